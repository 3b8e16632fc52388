/*
 * Client telemetry of one instance or of every instance of one client id (KIP-714 pushes; telemetry_ui/README.md):
 * the WebSocket /ws/monitor/ sends, per subscribed instance, the last minutes of its pushes ("backfill"), then each
 * new push ("telemetry"). One Plotly chart per metric name, one line per set of point attributes (per instance and
 * set of attributes on a client id's page); new points are appended with Plotly.extendTraces.
 *
 * Bootstrap (json_script): "telemetry-instance-data" {cluster, instance, ws_path, window_ms} or
 * "telemetry-client-data" {cluster, client_id, instances: [...], backfill: [entries], ws_path, window_ms}.
 */
(function () {
  "use strict";
  var cfgNode = document.getElementById("telemetry-instance-data") ||
                document.getElementById("telemetry-client-data");
  if (!cfgNode) return;
  var cfg = JSON.parse(cfgNode.textContent);
  var perClient = Array.isArray(cfg.instances); // several instances: each line is named after its instance too
  var instances = perClient ? cfg.instances : [cfg.instance];
  var container = document.getElementById("telemetry-charts");
  var statusNode = document.getElementById("telemetry-status");
  var errorsNode = document.getElementById("telemetry-errors");
  var emptyNode = document.getElementById("telemetry-empty");
  var charts = {}; // metric name -> {div, traces: {attrsKey: index}, pending: bool}
  var lastT = {}; // instance -> newest push time drawn (a backfill after a reconnect re-sends older pushes)
  var drawn = 0;
  var MAX_POINTS = 2000;

  function setStatus(state, text) {
    statusNode.dataset.state = state;
    statusNode.textContent = text;
  }

  function showError(text) {
    errorsNode.hidden = false;
    errorsNode.textContent = text;
  }

  function attrsKey(attrs) {
    var keys = Object.keys(attrs || {}).sort();
    return keys.map(function (k) { return k + "=" + attrs[k]; }).join(", ") || "(no attributes)";
  }

  function chartFor(name) {
    var c = charts[name];
    if (c) return c;
    var div = document.createElement("div");
    div.className = "chart telemetry-chart";
    div.dataset.metric = name;
    container.appendChild(div);
    c = charts[name] = {div: div, traces: {}, count: 0};
    Plotly.newPlot(div, [], {
      title: {text: name, font: {size: 14}}, height: 280, margin: {l: 60, r: 20, t: 40, b: 40},
      xaxis: {type: "date"}, showlegend: true, legend: {orientation: "h"}
    }, {responsive: true, displaylogo: false});
    return c;
  }

  function draw(entries) {
    // Group the new points by chart and trace, then one extendTraces/addTraces per chart.
    var byChart = {};
    entries.forEach(function (e) {
      var inst = String(e.instance);
      if (typeof e.t !== "number" || (lastT[inst] !== undefined && e.t <= lastT[inst])) return;
      lastT[inst] = e.t;
      (e.points || []).forEach(function (p) {
        if (typeof p.value !== "number") return;
        var name = p.name || "?";
        var key = perClient ? inst + " · " + attrsKey(p.attrs) : attrsKey(p.attrs);
        var g = byChart[name] = byChart[name] || {};
        var tr = g[key] = g[key] || {x: [], y: []};
        tr.x.push(new Date(p.t || e.t));
        tr.y.push(p.value);
        drawn += 1;
      });
    });
    Object.keys(byChart).forEach(function (name) {
      var c = chartFor(name);
      var groups = byChart[name];
      var fresh = [], idx = [], xs = [], ys = [];
      Object.keys(groups).forEach(function (key) {
        var g = groups[key];
        if (c.traces[key] === undefined) {
          c.traces[key] = c.count++;
          fresh.push({x: g.x, y: g.y, name: key, mode: "lines+markers", type: "scatter"});
        } else {
          idx.push(c.traces[key]); xs.push(g.x); ys.push(g.y);
        }
      });
      if (fresh.length) Plotly.addTraces(c.div, fresh);
      if (idx.length) Plotly.extendTraces(c.div, {x: xs, y: ys}, idx, MAX_POINTS);
    });
    container.dataset.points = String(drawn);
    if (drawn && emptyNode) emptyNode.hidden = true;
  }

  var delay = 1000;
  function connect() {
    var proto = window.location.protocol === "https:" ? "wss:" : "ws:";
    var ws = new WebSocket(proto + "//" + window.location.host + cfg.ws_path);
    var subscribed = 0;
    ws.onopen = function () {
      instances.forEach(function (inst) {
        var since = lastT[inst] !== undefined ? lastT[inst] : Date.now() - cfg.window_ms;
        ws.send(JSON.stringify({action: "subscribe_telemetry", cluster: cfg.cluster, instance: inst,
                                since_ms: since}));
      });
    };
    ws.onmessage = function (ev) {
      var f = JSON.parse(ev.data);
      if (f.type === "subscribed") {
        delay = 1000;
        subscribed += 1;
        setStatus("live", "Live.");
      } else if (f.type === "backfill" || f.type === "telemetry") {
        if (instances.indexOf(f.instance) >= 0) draw(f.entries || []);
      } else if (f.type === "error") {
        showError(f.message || f.code);
        if (!subscribed) setStatus("error", "The live charts are unavailable.");
      }
    };
    ws.onclose = function (ev) {
      if (ev.code === 4401) { setStatus("error", "Log in again to see the live charts."); return; }
      setStatus("reconnecting", "Connection lost; reconnecting in " + Math.round(delay / 1000) + " s.");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }
  if (typeof Plotly === "undefined") { showError("plotly.js did not load."); return; }
  draw(cfg.backfill || []);
  if (!instances.length) { setStatus("idle", "No live instance to follow."); return; }
  connect();
})();
