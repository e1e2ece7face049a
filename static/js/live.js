// Live pages: subscriptions over htmx's websocket extension, idempotent appends, clocks.
//
// The server renders every update (agents/live/render.py); this file only
//  1. tells the server what the page shows: each [data-live] element under a [ws-connect]
//     root is one subscription, sent when the socket opens (and re-opens after a restart,
//     with the number of the last event the page shows, so the server sends what it missed);
//  2. makes appends upserts: an element whose id is already on the page replaces it in place,
//     so an update that arrives twice is shown once;
//  3. keeps a question someone is answering (core/confirm.py: "Cancel this run?"), or a trigger
//     whose question is on its way, when an update re-renders the part around it, as long as
//     the update still offers its action;
//  4. ticks the elapsed-time clocks ([data-since], seconds since the epoch, server time).
(function () {
  "use strict";

  var offsetMs = 0; // server clock minus browser clock

  // Reconnecting after a restart: htmx's default backoff doubles up to 64 s, so a page whose
  // server was down for a minute could sit "reconnecting" for another minute after it came
  // back. Here the wait doubles from 0.5 s to at most 8 s, with jitter (half to all of it) so
  // a thousand pages do not all knock at the same moment.
  htmx.config.wsReconnectDelay = function (retryCount) {
    var ceiling = Math.min(8000, 500 * Math.pow(2, Math.min(retryCount, 4)));
    return ceiling / 2 + (Math.random() * ceiling) / 2;
  };

  function subscription(el) {
    var message = { type: "subscribe", kind: el.dataset.live };
    if (el.dataset.run) message.run = el.dataset.run;
    if (el.dataset.seq) message.after = parseInt(el.dataset.seq, 10);
    if (el.dataset.filter !== undefined) message.filter = el.dataset.filter;
    return JSON.stringify(message);
  }

  function rootOf(el) {
    return el.closest("[ws-connect]");
  }

  function subscribeAll(root, onlyNew) {
    var socket = root.liveSocket;
    if (!socket) return;
    root.querySelectorAll("[data-live]").forEach(function (el) {
      if (rootOf(el) !== root || (onlyNew && el.liveSubscribed)) return;
      el.liveSubscribed = true;
      socket.send(subscription(el));
    });
  }

  document.addEventListener("htmx:wsOpen", function (event) {
    var root = event.target;
    root.liveSocket = event.detail.socketWrapper;
    root.classList.remove("live-offline");
    subscribeAll(root, false);
  });

  document.addEventListener("htmx:wsClose", function (event) {
    event.target.classList.add("live-offline");
  });

  // A filter or a page of the runs list swapped in over HTTP: subscribe for what it shows.
  document.addEventListener("htmx:afterSwap", function () {
    document.querySelectorAll("[ws-connect]").forEach(function (root) {
      subscribeAll(root, true);
    });
  });

  // An open question stays open, focus included, where the update brings back its trigger
  // (same id); an update without the trigger (the run finished) takes the question away.
  // A trigger clicked a moment ago stays too: htmx swaps the question into the very element
  // that asked (hx-target="this"), so a fresh copy would leave the answer nowhere to land.
  var refocus = null;

  function keepOpenQuestions(target, fragment) {
    target.querySelectorAll(".confirm[id], .confirm-trigger.htmx-request[id]").forEach(function (question) {
      var trigger = fragment.querySelector("#" + CSS.escape(question.id));
      if (!trigger) return;
      if (question.contains(document.activeElement)) refocus = document.activeElement;
      trigger.replaceWith(question);
    });
  }

  document.addEventListener("htmx:oobAfterSwap", function () {
    if (refocus && document.body.contains(refocus)) refocus.focus();
    refocus = null;
  });

  // Appends are upserts, and [data-live-delete] markers remove an element if it is there.
  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var target = event.detail.target;
    var fragment = event.detail.fragment;
    if (!fragment || !fragment.children) return;
    if (target) keepOpenQuestions(target, fragment);
    Array.prototype.slice.call(fragment.children).forEach(function (el) {
      if (!el.id || el.id === target.id) return;
      var existing = document.getElementById(el.id);
      if (el.hasAttribute("data-live-delete")) {
        if (existing) existing.remove();
        el.remove();
      } else if (existing) {
        existing.replaceWith(el);
        htmx.process(el);
      }
    });
  });

  document.addEventListener("htmx:wsAfterMessage", readServerClock);

  var clockMarker = null;

  // Each update that carries a new time marker resets the offset (read as it arrives).
  function readServerClock() {
    var marker = document.querySelector("[data-now]");
    if (!marker || marker === clockMarker) return;
    clockMarker = marker;
    offsetMs = parseFloat(marker.dataset.now) * 1000 - Date.now();
  }

  function format(seconds) {
    if (seconds < 10) return seconds.toFixed(1) + " s";
    if (seconds < 60) return Math.round(seconds) + " s";
    var minutes = Math.floor(seconds / 60);
    var rest = Math.floor(seconds % 60);
    if (minutes < 60) return minutes + " min " + (rest < 10 ? "0" : "") + rest + " s";
    var hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    return hours + " h " + (minutes < 10 ? "0" : "") + minutes + " min";
  }

  function tick() {
    var now = (Date.now() + offsetMs) / 1000;
    document.querySelectorAll("[data-since]").forEach(function (el) {
      var since = parseFloat(el.dataset.since);
      if (!isNaN(since)) el.textContent = format(Math.max(0, now - since));
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    readServerClock();
    tick();
    setInterval(tick, 500);
  });
})();
