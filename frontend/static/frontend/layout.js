// Every page: a wide table's box (data-scroll-x) that does not fit the screen gets the class "overflowing", which
// shows "Wide table: scroll it sideways" above it (portal.css); on load and whenever the window changes size.
(function () {
  "use strict";
  function mark() {
    document.querySelectorAll("[data-scroll-x]").forEach(function (box) {
      box.classList.toggle("overflowing", box.scrollWidth > box.clientWidth + 1);
    });
  }
  document.addEventListener("DOMContentLoaded", mark);
  window.addEventListener("resize", mark);
  document.addEventListener("toggle", mark, true); // a <details> opened: its table is measured now
})();
