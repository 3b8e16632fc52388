// The entity page's hourly usage: the Spark rollups (history.UsageRollup) drawn with Plotly, one pair of
// charts per quota type: rate percentiles per hour, and the fraction of each hour spent throttled. Byte rates
// (produce, fetch) are ticked and hovered in binary units (units.js), with the exact bytes/s in the hover.
(function () {
  "use strict";
  const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  const FONT = { family: "system-ui, sans-serif", size: 12 };
  const UNIT = { produce: "bytes/s", fetch: "bytes/s", request: "% of a thread", controller_mutation: "mutations/s" };
  const LINES = [
    ["rate_avg", "average", { width: 2 }],
    ["rate_p50", "p50", { dash: "dot" }],
    ["rate_p95", "p95", { dash: "dash" }],
    ["rate_p99", "p99", { dash: "dashdot" }],
    ["rate_max", "peak", { dash: "longdash" }],
  ];

  function draw(host, quotaType, s) {
    const section = document.createElement("section");
    section.className = "usage-chart";
    section.id = "usage-" + quotaType;
    const h = document.createElement("h3");
    h.textContent = quotaType + " (" + (UNIT[quotaType] || "per s") + ")";
    const plot = document.createElement("div");
    plot.className = "plot";
    plot.setAttribute("role", "img");
    plot.setAttribute("aria-label", quotaType + ": rate per hour and time throttled");
    section.append(h, plot);
    host.append(section);
    const units = window.QuotaUnits && window.QuotaUnits.isByteRate(quotaType) ? window.QuotaUnits : null;
    const traces = LINES.map(([key, name, line]) => {
      const trace = {
        x: s.t, y: s[key], name: name, type: "scatter", mode: "lines+markers", line: line, marker: { size: 4 },
      };
      if (units) {
        trace.customdata = s[key].map((v) => (typeof v === "number" ? units.formatByteRate(v) + " (" + units.formatExact(v) + ")" : "—"));
        trace.hovertemplate = name + ": %{customdata}<extra></extra>";
      }
      return trace;
    });
    traces.push({
      x: s.t, y: s.throttled_fraction.map((f) => 100 * f), name: "time throttled (%)", type: "bar", yaxis: "y2",
      opacity: 0.35, marker: { color: "#c2410c" },
    });
    const layout = {
      font: FONT, height: 320, margin: { l: 64, r: 56, t: 8, b: 70 }, hovermode: "x unified",
      legend: { orientation: "h", y: -0.25, font: { size: 11 } },
      xaxis: { type: "date", tickformat: "%m-%d %H:%M" },
      yaxis: Object.assign({ title: { text: UNIT[quotaType] || "" }, rangemode: "tozero", automargin: true },
        units ? units.byteAxis(1.05 * Math.max(0, ...LINES.flatMap(([key]) => s[key].filter((v) => typeof v === "number")))) : {}),
      yaxis2: { title: { text: "throttled %" }, overlaying: "y", side: "right", range: [0, 100], dtick: 25,
                 showgrid: false },
    };
    return Plotly.newPlot(plot, traces, layout, CONFIG);
  }

  document.addEventListener("DOMContentLoaded", function () {
    const data = JSON.parse(document.getElementById("usage-history-data").textContent);
    const host = document.getElementById("usage-history-chart");
    const done = Object.keys(data.series).sort().map((q) => draw(host, q, data.series[q]));
    Promise.all(done).then(() => host.setAttribute("data-drawn", String(done.length)));
  });
})();
