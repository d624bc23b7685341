// Live status: a running build's page follows its server-sent events and updates in place; the
// grid re-reads itself while some build on the page is pending. All text goes in as textContent.
"use strict";

function stateSpan(state, text, reason) {
  const span = document.createElement("span");
  span.className = "st st-" + state;
  span.dataset.state = state;
  span.title = reason || "";
  span.textContent = text;
  return span;
}

function renderJobs(list, snap) {
  const items = snap.jobs.map((job) => {
    const li = document.createElement("li");
    li.dataset.job = job.id;
    const label = document.createElement("strong");
    label.textContent = job.label;
    li.append(label, " ", stateSpan(job.state, job.state, job.reason || ""));
    let tail = job.runner ? " on " + job.runner : "";
    tail += " · attempt " + job.attempt + " · " + job.done + "/" + job.total + " stages:";
    li.append(tail);
    for (const s of job.stages) {
      const step = document.createElement("span");
      step.className = "step";
      step.dataset.stage = s.name;
      step.append(s.name + " ", stateSpan(s.state, s.text, s.reason));
      if (s.duration_s !== null) step.append(" " + s.duration_s + " s");
      li.append(step);
    }
    return li;
  });
  list.replaceChildren(...items);
}

async function swapMain() {
  const resp = await fetch(location.href, { headers: { Accept: "text/html" } });
  if (!resp.ok) return;
  const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
  const fresh = doc.querySelector("main");
  if (fresh) document.querySelector("main").replaceChildren(...fresh.childNodes);
}

function apply(snap) {
  const list = document.getElementById("live-jobs");
  if (list) renderJobs(list, snap);
  const verdict = document.getElementById("verdict");
  if (verdict) verdict.replaceChildren(stateSpan(snap.verdict.state, snap.verdict.text, snap.verdict.reason));
  const reason = document.getElementById("verdict-reason");
  if (reason) reason.textContent = snap.verdict.reason;
  const status = document.getElementById("build-status");
  if (status) status.textContent = snap.status;
  const version = document.getElementById("build-version");
  if (version && snap.version) version.textContent = snap.version;
}

function followBuild(section) {
  const id = section.dataset.build;
  let done = false;
  const finish = () => { done = true; swapMain(); };
  const onSnapshot = (snap) => {
    apply(snap);
    if (snap.finished && !done) finish();
  };
  if (window.EventSource) {
    const source = new EventSource("/builds/" + id + "/events");
    source.addEventListener("snapshot", (event) => {
      const snap = JSON.parse(event.data);
      onSnapshot(snap);
      if (snap.finished) source.close();
    });
    return;
  }
  const poll = async () => {
    if (done) return;
    const resp = await fetch("/builds/" + id + "/live.json");
    if (resp.ok) onSnapshot(await resp.json());
    if (!done) setTimeout(poll, 2000);
  };
  poll();
}

function followGrid(table) {
  const tick = async () => {
    const resp = await fetch(location.href, { headers: { Accept: "text/html" } });
    if (resp.ok) {
      const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
      const fresh = doc.getElementById("builds");
      const body = fresh && fresh.querySelector("tbody");
      if (body) table.querySelector("tbody").replaceChildren(...body.childNodes);
      if (fresh && fresh.dataset.live !== "1") return;
    }
    setTimeout(tick, 3000);
  };
  setTimeout(tick, 3000);
}

// A link to a part of a folded page (/builds/7#job-12, from a commit status) opens the folds
// around it first, so the browser can scroll to it.
function revealTarget() {
  const id = decodeURIComponent(location.hash.slice(1));
  const target = id && document.getElementById(id);
  if (!target) return;
  for (let d = target.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) {
    d.open = true;
  }
  target.scrollIntoView();
}

window.addEventListener("hashchange", revealTarget);

document.addEventListener("DOMContentLoaded", () => {
  revealTarget();
  const section = document.getElementById("live");
  if (section && section.dataset.live === "1") followBuild(section);
  const table = document.getElementById("builds");
  if (table && table.dataset.live === "1") followGrid(table);
});
