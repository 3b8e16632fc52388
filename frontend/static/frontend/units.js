// Quota values in their units, as engine/units.py writes and reads them (the same rules, mirrored):
// byte rates in binary units (B/s, KiB/s, MiB/s, GiB/s; 1 KiB = 1024 B, as Kafka's documentation counts), the other
// keys in their own (%, mutations/s, connections/s). Used by the request form ("= 1,572,864 B/s (1.5 MiB/s)" under
// the value as one types) and by the charts (axis ticks and hover of byte-rate series). window.QuotaUnits.
(function () {
  "use strict";
  var BYTE_KEYS = { producer_byte_rate: 1, consumer_byte_rate: 1, produce: 1, fetch: 1 };
  var KEY_UNITS = {
    request_percentage: "%", request: "%",
    controller_mutation_rate: "mutations/s", controller_mutation: "mutations/s",
    connection_creation_rate: "connections/s",
  };
  var UNITS = [["GiB/s", 1073741824], ["MiB/s", 1048576], ["KiB/s", 1024], ["B/s", 1]];
  var FACTOR = { "": 1n, ki: 1024n, mi: 1048576n, gi: 1073741824n };
  var NUMBER = "([+-]?(?:[0-9]+(?:\\.[0-9]*)?|\\.[0-9]+))";
  var BYTE_RATE = new RegExp("^" + NUMBER + "\\s*(?:([kmg]i)?b)?(?:/s)?$", "i");
  var OWN = {
    request_percentage: new RegExp("^" + NUMBER + "\\s*%?$"),
    controller_mutation_rate: new RegExp("^" + NUMBER + "\\s*(?:(?:mutations?)?/s|mutations?)?$", "i"),
    connection_creation_rate: new RegExp("^" + NUMBER + "\\s*(?:(?:connections?)?/s|connections?)?$", "i"),
  };
  var BYTE_FORMS = "1572864, 1536 KiB/s, 1.5 MiB/s or 2 GiB/s";
  var FORMS = {
    request_percentage: "50 or 50 %",
    controller_mutation_rate: "10 or 10 mutations/s",
    connection_creation_rate: "5 or 5 connections/s",
  };

  function isByteRate(key) {
    return Object.prototype.hasOwnProperty.call(BYTE_KEYS, key);
  }

  function trimmed(v, decimals) {
    return v.toLocaleString("en-US", { minimumFractionDigits: 0, maximumFractionDigits: decimals });
  }

  // 1572864 -> "1.5 MiB/s": the largest binary unit the value reaches, up to 2 decimals, trimmed.
  function formatByteRate(v) {
    if (typeof v !== "number" || !isFinite(v)) return String(v);
    var m = Math.abs(v);
    for (var i = 0; i < UNITS.length; i++) {
      if (m >= UNITS[i][1] || UNITS[i][1] === 1) return (v < 0 ? "-" : "") + trimmed(m / UNITS[i][1], 2) + " " + UNITS[i][0];
    }
    return String(v);
  }

  // The whole figure, for hovering: "1,572,864 B/s".
  function formatExact(v) {
    if (typeof v === "bigint") return v.toLocaleString("en-US") + " B/s";
    return trimmed(v, 6) + " B/s";
  }

  function formatValue(key, v) {
    if (isByteRate(key)) return formatByteRate(v);
    var unit = KEY_UNITS[key];
    return trimmed(v, 2) + (unit ? " " + unit : "");
  }

  // Exact decimal text x unit -> BigInt numerator over 10^decimals.
  function exactBytes(number, unit) {
    var sign = 1n, text = number;
    if (text[0] === "+" || text[0] === "-") { sign = text[0] === "-" ? -1n : 1n; text = text.slice(1); }
    var parts = text.split(".");
    var frac = parts[1] || "";
    var scale = 10n ** BigInt(frac.length);
    var whole = BigInt((parts[0] || "0") + frac) * FACTOR[unit] * sign;
    return { whole: whole, scale: scale };
  }

  // What a typed value is, for `key`: {ok, value, text} or {ok: false, text}.
  function understand(key, raw) {
    var text = (raw || "").trim();
    if (!text) return { ok: false, empty: true, text: "" };
    if (isByteRate(key)) {
      var m = text.length <= 64 ? BYTE_RATE.exec(text) : null;
      if (!m) return { ok: false, text: "Not a byte rate: write " + BYTE_FORMS + " (binary units)." };
      var x = exactBytes(m[1], (m[2] || "").toLowerCase());
      if (x.whole % x.scale !== 0n) {
        var bytes = Number(x.whole) / Number(x.scale);
        return { ok: false, text: "= " + trimmed(bytes, 6) + " bytes/s: not a whole number of bytes." };
      }
      var value = x.whole / x.scale;
      if (value <= 0n) return { ok: false, text: "A quota must be greater than 0." };
      return { ok: true, value: value, text: "= " + formatExact(value) + " (" + formatByteRate(Number(value)) + ")" };
    }
    var own = OWN[key];
    if (!own) return { ok: false, text: "" };
    var n = text.length <= 64 ? own.exec(text) : null;
    if (!n) return { ok: false, text: "Not understood: write " + FORMS[key] + "." };
    var number = Number(n[1]);
    if (!(number > 0)) return { ok: false, text: "A quota must be greater than 0." };
    return { ok: true, value: number, text: "= " + formatValue(key, number) };
  }

  // Axis ticks in binary units up to `max` (bytes/s): about five, at 1/2/2.5/5 x 10^n of one unit.
  function byteTicks(max) {
    if (!(max > 0)) return { tickvals: [0], ticktext: ["0 B/s"] };
    var unit = UNITS[UNITS.length - 1];
    for (var i = 0; i < UNITS.length; i++) {
      if (max >= UNITS[i][1]) { unit = UNITS[i]; break; }
    }
    var raw = max / unit[1] / 5;
    var pow = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 2.5, 5, 10].map(function (f) { return f * pow; }).find(function (s) { return s >= raw; });
    var vals = [], texts = [];
    for (var v = 0; v <= max / unit[1] + 1e-9 && vals.length < 50; v += step) {
      var shown = Math.round(v * 1e6) / 1e6;
      vals.push(shown * unit[1]);
      texts.push(shown === 0 ? "0" : trimmed(shown, 2) + " " + unit[0]);
    }
    return { tickvals: vals, ticktext: texts };
  }

  // Plotly y-axis settings for byte-rate values up to `max`.
  function byteAxis(max) {
    var t = byteTicks(max);
    return { tickmode: "array", tickvals: t.tickvals, ticktext: t.ticktext };
  }

  // The request form: "= 1,572,864 B/s (1.5 MiB/s)" under a value input as one types, for the key chosen.
  function attach(input) {
    var keyField = document.getElementById(input.dataset.quotaValue);
    var out = document.getElementById(input.getAttribute("aria-describedby") || "");
    if (!out) return;
    // The server's refusal of the submitted value (Django's errorlist, id_<field>_error): while it stands, a refusal
    // of our own would say the same thing twice; once the person edits, ours replaces it.
    var served = input.getAttribute("aria-invalid") === "true" ? document.getElementById(input.id + "_error") : null;
    function update(event) {
      var key = keyField ? keyField.value : "producer_byte_rate";
      var u = understand(key, input.value);
      if (served && event) {
        served.hidden = true;
        input.removeAttribute("aria-invalid");
        served = null;
      }
      var quiet = served && !u.ok;
      out.textContent = quiet ? "" : u.text;
      out.classList.toggle("understood-error", !u.ok && !u.empty && !quiet);
      out.dataset.value = u.ok ? String(u.value) : "";
    }
    input.addEventListener("input", update);
    if (keyField) keyField.addEventListener("change", update);
    update(null);
  }

  window.QuotaUnits = {
    isByteRate: isByteRate,
    formatByteRate: formatByteRate,
    formatExact: formatExact,
    formatValue: formatValue,
    understand: understand,
    byteTicks: byteTicks,
    byteAxis: byteAxis,
  };

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("input[data-quota-value]").forEach(attach);
  });
})();
