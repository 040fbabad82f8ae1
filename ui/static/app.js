// Vigil's own script (no framework). The pages work without it; it adds live
// updates, inline validation, one Save for every change, a guard against leaving
// with unsaved changes, and keeps the API token for this tab (sessionStorage,
// sent in the Authorization header, never in a cookie).
"use strict";
(function () {
  var TOKEN_KEY = "vigil-api-token";
  var body = document.body;
  var $ = function (sel, root) { return (root || document).querySelector(sel); };
  var $$ = function (sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); };

  function token() { try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (e) { return ""; } }
  function keepToken(t) { try { if (t) { sessionStorage.setItem(TOKEN_KEY, t); } else { sessionStorage.removeItem(TOKEN_KEY); } } catch (e) { /* private mode */ } }
  function headers(extra) {
    var h = { "X-Vigil-Client": "ui" };
    if (token()) { h.Authorization = "Bearer " + token(); }
    for (var k in extra || {}) { h[k] = extra[k]; }
    return h;
  }

  // Reads that need the token: submit the token form with the kept token.
  var tokenForm = $("#token-form");
  if (tokenForm) {
    tokenForm.addEventListener("submit", function () { keepToken($("#token", tokenForm).value); });
    if (token() && !$("#token-error")) { $("#token", tokenForm).value = token(); tokenForm.submit(); }
    return;
  }

  // ---- Live updates: /v1/events read with fetch so the token can travel in a header.
  var status = $("#live-status");
  var handlers = {};
  function setStatus(on) {
    if (!status) { return; }
    status.textContent = on ? "Live" : "Reconnecting…";
    status.className = "live-status " + (on ? "on" : "off");
  }
  function stream() {
    var ctrl = new AbortController();
    fetch("/v1/events", { headers: headers(), signal: ctrl.signal, cache: "no-store" }).then(function (res) {
      if (!res.ok || !res.body) { throw new Error("events: " + res.status); }
      setStatus(true);
      var reader = res.body.getReader(), dec = new TextDecoder(), buf = "";
      function pump() {
        return reader.read().then(function (r) {
          if (r.done) { throw new Error("stream ended"); }
          buf += dec.decode(r.value, { stream: true });
          var i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            dispatch(buf.slice(0, i));
            buf = buf.slice(i + 2);
          }
          return pump();
        });
      }
      return pump();
    }).catch(function () {
      setStatus(false);
      setTimeout(stream, 2000);
    });
  }
  function dispatch(frame) {
    var name = "message", data = "";
    frame.split("\n").forEach(function (line) {
      if (line.indexOf("event: ") === 0) { name = line.slice(7); }
      if (line.indexOf("data: ") === 0) { data += line.slice(6); }
    });
    if (handlers[name] && data) {
      try { handlers[name](JSON.parse(data)); } catch (e) { /* a bad frame is skipped */ }
    }
  }

  // Swap a page's live region for its server-rendered fresh copy.
  function refreshPartial() {
    var live = $("#live");
    if (!live) { return; }
    fetch(live.getAttribute("data-partial"), { headers: headers(), cache: "no-store" })
      .then(function (res) { return res.ok ? res.text() : null; })
      .then(function (html) { if (html !== null) { live.innerHTML = html; } });
  }

  // Every page: the banner while a refused settings value blocks acting.
  handlers.problems = function (ev) {
    var banner = $("#blocked-banner");
    if (!banner) { return; }
    var list = $("[data-role=blocked-list]", banner);
    list.textContent = "";
    (ev.problems || []).filter(function (p) { return p.blocking; }).forEach(function (p) {
      var li = document.createElement("li");
      li.textContent = p.message + (p.setting ? "" : "; allowed: " + p.allowed);
      list.appendChild(li);
    });
    banner.hidden = !ev.actBlocked;
  };

  var page = body.getAttribute("data-page");
  if (page === "nodes") {
    handlers.nodes = refreshPartial;
    setInterval(refreshPartial, 2000); // heartbeat ages move on between events
  } else if (page === "recoveries") {
    handlers.recoveries = refreshPartial;
  } else if (page === "settings") {
    settingsPage();
  }
  stream();

  // ---- The settings page.
  function settingsPage() {
    var form = $("#settings-form");
    if (!form) { return; }
    var etag = $("#etag");
    var saveBtn = $("#save");
    var errorBanner = $("#error-banner");
    var tokenField = $("#token-field"), tokenKept = $("#token-kept"), tokenInput = $("#token");
    var timers = {};

    function showTokenState() {
      var kept = !!token();
      tokenField.hidden = kept;
      tokenKept.hidden = !kept;
    }
    $("#forget-token").addEventListener("click", function () { keepToken(""); showTokenState(); tokenInput.focus(); });
    showTokenState();

    function settings() { return $$(".setting[data-name]", form); }
    function control(s) { return $("#in-" + s.getAttribute("data-name"), form); }
    function current(s) {
      var c = control(s);
      if (c.type === "checkbox") { return c.checked ? "true" : "false"; }
      if (c.tagName === "TEXTAREA") {
        return c.value.split("\n").map(function (l) { return l.trim(); }).filter(Boolean).join(",");
      }
      return c.value;
    }
    function orig(s) { return $("[data-role=orig]", s).value; }
    function dirty() {
      return settings().filter(function (s) { return !control(s).disabled && current(s) !== orig(s); });
    }
    function showError(s, msg) {
      var p = $("[data-role=error]", s), c = control(s);
      p.textContent = msg || "";
      p.hidden = !msg;
      s.classList.toggle("has-error", !!msg);
      if (msg) { c.setAttribute("aria-invalid", "true"); } else { c.removeAttribute("aria-invalid"); }
    }
    function update() {
      var d = dirty();
      settings().forEach(function (s) { s.classList.toggle("dirty", d.indexOf(s) >= 0); });
      $("#dirty-count").textContent = d.length ? d.length + " unsaved change" + (d.length > 1 ? "s" : "") : "No unsaved changes";
      saveBtn.disabled = d.length === 0;
      settings().forEach(function (s) {
        var chosen = current(s);
        $$("[data-choice]", s).forEach(function (li) { li.classList.toggle("chosen", li.getAttribute("data-choice") === chosen); });
      });
    }
    function check(s) {
      var name = s.getAttribute("data-name"), value = current(s);
      if (value === orig(s)) { showError(s, ""); return; }
      fetch("/v1/settings/" + encodeURIComponent(name) + "/check?value=" + encodeURIComponent(value), { headers: headers() })
        .then(function (res) { return res.json().then(function (j) { return { ok: res.ok, j: j }; }); })
        .then(function (r) { if (current(s) === value) { showError(s, r.ok ? "" : r.j.error.message); } });
    }
    settings().forEach(function (s) {
      var c = control(s);
      var onChange = function () {
        update();
        clearTimeout(timers[s.id]);
        timers[s.id] = setTimeout(function () { check(s); }, 250);
      };
      c.addEventListener("input", onChange);
      c.addEventListener("change", onChange);
    });
    window.addEventListener("beforeunload", function (e) {
      if (dirty().length) { e.preventDefault(); e.returnValue = ""; }
    });

    // Apply a server view of a setting to the page (after a save or an event).
    function apply(v) {
      var s = $("#setting-" + v.name, form);
      if (!s) { return; }
      var wasDirty = dirty().indexOf(s) >= 0;
      $("[data-role=orig]", s).value = v.value;
      $("[data-role=value]", s).textContent = v.value || "(empty)";
      var badge = $("[data-role=source]", s);
      badge.textContent = v.source;
      badge.className = "badge source-" + v.source;
      var reset = $("[data-role=reset]", s);
      if (reset) { reset.hidden = v.source !== "store"; }
      if (!wasDirty) {
        var c = control(s);
        if (c.type === "checkbox") { c.checked = v.value === "true"; }
        else if (c.tagName === "TEXTAREA") { c.value = v.value.split(",").join("\n"); }
        else { c.value = v.value; }
      }
      if (v.name === "dry-run") { $("#dry-run-banner").hidden = v.value !== "true"; }
      update();
    }
    function refreshHistory() {
      fetch("/?partial=history", { headers: headers(), cache: "no-store" })
        .then(function (res) { return res.ok ? res.text() : null; })
        .then(function (html) { if (html !== null) { $("#history").innerHTML = html; } });
    }
    handlers.settings = function (ev) {
      var s = $("#setting-" + ev.setting.name, form);
      var isDirty = s && dirty().indexOf(s) >= 0;
      var locked = s && s.classList.contains("locked");
      if ((ev.setting.source === "managed") !== !!locked && !dirty().length) { window.location.reload(); return; }
      apply(ev.setting);
      // A change to a setting being edited keeps the old ETag: saving it then
      // fails with 412, naming the change, instead of overwriting it.
      if (!isDirty) { etag.value = ev.etag; }
      else { showError(s, "Changed elsewhere while you edited: now " + JSON.stringify(ev.setting.value) + " (" + ev.setting.source + "). Saving will be refused; reload to see it."); }
      refreshHistory();
    };

    function fail(res, j) {
      var e = (j && j.error) || { message: "HTTP " + res.status };
      var ok = $("#saved-banner");
      if (ok) { ok.remove(); }
      errorBanner.textContent = "Nothing was saved: " + e.message;
      errorBanner.hidden = false;
      if (res.status === 401) {
        keepToken(""); showTokenState();
        var te = $("#token-error"); te.textContent = e.message; te.hidden = false;
        tokenInput.setAttribute("aria-invalid", "true"); tokenInput.focus();
        return;
      }
      (e.errors && e.errors.length ? e.errors : [e]).forEach(function (one) {
        var s = one.setting && $("#setting-" + one.setting, form);
        if (s) { showError(s, one.message); }
      });
      (e.changed || []).forEach(function (c) {
        var s = $("#setting-" + c.name, form);
        if (s) { showError(s, "Changed elsewhere while you edited: now " + JSON.stringify(c.value) + " (" + c.source + ")."); }
      });
      var first = $(".has-error", form);
      if (first) { control(first).focus(); }
    }
    function send(method, url, payload) {
      if (!token() && tokenInput.value) { keepToken(tokenInput.value.trim()); }
      var h = headers({ "If-Match": etag.value });
      if (payload) { h["Content-Type"] = "application/json"; }
      return fetch(url, { method: method, headers: h, body: payload ? JSON.stringify(payload) : undefined })
        .then(function (res) { return res.json().then(function (j) { return { res: res, j: j }; }); });
    }
    function done(msg) {
      errorBanner.hidden = true;
      $("#token-error").hidden = true;
      tokenInput.removeAttribute("aria-invalid");
      showTokenState();
      var ok = $("#saved-banner");
      if (!ok) {
        ok = document.createElement("div");
        ok.id = "saved-banner"; ok.className = "banner ok"; ok.setAttribute("role", "status");
        errorBanner.parentNode.insertBefore(ok, errorBanner);
      }
      ok.textContent = msg;
      refreshHistory();
    }

    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var submitter = e.submitter;
      if (submitter && submitter.name === "reset") {
        var name = submitter.value;
        send("DELETE", "/v1/settings/" + encodeURIComponent(name)).then(function (r) {
          if (!r.res.ok) { fail(r.res, r.j); return; }
          var s = $("#setting-" + name, form);
          $("[data-role=orig]", s).value = current(s); // not dirty: apply takes the value
          apply(r.j);
          etag.value = r.res.headers.get("ETag") || etag.value;
          showError(s, "");
          done("Saved: " + name + " reset to its default.");
        });
        return;
      }
      var values = {};
      dirty().forEach(function (s) { values[s.getAttribute("data-name")] = current(s); });
      if (!Object.keys(values).length) { done("Nothing had changed."); return; }
      saveBtn.disabled = true;
      send("PATCH", "/v1/settings", { values: values }).then(function (r) {
        if (!r.res.ok) { fail(r.res, r.j); update(); return; }
        settings().forEach(function (s) { showError(s, ""); });
        r.j.settings.forEach(function (v) {
          var s = $("#setting-" + v.name, form);
          if (s && values.hasOwnProperty(v.name)) { $("[data-role=orig]", s).value = current(s); }
          apply(v);
        });
        etag.value = r.j.etag;
        done("Saved: " + Object.keys(values).length + " setting(s) changed.");
      }).catch(function (err) {
        errorBanner.textContent = "Nothing was saved: " + err; errorBanner.hidden = false; update();
      });
    });
    update();
  }
})();
