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
      case "norm": return typeof v === "number" ? Number(v).toPrecision(4) : String(v);
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
      if (c.key) th.setAttribute("data-key", "");
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
        if (spec.row_class && spec.row_class[i]) tr.className = "row-" + spec.row_class[i];
        cols.forEach(function (c, j) {
          var v = r[j], td = el("td");
          td.className = (isNum(c.kind) ? "num" : "") + (c.kind === "name" || c.kind === "code" ? " name" : "") + (c.kind === "text" ? " text" : "");
          if (c.kind.indexOf("delta") === 0 && typeof v === "number" && v !== 0) td.className += v > 0 ? " pos" : " neg";
          if (c.kind === "delta_figure" && typeof v === "string" && /^[+-]/.test(v) && /[1-9]/.test(v)) td.className += v.charAt(0) === "+" ? " pos" : " neg";
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
            // Long names and text wrap (see report.css); the full text is on hover too.
            if ((c.kind === "name" || c.kind === "code" || c.kind === "text") && v !== null && v !== undefined) td.title = String(v);
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
    var explained = cols.filter(function (c) { return c.title; });
    if (explained.length) {
      var dl = el("dl", { "class": "columns" });
      explained.forEach(function (c) { dl.appendChild(el("div", null, [el("dt", { text: c.label }), el("dd", { text: c.title })])); });
      host.appendChild(el("details", { "class": "colhelp" }, [el("summary", { text: "What the columns mean" }), dl]));
    }
    draw();
  }

  // ---------- charts ----------
  var PHASES = [["forward", "#4e79a7"], ["backward", "#f28e2b"], ["optimizer", "#59a14f"], ["other", "#bab0ac"]];
  function stepChart(host, steps) {
    if (!steps || !steps.index.length) { host.setAttribute("data-rendered", "absent"); host.appendChild(absent("No step events in this trace: step times are absent.")); return; }
    var W = 1160, H = 250, L = 64, R = 12, T = 12, B = 38;
    var n = steps.index.length, max = 0;
    steps.duration_ns.forEach(function (d) { if (d > max) max = d; });
    var base = steps.baseline || [];
    base.forEach(function (p) { if (p[1] > max) max = p[1]; });
    // The x axis is the step index, so unrecorded steps leave gaps.
    var i0 = steps.index[0], i1 = steps.last_index[n - 1];
    base.forEach(function (p) { if (p[0] < i0) i0 = p[0]; if (p[0] > i1) i1 = p[0]; });
    var slots = i1 - i0 + 1, bw = (W - L - R) / slots;
    function X(idx) { return L + (idx - i0) * bw; }
    var ystep = niceStep(max, 4), ymax = Math.max(ystep, Math.ceil(max / ystep) * ystep);
    function Y(v) { return H - B - (H - T - B) * (v / ymax); }
    var s = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "step times" });
    for (var v = 0; v <= ymax + 1e-9; v += ystep) {
      s.appendChild(svg("line", { "class": "grid", x1: L, x2: W - R, y1: Y(v), y2: Y(v) }));
      s.appendChild(svg("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end" }, fmtNs(v)));
    }
    (steps.unrecorded || []).forEach(function (g) {
      var gw = (g[1] - g[0] + 1) * bw;
      var r = svg("rect", { "class": "gap", x: X(g[0]) + 1, y: T, width: Math.max(1, gw - 2), height: H - T - B, fill: "#f1f3f6", stroke: "#c3cad4", "stroke-dasharray": "3 3" });
      r.appendChild(svg("title", {}, (g[0] === g[1] ? "step " + g[0] : "steps " + g[0] + "\u2013" + g[1]) + " not recorded"));
      s.appendChild(r);
      if (gw > 40) s.appendChild(svg("text", { x: X(g[0]) + gw / 2, y: T + 14, "text-anchor": "middle", "class": "gap-label" }, "not recorded"));
    });
    var gap = bw > 4 ? Math.min(2, bw * 0.15) : 0;
    for (var i = 0; i < n; i++) {
      var d = steps.duration_ns[i], ph = steps.phases_ns ? steps.phases_ns[i] : [0, 0, 0, d];
      var x = X(steps.index[i]), w = Math.max(0.5, (steps.last_index[i] - steps.index[i] + 1) * bw - gap);
      if (d === null) continue;
      var g = svg("g", { "class": "step-bar" + (steps.changed && steps.changed[i] ? " changed" : "") });
      var acc = 0;
      for (var k = 0; k < 4; k++) {
        if (!(ph[k] > 0)) continue;
        g.appendChild(svg("rect", { x: x + gap / 2, y: Y(acc + ph[k]), width: w, height: Math.max(0, Y(acc) - Y(acc + ph[k])), fill: PHASES[k][1] }));
        acc += ph[k];
      }
      if (steps.changed && steps.changed[i]) g.appendChild(svg("rect", { x: x + gap / 2, y: Y(d) - 4, width: w, height: 3, fill: "#c62828" }));
      var label = (steps.last_index[i] > steps.index[i] ? "steps " + steps.index[i] + "\u2013" + steps.last_index[i] + " (slowest shown)" : "step " + steps.index[i]) + ": " + fmtNs(d);
      PHASES.forEach(function (p, k) { if (ph[k] > 0) label += "\n  " + p[0] + " " + fmtNs(ph[k]); });
      if (steps.ops) label += "\n  " + fmtInt(steps.ops[i]) + " ops";
      if (steps.changed && steps.changed[i]) label += "\n  graph changed";
      g.appendChild(svg("title", {}, label));
      s.appendChild(g);
    }
    if (base.length) {
      var dpath = "";
      base.forEach(function (p, j) {
        var cx = X(p[0]) + bw / 2, cy = Y(p[1]);
        var prev = j > 0 ? base[j - 1][0] : null;
        dpath += (j === 0 || prev !== p[0] - 1 ? "M" : "L") + cx.toFixed(1) + "," + cy.toFixed(1);
      });
      s.appendChild(svg("path", { "class": "baseline", d: dpath, fill: "none", stroke: "#1d2330", "stroke-width": 1.5, "stroke-dasharray": "4 3" }));
      base.forEach(function (p) {
        var c = svg("circle", { cx: X(p[0]) + bw / 2, cy: Y(p[1]), r: 2.5, fill: "#1d2330" });
        c.appendChild(svg("title", {}, "baseline step " + p[0] + ": " + fmtNs(p[1])));
        s.appendChild(c);
      });
    }
    var labelEvery = Math.max(1, Math.ceil(slots / 24));
    for (var idx = i0; idx <= i1; idx += labelEvery) s.appendChild(svg("text", { x: X(idx) + bw / 2, y: H - B + 15, "text-anchor": "middle" }, String(idx)));
    s.appendChild(svg("line", { "class": "axis", x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#c3cad4" }));
    s.appendChild(svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, "step index"));
    host.appendChild(el("div", { "class": "chart" }, [s]));
    host.setAttribute("data-rendered", "svg");
    var legend = el("div", { "class": "legend" });
    PHASES.forEach(function (p) { legend.appendChild(el("span", null, [el("span", { "class": "sw", style: "background:" + p[1] }), document.createTextNode(p[0])])); });
    legend.appendChild(el("span", null, [el("span", { "class": "sw", style: "background:#c62828" }), document.createTextNode("graph changed")]));
    if ((steps.unrecorded || []).length) legend.appendChild(el("span", null, [el("span", { "class": "sw hatch" }), document.createTextNode("not recorded")]));
    if (base.length) legend.appendChild(el("span", null, [el("span", { "class": "sw line" }), document.createTextNode("baseline")]));
    host.appendChild(legend);
  }

  function memoryChart(host, dev) {
    var W = 1160, H = 300, L = 74, R = 16, T = 26, B = 34;
    var t = dev.t_ns, n = t.length, K = dev.series.length;
    if (n === 0) { host.appendChild(absent("No memory events on " + dev.device + ".")); return false; }
    var full0 = t[0], full1 = Math.max(dev.end_ns || t[n - 1], t[0] + 1);
    var view = [full0, full1];
    var max = Math.max(dev.peak.bytes, 0);
    dev.hi.forEach(function (v) { if (v > max) max = v; });
    var ystep = niceBytesStep(max, 4), ymax = Math.max(ystep, Math.ceil(max / ystep) * ystep);
    function Y(v) { return T + (H - T - B) * (1 - v / ymax); }
    var wrap = el("div", { "class": "chart zoomable" });
    var tools = el("div", { "class": "toolbar" });
    var reset = el("button", { type: "button", text: "reset zoom" });
    var range = el("span", { "class": "note" });
    tools.appendChild(reset); tools.appendChild(range);
    // Points in [a, b] reduced to at most one per pixel column: min of lo, max of hi,
    // categories at the smallest lo (what the column's floor is made of).
    function columns(a, b) {
      var cols = Math.max(1, W - L - R), out = [];
      var start = 0;
      while (start < n - 1 && t[start + 1] <= a) start++;
      for (var i = start; i < n && t[i] <= b; i++) {
        var c = Math.floor((Math.max(t[i], a) - a) / (b - a) * cols);
        var last = out[out.length - 1];
        if (last && last.c === c) {
          if (dev.lo[i] < last.lo) { last.lo = dev.lo[i]; last.i = i; }
          if (dev.hi[i] > last.hi) last.hi = dev.hi[i];
          last.next = i;
        } else out.push({ c: c, t: Math.max(t[i], a), lo: dev.lo[i], hi: dev.hi[i], i: i, next: i });
      }
      return out;
    }
    function draw() {
      var a = view[0], b = view[1];
      function X(v) { return L + (W - L - R) * (v - a) / (b - a); }
      var s = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "memory timeline " + dev.device });
      for (var v = 0; v <= ymax + 1e-9; v += ystep) {
        s.appendChild(svg("line", { "class": "grid", x1: L, x2: W - R, y1: Y(v), y2: Y(v) }));
        s.appendChild(svg("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end" }, fmtBytes(v)));
      }
      var xstep = niceStep(b - a, 8);
      for (var xv = Math.ceil(a / xstep) * xstep; xv <= b; xv += xstep) {
        s.appendChild(svg("line", { "class": "grid", x1: X(xv), x2: X(xv), y1: T, y2: H - B }));
        s.appendChild(svg("text", { x: X(xv), y: H - B + 15, "text-anchor": "middle" }, fmtNs(xv)));
      }
      var cols = columns(a, b), m = cols.length;
      if (m) {
        // Stacked step areas of the categories at each column's floor.
        var cum = [];
        // Exact points: after a column memory holds at its last event; buckets: at their floor.
        var colw = (W - L - R) / Math.max(1, W - L - R);
        for (var k = 0; k < K; k++) cum.push(cols.map(function (c) { var at = dev.exact ? c.next : c.i, acc = 0; for (var q = 0; q <= k; q++) acc += dev.series[q][at]; return acc; }));
        for (k = K - 1; k >= 0; k--) {
          var top = cum[k], bot = k > 0 ? cum[k - 1] : null;
          var d = "M" + X(cols[0].t).toFixed(1) + "," + Y(top[0]).toFixed(1);
          for (var i = 1; i < m; i++) d += "H" + X(cols[i].t).toFixed(1) + "V" + Y(top[i]).toFixed(1);
          d += "H" + X(b).toFixed(1) + "V" + Y(bot ? bot[m - 1] : 0).toFixed(1);
          for (i = m - 1; i >= 1; i--) d += "H" + X(cols[i].t).toFixed(1) + "V" + Y(bot ? bot[i - 1] : 0).toFixed(1);
          d += "H" + X(cols[0].t).toFixed(1) + "Z";
          var p = svg("path", { d: d, fill: CAT_COLORS[dev.categories[k]] || "#999", "fill-opacity": 0.85, stroke: "none" });
          p.appendChild(svg("title", {}, dev.categories[k]));
          s.appendChild(p);
        }
        // The band: from the smallest to the largest live total of each column.
        var band = "";
        cols.forEach(function (c, j) {
          if (c.hi <= c.lo) return;
          // An exact column's range lasts the column; a bucket's lasts until the next bucket.
          var x0 = X(c.t), xn = j + 1 < m ? X(cols[j + 1].t) : X(b), x1 = dev.exact ? Math.min(xn, x0 + colw) : xn;
          band += "M" + x0.toFixed(1) + "," + Y(c.hi).toFixed(1) + "H" + Math.max(x1, x0 + 1).toFixed(1) + "V" + Y(c.lo).toFixed(1) + "H" + x0.toFixed(1) + "Z";
        });
        if (band) {
          var bp = svg("path", { "class": "mem-band", d: band, fill: "#1f2a44", "fill-opacity": 0.28, stroke: "none" });
          bp.appendChild(svg("title", {}, "range of live bytes within the time bucket"));
          s.appendChild(bp);
        }
      }
      if (dev.peak.t_ns >= a && dev.peak.t_ns <= b) {
        var px = X(dev.peak.t_ns);
        s.appendChild(svg("line", { "class": "peak-marker", x1: px, x2: px, y1: T - 4, y2: H - B }));
        s.appendChild(svg("circle", { cx: px, cy: Y(dev.peak.bytes), r: 3.5, fill: "#c62828" }));
        var label = "peak " + fmtBytes(dev.peak.bytes) + " at " + fmtNs(dev.peak.t_ns);
        var right = px > W - 260;
        s.appendChild(svg("text", { "class": "peak-label", x: right ? px - 6 : px + 6, y: T + 6, "text-anchor": right ? "end" : "start" }, label));
      }
      s.appendChild(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#c3cad4" }));
      s.appendChild(svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, "time since session start (drag to zoom)"));
      var sel = svg("rect", { "class": "zoom-sel", x: 0, y: T, width: 0, height: H - T - B, visibility: "hidden" });
      s.appendChild(sel);
      var from = null;
      function tAt(ev) {
        var r = s.getBoundingClientRect(), x = (ev.clientX - r.left) * W / r.width;
        return { x: Math.max(L, Math.min(W - R, x)), t: a + (Math.max(L, Math.min(W - R, x)) - L) / (W - L - R) * (b - a) };
      }
      s.addEventListener("mousedown", function (ev) { from = tAt(ev); sel.setAttribute("visibility", "visible"); sel.setAttribute("x", from.x); sel.setAttribute("width", 0); ev.preventDefault(); });
      s.addEventListener("mousemove", function (ev) { if (!from) return; var to = tAt(ev); sel.setAttribute("x", Math.min(from.x, to.x)); sel.setAttribute("width", Math.abs(to.x - from.x)); });
      s.addEventListener("mouseup", function (ev) {
        if (!from) return; var to = tAt(ev), lo = Math.min(from.t, to.t), hi = Math.max(from.t, to.t); from = null;
        sel.setAttribute("visibility", "hidden");
        if (hi - lo > 0 && Math.abs(X(hi) - X(lo)) > 3) { view = [lo, hi]; draw(); }
      });
      s.addEventListener("dblclick", function () { view = [full0, full1]; draw(); });
      while (wrap.firstChild) wrap.removeChild(wrap.firstChild);
      wrap.appendChild(s);
      var zoomed = a > full0 || b < full1;
      reset.disabled = !zoomed;
      range.textContent = (zoomed ? "showing " + fmtNs(a) + " \u2013 " + fmtNs(b) : "whole run") + " \u00b7 " + (dev.exact ? "every event drawn" : "grouped into time buckets; the band spans each bucket's smallest to largest total");
      wrap.setAttribute("data-view", zoomed ? "zoomed" : "full");
    }
    reset.addEventListener("click", function () { view = [full0, full1]; draw(); });
    var legend = el("div", { "class": "legend" });
    dev.categories.forEach(function (c, k) {
      var peakVal = dev.peak.by_category ? dev.peak.by_category[k] : null;
      legend.appendChild(el("span", null, [el("span", { "class": "sw", style: "background:" + (CAT_COLORS[c] || "#999") }), document.createTextNode(c + (peakVal !== null && peakVal !== undefined ? " (" + fmtBytes(peakVal) + " at peak)" : ""))]));
    });
    legend.appendChild(el("span", null, [el("span", { "class": "sw", style: "background:rgba(31,42,68,0.28)" }), document.createTextNode("range within a time bucket")]));
    host.appendChild(el("h3", { text: dev.device + " \u2014 live " + data.memory.bytes_kind + " bytes by category" }));
    host.appendChild(legend);
    host.appendChild(tools);
    host.appendChild(wrap);
    draw();
    return true;
  }

  // Live tracked heap bytes over time: a step line from each point to the next (the points
  // are the analysis's, at most one per time bucket at its largest), and the true peak.
  function heapChart(host, h) {
    var W = 1160, H = 260, L = 74, R = 16, T = 26, B = 34;
    var t = h.t_ns, v = h.live, n = t.length;
    if (n === 0) { host.appendChild(absent("No tracked allocation.")); return false; }
    var a = t[0], b = Math.max(t[n - 1], t[0] + 1);
    var max = Math.max(h.peak.bytes, 1);
    v.forEach(function (x) { if (x > max) max = x; });
    var ystep = niceBytesStep(max, 4), ymax = Math.max(ystep, Math.ceil(max / ystep) * ystep);
    function X(x) { return L + (W - L - R) * (x - a) / (b - a); }
    function Y(y) { return T + (H - T - B) * (1 - y / ymax); }
    var s = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "tracked heap timeline" });
    for (var g = 0; g <= ymax + 1e-9; g += ystep) {
      s.appendChild(svg("line", { "class": "grid", x1: L, x2: W - R, y1: Y(g), y2: Y(g) }));
      s.appendChild(svg("text", { x: L - 6, y: Y(g) + 4, "text-anchor": "end" }, fmtBytes(g)));
    }
    var xstep = niceStep(b - a, 8);
    for (var xv = Math.ceil(a / xstep) * xstep; xv <= b; xv += xstep) {
      s.appendChild(svg("line", { "class": "grid", x1: X(xv), x2: X(xv), y1: T, y2: H - B }));
      s.appendChild(svg("text", { x: X(xv), y: H - B + 15, "text-anchor": "middle" }, fmtNs(xv)));
    }
    var d = "M" + X(t[0]).toFixed(1) + "," + Y(0).toFixed(1);
    for (var i = 0; i < n; i++) d += "V" + Y(v[i]).toFixed(1) + "H" + X(i + 1 < n ? t[i + 1] : b).toFixed(1);
    d += "V" + Y(0).toFixed(1) + "Z";
    var p = svg("path", { d: d, fill: "#8cd17d", "fill-opacity": 0.6, stroke: "#3b7d2e", "stroke-width": 1 });
    p.appendChild(svg("title", {}, "live " + h.bytes_kind + " bytes"));
    s.appendChild(p);
    var px = X(h.peak.t_ns);
    s.appendChild(svg("line", { "class": "peak-marker", x1: px, x2: px, y1: T - 4, y2: H - B }));
    s.appendChild(svg("circle", { cx: px, cy: Y(h.peak.bytes), r: 3.5, fill: "#c62828" }));
    var right = px > W - 260;
    s.appendChild(svg("text", { "class": "peak-label", x: right ? px - 6 : px + 6, y: T + 6, "text-anchor": right ? "end" : "start" }, "peak " + fmtBytes(h.peak.bytes) + " at " + fmtNs(h.peak.t_ns)));
    s.appendChild(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#c3cad4" }));
    s.appendChild(svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, "time since session start"));
    host.appendChild(el("h3", { text: "Live " + h.bytes_kind + " bytes (never summed with the logical bytes above)" }));
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
      // The breakdown is narrow; the allocations get the section's whole width, key columns
      // (category, bytes, tensor) first.
      box.appendChild(el("h3", { text: "At the peak, by category" }));
      var t1 = el("div", { "class": "narrow" }); box.appendChild(t1); renderTable(t1, dev.peak_breakdown);
      box.appendChild(el("h3", { text: "Largest allocations live at the peak" }));
      var t2 = el("div"); box.appendChild(t2); renderTable(t2, dev.peak_allocations);
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

  function renderHeap() {
    var host = el("div", { id: "heap-chart" });
    section("memory-section").appendChild(host);
    var h = data.heap;
    if (!h) { host.setAttribute("data-rendered", "absent"); return; }
    host.appendChild(el("h3", { text: "Heap (tracked)" }));
    if (h.note) host.appendChild(note(h.note));
    var drawn = heapChart(host, h);
    host.appendChild(kv(h.stats));
    host.appendChild(el("h3", { text: "Live at the heap peak, by span path" }));
    var t1 = el("div"); host.appendChild(t1); renderTable(t1, h.peak_by_span);
    host.appendChild(el("h3", { text: "Heap per span path" }));
    var t2 = el("div"); host.appendChild(t2); renderTable(t2, h.spans);
    host.setAttribute("data-rendered", drawn ? "svg" : "absent");
  }

  function renderGraphs() {
    var host = section("graphs");
    if (!data.graphs) { host.appendChild(absent("No per-step graphs: the trace has no steps with ops.")); return; }
    host.appendChild(kv(data.graphs.summary));
    var t = el("div"); host.appendChild(t); renderTable(t, data.graphs.table);
  }

  function renderGradients() {
    var host = section("gradients"), g = data.gradients;
    if (!g) {
      host.setAttribute("data-rendered", "absent");
      host.appendChild(absent("No gradient facts and no autograd graph in this trace: gradients are absent."));
      return;
    }
    host.appendChild(kv(g.summary));
    [g.params, g.autograd].forEach(function (spec) {
      host.appendChild(el("h3", { text: spec.title }));
      var t = el("div", { "class": "gradient-table" }); host.appendChild(t); renderTable(t, spec);
    });
    host.setAttribute("data-rendered", "tables");
  }

  // ---------- sampled flame graph ----------
  var FLAME_COLORS = {
    candle_core: "#f28e2b", gemm: "#e15759", candle_nn: "#edc948", model: "#59a14f",
    allocator: "#b07aa1", waiting: "#a0cbe8", profiler: "#9c755f", other: "#bab0ac"
  };
  function renderFlame() {
    var host = section("flame"), f = data.flame;
    if (!f) {
      host.setAttribute("data-rendered", "absent");
      host.appendChild(absent("No sampled stacks in this trace (it was recorded without the CPU sampler: `tracegraph demo --sample`, trace-candle's Capture::sample_stacks)."));
      return;
    }
    host.appendChild(kv(f.summary));
    // `tracegraph hot`'s hints: a recognised cost each, with its rule and evidence.
    var hints = el("ul", { "class": "warnings hints", id: "flame-hints" });
    hints.setAttribute("data-rows", String(f.hints.length));
    f.hints.forEach(function (h) {
      hints.appendChild(el("li", { "data-rule": h.rule, text: "hint: " + h.hint + " [" + h.rule + "; " + fmtInt(h.samples) + " samples]" }));
    });
    if (f.hints.length) host.appendChild(hints);
    host.appendChild(note(f.note));
    var W = 1160, ROW = 17, LABEL_PX = 6.6;
    var phaseOn = f.phases.map(function (p) { return p[1] > 0; });
    var zoom = [];  // the zoomed node's path from the root, as name indices
    var search = "";
    var tools = el("div", { "class": "toolbar flame-tools" });
    var phaseBox = el("span", { "class": "flame-phases" });
    f.phases.forEach(function (p, k) {
      if (!(p[1] > 0)) return;
      var id = "flame-phase-" + p[0];
      var cb = el("input", { type: "checkbox", id: id, "data-phase": p[0] });
      cb.checked = true;
      cb.addEventListener("change", function () { phaseOn[k] = cb.checked; draw(); });
      phaseBox.appendChild(el("label", { "for": id }, [cb, document.createTextNode(" " + p[0] + " (" + fmtInt(p[1]) + ")")]));
    });
    var only = el("button", { type: "button", text: "backward only" });
    only.addEventListener("click", function () {
      f.phases.forEach(function (p, k) { phaseOn[k] = p[0] === "backward"; });
      Array.prototype.forEach.call(phaseBox.querySelectorAll("input"), function (cb) { cb.checked = cb.getAttribute("data-phase") === "backward"; });
      draw();
    });
    only.disabled = !f.phases.some(function (p) { return p[0] === "backward" && p[1] > 0; });
    var reset = el("button", { type: "button", text: "reset zoom" });
    reset.addEventListener("click", function () { zoom = []; draw(); });
    var find = el("input", { type: "search", placeholder: "highlight frames\u2026" });
    find.addEventListener("input", function () { search = find.value.toLowerCase(); draw(); });
    tools.appendChild(el("span", { text: "phases:" }));
    tools.appendChild(phaseBox);
    tools.appendChild(only);
    tools.appendChild(reset);
    tools.appendChild(find);
    var detail = el("div", { "class": "flame-detail note", text: "Hover a frame for its samples; click to zoom." });
    var wrap = el("div", { "class": "flame-wrap" });
    var legend = el("div", { "class": "legend" });
    Object.keys(FLAME_COLORS).forEach(function (g) {
      legend.appendChild(el("span", null, [el("span", { "class": "sw", style: "background:" + FLAME_COLORS[g] }), document.createTextNode(g)]));
    });
    host.appendChild(tools);
    host.appendChild(legend);
    host.appendChild(detail);
    host.appendChild(wrap);

    // The tree of the selected phases: {name, total, self, kids: {nameIndex: node}, list}.
    function build() {
      var root = { name: -1, total: 0, self: 0, kids: {}, parent: null };
      f.stacks.forEach(function (stack, i) {
        var c = f.counts[i], n = 0;
        for (var k = 0; k < c.length; k++) if (phaseOn[k]) n += c[k];
        if (!n) return;
        var node = root;
        root.total += n;
        for (var d = 0; d < stack.length; d++) {
          var key = stack[d], next = node.kids[key];
          if (!next) { next = node.kids[key] = { name: key, total: 0, self: 0, kids: {}, parent: node }; }
          next.total += n;
          node = next;
        }
        node.self += n;
      });
      return root;
    }
    function sortedKids(node) {
      return Object.keys(node.kids).map(function (k) { return node.kids[k]; })
        .sort(function (a, b) { return b.total - a.total || a.name - b.name; });
    }
    function estimate(n) {
      return f.ns_per_sample ? "\u2248" + fmtNs(n * f.ns_per_sample) + " CPU (estimate)" : "CPU time unknown";
    }
    function describe(node, shown) {
      var name = f.names[node.name];
      var parts = [name, fmtInt(node.total) + " samples (" + (100 * node.total / shown).toFixed(1) + " % of the samples shown" +
        (node.parent && node.parent.name >= 0 ? ", " + (100 * node.total / node.parent.total).toFixed(1) + " % of its caller" : "") + ")",
        "self " + fmtInt(node.self) + " samples", estimate(node.total), "group " + f.groups[node.name]];
      return parts.join(" \u00b7 ");
    }
    function draw() {
      // As wide as the section (the page's charts are 1160 px at most).
      W = Math.max(480, Math.min(1160, (wrap.clientWidth || 1162) - 2));
      var root = build();
      // Follow the zoom path as far as it exists under the selected phases.
      var top = root, chain = [];
      for (var z = 0; z < zoom.length; z++) {
        var nx = top.kids[zoom[z]];
        if (!nx) { zoom = zoom.slice(0, z); break; }
        chain.push(nx); top = nx;
      }
      while (wrap.firstChild) wrap.removeChild(wrap.firstChild);
      reset.disabled = zoom.length === 0;
      if (!root.total) {
        wrap.appendChild(absent("No samples in the selected phases."));
        wrap.setAttribute("data-nodes", "0");
        return;
      }
      var rects = [], maxDepth = 0;
      // Ancestors of the zoomed frame: full width, click to zoom out to them.
      chain.slice(0, -1).forEach(function (node, d) { rects.push({ node: node, x: 0, w: W, d: d, anc: d + 1 }); });
      var base = Math.max(0, chain.length - 1);
      var scale = W / (top === root ? root.total : top.total);
      var stack = top === root ? sortedKids(root).map(function (k) { return { node: k, x: 0, d: base }; }) : [{ node: top, x: 0, d: base }];
      // Lay out children left to right, iteratively.
      if (top === root) { var acc0 = 0; stack.forEach(function (it) { it.x = acc0; acc0 += it.node.total * scale; }); }
      while (stack.length) {
        var it = stack.pop(), w = it.node.total * scale;
        if (w < 0.4) continue;
        rects.push({ node: it.node, x: it.x, w: w, d: it.d });
        if (it.d > maxDepth) maxDepth = it.d;
        var acc = it.x;
        sortedKids(it.node).forEach(function (k) { stack.push({ node: k, x: acc, d: it.d + 1 }); acc += k.total * scale; });
      }
      var H = (maxDepth + 1) * ROW + 2;
      var s = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "sampled flame graph" });
      function isHit(node) { return !!search && f.names[node.name].toLowerCase().indexOf(search) >= 0; }
      // Samples with a matching frame on the stack: outermost matches only, so none twice.
      var matched = 0, walk = [[top === root ? root : top, false]];
      while (search && walk.length) {
        var w0 = walk.pop(), n0 = w0[0], hit0 = n0.name >= 0 && isHit(n0);
        if (hit0 && !w0[1]) matched += n0.total;
        Object.keys(n0.kids).forEach(function (k) { walk.push([n0.kids[k], w0[1] || hit0]); });
      }
      rects.forEach(function (r) {
        var node = r.node;
        var hit = isHit(node);
        var g = svg("g", { "class": "flame-node" + (r.anc ? " flame-ancestor" : "") + (hit ? " flame-hit" : "") });
        var rect = svg("rect", { x: r.x.toFixed(2), y: r.d * ROW, width: Math.max(0.4, r.w - 0.6).toFixed(2), height: ROW - 1,
          fill: hit ? "#3164c6" : (FLAME_COLORS[f.groups[node.name]] || "#bab0ac"), rx: 1.5 });
        g.appendChild(rect);
        var label = f.labels[node.name], fit = Math.floor((r.w - 6) / LABEL_PX);
        if (fit >= 3) g.appendChild(svg("text", { x: (r.x + 3).toFixed(2), y: r.d * ROW + 12 }, label.length > fit ? label.slice(0, fit - 1) + "\u2026" : label));
        g.appendChild(svg("title", {}, describe(node, root.total)));
        g.addEventListener("mouseover", function () { detail.textContent = describe(node, root.total); });
        g.addEventListener("click", function () {
          var path = [], n = node;
          while (n && n.name >= 0) { path.unshift(n.name); n = n.parent; }
          zoom = r.anc || path.length === zoom.length && path.every(function (v, i) { return v === zoom[i]; }) ? path.slice(0, r.anc ? r.anc : path.length - 1) : path;
          draw();
        });
        s.appendChild(g);
      });
      wrap.appendChild(s);
      wrap.setAttribute("data-nodes", String(rects.length));
      wrap.setAttribute("data-samples", String(root.total));
      wrap.setAttribute("data-view", zoom.length ? "zoomed" : "full");
      var shown = top === root ? root.total : top.total;
      detail.textContent = (zoom.length ? "zoomed into " + f.names[top.name] + ": " : "all frames: ") + fmtInt(shown) + " of " + fmtInt(root.total) +
        " samples in the selected phases (" + estimate(shown) + ")" + (search ? " \u00b7 highlighted: " + fmtInt(matched) + " samples with a matching frame" : "");
    }
    draw();
    // Beside the graph, the sampled op table (`tracegraph ops --sampled`): span paths and
    // the Candle ops their samples ran inside.
    if (f.ops) {
      host.appendChild(el("h3", { text: "Sampled op table: Candle ops per span path (estimates)" }));
      var ops = el("div", { id: "flame-ops" });
      host.appendChild(ops);
      renderTable(ops, f.ops);
    }
    host.setAttribute("data-rendered", "svg");
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
    // The caveat `tracegraph compare` prints, above everything it qualifies.
    host.appendChild(el("ul", { "class": "warnings", id: "comparison-caveat" }, [el("li", { text: "intervals: " + data.comparison.caveat })]));
    host.appendChild(kv(data.comparison.summary));
    host.appendChild(note(data.comparison.legend));
    var total = 0;
    data.comparison.tables.forEach(function (spec) {
      host.appendChild(el("h3", { text: spec.title }));
      var t = el("div"); host.appendChild(t); renderTable(t, spec);
      total += spec.rows.length;
    });
    host.setAttribute("data-rows", String(total));
  }

  // A Candle run beside a torch.profiler run: the figures of `compare --against-torch`,
  // drawn as given, in its order.
  function renderTorch() {
    var sec = document.getElementById("torch-section"), host = section("torch");
    var t = data.torch;
    if (!t) {
      sec.hidden = true;
      var link = document.querySelector('nav.toc a[href="#torch-section"]');
      if (link) link.hidden = true;
      return;
    }
    sec.hidden = false;
    host.appendChild(kv(t.summary));
    if (t.warnings.length) {
      var warn = el("ul", { "class": "warnings" });
      t.warnings.forEach(function (w) { warn.appendChild(el("li", { text: "warning: " + w })); });
      host.appendChild(warn);
    }
    host.appendChild(el("h3", { text: t.kinds.title }));
    var kinds = el("div", { id: "torch-kinds" }); host.appendChild(kinds); renderTable(kinds, t.kinds);
    host.appendChild(el("p", { "class": "figures", text: t.copy_layout }));
    host.appendChild(el("h3", { text: t.layers.title }));
    var layers = el("div", { id: "torch-layers" }); host.appendChild(layers); renderTable(layers, t.layers);
    if (t.unmatched) host.appendChild(note(t.unmatched));
    host.appendChild(el("h3", { text: "Diagnoses, by what Candle loses" }));
    var diag = el("div", { id: "torch-diagnoses" });
    diag.setAttribute("data-rows", String(t.diagnoses.length));
    if (!t.diagnoses.length) diag.appendChild(absent(t.no_diagnosis));
    else {
      var ol = el("ol", { "class": "diagnoses" });
      t.diagnoses.forEach(function (d) {
        var li = el("li", { "data-rule": d.rule }, [
          el("span", { "class": "diagnosis", text: d.text }),
          el("span", { "class": "loss", text: " (Candle loses " + d.loss + " per step)" })
        ]);
        if (d.evidence.length) {
          var ev = el("ul", { "class": "evidence" });
          d.evidence.forEach(function (e) { ev.appendChild(el("li", { text: e })); });
          li.appendChild(ev);
        }
        ol.appendChild(li);
      });
      diag.appendChild(ol);
    }
    host.appendChild(diag);
    host.setAttribute("data-rows", String(t.kinds.rows.length + t.layers.rows.length));
  }

  renderHeader();
  renderSteps();
  renderTable(section("op-table"), data.ops);
  renderTable(section("span-tree"), data.spans);
  renderMemory();
  renderHeap();
  renderGraphs();
  renderGradients();
  renderFlame();
  renderComparison();
  renderTorch();
  if (document.getElementById("tg-errors").textContent === "") {
    document.documentElement.setAttribute("data-tg-status", "ok");
  }
})();
