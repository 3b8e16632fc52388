// Every page: a wide table's box (data-scroll-x) that does not fit the screen gets the class "overflowing", which
// shows "Wide table: scroll it sideways" above it (portal.css); on load and whenever the window changes size.
// The top bar's menu (<details class="menu">, open in the HTML so it works without script) is folded where the
// screen is too narrow for it on one line (portal.css, 64rem), and open again where it fits.
(function () {
  "use strict";
  var NARROW = "(max-width: 64rem)";

  function mark() {
    document.querySelectorAll("[data-scroll-x]").forEach(function (box) {
      box.classList.toggle("overflowing", box.scrollWidth > box.clientWidth + 1);
    });
  }

  function fitMenu(narrow) {
    var menu = document.querySelector("details.menu");
    if (menu) menu.open = !narrow;
  }

  function start() {
    var query = window.matchMedia ? window.matchMedia(NARROW) : null;
    if (query) {
      fitMenu(query.matches);
      var changed = function (ev) { fitMenu(ev.matches); };
      if (query.addEventListener) query.addEventListener("change", changed);
      else if (query.addListener) query.addListener(changed);
    }
    document.addEventListener("keydown", function (ev) { // Escape closes the folded menu, as a menu does
      var menu = document.querySelector("details.menu");
      if (ev.key === "Escape" && menu && menu.open && query && query.matches) {
        menu.open = false;
        menu.querySelector("summary").focus();
      }
    });
    mark();
  }

  document.addEventListener("DOMContentLoaded", start);
  window.addEventListener("resize", mark);
  document.addEventListener("toggle", mark, true); // a <details> opened: its table is measured now
})();
