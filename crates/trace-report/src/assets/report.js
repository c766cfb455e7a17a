(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var CAT_COLORS = {
    parameter: "#4e79a7", activation: "#f28e2b", gradient: "#e15759",
    optimizer_state: "#76b7b2", input: "#59a14f", temporary: "#edc948", other: "#b07aa1"
  };
  (window.__tgErrors || []).forEach(function (m) { window.__tgFail(m); });
  var data = JSON.parse(document.getElementById("tg-data").textContent);

  // ---------- formatting ----------
  function fmtNs(ns) {
    if (ns === null || ns === undefined) return "\u2013";
    var a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(a >= 1e10 ? 1 : 2) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(a >= 1e8 ? 0 : a >= 1e7 ? 1 : 2) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(a >= 1e5 ? 0 : a >= 1e4 ? 1 : 2) + " \u00b5s";
    return Math.round(ns) + " ns";
  }
  function fmtBytes(b) {
    if (b === null || b === undefined) return "\u2013";
    var a = Math.abs(b), units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (a >= 1024 && i < units.length - 1) { a /= 1024; i++; }
    var s = i === 0 ? String(a) : a.toFixed(a >= 100 ? 0 : a >= 10 ? 1 : 2);
    return (b < 0 ? "-" : "") + s + " " + units[i];
  }
  function fmtInt(n) {
    if (n === null || n === undefined) return "\u2013";
    return Number(n).toLocaleString("en-US");
  }
  function sign(v, s) { return v > 0 ? "+" + s : s; }
  function fmtCell(kind, v) {
    if (v === null || v === undefined) return "\u2013";
    switch (kind) {
      case "ns": return fmtNs(v);
      case "bytes": return fmtBytes(v);
      case "int": return fmtInt(v);
      case "pct": return (v * 100).toFixed(1) + " %";
      case "delta_ns": return sign(v, fmtNs(v));
      case "delta_bytes": return sign(v, fmtBytes(v));
      case "delta_pct": return sign(v, (v * 100).toFixed(1) + " %");
      case "float": return Number(v).toPrecision(4);
      default: return String(v);
    }
  }
  function isNum(kind) { return kind !== "text" && kind !== "code" && kind !== "name"; }

  // ---------- DOM helpers ----------
  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (k === "text") e.textContent = attrs[k]; else e.setAttribute(k, attrs[k]);
    }
    (children || []).forEach(function (c) { if (c) e.appendChild(c); });
    return e;
  }
  function svg(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function note(text) { return el("p", { "class": "note", text: text }); }
  function absent(text) { return el("p", { "class": "absent", text: text }); }
  function kv(pairs) {
    var dl = el("dl", { "class": "kv" });
    pairs.forEach(function (p) {
      dl.appendChild(el("div", null, [el("dt", { text: p[0] }), el("dd", { text: p[1], title: p[1] })]));
    });
    return dl;
  }
  function niceStep(max, n) {
    if (!(max > 0)) return 1;
    var raw = max / n, p = Math.pow(10, Math.floor(Math.log(raw) / Math.LN10)), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * p;
  }
  function niceBytesStep(max, n) {
    if (!(max > 0)) return 1;
    var unit = 1;
    while (max / unit >= 1024 * n && unit < Math.pow(1024, 4)) unit *= 1024;
    return niceStep(max / unit, n) * unit;
  }

  // ---------- tables ----------
  // A table spec: {id, columns:[{key,label,kind,bar}], rows:[[...]], depth:[..]|null,
  //                total_rows, note, sortable, filter}
  function renderTable(host, spec) {
    host.setAttribute("data-rows", String(spec.rows.length));
    if (spec.note) host.appendChild(note(spec.note));
    if (!spec.rows.length) { host.appendChild(absent(spec.empty || "No rows.")); return; }
    var cols = spec.columns, rows = spec.rows.slice(), isTree = !!spec.depth;
    var order = rows.map(function (_, i) { return i; });
    var sortCol = -1, sortDesc = true, filter = "", collapsed = {};
    var maxes = cols.map(function (c, j) {
      if (!c.bar) return 0;
      var m = 0; rows.forEach(function (r) { if (typeof r[j] === "number" && r[j] > m) m = r[j]; });
      return m;
    });
    var table = el("table", { "class": "data" });
    var thead = el("thead"), htr = el("tr"), tbody = el("tbody");
    cols.forEach(function (c, j) {
      var th = el("th", { "class": (isNum(c.kind) ? "num " : "") + (spec.sortable ? "sortable" : ""), text: c.label });
      if (c.title) th.title = c.title;
      if (spec.sortable) th.addEventListener("click", function () {
        if (sortCol === j) sortDesc = !sortDesc; else { sortCol = j; sortDesc = isNum(c.kind); }
        draw();
      });
      htr.appendChild(th);
    });
    thead.appendChild(htr); table.appendChild(thead); table.appendChild(tbody);
    if (spec.filter) {
      var input = el("input", { type: "search", placeholder: "filter " + cols[0].label.toLowerCase() + "\u2026" });
      input.addEventListener("input", function () { filter = input.value.toLowerCase(); draw(); });
      host.appendChild(el("div", { "class": "toolbar" }, [input]));
    }
    function hiddenByTree(i) {
      // Pre-order rows: a row is hidden when an ancestor is collapsed.
      return spec._hidden && spec._hidden[i];
    }
    function computeHidden() {
      if (!isTree) return;
      var hidden = new Array(rows.length), stack = [];
      for (var i = 0; i < rows.length; i++) {
        var d = spec.depth[i];
        while (stack.length && stack[stack.length - 1].depth >= d) stack.pop();
        hidden[i] = stack.some(function (s) { return s.collapsed; });
        stack.push({ depth: d, collapsed: !!collapsed[i] });
      }
      spec._hidden = hidden;
    }
    function draw() {
      if (sortCol >= 0) {
        order.sort(function (a, b) {
          var x = rows[a][sortCol], y = rows[b][sortCol];
          if (x === y) return a - b;
          if (x === null || x === undefined) return 1;
          if (y === null || y === undefined) return -1;
          var r = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
          return sortDesc ? -r : r;
        });
      }
      computeHidden();
      while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
      order.forEach(function (i) {
        var r = rows[i];
        if (filter && String(r[0]).toLowerCase().indexOf(filter) < 0) return;
        if (hiddenByTree(i)) return;
        var tr = el("tr");
        cols.forEach(function (c, j) {
          var v = r[j], td = el("td");
          td.className = (isNum(c.kind) ? "num" : "") + (c.kind === "name" || c.kind === "code" ? " name" : "");
          if (c.kind.indexOf("delta") === 0 && typeof v === "number" && v !== 0) td.className += v > 0 ? " pos" : " neg";
          if (j === 0 && isTree) {
            var d = spec.depth[i], hasKids = i + 1 < rows.length && spec.depth[i + 1] > d;
            td.style.paddingLeft = (8 + d * 16) + "px";
            var tog = el("span", { "class": "tree-toggle", text: hasKids ? (collapsed[i] ? "\u25b8" : "\u25be") : "" });
            if (hasKids) tog.addEventListener("click", function () { collapsed[i] = !collapsed[i]; draw(); });
            td.appendChild(tog);
            td.appendChild(document.createTextNode(String(v)));
            td.title = spec.titles ? String(spec.titles[i]) : String(v);
          } else if (c.bar && typeof v === "number" && maxes[j] > 0) {
            td.className += " bar";
            td.appendChild(el("span", { "class": "fill", style: "width:" + Math.max(0, Math.min(100, 100 * v / maxes[j])).toFixed(1) + "%" }));
            td.appendChild(el("span", { "class": "val", text: fmtCell(c.kind, v) }));
          } else {
            td.textContent = fmtCell(c.kind, v);
            if (c.kind === "name" || c.kind === "code") td.title = String(v);
          }
          tr.appendChild(td);
        });
        tbody.appendChild(tr);
      });
      Array.prototype.forEach.call(htr.children, function (th, j) {
        var old = th.querySelector(".arrow");
        if (old) th.removeChild(old);
        if (j === sortCol) th.appendChild(el("span", { "class": "arrow", text: sortDesc ? "\u25bc" : "\u25b2" }));
      });
    }
    host.appendChild(el("div", { "class": "tablewrap" }, [table]));
    draw();
  }

  // ---------- charts ----------
  function stepChart(host, steps) {
    if (!steps || !steps.index.length) { host.setAttribute("data-rendered", "absent"); host.appendChild(absent("No step events in this trace: step times are absent.")); return; }
    var W = 1160, H = 230, L = 64, R = 12, T = 12, B = 34;
    var n = steps.index.length, max = 0;
    steps.duration_ns.forEach(function (d) { if (d > max) max = d; });
    var ystep = niceStep(max, 4), ymax = Math.max(ystep, Math.ceil(max / ystep) * ystep);
    var s = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "step times" });
    for (var v = 0; v <= ymax + 1e-9; v += ystep) {
      var y = T + (H - T - B) * (1 - v / ymax);
      s.appendChild(svg("line", { "class": "grid", x1: L, x2: W - R, y1: y, y2: y }));
      s.appendChild(svg("text", { x: L - 6, y: y + 4, "text-anchor": "end" }, fmtNs(v)));
    }
    var bw = (W - L - R) / n, gap = bw > 4 ? Math.min(2, bw * 0.15) : 0;
    var labelEvery = Math.max(1, Math.ceil(n / 24));
    for (var i = 0; i < n; i++) {
      var d = steps.duration_ns[i];
      var x = L + i * bw;
      if (d !== null) {
        var h = (H - T - B) * (d / ymax);
        var rect = svg("rect", { x: x + gap / 2, y: H - B - h, width: Math.max(0.5, bw - gap), height: Math.max(0, h), fill: steps.changed && steps.changed[i] ? "#e15759" : "#4e79a7", rx: bw > 6 ? 2 : 0 });
        rect.appendChild(svg("title", {}, "step " + steps.index[i] + ": " + fmtNs(d) + (steps.ops ? ", " + fmtInt(steps.ops[i]) + " ops" : "") + (steps.changed && steps.changed[i] ? " (graph changed)" : "")));
        s.appendChild(rect);
      }
      if (i % labelEvery === 0) s.appendChild(svg("text", { x: x + bw / 2, y: H - B + 15, "text-anchor": "middle" }, String(steps.index[i])));
    }
    s.appendChild(svg("line", { "class": "axis", x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#c3cad4" }));
    s.appendChild(svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, "step index"));
    host.appendChild(el("div", { "class": "chart" }, [s]));
    host.setAttribute("data-rendered", "svg");
    var legend = el("div", { "class": "legend" });
    legend.appendChild(el("span", null, [el("span", { "class": "sw", style: "background:#4e79a7" }), document.createTextNode("same graph as before")]));
    legend.appendChild(el("span", null, [el("span", { "class": "sw", style: "background:#e15759" }), document.createTextNode("graph changed")]));
    host.appendChild(legend);
  }

  function memoryChart(host, dev) {
    var W = 1160, H = 300, L = 74, R = 16, T = 26, B = 34;
    var t = dev.t_ns, n = t.length;
    if (n === 0) { host.appendChild(absent("No memory events on " + dev.device + ".")); return false; }
    var t0 = t[0], t1 = Math.max(t[n - 1], t0 + 1);
    var cum = dev.series.map(function () { return new Array(n); });
    var max = 0;
    for (var i = 0; i < n; i++) {
      var acc = 0;
      for (var k = 0; k < dev.series.length; k++) { acc += dev.series[k][i]; cum[k][i] = acc; }
      if (acc > max) max = acc;
    }
    max = Math.max(max, dev.peak.bytes);
    var ystep = niceBytesStep(max, 4), ymax = Math.max(ystep, Math.ceil(max / ystep) * ystep);
    function X(v) { return L + (W - L - R) * (v - t0) / (t1 - t0); }
    function Y(v) { return T + (H - T - B) * (1 - v / ymax); }
    var s = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "memory timeline " + dev.device });
    for (var v = 0; v <= ymax + 1e-9; v += ystep) {
      s.appendChild(svg("line", { "class": "grid", x1: L, x2: W - R, y1: Y(v), y2: Y(v) }));
      s.appendChild(svg("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end" }, fmtBytes(v)));
    }
    var xstep = niceStep(t1 - t0, 8);
    for (var xv = Math.ceil(t0 / xstep) * xstep; xv <= t1; xv += xstep) {
      s.appendChild(svg("line", { "class": "grid", x1: X(xv), x2: X(xv), y1: T, y2: H - B }));
      s.appendChild(svg("text", { x: X(xv), y: H - B + 15, "text-anchor": "middle" }, fmtNs(xv)));
    }
    // Stacked step areas: memory is constant between events.
    for (k = dev.series.length - 1; k >= 0; k--) {
      var top = cum[k], bot = k > 0 ? cum[k - 1] : null;
      var d = "M" + X(t[0]).toFixed(1) + "," + Y(top[0]).toFixed(1);
      for (i = 1; i < n; i++) d += "H" + X(t[i]).toFixed(1) + "V" + Y(top[i]).toFixed(1);
      d += "H" + X(t1).toFixed(1);
      d += "V" + Y(bot ? bot[n - 1] : 0).toFixed(1);
      for (i = n - 1; i >= 1; i--) d += "H" + X(t[i]).toFixed(1) + "V" + Y(bot ? bot[i - 1] : 0).toFixed(1);
      d += "H" + X(t[0]).toFixed(1) + "Z";
      var p = svg("path", { d: d, fill: CAT_COLORS[dev.categories[k]] || "#999", "fill-opacity": 0.85, stroke: "none" });
      p.appendChild(svg("title", {}, dev.categories[k]));
      s.appendChild(p);
    }
    var px = X(dev.peak.t_ns);
    s.appendChild(svg("line", { "class": "peak-marker", x1: px, x2: px, y1: T - 4, y2: H - B }));
    s.appendChild(svg("circle", { cx: px, cy: Y(dev.peak.bytes), r: 3.5, fill: "#c62828" }));
    var label = "peak " + fmtBytes(dev.peak.bytes) + " at " + fmtNs(dev.peak.t_ns);
    var right = px > W - 260;
    s.appendChild(svg("text", { "class": "peak-label", x: right ? px - 6 : px + 6, y: T + 6, "text-anchor": right ? "end" : "start" }, label));
    s.appendChild(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#c3cad4" }));
    s.appendChild(svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, "time since session start"));
    var legend = el("div", { "class": "legend" });
    dev.categories.forEach(function (c, k) {
      var peakVal = dev.peak.by_category ? dev.peak.by_category[k] : null;
      legend.appendChild(el("span", null, [el("span", { "class": "sw", style: "background:" + (CAT_COLORS[c] || "#999") }), document.createTextNode(c + (peakVal !== null && peakVal !== undefined ? " (" + fmtBytes(peakVal) + " at peak)" : ""))]));
    });
    host.appendChild(el("h3", { text: dev.device + " \u2014 live " + data.memory.bytes_kind + " bytes by category" }));
    host.appendChild(legend);
    host.appendChild(el("div", { "class": "chart" }, [s]));
    return true;
  }

  // ---------- sections ----------
  function section(id) { return document.getElementById(id); }

  function renderHeader() {
    document.getElementById("subtitle").textContent = data.subtitle || "";
    var host = section("run");
    host.appendChild(kv(data.run));
    var badges = el("div", { "class": "badges" });
    data.health.forEach(function (h) { badges.appendChild(el("span", { "class": "badge " + h.level, text: h.text })); });
    host.appendChild(badges);
    if (data.caps.length) {
      var ul = el("ul");
      data.caps.forEach(function (c) { ul.appendChild(el("li", { text: c })); });
      host.appendChild(el("div", { "class": "caps" }, [el("strong", { text: "Capped for size: " }), ul]));
    }
  }

  function renderSteps() {
    var host = section("step-chart");
    if (data.steps && data.steps.note) host.appendChild(note(data.steps.note));
    stepChart(host, data.steps);
  }

  function renderMemory() {
    var host = section("memory-chart"), detail = section("memory-detail");
    if (!data.memory) {
      host.setAttribute("data-rendered", "absent");
      host.appendChild(absent("This trace has no memory events: memory is absent (not zero)."));
      return;
    }
    if (data.memory.note) host.appendChild(note(data.memory.note));
    var any = false;
    data.memory.devices.forEach(function (dev) {
      if (memoryChart(host, dev)) any = true;
      var box = el("div");
      box.appendChild(kv(dev.stats));
      var two = el("div", { "class": "two" });
      var a = el("div"), b = el("div");
      a.appendChild(el("h3", { text: "At the peak, by category" }));
      var t1 = el("div"); a.appendChild(t1); renderTable(t1, dev.peak_breakdown);
      b.appendChild(el("h3", { text: "Largest allocations live at the peak" }));
      var t2 = el("div"); b.appendChild(t2); renderTable(t2, dev.peak_allocations);
      two.appendChild(a); two.appendChild(b);
      box.appendChild(two);
      box.appendChild(el("h3", { text: "Still live at the end (possible leaks; parameters and optimizer state excluded)" }));
      var t3 = el("div"); box.appendChild(t3); renderTable(t3, dev.leaks);
      if (dev.physical) {
        box.appendChild(el("h3", { text: "Physical device memory (reported by the device; never mixed with logical bytes)" }));
        box.appendChild(kv(dev.physical));
      }
      detail.appendChild(box);
    });
    host.setAttribute("data-rendered", any ? "svg" : "absent");
  }

  function renderGraphs() {
    var host = section("graphs");
    if (!data.graphs) { host.appendChild(absent("No per-step graphs: the trace has no steps with ops.")); return; }
    host.appendChild(kv(data.graphs.summary));
    var t = el("div"); host.appendChild(t); renderTable(t, data.graphs.table);
  }

  function renderComparison() {
    var sec = document.getElementById("comparison-section"), host = section("comparison");
    if (!data.comparison) {
      sec.hidden = true;
      var link = document.querySelector('nav.toc a[href="#comparison-section"]');
      if (link) link.hidden = true;
      return;
    }
    sec.hidden = false;
    host.appendChild(kv(data.comparison.summary));
    var total = 0;
    data.comparison.tables.forEach(function (spec) {
      host.appendChild(el("h3", { text: spec.title }));
      var t = el("div"); host.appendChild(t); renderTable(t, spec);
      total += spec.rows.length;
    });
    host.setAttribute("data-rows", String(total));
  }

  renderHeader();
  renderSteps();
  renderTable(section("op-table"), data.ops);
  renderTable(section("span-tree"), data.spans);
  renderMemory();
  renderGraphs();
  renderComparison();
  if (document.getElementById("tg-errors").textContent === "") {
    document.documentElement.setAttribute("data-tg-status", "ok");
  }
})();
