// JSON errors (templates/core/_json_marker.html): a long line scrolls sideways in its box;
// bring the caret under the spot into view. Without this script the box still scrolls.
(function () {
  "use strict";

  function show(root) {
    root.querySelectorAll("pre.json-marker").forEach(function (box) {
      var spot = box.querySelector(".spot");
      if (!spot || box.scrollWidth <= box.clientWidth) return;
      box.scrollLeft = Math.max(0, spot.offsetLeft + spot.offsetWidth - box.clientWidth / 2);
    });
  }

  document.addEventListener("DOMContentLoaded", function () { show(document); });
  document.addEventListener("htmx:afterSettle", function () { show(document); });
})();
