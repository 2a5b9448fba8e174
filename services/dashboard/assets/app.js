// SLM dashboard: live updates by polling the read-only JSON API.
// Renders with textContent only: server data is never parsed as HTML.
(function () {
  "use strict";
  var body = document.body;
  var page = body.dataset.page;
  var POLL_MS = 1500;

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function badge(status) {
    return el("span", status, "badge status-" + String(status).toLowerCase());
  }

  function getJSON(url) {
    return fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      });
  }

  function renderRun(d) {
    var set = function (id, node) {
      var target = document.getElementById(id);
      if (!target) return;
      target.textContent = "";
      target.appendChild(node);
    };
    set("run-status", badge(d.status));
    set("run-reason", document.createTextNode(d.reason));
    set("run-laps", document.createTextNode(String(d.laps.length)));
    var tbody = document.querySelector("#laps tbody");
    if (!tbody) return;
    var rows = document.createDocumentFragment();
    d.laps.forEach(function (l) {
      var tr = el("tr");
      tr.appendChild(el("td", l.lap, "num"));
      tr.appendChild(el("td", l.ts, "ts"));
      tr.appendChild(el("td", l.decision));
      tr.appendChild(el("td", l.gate_passed ? "yes" : "no"));
      tr.appendChild(el("td", l.detail, "detail"));
      var claim = el("td", (l.agent_claimed_done ? "says done" : "no claim") + " ", "claim");
      claim.appendChild(el("em", l.agent_claim));
      tr.appendChild(claim);
      tr.appendChild(el("td", l.tokens, "num"));
      tr.appendChild(el("td", Number(l.wallclock_s).toFixed(3), "num"));
      rows.appendChild(tr);
    });
    tbody.textContent = "";
    tbody.appendChild(rows);
    var live = document.getElementById("live");
    if (live) live.hidden = !!d.terminal;
    body.dataset.terminal = d.terminal ? "true" : "false";
  }

  function pollRun() {
    var id = body.dataset.runId;
    if (!id || body.dataset.terminal === "true") return;
    getJSON("/api/runs/" + encodeURIComponent(id))
      .then(function (d) {
        renderRun(d);
        if (!d.terminal) setTimeout(pollRun, POLL_MS);
      })
      .catch(function () { setTimeout(pollRun, POLL_MS * 4); });
  }

  function renderHome(p) {
    var tbody = document.querySelector("#runs tbody");
    if (!tbody) return;
    var rows = document.createDocumentFragment();
    p.runs.forEach(function (r) {
      var tr = el("tr");
      tr.dataset.runId = r.run_id;
      tr.appendChild(el("td", r.name, "name"));
      var td = el("td");
      var a = el("a", r.run_id, "mono");
      a.href = "/runs/" + encodeURIComponent(r.run_id);
      td.appendChild(a);
      tr.appendChild(td);
      var st = el("td");
      st.appendChild(badge(r.status));
      tr.appendChild(st);
      tr.appendChild(el("td", r.reason, "reason"));
      tr.appendChild(el("td", r.laps, "num"));
      tr.appendChild(el("td", r.last_ts, "ts"));
      rows.appendChild(tr);
    });
    tbody.textContent = "";
    tbody.appendChild(rows);
    return p.runs.some(function (r) { return r.status === "RUNNING"; });
  }

  function pollHome() {
    getJSON("/api/runs?limit=20")
      .then(function (p) {
        if (renderHome(p)) setTimeout(pollHome, POLL_MS * 2);
      })
      .catch(function () { setTimeout(pollHome, POLL_MS * 8); });
  }

  if (page === "run" && body.dataset.terminal !== "true") setTimeout(pollRun, POLL_MS);
  if (page === "home" && body.dataset.live === "true") setTimeout(pollHome, POLL_MS * 2);
})();
