(function () {
  "use strict";
  // Installed before anything else runs: every error, rejection, console.error call and CSP
  // violation lands in #tg-errors and marks the page as failed (the browser check reads both).
  var root = document.documentElement;
  function fail(m) {
    root.setAttribute("data-tg-status", "error");
    var e = document.getElementById("tg-errors");
    if (e) { e.hidden = false; e.textContent += m + "\n"; }
    else (window.__tgErrors = window.__tgErrors || []).push(m);
  }
  window.__tgFail = fail;
  window.addEventListener("error", function (e) {
    var what = e.message || (e.target && e.target.tagName ? e.target.tagName + " failed to load" : "error");
    fail("error: " + what + (e.lineno ? " (line " + e.lineno + ")" : ""));
  }, true);
  window.addEventListener("unhandledrejection", function (e) { fail("unhandled rejection: " + e.reason); });
  document.addEventListener("securitypolicyviolation", function (e) { fail("blocked by the page's policy: " + e.blockedURI); });
  var original = console.error;
  console.error = function () {
    fail("console.error: " + Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
})();
