"use strict";
(function () {
  var count = 0;
  function show(msg) {
    count += 1;
    var pre = document.getElementById("errors");
    if (pre) {
      pre.hidden = false;
      pre.appendChild(document.createTextNode((count > 1 ? "\n" : "") + msg));
    }
    if (document.body) document.body.dataset.errors = String(count);
  }
  function text(e) {
    return e && e.stack ? String(e.stack) : String(e);
  }
  window.__pageError = function (what, e) {
    show(what + ": " + text(e));
  };
  window.onerror = function (msg, src, line, col, err) {
    show("error: " + msg + (line ? " (line " + line + ":" + col + ")" : "") +
      (err && err.stack ? "\n" + err.stack : ""));
    return false;
  };
  window.addEventListener("unhandledrejection", function (ev) {
    show("unhandled promise rejection: " + text(ev.reason));
  });
})();
