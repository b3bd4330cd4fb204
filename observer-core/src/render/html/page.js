"use strict";
(function () {
  var page = document.getElementById("page");
  var R = JSON.parse(document.getElementById("report").textContent);
  if (R === null || typeof R !== "object") throw new Error("no report in the page");
  if (R.error) throw new Error("the report could not be written as JSON: " + R.error);
  if (typeof uPlot !== "function") throw new Error("uPlot did not load");

  var plots = [];
  var PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
    "#e377c2", "#17becf", "#7f7f7f", "#bcbd22", "#393b79", "#ad494a"];

  // ---------- DOM and formatting helpers (text nodes only, never markup)
  function el(tag, cls) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    for (var i = 2; i < arguments.length; i++) {
      var k = arguments[i];
      if (k === null || k === undefined || k === false) continue;
      e.append(k instanceof Node ? k : String(k));
    }
    return e;
  }
  function isNum(v) { return typeof v === "number" && isFinite(v); }
  function int(n) {
    if (!isNum(n)) return "-";
    return Math.round(n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }
  function dec(v) {
    if (!isNum(v)) return "-";
    var a = Math.abs(v);
    if (a === 0 || Number.isInteger(v)) return int(v);
    if (a >= 100) return int(v);
    if (a >= 10) return v.toFixed(1);
    if (a >= 0.01) return v.toFixed(2);
    return v.toPrecision(2);
  }
  function scaled(v, units, step) {
    if (!isNum(v)) return "-";
    var i = 0;
    while (Math.abs(v) >= step && i < units.length - 1) { v /= step; i++; }
    return (i === 0 ? dec(v) : v.toFixed(Math.abs(v) >= 100 ? 0 : 1)) + " " + units[i];
  }
  var RATE_UNITS = ["b/s", "kb/s", "Mb/s", "Gb/s", "Tb/s"];
  function rate(bps) { return scaled(bps, RATE_UNITS, 1000); }
  // Bytes in IEC binary units, as the terminal prints them; rates in decimal bits per second.
  function bytes(b) { return scaled(b, ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], 1024); }
  // As the terminal prints durations: "850 ns", "720 \u00b5s", "3.2 ms", "12.4 s", "2.5 min".
  function dur(ns) {
    if (!isNum(ns) || ns < 0) return "-";
    if (ns === 0) return "0 s";
    var steps = [[1e3, 1, "ns"], [1e6, 1e3, "\u00b5s"], [1e9, 1e6, "ms"], [60e9, 1e9, "s"], [3600e9, 60e9, "min"], [Infinity, 3600e9, "h"]];
    for (var i = 0; i < steps.length; i++) {
      if (ns < steps[i][0]) {
        var v = ns / steps[i][1];
        var text = v.toFixed(v >= 99.95 || i === 0 ? 0 : 1);
        if (text === "1000" && i < 3) return "1.0 " + steps[i + 1][2];
        return text + " " + steps[i][2];
      }
    }
    return "-";
  }
  function pct(x, digits) {
    return isNum(x) ? x.toFixed(digits === undefined ? 1 : digits) + " %" : "-";
  }
  function share(part, whole) { return whole > 0 ? part * 100 / whole : 0; }
  // A connection's ports as the terminal table shows them: one both ways, "a/b" when each side
  // used its own, "p+N" for a side that used N more.
  function connPorts(c) {
    var side = function (p) {
      p = arr(p);
      return p.length === 0 ? "-" : p.length === 1 ? String(p[0]) : p[0] + "+" + (p.length - 1);
    };
    var a = arr(c.a && c.a.ports), b = arr(c.b && c.b.ports);
    if (!a.length && !b.length) return String(c.udp_src_port);
    if (a.join() === b.join() || !b.length) return side(a);
    if (!a.length) return side(b);
    return side(a) + "/" + side(b);
  }
  function hex(qp) { return "0x" + (Number(qp) >>> 0).toString(16).padStart(6, "0"); }
  function flowName(f) {
    return f.src_ip + " \u2192 " + f.dst_ip + "  QP " + hex(f.dest_qp) + "  sport " +
      f.udp_src_port + (f.direction === "egress" ? "  (tx)" : "");
  }
  // Source and destination, on two lines when IPv6 makes them long.
  function flowCell(f, via) {
    var tail = (f.direction === "egress" ? " (tx)" : "") + via;
    var src = String(f.src_ip), dst = String(f.dst_ip);
    if (src.indexOf(":") < 0 && dst.indexOf(":") < 0) return src + " \u2192 " + dst + tail;
    return el("span", null, src + " \u2192", el("br"), dst + tail);
  }
  function mirrorName(m) {
    if (!m) return "direct";
    if (m.session !== undefined && m.session !== null) return "ERSPAN session " + m.session;
    return m.kind || "mirror";
  }
  function sum(a) { var s = 0; for (var i = 0; i < a.length; i++) if (isNum(a[i])) s += a[i]; return s; }
  function max(a) { var m = 0; for (var i = 0; i < a.length; i++) if (isNum(a[i]) && a[i] > m) m = a[i]; return m; }
  function arr(a) { return Array.isArray(a) ? a : []; }

  // A table from column specs {h, num} and rows of cells (a value or {v, cls}).
  function table(cols, rows, cls) {
    var t = el("table", cls || null);
    var hr = el("tr");
    cols.forEach(function (c) { hr.append(el("th", c.num ? "num" : null, c.h)); });
    t.append(el("thead", null, hr));
    var body = el("tbody");
    rows.forEach(function (r) {
      var tr = el("tr");
      r.forEach(function (cell, i) {
        var c = cell !== null && typeof cell === "object" && !(cell instanceof Node) ? cell : { v: cell };
        var classes = [cols[i] && cols[i].num ? "num" : "", cols[i] && cols[i].cls || "", c.cls || ""]
          .filter(Boolean).join(" ");
        var td = el("td", classes || null, c.v);
        if (c.title) td.title = c.title;
        if (c.sort !== undefined && c.sort !== null) td.dataset.sort = String(c.sort);
        tr.append(td);
      });
      body.append(tr);
    });
    t.append(body);
    return el("div", "scroll", t);
  }
  // Makes a table from `table` sortable: a click on a header sorts by that column (numbers by
  // their `data-sort` value where cells have one, else by text), a second click reverses.
  function sortable(wrap) {
    var t = wrap.querySelector("table");
    var ths = t.querySelectorAll("thead th");
    ths.forEach(function (th, col) {
      th.classList.add("sortable");
      th.title = "Sort by this column";
      th.addEventListener("click", function () {
        var dir = th.dataset.dir === "desc" ? "asc" : "desc";
        ths.forEach(function (o) { delete o.dataset.dir; });
        th.dataset.dir = dir;
        var body = t.querySelector("tbody");
        var rows = Array.prototype.slice.call(body.rows);
        function key(r) {
          var c = r.cells[col];
          if (!c) return "";
          if (c.dataset.sort !== undefined) {
            var n = Number(c.dataset.sort);
            return isNaN(n) ? c.dataset.sort : n;
          }
          return c.textContent;
        }
        rows.sort(function (a, b) {
          var x = key(a), y = key(b);
          var cmp = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
          return dir === "desc" ? -cmp : cmp;
        });
        rows.forEach(function (r) { body.append(r); });
      });
    });
    return wrap;
  }
  function kv(pairs) {
    var t = el("table", "kv");
    pairs.forEach(function (p) { t.append(el("tr", null, el("th", null, p[0]), el("td", p[2] || null, p[1]))); });
    return t;
  }
  function section(id, title, build) {
    var s = el("section", null, el("h2", null, title));
    s.id = id;
    page.append(s);
    try {
      build(s);
    } catch (e) {
      window.__pageError("section \u201c" + title + "\u201d", e);
      s.append(el("p", "note", "This section could not be drawn: " + (e && e.message)));
    }
    return s;
  }

  // ---------- header
  var src = R.source || {};
  var win = R.window && isNum(R.window.seconds) ? R.window.seconds : 0;
  var T = R.totals || {};
  var flows = arr(R.flows).slice().sort(function (a, b) { return (b.bytes || 0) - (a.bytes || 0); });
  (function header() {
    var where;
    if (src.kind === "live") {
      where = "Live capture on " + (arr(src.interfaces).join(", ") || "?");
      var how = [];
      if (src.mode) how.push("mode " + src.mode);
      if (src.xdp_mode) how.push("XDP " + src.xdp_mode);
      if (how.length) where += " (" + how.join(", ") + ")";
    } else if (src.kind === "capture") {
      where = "Live capture through libpcap on " + (arr(src.interfaces).join(", ") || "?");
      if (src.capture && src.capture.link_type) where += " (" + src.capture.link_type + ")";
    } else if (src.kind === "pcap") {
      where = "Replay of " + (arr(src.files).join(", ") || "?");
    } else {
      where = "Source: " + (src.kind || "?") +
        (arr(src.interfaces).length ? " " + src.interfaces.join(", ") : "") +
        (arr(src.files).length ? " " + src.files.join(", ") : "");
    }
    document.title = "RoCEv2 diagnosis: " + where;
    var head = el("header", null, el("h1", null, "RoCEv2 diagnosis"),
      el("p", "muted", where + " \u00b7 window " + (win > 0 ? dur(win * 1e9) : "one instant")));
    var tiles = el("div", "tiles");
    function tile(value, label, bad) {
      tiles.append(el("div", bad ? "tile bad" : "tile", el("b", null, value), el("span", null, label)));
    }
    tile(int(T.frames), "frames seen");
    tile(int(T.roce_packets), "RoCEv2 packets");
    tile(bytes(T.roce_bytes), "RoCEv2 bytes" + (win > 0 ? " (" + rate(T.roce_bytes * 8 / win) + ")" : ""));
    tile(int(T.ce_packets), "CE-marked (" + pct(share(T.ce_packets, T.roce_packets), 2) + ")", T.ce_packets > 0);
    tile(int(T.cnp_packets), "CNPs");
    tile(int(flows.length), "flows (QPs)");
    if (R.pfc) {
      var pf = 0;
      arr(R.pfc.sources).forEach(function (s) {
        pf += s.pfc_frames || 0;
        if (s.link_pause) pf += s.link_pause.frames || 0;
      });
      tile(int(pf), "PFC / PAUSE frames", pf > 0);
    }
    head.append(tiles);
    var lost = [];
    if (T.flow_insert_failures > 0) lost.push(int(T.flow_insert_failures) + " RoCE packets found the flow table full (in the totals only)");
    if (T.evicted_packets > 0) lost.push(int(T.evicted_packets) + " RoCE packets belong to flows evicted from the full flow table (in the totals only)");
    if (T.pause_insert_failures > 0) lost.push(int(T.pause_insert_failures) + " PAUSE/PFC frames found the pause table full");
    var warnings = arr(src.warnings).concat(lost);
    if (warnings.length) {
      var ul = el("ul");
      warnings.forEach(function (w) { ul.append(el("li", null, w)); });
      head.append(el("div", "box", el("b", null, "Warnings"), ul));
    }
    var skipped = Object.keys(T.skipped || {}).filter(function (k) { return T.skipped[k] > 0; });
    var mirror = T.mirror;
    if (skipped.length || mirror || T.egress_frames > 0) {
      var d = el("details", null, el("summary", null, "Other frames: not RoCEv2, mirror copies, egress"));
      if (skipped.length) {
        d.append(table([{ h: "Not counted as RoCEv2" }, { h: "Frames", num: true }],
          skipped.map(function (k) { return [k, int(T.skipped[k])]; }), "narrow"));
      }
      if (T.egress_frames > 0) d.append(el("p", null, int(T.egress_frames) + " frames seen leaving the host (TC egress)."));
      if (mirror) {
        var rows = Object.keys(mirror.sessions || {}).map(function (s) { return ["ERSPAN session " + s, int(mirror.sessions[s])]; });
        rows.push(["without a session (ERSPAN I, GRE)", int(mirror.sessionless)]);
        rows.push(["truncated copies", int(mirror.truncated)]);
        d.append(table([{ h: "Mirror copies" }, { h: "Frames", num: true }], rows, "narrow"));
      }
      head.append(d);
    }
    if (R.notice) head.prepend(el("div", "box", el("b", null, R.notice)));
    page.append(head);
  })();

  // ---------- findings first
  section("findings", "Findings", function (s) {
    var F = arr(R.findings);
    if (!F.length) {
      s.append(el("p", "note", arr(R.checks).length
        ? "No findings: every rule that could run passed (see the checks below)."
        : "No findings in this report (findings come from the diagnose and replay rules)."));
      return;
    }
    var counts = { critical: 0, warning: 0, info: 0 };
    F.forEach(function (f) { counts[f.severity] = (counts[f.severity] || 0) + 1; });
    var line = el("p");
    ["critical", "warning", "info"].forEach(function (k) {
      if (counts[k]) line.append(el("span", "badge " + k, counts[k] + " " + k));
    });
    s.append(line);
    F.forEach(function (f) {
      var sev = ["critical", "warning", "info"].indexOf(f.severity) >= 0 ? f.severity : "info";
      var card = el("article", "finding " + sev,
        el("div", null, el("span", "badge " + sev, sev), el("h3", null, f.title), el("span", "rule", f.rule)),
        el("p", null, f.summary));
      if (f.hint) card.append(el("p", "hint", el("b", null, "Hint: "), f.hint));
      var ev = f.evidence || {};
      var keys = Object.keys(ev);
      if (keys.length) card.append(kv(keys.map(function (k) { return [k, evidence(k, ev[k])]; })));
      var fl = arr(f.flows);
      if (fl.length) {
        var ul = el("ul");
        fl.forEach(function (x) { ul.append(el("li", "flow", flowName(x))); });
        card.append(el("div", null, el("span", "muted", "Flows involved (" + fl.length + "):"), ul));
      }
      s.append(card);
    });
  });
  function evidence(k, v) {
    if (isNum(v)) {
      if (/_bps$/.test(k)) return rate(v) + "  (" + int(v) + ")";
      if (/_ns$/.test(k)) return dur(v);
      if (/bytes$/.test(k)) return bytes(v) + "  (" + int(v) + ")";
      if (/percent$/.test(k)) return pct(v, 2);
      return dec(v);
    }
    if (v === null || v === undefined) return "-";
    if (Array.isArray(v) && v.every(function (x) { return x === null || typeof x !== "object"; })) return v.join(", ");
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }

  // ---------- checks
  section("checks", "Checks", function (s) {
    var C = arr(R.checks);
    if (!C.length) { s.append(el("p", "note", "No rule checks in this report.")); return; }
    s.append(table([{ h: "Rule" }, { h: "Status" }, { h: "Note" }], C.map(function (c) {
      return [{ v: c.rule, cls: "mono" }, el("span", "badge " + c.status, c.status), c.note || ""];
    })));
  });

  // ---------- charts over time
  function unitFor(maxValue, units, step) {
    var div = 1, i = 0;
    while (maxValue >= step * div && i < units.length - 1) { div *= step; i++; }
    return { div: div, name: units[i] };
  }
  // The time the series covers, in seconds: to the last frame (older reports: the end of the
  // last interval).
  function seriesSpan(S) {
    if (isNum(S.span_s) && S.span_s > 0) return S.span_s;
    return max(arr(S.t)) + (S.interval_s || 0);
  }
  function timeUnit(S) {
    var span = seriesSpan(S);
    if (span >= 1) return { div: 1, name: "s" };
    if (span >= 1e-3) return { div: 1e-3, name: "ms" };
    return { div: 1e-6, name: "\u00b5s" };
  }
  function chartWidth() {
    return Math.max(420, Math.min(900, (page.clientWidth || 948) - 48));
  }
  function fit(a, n) {
    var out = arr(a).slice(0, n);
    while (out.length < n) out.push(null);
    return out;
  }
  function flat(n, v) { var out = []; for (var i = 0; i < n; i++) out.push(v); return out; }
  function axisNums(div) {
    return function (u, vals) { return vals.map(function (v) { return v === null ? "" : dec(v / div); }); };
  }
  function xAxis(tu) {
    return { label: "time since start (" + tu.name + ")", values: axisNums(tu.div) };
  }
  function xSeries(tu) {
    return { label: "t", value: function (u, v) { return v === null || v === undefined ? "-" : dec(v / tu.div) + " " + tu.name; } };
  }
  function line(label, color, fmt, extra) {
    var s = {
      label: label, stroke: color, width: 1.6,
      value: function (u, v) { return v === null || v === undefined ? "-" : fmt(v); },
    };
    return Object.assign(s, extra || {});
  }
  function zeroTo(u, min, maxv) { return [0, maxv > 0 ? maxv * 1.08 : 1]; }
  function plot(host, title, opts, data) {
    var fig = el("figure", "chart");
    host.append(fig);
    var o = Object.assign({ title: title, width: chartWidth(), height: 260, legend: { live: true } }, opts);
    o.scales = Object.assign({}, opts.scales || {});
    o.scales.x = Object.assign({}, o.scales.x || {}, { time: false });
    plots.push(new uPlot(o, data, fig));
    return fig;
  }

  var S = R.series;
  var MB = R.microbursts;
  section("charts", "Over time", function (s) {
    var n = S && Array.isArray(S.t) ? S.t.length : 0;
    if (!n) {
      s.append(el("p", "note", "No time series in this report (the series come from diagnose and replay)."));
      if (MB) microburstTable(s);
      return;
    }
    var tu = timeUnit(S);
    var spanS = seriesSpan(S);
    var start = "";
    if (isNum(S.start_ns) && S.start_ns > 1e17) start = ", from " + new Date(S.start_ns / 1e6).toISOString();
    s.append(el("p", "muted", n + " interval" + (n === 1 ? "" : "s") + " of " + dur((S.interval_s || 0) * 1e9) +
      (S.interval_fitted ? " (fitted to the capture)" : "") + " over " + dur(spanS * 1e9) + start +
      ". Rates are over the time each interval covers; the last ends with the " + (src.kind === "pcap" ? "last frame" : "observation") + "."));
    // Every chart over time spans the series, whatever its length.
    function timePlot(title, opts, data) {
      opts.scales = Object.assign({ x: { range: function () { return [0, spanS]; } } }, opts.scales || {});
      return plot(s, title, opts, data);
    }
    var total = S.total || {};
    var ifs = arr(S.interfaces);

    // One chart failing leaves the others drawn.
    function chart(name, build) {
      try {
        build();
      } catch (e) {
        window.__pageError("chart \u201c" + name + "\u201d", e);
        s.append(el("p", "note", "The " + name + " chart could not be drawn: " + (e && e.message)));
      }
    }

    // 1. Throughput
    chart("throughput", function () {
      var d = [S.t, fit(total.bps, n)];
      ifs.forEach(function (i) { d.push(fit(i.bps, n)); });
      var top = 0;
      for (var k = 1; k < d.length; k++) top = Math.max(top, max(d[k]));
      var ru = unitFor(top, RATE_UNITS, 1000);
      var series = [xSeries(tu), line("RoCEv2, all flows (IP bytes)", PALETTE[0], rate, { width: 2.2 })];
      ifs.forEach(function (i, k) {
        series.push(line(i.name + " " + i.direction + " (wire, all frames)", PALETTE[(k + 1) % PALETTE.length], rate, { dash: [6, 3] }));
      });
      timePlot("Throughput (" + ru.name + ")", {
        series: series,
        scales: { y: { range: zeroTo } },
        axes: [xAxis(tu), { label: ru.name, values: axisNums(ru.div), size: 60 }],
      }, d);
    });

    // 2. CE fraction and CNP rate
    chart("congestion", function () {
      var ce = fit(total.ce_fraction, n).map(function (v) { return isNum(v) ? v * 100 : null; });
      var cnp = fit(total.cnp_per_s, n);
      timePlot("Congestion: CE-marked share of RoCEv2 packets (%) and CNPs per second", {
        series: [xSeries(tu),
          line("CE-marked packets", PALETTE[1], function (v) { return pct(v, 2); }, { scale: "pct", width: 2 }),
          line("CNPs", PALETTE[0], function (v) { return dec(v) + " /s"; }, { scale: "cnp", dash: [6, 3] })],
        scales: { pct: { range: function (u, a, b) { return [0, Math.max(1, b * 1.08)]; } }, cnp: { range: zeroTo } },
        axes: [xAxis(tu),
          { scale: "pct", label: "CE-marked %", values: function (u, v) { return v.map(function (x) { return dec(x) + "%"; }); }, size: 60 },
          { scale: "cnp", label: "CNP/s", side: 1, grid: { show: false }, values: axisNums(1), size: 60 }],
      }, [S.t, ce, cnp]);
    });

    // 3. Per-flow throughput
    chart("per-flow throughput", function () {
      var fl = arr(S.flows);
      if (!fl.length) { s.append(el("p", "note", "Per-flow throughput: no flow series in this report.")); return; }
      var d = [S.t];
      var top = 0;
      fl.forEach(function (f) { var b = fit(f.bps, n); d.push(b); top = Math.max(top, max(b)); });
      var ru = unitFor(top, RATE_UNITS, 1000);
      timePlot("Per-flow throughput, the " + fl.length + " largest flows (" + ru.name + ")", {
        series: [xSeries(tu)].concat(fl.map(function (f, k) { return line(flowName(f), PALETTE[k % PALETTE.length], rate); })),
        scales: { y: { range: zeroTo } },
        axes: [xAxis(tu), { label: ru.name, values: axisNums(ru.div), size: 60 }],
      }, d);
    });

    // 4. NAKs, PSN gaps, retransmissions
    chart("loss signals", function () {
      var step = uPlot.paths.stepped({ align: 1 });
      var cnt = function (v) { return int(v); };
      timePlot("Loss signals per interval: NAKs, PSN gaps, retransmissions", {
        series: [xSeries(tu),
          line("NAKs (incl. RNR)", PALETTE[1], cnt, { paths: step, width: 2 }),
          line("PSN gaps", PALETTE[3], cnt, { paths: step }),
          line("retransmissions (PSN regressions)", PALETTE[4], cnt, { paths: step, dash: [6, 3] })],
        scales: { y: { range: function (u, a, b) { return [0, Math.max(1, b * 1.1)]; } } },
        axes: [xAxis(tu), { label: "per interval", values: axisNums(1), size: 60 }],
      }, [S.t, fit(total.naks, n), fit(total.psn_gaps, n), fit(total.retransmissions, n)]);
    });

    // 5. Microburst peaks
    chart("microburst peaks", function () {
      if (!ifs.length) { s.append(el("p", "note", "Microburst peaks: no interface series in this report.")); return; }
      var d = [S.t];
      var series = [xSeries(tu)];
      var top = 0;
      ifs.forEach(function (i, k) {
        var p = fit(i.peak_bps, n);
        d.push(p);
        top = Math.max(top, max(p));
        series.push(line(i.name + " " + i.direction + " peak", PALETTE[(k + 1) % PALETTE.length], rate, { width: 2 }));
      });
      var link = MB && isNum(MB.link_speed_bps) ? MB.link_speed_bps : null;
      if (link) {
        var thr = isNum(MB.threshold_percent) ? MB.threshold_percent : 100;
        d.push(flat(n, link));
        series.push(line("link speed", "#444", rate, { dash: [2, 3], points: { show: false } }));
        d.push(flat(n, link * thr / 100));
        series.push(line("burst threshold (" + dec(thr) + "% of link)", PALETTE[1], rate, { dash: [8, 4], points: { show: false } }));
        top = Math.max(top, link);
      }
      var ru = unitFor(top, RATE_UNITS, 1000);
      var slot = MB && isNum(MB.slot_ns) ? " " + dur(MB.slot_ns) : "";
      timePlot("Microbursts: the busiest" + slot + " slot of each interval, as a rate (" + ru.name + ")", {
        series: series,
        scales: { y: { range: zeroTo } },
        axes: [xAxis(tu), { label: ru.name, values: axisNums(ru.div), size: 60 }],
      }, d);
    });

    // 6. Passive latency per interval
    if (S.latency) chart("latency over time", function () {
      var L = S.latency;
      var us = function (v) { return isNum(v) ? v / 1e3 : null; };
      var d = [S.t, fit(L.ack_p50_ns, n).map(us), fit(L.ack_p99_ns, n).map(us), fit(L.read_p99_ns, n).map(us)];
      var fmt = function (v) { return isNum(v) ? dur(v * 1e3) : "-"; };
      timePlot("Latency per interval: ACK p50 and p99, READ p99 (µs)", {
        series: [xSeries(tu),
          line("ACK p50", PALETTE[2], fmt, { width: 2 }),
          line("ACK p99", PALETTE[1], fmt, { width: 2 }),
          line("READ p99", PALETTE[4], fmt, { dash: [6, 3] })],
        scales: { y: { range: zeroTo } },
        axes: [xAxis(tu), { label: "µs", values: axisNums(1), size: 60 }],
      }, d);
    });

    if (MB) microburstTable(s);
  });

  function microburstTable(s) {
    var rows = arr(MB.interfaces);
    var base = S && isNum(S.start_ns) ? S.start_ns : null;
    function at(ns) {
      if (!isNum(ns)) return "-";
      if (base !== null && ns >= base) return "+" + dur(ns - base);
      return dur(ns);
    }
    s.append(el("h3", null, "Microbursts per interface"));
    var averaged = rows.some(function (i) { return i.uncertain_slots > 0; });
    s.append(el("p", "muted", "Slot " + dur(MB.slot_ns) + "; a slot is busy at or above " + dec(MB.threshold_percent) +
      "% of " + (isNum(MB.link_speed_bps) ? rate(MB.link_speed_bps) : "the link speed (unknown: no bursts, peaks only)") +
      ". Times are from the start of the series." +
      (averaged ?
        " Averaged slots: the kernel clock's timer ran late, so their frames' times are known only over a longer span; their bytes are spread evenly over it." : "")));
    if (!rows.length) { s.append(el("p", "note", "No interface had traffic.")); return; }
    s.append(table([{ h: "Interface" }, { h: "Bytes (wire)", num: true }, { h: "Peak", num: true }, { h: "Peak % link", num: true },
      { h: "Peak at", num: true }, { h: "Busy slots", num: true }, { h: "Bursts", num: true }, { h: "Longest", num: true },
      { h: "Lost slots", num: true }].concat(averaged ? [{ h: "Averaged slots", num: true }] : []), rows.map(function (i) {
      return [i.name + " " + i.direction, bytes(i.bytes), rate(i.peak_bps),
        { v: pct(i.peak_percent), cls: i.peak_percent >= (MB.threshold_percent || 100) ? "warn" : "" },
        at(i.peak_at_ns), int(i.busy_slots), { v: int(i.bursts), cls: i.bursts > 0 ? "warn" : "" },
        i.longest_burst_ns ? dur(i.longest_burst_ns) + " at " + at(i.longest_burst_at_ns) : "-",
        { v: int(i.lost_slots), cls: i.lost_slots > 0 ? "bad" : "" }].concat(averaged ?
        [{ v: int(i.uncertain_slots || 0), cls: i.uncertain_slots > 0 ? "warn" : "" }] : []);
    })));
    rows.forEach(function (i) {
      var top = arr(i.top);
      if (!top.length) return;
      var d = el("details", null, el("summary", null, "Largest bursts on " + i.name + " " + i.direction + " (" + top.length + ")"));
      d.append(table([{ h: "At", num: true }, { h: "Duration", num: true }, { h: "Bytes", num: true }, { h: "Peak", num: true }, { h: "Peak % link", num: true }],
        top.map(function (b) { return [at(b.at_ns), dur(b.duration_ns), bytes(b.bytes), rate(b.peak_bps), pct(b.peak_percent)]; }), "narrow"));
      s.append(d);
    });
  }

  // ---------- top flows
  section("flows", "Top flows by bytes", function (s) {
    if (!flows.length) { s.append(el("p", "note", "No RoCEv2 flows.")); return; }
    var shown = flows.slice(0, 20);
    var tagged = shown.some(function (f) { return arr(f.pcp).length > 0; });
    var peaks = shown.some(function (f) { return isNum(f.peak_rate_bps); });
    var cols = [{ h: "#", num: true }, { h: "Source \u2192 destination" }, { h: "sport", num: true }, { h: "Dest QP" },
      { h: "Rate", num: true }].concat(peaks ? [{ h: "Peak", num: true }] : []).concat([{ h: "Packets", num: true }, { h: "Bytes", num: true }, { h: "CE %", num: true },
      { h: "CNPs", num: true }, { h: "NAKs", num: true }, { h: "RNR", num: true }, { h: "Lost", num: true },
      { h: "Reord", num: true }, { h: "Dup", num: true }, { h: "Retx", num: true }, { h: "DSCP" }]);
    if (tagged) cols.push({ h: "PCP" });
    s.append(table(cols, shown.map(function (f, k) {
      var ops = f.ops || {}, psn = f.psn || {}, ecn = f.ecn || {};
      var ce = share(ecn.ce || 0, f.packets || 0);
      var via = f.mirror ? "  [" + mirrorName(f.mirror) + "]" : "";
      var dscp = arr(f.dscp).join(", ") || "-";
      if (arr(f.cnp_dscp).length) dscp += "; CNPs " + f.cnp_dscp.join(", ");
      var row = [k + 1,
        { v: flowCell(f, via), cls: "flow" },
        f.udp_src_port, { v: hex(f.dest_qp), cls: "mono" },
        isNum(f.active_rate_bps) ? rate(f.active_rate_bps) : { v: "-", title: "one instant: no rate" }].concat(
        peaks ? [isNum(f.peak_rate_bps) ? rate(f.peak_rate_bps) : "-"] : []).concat([int(f.packets), bytes(f.bytes),
        { v: ce > 0 ? pct(ce, 2) : "0", cls: ce > 0 ? "warn" : "" },
        int(ops.cnp), { v: int(ops.nak), cls: ops.nak > 0 ? "bad" : "" }, { v: int(ops.rnr_nak), cls: ops.rnr_nak > 0 ? "bad" : "" },
        { v: int(psn.missing), cls: psn.missing > 0 ? "bad" : "", title: int(psn.gaps) + " PSN gaps opened" },
        { v: int(psn.out_of_order), cls: psn.out_of_order > 0 ? "warn" : "" },
        { v: int(psn.duplicates), cls: psn.duplicates > 0 ? "warn" : "" },
        { v: int(psn.retransmissions), cls: psn.retransmissions > 0 ? "bad" : "",
          title: int(psn.retransmission_episodes) + " resend episodes" },
        dscp]);
      if (tagged) {
        var pcp = arr(f.pcp).join(", ");
        if (f.untagged) pcp = pcp ? pcp + ", untagged" : "untagged";
        row.push(pcp || "-");
      }
      return row;
    })));
    s.append(el("p", "muted", "Rate: bytes over the flow's first to last packet (while active; none for one instant). " +
      (peaks ? "Peak: its busiest interval of the time series. " : "") + "CE %: share of the flow's packets marked CE. " +
      "NAKs: NAK packets; RNR: receiver not ready; Lost: PSNs never seen; Reord: late packets (reordering, not loss); " +
      "Dup: PSNs seen twice with no resend (copies made by the observation); Retx: PSNs the sender sent again."));
    if (flows.length > shown.length) {
      s.append(el("p", "note", (flows.length - shown.length) + " more flows are in the JSON report."));
    }
  });

  // ---------- connections
  var conns = arr(R.connections);
  section("connections", "Connections", function (s) {
    if (!conns.length) { s.append(el("p", "note", "No RC, UC or XRC connection.")); }
    else {
      var shown = conns.slice(0, 200);
      function lat(l) {
        if (!l) return { v: "-", sort: -1 };
        return { v: dur(l.p50_ns) + " / " + dur(l.p99_ns), sort: l.p99_ns,
          title: int(l.samples) + " samples, max " + dur(l.max_ns) };
      }
      function qpCell(q) { return isNum(q) ? { v: hex(q), cls: "mono", sort: q } : { v: "-", sort: -1 }; }
      // Binary units: verbs sizes are powers of two more often than not.
      function msize(b) {
        if (b < 1024) return b + " B";
        var units = ["KiB", "MiB", "GiB", "TiB"], unit = 1024, i = 0;
        while (b >= unit * 1024 && i < units.length - 1) { unit *= 1024; i++; }
        return (b % unit === 0 ? String(b / unit) : (b / unit).toFixed(1)) + " " + units[i];
      }
      function msgs(m) {
        if (!m) return { v: "-", sort: -1 };
        var kinds = [["SEND", m.send], ["WRITE", m.write], ["READ", m.read]].filter(function (k) { return k[1] > 0; })
          .map(function (k) { return k[0] + " " + int(k[1]); }).join(", ");
        var unknown = m.unknown_size ? " +" + int(m.unknown_size) + "?" : "";
        var sizes = m.count > 0 ? ": " + msize(m.p50_bytes) + " / " + msize(m.p99_bytes) : "";
        return { v: int(m.count) + unknown + sizes, sort: m.count,
          title: kinds + "; " + bytes(m.bytes) + " in all, min " + msize(m.min_bytes) + ", max " + msize(m.max_bytes) +
            (m.unknown_size ? "; " + int(m.unknown_size) + " of unknown size" : "") };
      }
      s.append(sortable(table([{ h: "A ↔ B" }, { h: "QP A" }, { h: "QP B" }, { h: "Type" }, { h: "PMTU", num: true },
        { h: "sport", num: true }, { h: "A→B pkts", num: true }, { h: "B→A pkts", num: true }, { h: "Bytes", num: true },
        { h: "Rate", num: true }, { h: "Messages A: size p50 / p99", num: true }, { h: "Messages B: size p50 / p99", num: true },
        { h: "ACK p50 / p99 (A)", num: true }, { h: "READ p50 / p99 (A)", num: true },
        { h: "ACK p50 / p99 (B)", num: true }, { h: "Lost", num: true }, { h: "Retx", num: true }],
      shown.map(function (c) {
        var a = c.a || {}, b = c.b || {};
        var la = a.latency || {}, lb = b.latency || {};
        var pa = a.psn || {}, pb = b.psn || {};
        var lost = (pa.missing || 0) + (pb.missing || 0), retx = (pa.retransmissions || 0) + (pb.retransmissions || 0);
        var via = arr(c.mirrors).length ? "  [" + arr(c.mirrors).map(mirrorName).join(", ") + "]" : "";
        return [{ v: String(a.ip) + " ↔ " + String(b.ip) + via, cls: "flow" }, qpCell(a.qp), qpCell(b.qp), c.transport,
          isNum(c.pmtu) ? c.pmtu : { v: "-", sort: 0 }, { v: connPorts(c), sort: c.udp_src_port },
          { v: int(a.packets), sort: a.packets }, { v: int(b.packets), sort: b.packets }, { v: bytes(c.bytes), sort: c.bytes },
          isNum(c.active_rate_bps) ? { v: rate(c.active_rate_bps), sort: c.active_rate_bps } : { v: "-", sort: 0 },
          msgs(a.messages), msgs(b.messages), lat(la.ack), lat(la.read), lat(lb.ack),
          { v: int(lost), cls: lost > 0 ? "bad" : "", sort: lost }, { v: int(retx), cls: retx > 0 ? "bad" : "", sort: retx }];
      }))));
      s.append(el("p", "muted", "Both directions of each connection joined (swapped addresses, paired by their port or their PSNs). A sent the most requests (with none, the most packets). " +
        "Messages: what each side posted (a WRITE or READ by its DMA length, a SEND from its FIRST to its LAST packet), " +
        "how many (+n?: n of unknown size) and their size p50 / p99 (the title has the kinds and extremes). " +
        "Latency: how long the other side took to answer that side's requests, timed on the wire (p50 / p99; the title has the samples). " +
        "Click a column header to sort."));
      if (conns.length > shown.length) s.append(el("p", "note", (conns.length - shown.length) + " more connections are in the JSON report."));
    }
    var other = arr(R.other_traffic);
    if (other.length) {
      var ud = other.filter(function (o) { return o.kind === "UD"; });
      s.append(el("p", "muted", "Not connections: " + ud.length + " UD flow" + (ud.length === 1 ? "" : "s") + ", " +
        (other.length - ud.length) + " flow" + (other.length - ud.length === 1 ? "" : "s") + " of connection management (QP 1)."));
    }
  });

  // ---------- latency histograms
  var LAT = arr(R.latency);
  if (LAT.length) section("latency", "Latency", function (s) {
    s.append(el("p", "muted", "Passive latency: a request to its answer in the reverse direction, timed on the wire, no probe sent. " +
      "ACK: a request with AckReq to the first ACK or NAK covering it; READ: a READ request to its first response. " +
      "requests_out: this host's requests (the round trip through the fabric and the peer's NIC); requests_in: requests arriving; mirror: tap to responder to tap."));
    s.append(table([{ h: "Kind" }, { h: "Side" }, { h: "Interface" }, { h: "Samples", num: true }, { h: "p50", num: true },
      { h: "p90", num: true }, { h: "p99", num: true }, { h: "Max", num: true }], LAT.map(function (l) {
      return [l.kind.toUpperCase(), l.side.replace("_", " "), l.interface || "-", int(l.samples), dur(l.p50_ns), dur(l.p90_ns), dur(l.p99_ns), dur(l.max_ns)];
    }), "narrow"));
    try {
      // Each histogram as samples per bucket over a log time axis (bucket lower edges, µs).
      var edges = {};
      LAT.forEach(function (l) { arr(l.buckets).forEach(function (b) { edges[b.lo_ns] = true; }); });
      var xs = Object.keys(edges).map(Number).sort(function (a, b) { return a - b; });
      if (!xs.length) return;
      var d = [xs.map(function (x) { return Math.max(x, 1) / 1e3; })];
      var series = [{ label: "latency", value: function (u, v) { return isNum(v) ? dur(v * 1e3) : "-"; } }];
      LAT.forEach(function (l, k) {
        var at = {};
        arr(l.buckets).forEach(function (b) { at[b.lo_ns] = b.count; });
        d.push(xs.map(function (x) { return at[x] || 0; }));
        series.push(line(l.kind.toUpperCase() + " " + l.side.replace("_", " ") + (l.interface ? " " + l.interface : ""),
          PALETTE[k % PALETTE.length], function (v) { return int(v); }, { paths: uPlot.paths.stepped({ align: 1 }), width: 2 }));
      });
      plot(s, "Latency histograms: samples per bucket (8 per octave)", {
        series: series,
        scales: { x: { time: false, distr: 3 }, y: { range: zeroTo } },
        // Labels on the powers of ten only: uPlot's log axis also ticks 2..9 of each decade,
        // and hands null for the ticks it leaves bare (which would read "0 s").
        // The labels drawn (on a canvas) are also kept on the chart as data-x-labels.
        axes: [{ label: "latency (log)", values: function (u, v) {
          var labels = v.map(function (x) {
            if (!isNum(x) || x <= 0) return "";
            var l = Math.log10(x);
            return Math.abs(l - Math.round(l)) < 1e-6 ? dur(x * 1e3) : "";
          });
          u.root.setAttribute("data-x-labels", labels.filter(Boolean).join("|"));
          return labels;
        } },
          { label: "samples", values: axisNums(1), size: 60 }],
      }, d);
    } catch (e) {
      window.__pageError("chart “latency histograms”", e);
      s.append(el("p", "note", "The latency histogram chart could not be drawn: " + (e && e.message)));
    }
  });

  // ---------- PFC
  if (R.pfc) section("pfc", "PFC and PAUSE", function (s) {
    var P = R.pfc;
    var speed = isNum(P.link_speed_bps) ? P.link_speed_bps : null;
    s.append(el("p", "muted", speed
      ? "Pause times at " + rate(speed) + "; a refresh before the previous pause ran out overlaps it, so times bound the time paused from above."
      : "Link speed unknown: pause times are in quanta (512 bit times) only."));
    var rows = [];
    arr(P.sources).forEach(function (src) {
      var who = [src.src_mac, mirrorName(src.mirror), src.direction || "ingress"];
      function row(cls, c) {
        var pausedShare = isNum(c.pause_ns) && win > 0 ? share(c.pause_ns, win * 1e9) : null;
        rows.push([{ v: who[0], cls: "mono" }, who[1], who[2], cls, int(c.frames), int(c.xon), int(c.quanta),
          isNum(c.pause_ns) ? dur(c.pause_ns) : "-",
          { v: pausedShare === null ? "-" : pct(pausedShare), cls: pausedShare > 10 ? "bad" : "" }]);
      }
      arr(src.priorities).forEach(function (p) { row("priority " + p.priority, p); });
      if (src.link_pause) row("802.3x (all)", src.link_pause);
      if (!arr(src.priorities).length && !src.link_pause) {
        rows.push([{ v: who[0], cls: "mono" }, who[1], who[2], "none named", int(src.pfc_frames), "0", "0", "-", "-"]);
      }
    });
    s.append(table([{ h: "Sender MAC" }, { h: "Seen" }, { h: "Direction" }, { h: "Class" }, { h: "Frames", num: true },
      { h: "XON", num: true }, { h: "Quanta", num: true }, { h: "Pause asked", num: true }, { h: "% of window", num: true }], rows));
  });

  // ---------- training jobs: each host's sending in each phase, as a timeline
  var jobBars = 0;
  if (R.jobs) section("jobs", "Training jobs", function (s) {
    var J = R.jobs;
    var jobs = arr(J.jobs);
    if (!jobs.length) { s.append(el("p", "note", "No training job: no hosts joined by RC traffic.")); return; }
    s.append(el("p", "muted", "On bins of " + dur(J.bin_ns) + ". Each host's bar spans its first to its last data sent in a phase (not its NIC's ACKs); the top row is the job's phases."));
    // What the job rules named, per job.
    var named = {};
    arr(R.findings).forEach(function (f) {
      var e = f.evidence || {};
      if (!e.job) return;
      var n = named[e.job] || (named[e.job] = {});
      if (f.rule === "job-straggler" && e.host) n.straggler = { host: e.host, cause: e.cause };
      if (f.rule === "job-hang") n.missing = String(e.missing_hosts || "").split(",").filter(Boolean);
      if (f.rule === "job-irregular-iteration") n.irregular = e.iteration_start_ns;
    });
    // Bars drawn at most, over all jobs (a long capture's thousands of phases).
    var MAX_BARS = 6000;
    jobs.forEach(function (j) {
      var phases = arr(j.phases), hosts = arr(j.hosts), n = named[j.id] || {};
      s.append(el("h3", null, j.id + ": " + hosts.length + " hosts, " + int(phases.length) + " phases"));
      var p = j.period;
      var pairs = [
        ["hosts", hosts.join(", ")],
        ["data", bytes(j.bytes)],
        ["period", p ? dur(p.ns) + " \u00b1 " + dur(p.stderr_ns) + " over " + int(p.iterations) + " iterations (spread " + pct(p.cv * 100, 1) + ")" : "none: " + (j.no_period || "-")],
        ["iteration time p50 / p99", isNum(j.iteration_p50_ns) ? dur(j.iteration_p50_ns) + " / " + dur(j.iteration_p99_ns) : "-"],
      ];
      // The job's processes (the observed host's, and peers' from their records), as their
      // environments tell them.
      var ranks = {};
      arr(j.ranks).forEach(function (r) {
        (ranks[r.host] = ranks[r.host] || []).push(isNum(r.rank) ? String(r.rank) : "?");
      });
      if (j.name) pairs.push(["launched as", j.name]);
      arr(j.ranks).forEach(function (r) {
        pairs.push(["rank " + (isNum(r.rank) ? r.rank : "?") + (isNum(r.world_size) ? " of " + r.world_size : ""),
          r.host + ", pid " + r.pid + (r.comm ? " (" + r.comm + ")" : "") + (r.pod ? ", pod " + r.pod : "") + (r.unread ? ", environment unread: " + r.unread : "") + (r.seen_by ? ", from " + r.seen_by + "'s records" : "")]);
      });
      if (n.straggler) pairs.push(["straggler", n.straggler.host + " (cause: " + n.straggler.cause + ")", "bad"]);
      if (n.missing && n.missing.length) pairs.push(["missing from its last phase (hung)", n.missing.join(", "), "bad"]);
      s.append(kv(pairs));
      if (!phases.length) return;
      var t0 = phases[0].start_ns, span = Math.max(1, phases[phases.length - 1].end_ns - t0);
      var drawn = phases.length;
      var per = hosts.length + 1;
      if (jobBars + drawn * per > MAX_BARS) drawn = Math.max(0, Math.floor((MAX_BARS - jobBars) / per));
      if (drawn < phases.length) {
        s.append(el("p", "note", "The timeline draws the first " + int(drawn) + " of " + int(phases.length) + " phases (the JSON has them all)."));
        if (drawn > 0) span = Math.max(1, phases[drawn - 1].end_ns - t0);
      }
      function bar(track, a, b, cls, tip) {
        var d = el("div", cls);
        d.style.left = (100 * (a - t0) / span) + "%";
        d.style.width = Math.max(0.15, 100 * (b - a) / span) + "%";
        d.title = tip;
        track.append(d);
        jobBars++;
      }
      var tl = el("div", "timeline");
      function row(label, cls) {
        var track = el("div", "track");
        tl.append(el("div", "tl-row" + (cls ? " " + cls : ""), el("span", "tl-label mono", label), track));
        return track;
      }
      var top = row("phases");
      phases.slice(0, drawn).forEach(function (ph, i) {
        var slow = n.irregular === ph.start_ns;
        bar(top, ph.start_ns, ph.end_ns, slow ? "bar phase slow" : "bar phase",
          "phase " + (i + 1) + ": " + dur(ph.end_ns - ph.start_ns) + ", " + bytes(ph.bytes) + (slow ? " (irregular iteration)" : ""));
      });
      hosts.forEach(function (h) {
        var mark = n.straggler && n.straggler.host === h ? "straggler" : n.missing && n.missing.indexOf(h) >= 0 ? "missing" : "";
        var track = row(h + (ranks[h] ? " rank " + ranks[h].join(",") : "") + (mark ? " (" + mark + ")" : ""), mark);
        phases.slice(0, drawn).forEach(function (ph, i) {
          arr(ph.hosts).forEach(function (x) {
            if (x.host !== h) return;
            var ev = (x.ce || 0) + (x.cnp || 0) + (x.naks || 0) + (x.retransmissions || 0);
            bar(track, x.start_ns, x.end_ns, ev > 0 ? "bar troubled" : "bar",
              h + " in phase " + (i + 1) + ": " + dur(x.end_ns - x.start_ns) + ", " + bytes(x.bytes) +
              (ev > 0 ? ", " + int(ev) + " CE marks, CNPs, NAKs and resends on its QPs" : ""));
          });
        });
      });
      tl.append(el("div", "tl-axis muted", el("span", null, "0"), el("span", null, dur(span))));
      s.append(el("div", "scroll", tl));
      // The iterations, as a table (the first 200).
      var rows = phases.slice(0, 200).map(function (ph, i) {
        var next = phases[i + 1];
        var last = arr(ph.hosts).slice().sort(function (a, b) { return b.end_ns - a.end_ns; })[0];
        var ev = sum(arr(ph.hosts).map(function (x) { return (x.ce || 0) + (x.cnp || 0) + (x.naks || 0) + (x.retransmissions || 0); }));
        var it = next ? next.start_ns - ph.start_ns : null;
        var long = p && it !== null && it > 1.5 * p.ns;
        return [i + 1, { v: dur(ph.start_ns - t0), sort: ph.start_ns - t0 },
          { v: it === null ? "-" : dur(it), sort: it === null ? -1 : it, cls: long ? "warn" : "" },
          { v: dur(ph.end_ns - ph.start_ns), sort: ph.end_ns - ph.start_ns }, { v: bytes(ph.bytes), sort: ph.bytes },
          int(arr(ph.hosts).length), { v: last ? last.host : "-", cls: "mono" }, { v: int(ev), cls: ev > 0 ? "bad" : "" }];
      });
      var d = el("details", null, el("summary", null, "Iterations: " + int(phases.length) + " phases" + (phases.length > 200 ? " (the first 200)" : "")));
      d.append(table([{ h: "#", num: true }, { h: "Start", num: true }, { h: "Iteration", num: true }, { h: "Phase", num: true },
        { h: "Bytes", num: true }, { h: "Hosts", num: true }, { h: "Last to finish" }, { h: "CE, CNP, NAK, resends", num: true }], rows));
      s.append(d);
    });
  });

  // ---------- ECMP
  if (R.ecmp) section("ecmp", "ECMP hashing model", function (s) {
    var E = R.ecmp, m = E.model || {};
    var how = m.uplinks + " uplinks: " + m.hash + " of " + m.fields + ", seed 0x" + (Number(m.seed) >>> 0).toString(16) + ", " + m.bucket;
    if (!E.flows) { s.append(el("p", "note", "ECMP model over " + how + ": " + E.verdict + ".")); return; }
    s.append(el("p", null, int(E.flows) + " flows through " + how + "; " + (E.tier2
      ? "one hashing stage per tier (leaf, then spine; later hops not modelled)."
      : "one hashing stage (the first switch's; later hops not modelled).")));
    s.append(el("p", null, el("b", null, "Verdict: "), E.verdict));
    var up = arr(E.uplinks);
    var totalBytes = sum(up.map(function (u) { return u.bytes; }));
    var b = E.balance_bytes || {}, rb = E.random_bytes || null, bf = E.balance_flows || {};
    var pairs = [
      ["busiest uplink / mean (bytes)", dec(b.max_over_mean) + (rb ? "   (random hash: " + dec(rb.max_over_mean) + ")" : "")],
      ["busiest uplink / mean (flows)", dec(bf.max_over_mean)],
      ["CV, Jain (bytes)", dec(b.cv) + ", " + (isNum(b.jain) ? b.jain.toFixed(3) : "-")],
      ["idle uplinks", int(b.idle)],
    ];
    if (isNum(E.random_percentile)) pairs.push(["random placements lighter than this one", pct(E.random_percentile * 100, 0)]);
    if (isNum(E.top_k)) pairs.push(["of the " + E.top_k + " largest flows, sharing an uplink", int(E.top_k_colliding)]);
    var c = E.connections;
    var why = c && c.unpaired_why ? [[c.unpaired_why.one_way, "without a reverse direction"],
      [c.unpaired_why.other_mirror, "whose reverse came through another mirror"],
      [c.unpaired_why.shared_tuple, "on a 5-tuple shared by QPs the drivers' rule cannot match up"]]
      .filter(function (x) { return x[0] > 0; }).map(function (x) { return x[0] + " " + x[1]; }).join(", ") : "";
    if (c) pairs.push(["connections", c.paired + " paired (" + c.conforming + " drivers' source port, " + c.overridden +
      " overridden, " + c.shared_tuple + " sharing a 5-tuple); " + c.unpaired_flows + " flows unpaired" + (why ? " (" + why + ")" : "") + ", " +
      c.shared_tuple_flows + " flows sharing a 5-tuple, " + c.qp1_flows + " to QP 1"]);
    if (E.tier2) pairs.push(["tier 2", E.tier2.uplinks + " uplinks per spine, " + E.tier2.hash + ": " + E.tier2.polarized +
      " of " + arr(E.tier2.spines).length + " spines polarized"]);
    var w = E.what_if;
    if (w && E.flows > 0) {
      pairs.push(["what-if: destination QP in the hash", isNum(w.with_dest_qp)
        ? dec(w.with_dest_qp) + " busiest/mean (target " + dec(w.target) + ")"
        : "hashed already"]);
      pairs.push(["what-if: QPs per connection", w.meets_target || w.qps_per_connection === 1 ? "the flows as they are already meet the target"
        : isNum(w.qps_per_connection) ? w.qps_per_connection + " QPs per connection would meet the target"
          : "no count up to 16 QPs per connection would meet the target"]);
      if (w.hint) pairs.push(["what would help", w.hint]);
    }
    s.append(kv(pairs));
    if (!up.length) { s.append(el("p", "note", "No uplinks in the model.")); return; }
    var xs = up.map(function (u) { return u.uplink; });
    var ys = up.map(function (u) { return u.bytes; });
    var mean = totalBytes / up.length;
    var d = [xs, ys, flat(up.length, mean)];
    var bu = unitFor(Math.max(max(ys), rb ? mean * rb.max_over_mean : 0), ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], 1024);
    var series = [
      { label: "uplink", value: function (u, v) { return v === null || v === undefined ? "-" : "uplink " + v; } },
      line("bytes on the uplink (model)", PALETTE[0], bytes, { fill: "rgba(31,119,180,0.35)", width: 1,
        paths: uPlot.paths.bars({ size: [0.6, 120] }), points: { show: false } }),
      line("even split (mean)", "#2f855a", bytes, { dash: [6, 4], points: { show: false } }),
    ];
    if (rb && isNum(rb.max_over_mean)) {
      d.push(flat(up.length, mean * rb.max_over_mean));
      series.push(line("random hash: expected busiest uplink", PALETTE[1], bytes, { dash: [2, 3], points: { show: false } }));
    }
    var lo = Math.min.apply(null, xs), hi = Math.max.apply(null, xs);
    plot(s, "Bytes per uplink under the model (" + bu.name + ")", {
      series: series,
      scales: { x: { range: function () { return [lo - 0.5, hi + 0.5]; } }, y: { range: zeroTo } },
      axes: [{ label: "uplink", incrs: [1], values: function (u, v) { return v.map(function (x) { return Number.isInteger(x) ? String(x) : ""; }); } },
        { label: bu.name, values: axisNums(bu.div), size: 60 }],
    }, d);
    s.append(table([{ h: "Uplink", num: true }, { h: "Flows", num: true }, { h: "Bytes", num: true }, { h: "Share", num: true }],
      up.map(function (u) { return [u.uplink, int(u.flows), bytes(u.bytes), pct(share(u.bytes, totalBytes))]; }), "narrow"));
  });

  page.append(el("footer", null, (R.schema || "report") + " \u00b7 drawn with uPlot 1.6.32 (MIT) \u00b7 the full JSON report is embedded in this page (script id=\"report\")."));

  // Charts follow the page width, and shrink to the paper when printed.
  var resizeTimer = null;
  function resizeAll(width) {
    plots.forEach(function (u) { u.setSize({ width: width, height: u.height }); });
  }
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () { resizeAll(chartWidth()); }, 150);
  });
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
    resizeAll(680);
  });
  window.addEventListener("afterprint", function () { resizeAll(chartWidth()); });

  document.body.dataset.charts = String(plots.length);
  document.body.dataset.jobBars = String(jobBars);
  document.body.dataset.rendered = "1";
})();
