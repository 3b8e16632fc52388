// Impact previews: ask for one from the request form, and follow a running one until it is finished.
// The server renders the preview (/previews/<id>/, frontend/_impact.html); this script only polls and swaps it in.
(function () {
  "use strict";
  const POLL_MS = 700;

  function csrfToken() {
    const field = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (field) return field.value;
    const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  function showError(holder, code, message) {
    holder.replaceChildren();
    const p = document.createElement("p");
    p.className = "warning";
    p.setAttribute("role", "alert");
    p.dataset.error = code;
    const strong = document.createElement("strong");
    strong.textContent = "No preview (" + code + "). ";
    p.append(strong, message);
    holder.append(p);
  }

  function follow(box) {
    if (!box || box.dataset.finished === "1") return;
    const holder = box.parentElement;
    const url = box.dataset.previewUrl;
    setTimeout(async function () {
      let response;
      try {
        response = await fetch(url, { headers: { Accept: "text/html" }, credentials: "same-origin" });
      } catch (e) {
        follow(box); // the network blinked: try again
        return;
      }
      if (!response.ok) {
        showError(holder, "HTTP_" + response.status, "The preview could not be read; reload the page.");
        return;
      }
      const template = document.createElement("template");
      template.innerHTML = (await response.text()).trim();
      const next = template.content.querySelector(".impact");
      box.replaceWith(template.content);
      follow(next);
    }, POLL_MS);
  }

  function proposalOf(form) {
    const text = form.elements.value.value.trim();
    const number = Number(text);
    return {
      cluster: form.elements.cluster.value,
      user: form.elements.user.value.trim() || null,
      client_id: form.elements.client_id.value.trim() || null,
      key: form.elements.key.value,
      value: text !== "" && Number.isFinite(number) ? number : text, // the engine words the refusal
    };
  }

  async function ask(button) {
    const holder = document.getElementById("preview-panel");
    button.disabled = true;
    holder.replaceChildren();
    try {
      const response = await fetch(button.dataset.api, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
        body: JSON.stringify(proposalOf(button.form)),
      });
      const body = await response.json().catch(() => ({}));
      if (!response.ok) {
        showError(holder, body.code || "HTTP_" + response.status, body.message || "The preview was refused.");
        return;
      }
      const box = document.createElement("div");
      box.className = "impact";
      box.dataset.previewUrl = button.dataset.fragment.replace("/0/", "/" + body.id + "/");
      box.dataset.finished = "0";
      box.textContent = "Asking for the preview…";
      holder.append(box);
      follow(box);
    } finally {
      button.disabled = false;
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".impact[data-preview-url]").forEach(follow);
    const button = document.getElementById("preview-button");
    if (button) button.addEventListener("click", () => ask(button));
  });
})();
