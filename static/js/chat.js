// The chat follows its newest run over the live websocket (static/js/live.js subscribes).
//
// A run subscription sends the run page's own partials (agents/live/render.py): the chat
// shows only the model's words as they stream (#run-activity) and keeps the number of the last
// event (#run-seq); its "chat" feed renders the rest in plain words. The "chat-live" htmx
// extension drops, from websocket messages only, the updates of elements this page does not
// have (the run page's timeline, events, sections), which htmx would report as errors.
(function () {
  "use strict";

  function targetOf(el) {
    var how = el.getAttribute("hx-swap-oob") || "true";
    var colon = how.indexOf(":");
    return colon > 0 ? how.slice(colon + 1) : el.id ? "#" + CSS.escape(el.id) : null;
  }

  htmx.defineExtension("chat-live", {
    transformResponse: function (text, xhr) {
      if (xhr) return text; // an HTTP answer (the chat's own forms): as it is
      var template = document.createElement("template");
      template.innerHTML = text;
      Array.prototype.slice.call(template.content.children).forEach(function (el) {
        var selector = targetOf(el);
        if (!selector || !document.querySelector(selector)) el.remove();
      });
      return template.innerHTML;
    },
  });
})();
