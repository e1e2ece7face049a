// Copy buttons: <button class="copy" data-copy="text" hidden> next to the text they copy.
// Without this script the buttons stay hidden and the text is still there to select.
(function () {
  "use strict";

  function reveal(root) {
    if (!navigator.clipboard) return;
    root.querySelectorAll("button.copy[data-copy][hidden]").forEach(function (button) {
      button.hidden = false;
    });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("button.copy[data-copy]");
    if (!button) return;
    if (!button.dataset.label) button.dataset.label = button.innerHTML;
    var label = button.dataset.label;
    navigator.clipboard.writeText(button.dataset.copy).then(
      function () { button.textContent = "Copied"; },
      function () { button.textContent = "Copy failed: select the id"; }
    );
    setTimeout(function () { button.innerHTML = label; }, 2000);
  });

  document.addEventListener("DOMContentLoaded", function () { reveal(document); });
  // Rows swapped in over the socket or by a filter come with hidden buttons too.
  document.addEventListener("htmx:afterSettle", function () { reveal(document); });
  document.addEventListener("htmx:oobAfterSwap", function () { reveal(document); });
})();
