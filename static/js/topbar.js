// The top bar on a phone: the Menu button folds the links and the account away and shows them
// again. Without this script the button stays hidden and the top bar shows everything.
// The account disclosure (<details class="account">) works without it; here it also closes on
// Escape and on a click elsewhere, like the menu.
(function () {
  "use strict";

  // A folded menu still says how many approvals wait: the nav badge (pushed again live over
  // the socket) is copied onto the button whenever it changes.
  function mirrorApprovalsBadge(button, nav) {
    if (!nav || !document.getElementById("approvals-badge")) return;
    var copy = document.createElement("span");
    copy.className = "nav-badge";
    button.appendChild(copy);
    function sync() {
      var badge = document.getElementById("approvals-badge");
      var text = badge ? badge.textContent : "";
      if (copy.textContent === text) return;
      copy.replaceChildren.apply(copy, badge ? Array.prototype.map.call(
        badge.childNodes, function (node) { return node.cloneNode(true); }) : []);
    }
    sync();
    new MutationObserver(sync).observe(nav, {subtree: true, childList: true, characterData: true});
  }

  document.addEventListener("DOMContentLoaded", function () {
    var bar = document.querySelector(".topbar");
    var button = bar && bar.querySelector(".menu-toggle");
    var menu = button && document.getElementById(button.getAttribute("aria-controls"));
    var account = bar && bar.querySelector("details.account");

    function setMenu(open) {
      button.setAttribute("aria-expanded", open ? "true" : "false");
      bar.classList.toggle("menu-open", open);
    }

    if (menu) {
      bar.classList.add("has-menu");
      button.hidden = false;
      button.addEventListener("click", function () {
        setMenu(button.getAttribute("aria-expanded") !== "true");
      });
      mirrorApprovalsBadge(button, menu.querySelector("nav"));
    }

    document.addEventListener("keydown", function (event) {
      if (event.key !== "Escape") return;
      if (account && account.open) {
        account.open = false;
        account.querySelector("summary").focus();
      } else if (menu && button.getAttribute("aria-expanded") === "true" && button.offsetParent) {
        setMenu(false);
        button.focus();
      }
    });

    document.addEventListener("click", function (event) {
      if (account && account.open && !account.contains(event.target)) account.open = false;
    });
  });
})();
