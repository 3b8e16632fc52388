/*
 * Live monitor pages (frontend/templates/frontend/monitor_*.html), drawn with plotly.js served by the portal.
 *
 * Entity page: the entity's samples (telemetry_ui/README.md) stream in through the WebSocket /ws/monitor/
 * ("subscribe" → "backfill", then live "points"), appended with Plotly.extendTraces; a lost connection is
 * re-opened with since_ms just before the newest point drawn, and points already drawn are skipped, so the
 * charts have no gap and no double. "Last hour" draws the minute rollups of the history endpoint instead.
 * Overview: one heatmap of utilization by entity and broker per cluster; a cell opens that entity's page.
 * A sensor under a cluster-wide budget (samples with "budget") also gets a chart of the cluster's total against
 * the budget; each broker's bound is then its share of it.
 * A quota group's sensor (samples with "members") also gets each member's estimated part of the group's rate: a
 * stacked chart over time and a table of the newest parts, summed over the brokers; the hour view stacks each
 * minute's average parts (the rollups' "members").
 *
 * The server's data comes in <script type="application/json"> elements (json_script); no inline script.
 */
(function () {
  "use strict";

  var PALETTE = ["#1f5fc9", "#c2410c", "#15803d", "#7c3aed", "#b91c1c", "#0e7490", "#a16207", "#be185d"];
  var FONT = { family: 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif', size: 12, color: "#1d2330" };
  // the chart toolbar (Plotly's mode bar) shows on hover in the chart's top margin (MODEBAR_MARGIN), above the plot
  // area, never over the lines; the heatmap's axes are fixed, so it has none
  var CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  var HEATMAP_CONFIG = { displaylogo: false, responsive: true, displayModeBar: false };
  var MODEBAR_MARGIN = 36;
  var QUOTA_TYPES = ["produce", "fetch", "request", "controller_mutation"];
  var SHORT = { produce: "produce", fetch: "fetch", request: "request", controller_mutation: "mutations" };
  // the quota type of a throttle line, told by its dash (produce solid)
  var TYPE_DASH = { produce: "solid", fetch: "longdash", request: "dashdot", controller_mutation: "dot" };
  var CHART_ORDER = ["budget-produce", "budget-fetch", "budget-request", "rate-produce", "rate-fetch", "rate-request",
    "rate-other", "members-produce", "members-fetch", "members-request", "tokens", "throttle", "frac"];
  // a group's members drawn one by one in its stacked chart; the others are summed into one band
  var MEMBER_TRACES = 8;
  var OTHERS = "\u0000others"; // the key of the band (and row) of the members summed together
  // a broker's rate counts in the cluster's total while its newest sample is at most this old
  var TOTAL_FRESH_MS = 5000;

  function readData(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  function brokerColor(b) {
    var n = typeof b === "number" ? b : 0;
    return PALETTE[((n % PALETTE.length) + PALETTE.length) % PALETTE.length];
  }

  function isNum(v) {
    return typeof v === "number" && isFinite(v);
  }

  function utcTime(ms) {
    return new Date(ms).toISOString().slice(11, 19);
  }

  // ------------------------------------------------------------------ one chart

  function Chart(host, id, title, yTitle, options, hour) {
    this.id = id;
    this.hour = !!hour;
    // byte rates: binary-unit ticks and hover (units.js), the exact figure in the hover too
    this.units = /^(rate|budget|members)-(produce|fetch)$/.test(id) && window.QuotaUnits ? window.QuotaUnits : null;
    this.ticks = "";
    this.keys = new Map(); // trace key -> index in the plot
    this.queue = Promise.resolve();
    this.section = document.createElement("section");
    this.section.className = "chart";
    this.section.id = "chart-" + id;
    var h = document.createElement("h2");
    h.id = "chart-" + id + "-h";
    h.textContent = title;
    this.el = document.createElement("div");
    this.el.className = "plot";
    this.el.id = "plot-" + id;
    // a figure, not an img: an img's content is presentational, and the chart's toolbar has buttons
    this.el.setAttribute("role", "figure");
    this.el.setAttribute("aria-labelledby", h.id);
    this.section.appendChild(h);
    this.section.appendChild(this.el);
    // keep the charts in a fixed order whatever order their first points come in
    var rank = CHART_ORDER.indexOf(id);
    var before = null;
    host.querySelectorAll("section.chart").forEach(function (other) {
      if (before === null && CHART_ORDER.indexOf(other.id.slice(6)) > rank) before = other;
    });
    host.insertBefore(this.section, before);
    this.layout = {
      font: FONT,
      margin: { l: 56, r: 12, t: MODEBAR_MARGIN, b: 70 },
      height: 320,
      showlegend: true,
      legend: { orientation: "h", y: -0.22, font: { size: 11 } },
      xaxis: { type: "date", title: { text: "" }, tickformat: hour ? "%H:%M" : "%H:%M:%S" },
      yaxis: Object.assign({ title: { text: yTitle }, rangemode: "tozero", automargin: true }, options.yaxis || {}),
      shapes: options.shapes || [],
      hovermode: "x unified",
      uirevision: "keep",
    };
    this.plotted = Plotly.newPlot(this.el, [], this.layout, CONFIG);
    this.queue = this.plotted;
  }

  /* items: [{key, spec, x, y}] in time order; range: [from, to] of the x axis or null (autorange). */
  Chart.prototype.append = function (items, maxPoints, range) {
    var self = this;
    var fresh = [];
    var groups = new Map();
    items.forEach(function (it) {
      var idx = self.keys.get(it.key);
      if (idx === undefined) {
        idx = self.keys.size;
        self.keys.set(it.key, idx);
        // markers: a lone point (a burst of mutations, an hour with one minute) is visible too
        var base = { mode: "lines+markers", marker: { size: self.hour ? 5 : 3 } };
        if (self.units) {
          base.customdata = [];
          base.hovertemplate = (it.spec.name || "") + ": %{customdata}<extra></extra>";
        }
        fresh.push(Object.assign({ x: [], y: [], type: "scatter" }, base, it.spec));
      }
      var g = groups.get(idx);
      if (!g) groups.set(idx, (g = { x: [], y: [], c: [] }));
      g.x.push(it.x);
      g.y.push(it.y);
      if (self.units) g.c.push(isNum(it.y) ? self.units.formatByteRate(it.y) + " (" + self.units.formatExact(it.y) + ")" : "—");
    });
    this.queue = this.queue.then(function () {
      var steps = Promise.resolve();
      if (fresh.length) steps = steps.then(function () { return Plotly.addTraces(self.el, fresh); });
      return steps.then(function () {
        var indices = [], xs = [], ys = [], cs = [];
        groups.forEach(function (g, idx) {
          indices.push(idx);
          xs.push(g.x);
          ys.push(g.y);
          cs.push(g.c);
        });
        if (!indices.length) return null;
        var update = self.units ? { x: xs, y: ys, customdata: cs } : { x: xs, y: ys };
        return Plotly.extendTraces(self.el, update, indices, maxPoints);
      }).then(function () {
        var update = /^(rate|budget|members)-/.test(self.id) ? self.fitRate() : {};
        if (range) update["xaxis.range"] = range;
        if (Object.keys(update).length) return Plotly.relayout(self.el, update);
        return null;
      });
    }).catch(function (err) {
      if (window.console) console.error("monitor chart", self.id, err);
    });
    return this.queue;
  };

  /* A bound far above the rate (a quota raised 100-fold) would flatten the rate against 0: then the y axis
     follows the rate and a note says where the bound is. Byte rates get their ticks in binary units. */
  Chart.prototype.fitRate = function () {
    var update = this.fitRange();
    if (!this.units) return update;
    var top = this.capped ? this.rateMax * 1.3 : Math.max(this.rateMax, this.boundMax) * 1.05;
    var axis = this.units.byteAxis(top);
    var key = axis.tickvals.join(",");
    if (key !== this.ticks) {
      this.ticks = key;
      update["yaxis.tickmode"] = axis.tickmode;
      update["yaxis.tickvals"] = axis.tickvals;
      update["yaxis.ticktext"] = axis.ticktext;
    }
    return update;
  };

  Chart.prototype.fitRange = function () {
    var rateMax = 0, boundMax = 0;
    var stacks = new Map(); // x -> the top of a stacked chart's stack there
    (this.el.data || []).forEach(function (t) {
      var bound = / bound$/.test(t.name || "");
      (t.y || []).forEach(function (v, i) {
        if (!isNum(v)) return;
        if (t.stackgroup) stacks.set(+t.x[i], (stacks.get(+t.x[i]) || 0) + v);
        else if (bound) boundMax = Math.max(boundMax, v);
        else rateMax = Math.max(rateMax, v);
      });
    });
    stacks.forEach(function (top) { rateMax = Math.max(rateMax, top); });
    this.rateMax = rateMax;
    this.boundMax = boundMax;
    if (rateMax > 0 && boundMax > 4 * rateMax) {
      this.capped = true;
      return {
        "yaxis.autorange": false,
        "yaxis.range": [0, rateMax * 1.3],
        // top left, in the margin: the top right is the mode bar's
        annotations: [{ xref: "paper", yref: "paper", x: 0, y: 1, xanchor: "left", yanchor: "bottom", showarrow: false,
          text: "bound up to " + (this.units ? this.units.formatByteRate(boundMax) : boundMax.toLocaleString("en-US")) +
            ", above the chart",
          font: { size: 11, color: "#4f5869" } }],
      };
    }
    if (this.capped) {
      this.capped = false;
      return { "yaxis.autorange": true, annotations: [] };
    }
    return {};
  };

  Chart.prototype.remove = function () {
    Plotly.purge(this.el);
    this.section.remove();
  };

  // ------------------------------------------------------------------ points → traces

  /* The traces one sample (live) or one minute rollup (hour view) adds to. */
  function itemsOf(p, hour) {
    var b = p.b, q = QUOTA_TYPES.indexOf(p.q) >= 0 ? p.q : "other";
    var bl = "broker " + b, color = brokerColor(b), x = p.t, out = [];
    var shortQ = SHORT[q] || String(p.q || "rate");
    var dash = TYPE_DASH[q] || "solid";
    var group = "b" + b;
    if (q === "controller_mutation") {
      var tokens = hour ? (isNum(p.tokens_min) ? p.tokens_min : p.tokens) : p.tokens;
      if (isNum(tokens)) {
        out.push({ chart: "tokens", key: "b" + b, x: x, y: tokens,
          spec: { name: bl + (hour ? " (lowest)" : ""), line: { color: color } } });
      }
    } else {
      // legend: one entry per broker; its bound (dashed) and peak (dotted) toggle with it
      var rate = hour ? (isNum(p.rate_avg) ? p.rate_avg : p.rate) : p.rate;
      out.push({ chart: "rate-" + q, key: "b" + b + ":rate", x: x, y: isNum(rate) ? rate : null,
        spec: { name: bl, legendgroup: group, line: { color: color } } });
      if (hour && isNum(p.rate_max)) {
        out.push({ chart: "rate-" + q, key: "b" + b + ":peak", x: x, y: p.rate_max,
          spec: { name: bl + " peak", legendgroup: group, showlegend: false,
            line: { color: color, width: 1, dash: "dot" }, opacity: 0.6 } });
      }
      out.push({ chart: "rate-" + q, key: "b" + b + ":bound", x: x, y: isNum(p.bound) ? p.bound : null,
        spec: { name: bl + " bound", legendgroup: group, showlegend: false,
          line: { color: color, dash: "dash", shape: "hv", width: 1.5 } } });
    }
    var typed = shortQ + " ";
    out.push({ chart: "throttle", key: q + ":b" + b + ":max", x: x, y: isNum(p.thr_max) ? p.thr_max : 0,
      spec: { name: typed + bl, legendgroup: q + group, line: { color: color, width: 2, dash: dash } } });
    out.push({ chart: "throttle", key: q + ":b" + b + ":avg", x: x, y: isNum(p.thr_avg) ? p.thr_avg : 0,
      spec: { name: typed + bl + " avg", legendgroup: q + group, showlegend: false,
        line: { color: color, width: 1, dash: dash }, opacity: 0.45 } });
    out.push({ chart: "frac", key: q + ":b" + b, x: x, y: isNum(p.thr_frac) ? p.thr_frac * 100 : 0,
      spec: { name: typed + bl, line: { color: color, dash: dash } } });
    return out;
  }

  /* The rows of a history response, each with its quota type, oldest first, whatever the nesting:
     a list of rows, {rows|minutes|points|samples|series|...: ...}, or {<quota type>: [rows]}. */
  function historyRows(doc) {
    var rows = [];
    var CONTAINERS = ["rollups", "rows", "minutes", "points", "samples", "data", "results", "series", "by_type", "quota_types", "types"];
    function walk(v, q) {
      if (Array.isArray(v)) {
        v.forEach(function (r) {
          if (r && typeof r === "object" && isNum(r.t)) rows.push(r.q || !q ? r : Object.assign({ q: q }, r));
        });
        return;
      }
      if (!v || typeof v !== "object") return;
      for (var i = 0; i < CONTAINERS.length; i++) {
        var sub = v[CONTAINERS[i]];
        if (sub && typeof sub === "object") {
          walk(sub, q);
          return;
        }
      }
      Object.keys(v).forEach(function (k) {
        if (QUOTA_TYPES.indexOf(k) >= 0) walk(v[k], k);
      });
    }
    walk(doc, null);
    rows.sort(function (a, b) { return a.t - b.t; });
    return rows;
  }

  // ------------------------------------------------------------------ the entity page

  function EntityPage(cfg) {
    this.cfg = cfg;
    this.host = document.getElementById("monitor-charts");
    this.empty = document.getElementById("monitor-empty");
    this.status = document.getElementById("monitor-status");
    this.errors = document.getElementById("monitor-errors");
    this.charts = new Map();
    this.lastT = new Map(); // "<q>|<b>" -> newest t drawn (live)
    this.budgetRates = new Map(); // "<q>" -> Map(broker -> {t, rate}): the cluster's total under a budget
    this.memberSamples = new Map(); // "<q>" -> Map(broker -> newest sample with "members"): a group's members
    this.memberKeys = new Map(); // "<q>" -> [member key]: the members with a band of their own in the chart
    this.stackDue = new Map(); // "<q>" -> the time whose stack is not drawn yet
    this.stacked = new Map(); // "<q>" -> the newest time stacked
    this.stackTimer = null;
    this.membersBox = document.getElementById("monitor-members");
    this.membersTables = document.getElementById("monitor-members-tables");
    this.newest = 0;
    this.oldest = 0;
    this.points = 0;
    this.mode = "live";
    this.ws = null;
    this.retries = 0;
    this.retryTimer = null;
    this.hourTimer = null;
    this.windowMs = (cfg.live_minutes || 5) * 60000;
  }

  EntityPage.prototype.setStatus = function (state, text) {
    this.status.dataset.state = state;
    this.status.textContent = text;
  };

  EntityPage.prototype.showError = function (text) {
    var p = document.createElement("p");
    p.textContent = text;
    this.errors.appendChild(p);
    while (this.errors.childElementCount > 5) this.errors.removeChild(this.errors.firstElementChild);
    this.errors.hidden = false;
  };

  EntityPage.prototype.chart = function (id) {
    var c = this.charts.get(id);
    if (c) return c;
    var labels = this.cfg.labels || {};
    var hour = this.mode === "hour";
    if (id.indexOf("members-") === 0) {
      var mq = id.slice(8);
      c = new Chart(this.host, id, "Members' estimated parts (from their requests), stacked: " + (labels[mq] || mq),
        labels[mq] || "rate", {}, hour);
    } else if (id.indexOf("budget-") === 0) {
      var bq = id.slice(7);
      c = new Chart(this.host, id, "Cluster total against its cluster-wide budget (dashed): " + (labels[bq] || bq),
        labels[bq] || "rate", {}, hour);
    } else if (id.indexOf("rate-") === 0) {
      var q = id.slice(5);
      c = new Chart(this.host, id, "Rate against its bound (dashed): " + (labels[q] || q) +
        (hour ? "; minute average, peak dotted" : "") + (this.budgeted && this.budgeted[q] ?
        "; under a cluster-wide budget, each broker's bound is its share" : ""), labels[q] || "rate", {}, hour);
    } else if (id === "tokens") {
      c = new Chart(this.host, id, "Token bucket: " + (labels.controller_mutation || "controller mutations"),
        "tokens (below 0 = throttled)", {
          yaxis: { rangemode: "normal", zeroline: true, zerolinecolor: "#a4161a", zerolinewidth: 2 },
          shapes: [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: 0, y1: 0, line: { color: "#a4161a", width: 1, dash: "dash" } }],
        }, hour);
    } else if (id === "throttle") {
      c = new Chart(this.host, id, "Throttle time: max (bold) and average (thin)", "ms", {}, hour);
    } else {
      c = new Chart(this.host, id, "Time throttled", hour ? "% of the minute" : "% of the last second",
        { yaxis: { range: [0, 100], rangemode: "normal" } }, hour);
    }
    this.charts.set(id, c);
    this.empty.hidden = true;
    return c;
  };

  EntityPage.prototype.clear = function () {
    this.charts.forEach(function (c) { c.remove(); });
    this.charts.clear();
    this.lastT.clear();
    this.budgetRates.clear();
    this.memberSamples.clear();
    this.memberKeys.clear();
    this.stackDue.clear();
    this.stacked.clear();
    clearTimeout(this.stackTimer);
    this.renderMembers();
    this.newest = 0;
    this.oldest = 0;
    this.points = 0;
    this.host.dataset.points = "0";
    this.empty.hidden = false;
  };

  /* Draw samples (live) or rollups (hour); returns how many were new. */
  EntityPage.prototype.draw = function (samples, hour) {
    var self = this;
    var byChart = new Map();
    var minutes = new Map(); // hour view: "<q>|<t>" -> the brokers' rollups of a group's minute
    var added = 0;
    samples = samples.filter(function (p) {
      return p && isNum(p.t) && p.q !== "connection" && (p.e === undefined || p.e === self.cfg.entity) &&
        (p.c === undefined || p.c === self.cfg.cluster);
    });
    samples.sort(function (a, b) { return a.t - b.t; });
    function put(it) {
      var list = byChart.get(it.chart);
      if (!list) byChart.set(it.chart, (list = []));
      list.push(it);
    }
    samples.forEach(function (p) {
      var k = p.q + "|" + p.b;
      var last = self.lastT.get(k);
      if (last !== undefined && p.t <= last) return; // already drawn (a backfill after a reconnect)
      self.lastT.set(k, p.t);
      self.newest = Math.max(self.newest, p.t);
      added += 1;
      itemsOf(p, hour).concat(hour ? [] : self.totalItems(p)).forEach(put);
      if (Array.isArray(p.members)) {
        if (!hour) self.dueStack(p).forEach(put);
        else memberMinute(minutes, p);
      }
    });
    // the hour view: one stack per minute, each member's part summed over the brokers' rollups of that minute
    minutes.forEach(function (m) { self.stackItems(m.q, m.t, sumMembers(m.rows)).forEach(put); });
    if (!added) return 0;
    if (!this.oldest || (samples.length && samples[0].t < this.oldest)) this.oldest = samples[0].t;
    var range = this.range(hour);
    // a 5-minute window of 1 s samples, with room to spare; the x range hides anything older
    var maxPoints = hour ? 100000 : Math.ceil(this.windowMs / 1000) + 60;
    byChart.forEach(function (items, id) { self.chart(id).append(items, maxPoints, range); });
    if (!hour) {
      this.renderMembers();
      // the stack of the newest time, once its brokers' samples (one frame each) had a second to come
      clearTimeout(this.stackTimer);
      if (this.stackDue.size) this.stackTimer = setTimeout(function () { self.flushStacks(); }, 1200);
    }
    this.points += added;
    this.host.dataset.points = String(this.points);
    this.host.dataset.newest = String(this.newest);
    return added;
  };

  /* A live sample of a budgeted sensor: the cluster's total (the newest rate of every broker that published one
     lately) and the budget, at the sample's time. */
  EntityPage.prototype.totalItems = function (p) {
    if (!isNum(p.budget) || !isNum(p.rate)) return [];
    this.budgeted = this.budgeted || {};
    this.budgeted[p.q] = true;
    var rates = this.budgetRates.get(p.q);
    if (!rates) this.budgetRates.set(p.q, (rates = new Map()));
    rates.set(p.b, { t: p.t, rate: p.rate });
    // a broker counts while its newest sample is fresh: a few seconds, or two scrape intervals of a slow source
    var fresh = Math.max(TOTAL_FRESH_MS, isNum(p.res_ms) ? 2 * p.res_ms : 0);
    var total = 0;
    rates.forEach(function (r) {
      if (p.t - r.t <= fresh) total += r.rate;
    });
    var id = "budget-" + p.q;
    return [
      { chart: id, key: "total", x: p.t, y: total,
        spec: { name: "cluster total", line: { color: "#1d2330", width: 2 } } },
      // named "... bound" so the y axis treats it as one (it may sit far above a quiet total)
      { chart: id, key: "budget", x: p.t, y: p.budget,
        spec: { name: "budget bound", line: { color: "#a4161a", dash: "dash", shape: "hv", width: 1.5 } } },
    ];
  };

  /* A group's members now, per quota type: each member's requests/s and estimated part summed over the brokers
     whose newest sample is fresh (at ``t``), busiest first, with the group's total rate and requests/s. */
  EntityPage.prototype.membersAt = function (q, t) {
    var per = this.memberSamples.get(q);
    if (!per) return null;
    var fresh = [];
    per.forEach(function (s) {
      if (t - s.t <= Math.max(TOTAL_FRESH_MS, isNum(s.res_ms) ? 2 * s.res_ms : 0)) fresh.push(s);
    });
    return sumMembers(fresh);
  };

  /* A minute rollup of a group's sensor, kept with the other brokers' rollups of the same minute. */
  function memberMinute(minutes, p) {
    var k = p.q + "|" + p.t;
    var m = minutes.get(k);
    if (!m) minutes.set(k, (m = { q: p.q, t: p.t, rows: [] }));
    m.rows.push(p);
  }

  /* The members of some samples (or minute rollups), one per broker, summed: each member's requests/s and
     estimated part, busiest first, with the group's total rate and requests/s. */
  function sumMembers(samples) {
    var byKey = new Map(), total = 0, rps = 0;
    samples.forEach(function (s) {
      var rate = isNum(s.rate) ? s.rate : s.rate_avg;
      if (isNum(rate)) total += rate;
      s.members.forEach(function (m) {
        var key = isNum(m.others) ? OTHERS : (m.u || "") + "\u0000" + (m.c || "");
        var row = byKey.get(key);
        if (!row) byKey.set(key, (row = { key: key, u: m.u, c: m.c, others: 0, rps: 0, part: 0 }));
        if (isNum(m.others)) row.others += m.others;
        if (isNum(m.rps)) { row.rps += m.rps; rps += m.rps; }
        if (isNum(m.part)) row.part += m.part;
      });
    });
    var rows = Array.from(byKey.values());
    rows.forEach(function (r) { r.share = rps > 0 ? r.rps / rps : null; });
    rows.sort(function (a, b) { return b.part - a.part || b.rps - a.rps; });
    return { rows: rows, total: total, rps: rps };
  }

  function memberName(m) {
    if (m.others) return m.others + " other member" + (m.others === 1 ? "" : "s");
    var name = m.u ? m.u : "(no principal)";
    return m.c ? name + ", client-id " + m.c : name;
  }

  /* A live sample of a group's sensor: its broker's newest members. The brokers' samples of one time come in
     frames of their own, and a stack is drawn once per time (one x, one stack): the stack of a time is drawn when a
     later sample comes (returned here), or by flushStacks a moment after the last one. */
  EntityPage.prototype.dueStack = function (p) {
    var per = this.memberSamples.get(p.q);
    if (!per) this.memberSamples.set(p.q, (per = new Map()));
    var due = this.stackDue.get(p.q), out = [];
    if (due !== undefined && p.t > due) {
      out = this.stackItems(p.q, due);
      this.stackDue.delete(p.q);
      this.stacked.set(p.q, due);
    }
    per.set(p.b, p);
    if (!this.stackDue.has(p.q) && !(p.t <= this.stacked.get(p.q))) this.stackDue.set(p.q, p.t);
    return out;
  };

  EntityPage.prototype.flushStacks = function () {
    var self = this;
    if (this.mode !== "live") return;
    this.stackDue.forEach(function (t, q) {
      self.stacked.set(q, t);
      var items = self.stackItems(q, t);
      if (items.length) self.chart("members-" + q).append(items, Math.ceil(self.windowMs / 1000) + 60, self.range(false));
    });
    this.stackDue.clear();
  };

  /* The members' estimated parts at time t (``now``: as summed there, by default the live samples fresh at t),
     stacked; the members past MEMBER_TRACES (in the order they came) share one band. */
  EntityPage.prototype.stackItems = function (q, t, now) {
    now = now || this.membersAt(q, t);
    var keys = this.memberKeys.get(q);
    if (!keys) this.memberKeys.set(q, (keys = []));
    var bands = new Map();
    now.rows.forEach(function (r) {
      var own = keys.indexOf(r.key);
      if (own < 0 && r.key !== OTHERS && keys.length < MEMBER_TRACES) {
        keys.push(r.key);
        own = keys.length - 1;
      }
      var band = own >= 0 ? r.key : OTHERS;
      var b = bands.get(band);
      if (!b) bands.set(band, (b = { name: own >= 0 ? memberName(r) : "other members", part: 0 }));
      b.part += r.part;
    });
    var id = "members-" + q, out = [];
    if (bands.has(OTHERS)) keys.others = true; // once drawn, a band has a point at every time (0 when none)
    keys.concat([OTHERS]).forEach(function (key, i) {
      var b = bands.get(key);
      if (key === OTHERS && !keys.others) return;
      var color = key === OTHERS ? "#8a93a3" : PALETTE[i % PALETTE.length];
      var parts = key.split("\u0000");
      out.push({ chart: id, key: key, x: t, y: b ? b.part : 0,
        spec: { name: key === OTHERS ? "other members" : memberName({ u: parts[0], c: parts[1] }),
          mode: "lines", stackgroup: "members", line: { color: color, width: 1 } } });
    });
    return out;
  };

  /* The table of the members' parts now, one per quota type; the section stays hidden until a sample has some. */
  EntityPage.prototype.renderMembers = function () {
    if (!this.membersBox || !this.membersTables) return;
    var self = this, labels = this.cfg.labels || {};
    var units = window.QuotaUnits;
    var host = this.membersTables;
    host.textContent = "";
    var shown = 0;
    QUOTA_TYPES.forEach(function (q) {
      var now = self.memberSamples.has(q) ? self.membersAt(q, self.newest) : null;
      if (!now || !now.rows.length) return;
      shown += 1;
      var bytes = (q === "produce" || q === "fetch") && units;
      var fmt = function (v) {
        if (!isNum(v)) return "—";
        return bytes ? units.formatByteRate(v) : (Math.round(v * 10) / 10).toLocaleString("en-US") + (q === "request" ? " %" : "");
      };
      var wrap = document.createElement("div");
      wrap.className = "scroll-x";
      wrap.setAttribute("data-scroll-x", "");
      wrap.tabIndex = 0;
      wrap.setAttribute("role", "region");
      wrap.setAttribute("aria-label", "Members' parts: " + (labels[q] || q));
      var table = document.createElement("table");
      table.className = "members-table";
      table.id = "members-" + q;
      var cap = table.createCaption();
      cap.textContent = (labels[q] || q) + ": group total " + fmt(now.total) + ", " +
        (Math.round(now.rps * 10) / 10).toLocaleString("en-US") + " requests/s";
      var head = table.createTHead().insertRow();
      ["Member", "Share of requests", "Requests/s", "Estimated part"].forEach(function (text, i) {
        var th = document.createElement("th");
        th.scope = "col";
        th.textContent = text;
        if (i) th.className = i === 2 ? "num rps" : "num";
        head.appendChild(th);
      });
      var body = table.createTBody();
      now.rows.forEach(function (r) {
        var tr = body.insertRow();
        [memberName(r), isNum(r.share) ? (Math.round(r.share * 1000) / 10) + " %" : "—",
          (Math.round(r.rps * 10) / 10).toLocaleString("en-US"), fmt(r.part)].forEach(function (text, i) {
          var td = tr.insertCell();
          td.textContent = text;
          if (i) td.className = i === 2 ? "num rps" : "num";
        });
      });
      wrap.appendChild(table);
      host.appendChild(wrap);
    });
    this.membersBox.hidden = !shown;
  };

  /* The x axis: live, the last 5 minutes, or less while there is less (at least 30 s, so a few points
     are not squeezed against the right edge); the hour view, the whole hour. */
  EntityPage.prototype.range = function (hour) {
    if (hour) {
      var end = Math.max(this.newest + 60000, Date.now());
      return [end - (this.cfg.hour_minutes || 60) * 60000, end];
    }
    var span = Math.min(this.windowMs, Math.max(30000, this.newest - this.oldest + 3000));
    return [this.newest - span, this.newest];
  };

  EntityPage.prototype.liveStatus = function () {
    var when = this.newest ? ", newest sample " + utcTime(this.newest) + " UTC" : ", no sample yet";
    this.setStatus("live", "Live: " + this.points + " samples" + when + ".");
  };

  // ---- live: the WebSocket

  EntityPage.prototype.connect = function () {
    var self = this;
    var proto = window.location.protocol === "https:" ? "wss:" : "ws:";
    var ws;
    try {
      ws = new WebSocket(proto + "//" + window.location.host + this.cfg.ws_path);
    } catch (err) {
      this.scheduleReconnect();
      return;
    }
    this.ws = ws;
    ws.onopen = function () {
      self.retries = 0;
      // from just before the newest point drawn (skipped when it comes again), else the whole live window
      var since = self.newest ? self.newest - 5000 : Date.now() - self.windowMs;
      ws.send(JSON.stringify({ action: "subscribe", cluster: self.cfg.cluster, entity: self.cfg.entity, since_ms: since }));
      self.setStatus("connecting", "Connected; subscribing…");
    };
    ws.onmessage = function (ev) {
      var msg;
      try {
        msg = JSON.parse(ev.data);
      } catch (err) {
        return;
      }
      if (ws !== self.ws || self.mode !== "live") return;
      if (msg.type === "error") {
        self.showError((msg.code || "ERROR") + ": " + (msg.message || "the server refused"));
        if (msg.code === "PERMISSION_DENIED" || msg.code === "NOT_FOUND") self.setStatus("error", "Not streaming: " + msg.code + ".");
        return;
      }
      if (msg.cluster !== undefined && msg.cluster !== self.cfg.cluster) return;
      if (msg.entity !== undefined && msg.entity !== self.cfg.entity) return;
      if (msg.type === "subscribed") {
        self.liveStatus();
      } else if (msg.type === "backfill" || msg.type === "points") {
        self.draw(msg.points || [], false);
        self.liveStatus();
      }
    };
    ws.onclose = function (ev) {
      if (ws !== self.ws) return;
      self.ws = null;
      if (self.mode !== "live") return;
      if (ev.code === 4401) {
        self.setStatus("closed", "Not streaming: your session has ended. Log in again and reload this page.");
        return;
      }
      self.scheduleReconnect();
    };
  };

  EntityPage.prototype.scheduleReconnect = function () {
    var self = this;
    var delay = Math.min(10000, 500 * Math.pow(2, this.retries));
    this.retries += 1;
    this.setStatus("reconnecting", "Connection lost; reconnecting in " + Math.round(delay / 1000) + " s (no sample will be missed).");
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(function () {
      if (self.mode === "live") self.connect();
    }, delay);
  };

  EntityPage.prototype.disconnect = function () {
    clearTimeout(this.retryTimer);
    var ws = this.ws;
    this.ws = null;
    if (ws) {
      try {
        if (ws.readyState === WebSocket.OPEN) {
          ws.send(JSON.stringify({ action: "unsubscribe", cluster: this.cfg.cluster, entity: this.cfg.entity }));
        }
        ws.close(1000);
      } catch (err) {
        /* already closing */
      }
    }
  };

  // ---- the last hour: minute rollups from the history endpoint

  EntityPage.prototype.loadHour = function () {
    var self = this;
    var minutes = this.cfg.hour_minutes || 60;
    var url = this.cfg.history_url + "?" + new URLSearchParams({ entity: this.cfg.entity, minutes: String(minutes) });
    this.setStatus("loading", "Loading the last hour…");
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) {
          return r.json().catch(function () { return {}; }).then(function (body) {
            var why = body && body.message ? body.message : "HTTP " + r.status;
            throw new Error(why);
          });
        }
        return r.json();
      })
      .then(function (doc) {
        if (self.mode !== "hour") return;
        self.clear();
        var rows = historyRows(doc);
        self.draw(rows, true);
        self.setStatus("history", "Last " + minutes + " minutes: " + rows.length + " broker-minutes" +
          (self.newest ? ", newest minute " + utcTime(self.newest).slice(0, 5) + " UTC." : "."));
      })
      .catch(function (err) {
        if (self.mode !== "hour") return;
        self.setStatus("history-missing", "The last hour could not be loaded (" + err.message + ").");
      });
  };

  EntityPage.prototype.setMode = function (mode) {
    var self = this;
    if (mode === this.mode && (this.ws || this.hourTimer)) return;
    this.mode = mode;
    clearInterval(this.hourTimer);
    this.hourTimer = null;
    this.disconnect();
    this.clear();
    if (mode === "hour") {
      this.loadHour();
      this.hourTimer = setInterval(function () { self.loadHour(); }, 60000);
    } else {
      this.setStatus("connecting", "Connecting…");
      this.connect();
    }
  };

  EntityPage.prototype.start = function () {
    var self = this;
    document.querySelectorAll('input[name="range"]').forEach(function (input) {
      input.addEventListener("change", function () {
        if (input.checked) self.setMode(input.value);
      });
    });
    var chosen = document.querySelector('input[name="range"]:checked');
    this.mode = null;
    this.setMode(chosen ? chosen.value : "live");
    window.addEventListener("pagehide", function () { self.disconnect(); });
  };

  // ------------------------------------------------------------------ the overview

  function drawHeatmaps(data) {
    (data.heatmaps || []).forEach(function (hm, i) {
      var el = document.getElementById("heatmap-" + i);
      if (!el) return;
      var names = hm.entities.map(function (e, r) { return (hm.names || [])[r] || e; });
      var z = hm.z.map(function (row) {
        return row.map(function (v) { return v === null ? null : Math.round(v * 1000) / 10; });
      });
      var trace = {
        type: "heatmap",
        z: z,
        x: hm.brokers,
        y: hm.entities,
        // fixed scale, the same on every page: blue below the bound, yellow at it, red at twice it and above
        zmin: 0,
        zmax: 200,
        colorscale: [[0, "#eef2f7"], [0.4, "#8fb8ea"], [0.5, "#f5c542"], [0.75, "#e8743b"], [1, "#a4161a"]],
        colorbar: { title: { text: "of bound" }, ticksuffix: "%", thickness: 14 },
        xgap: 2,
        ygap: 1,
        // the entity in words (the server's display names), Kafka's sensor tags, and the cell's figure
        customdata: hm.z.map(function (row, r) { return row.map(function () { return names[r]; }); }),
        hovertemplate: "%{customdata}<br>sensor %{y}<br>%{x}: %{z:.0f}% of its bound<extra></extra>",
      };
      // on a phone the labels are shorter: "broker 1" turned on its side and names cut at their start otherwise
      var narrow = el.clientWidth < 560;
      var most = narrow ? 22 : 40;
      var layout = {
        font: FONT,
        height: Math.max(220, 70 + hm.entities.length * 20),
        margin: { l: 10, r: 10, t: 30, b: 10 },
        xaxis: { side: "top", type: "category", fixedrange: true, automargin: true, tickangle: 0, tickmode: "array",
          tickvals: hm.brokers, ticktext: narrow ? hm.brokers.map(function (b) { return String(b).replace(/^broker /, "#"); }) : hm.brokers },
        // rows are the sensors' tags, labelled in words; long names would squeeze the cells, so the labels are cut
        // (the hover has the whole name)
        yaxis: { type: "category", autorange: "reversed", automargin: true, fixedrange: true, tickmode: "array",
          tickvals: hm.entities, ticktext: names.map(function (e) { return e.length > most ? e.slice(0, most - 1) + "…" : e; }) },
      };
      Plotly.newPlot(el, [trace], layout, HEATMAP_CONFIG).then(function () {
        el.on("plotly_click", function (ev) {
          var p = ev && ev.points && ev.points[0];
          if (!p) return;
          var row = Array.isArray(p.pointIndex) ? p.pointIndex[0] : hm.entities.indexOf(p.y);
          if (row >= 0 && hm.links[row]) window.location.assign(hm.links[row]);
        });
      });
    });
  }

  function main() {
    if (typeof window.Plotly === "undefined") {
      var status = document.getElementById("monitor-status");
      if (status) {
        status.dataset.state = "error";
        status.textContent = "The charts could not load (plotly.js is missing).";
      }
      return;
    }
    var entity = readData("monitor-entity-data");
    if (entity) {
      var pageObj = new EntityPage(entity);
      window.quotaMonitor = pageObj; // for the browser tests and the curious: read-only use
      pageObj.start();
    }
    var overview = readData("monitor-overview-data");
    if (overview) drawHeatmaps(overview);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", main);
  else main();
})();
