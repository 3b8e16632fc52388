// Impact previews: ask for one from the request form, and follow a running one until it is finished.
// The server renders the preview (/previews/<id>/, frontend/_impact.html); this script only polls and swaps it in.
(function () {
  "use strict";
  const POLL_MS = 250; // a warm preview takes a second or two: look often at first...
  const FAST_FOR_MS = 5000;
  const MAX_POLL_MS = 10000; // ...then less and less often (a cold start or a long history)

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

  // Poll a running preview's fragment every 0.25 s for 5 s, then less often the longer it runs (up to 10 s), until
  // it is finished, replaced (a newer ask) or gone from the page.
  function follow(box, delay, since) {
    if (!box || box.dataset.finished === "1") return;
    const started = since || Date.now();
    const wait = Date.now() - started < FAST_FOR_MS ? POLL_MS : Math.max(delay || POLL_MS, POLL_MS);
    setTimeout(async function () {
      if (!box.isConnected) return;
      const holder = box.parentElement;
      let response;
      try {
        response = await fetch(box.dataset.previewUrl, { headers: { Accept: "text/html" }, credentials: "same-origin" });
      } catch (e) {
        follow(box, Math.min(wait * 2, MAX_POLL_MS), started); // the network blinked: try again
        return;
      }
      if (!box.isConnected) return;
      if (!response.ok || response.redirected) { // redirected: the session ended (the login page)
        showError(holder, "HTTP_" + response.status, "The preview could not be read; reload the page (and log in).");
        return;
      }
      const template = document.createElement("template");
      template.innerHTML = (await response.text()).trim();
      const next = template.content.querySelector(".impact");
      if (!next || !box.isConnected) return;
      box.replaceWith(next);
      follow(next, Math.min(wait * 1.5, MAX_POLL_MS), started);
    }, wait);
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
      // a cluster-wide value is replayed as one budget shared by the brokers
      scope: form.elements.budget_scope ? form.elements.budget_scope.value || "per_broker" : "per_broker",
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
    document.querySelectorAll(".impact[data-preview-url]").forEach((box) => follow(box));
    const button = document.getElementById("preview-button");
    if (button) button.addEventListener("click", () => ask(button));
  });
})();
