// Episode browser: pick an actor, an episode; play its frames, see its reward curve and intervention
// spans; relabel it, note it, exclude it (each an appended, timestamped edit).
"use strict";

const $ = id => document.getElementById(id);
const FPS = 10;
let actors = [], actor = null, detail = null, plot = null, timer = null;

function showError(err) { $("error").textContent = err ? String(err.message || err) : ""; }

function base() { return `/api/history/actors/${actor.run}/${actor.actor}/episodes`; }

function outcome(row) {
  const text = row.success ? "success" : "failure";
  return `<span class="${row.success ? "ok" : "fail"}${row.label !== null ? " edited" : ""}">${text}</span>`;
}

async function loadActors() {
  actors = await api("/api/history/actors");
  $("actor-select").replaceChildren(...actors.map((a, i) => new Option(`${a.run} / ${a.actor} (${a.episodes})`, i)));
  if (actors.length) { actor = actors[0]; await loadEpisodes(); }
}

async function loadEpisodes() {
  const rows = await api(base());
  const body = $("episode-list").tBodies[0];
  body.replaceChildren();
  for (const row of rows) {
    const tr = body.insertRow();
    tr.dataset.episode = row.episode;
    tr.className = (row.exclude ? "excluded" : "") + (detail && detail.episode === row.episode ? " selected" : "");
    tr.innerHTML = `<td>${row.episode}</td><td>${row.steps}</td><td>${outcome(row)}</td>` +
      `<td>${row.intervention_steps}</td><td>${row["return"].toFixed(2)}</td><td></td>`;
    tr.cells[5].textContent = row.note.slice(0, 30);
    tr.onclick = () => openEpisode(row.episode).catch(showError);
  }
  body.dataset.count = rows.length;
}

function frameUrl(camera, step) { return withToken(`${base()}/${detail.episode}/frames/${camera}/${step}.jpg`); }

// Frames are fetched one request per camera at a time: a step asked for while that camera's frame still
// loads is fetched after it (only the newest such step), and the player waits for the shown frames. So
// scrubbing, playing or opening an episode never piles requests up on the GUI server, which also serves
// the live page and relays the e-stop (fetching every frame of an episode up front once starved it).
function showFrame(img, url) {
  if (img.dataset.loading) { img.wanted = url; return; }
  img.dataset.loading = "1";
  img.src = url;
}

function frameDone(img) {
  delete img.dataset.loading;
  img.dataset.loaded = Number(img.dataset.loaded || 0) + 1;
  const next = img.wanted;
  img.wanted = null;
  if (next) showFrame(img, next);
}

function showStep(step) {
  $("step").value = step;
  $("step-label").textContent = `step ${step + 1} / ${detail.steps}`;
  for (const camera of detail.cameras) showFrame($(`cam-${camera}`), frameUrl(camera, step));
  if (plot) plot.moveCursor(step);
  $("frames").dataset.step = step;
}

function render() {
  $("detail").hidden = false;
  $("detail").dataset.episode = detail.episode;
  $("detail-title").textContent = `${actor.run} / ${actor.actor} / episode ${detail.episode}`;
  $("outcome").innerHTML = outcome(detail) + (detail.label !== null ? ` (recorded ${detail.recorded_success ? "success" : "failure"})` : "");
  $("exclude").checked = detail.exclude;
  $("note").value = detail.note;
  $("history").replaceChildren(...detail.history.map(e => {
    const li = document.createElement("li");
    li.textContent = `${e.time}: ${e.set} = ${JSON.stringify(e.value)}`;
    return li;
  }));
  const steps = detail.reward.map((_, i) => i);
  const last = detail.steps - 1;
  plot = drawPlot($("curve"), [{name: "reward", x: steps, y: detail.reward}], {
    spans: detail.interventions,
    marker: detail.label !== null ? {x: last, y: detail.label === "success" ? 1 : 0, label: `labelled ${detail.label}`} : null,
  });
  $("curve").dataset.points = steps.length;
}

async function openEpisode(episode) {
  stop();
  detail = await api(`${base()}/${episode}`);
  const frames = $("frames");
  frames.replaceChildren(...detail.cameras.map(camera => {
    const fig = document.createElement("figure");
    fig.innerHTML = `<img id="cam-${camera}" alt="${camera}"><figcaption>${camera}</figcaption>`;
    const img = fig.querySelector("img");
    img.onload = img.onerror = () => frameDone(img);  // data-loaded: its finished frame requests
    return fig;
  }));
  $("step").max = detail.steps - 1;
  render();
  showStep(0);
  for (const tr of $("episode-list").tBodies[0].rows) tr.classList.toggle("selected", +tr.dataset.episode === episode);
}

function stop() { if (timer) clearInterval(timer); timer = null; $("play").textContent = "play"; }

function play() {
  if (timer) return stop();
  $("play").textContent = "pause";
  timer = setInterval(() => {
    if (detail.cameras.some(camera => $(`cam-${camera}`).dataset.loading)) return;  // the shown frames first
    const next = +$("step").value + 1;
    if (next >= detail.steps) return stop();
    showStep(next);
  }, 1000 / FPS);
}

async function edit(kind, body) {
  detail = await api(`${base()}/${detail.episode}/${kind}`, body);
  render();
  await loadEpisodes();
  $("saved").textContent = `saved ${kind}`;
}

$("actor-select").onchange = e => { actor = actors[+e.target.value]; $("detail").hidden = true; loadEpisodes().catch(showError); };
$("play").onclick = play;
$("step").oninput = e => { stop(); showStep(+e.target.value); };
$("label-success").onclick = () => edit("label", {label: "success"}).catch(showError);
$("label-failure").onclick = () => edit("label", {label: "failure"}).catch(showError);
$("label-clear").onclick = () => edit("label", {label: null}).catch(showError);
$("exclude").onchange = e => edit("exclude", {exclude: e.target.checked}).catch(showError);
$("save-note").onclick = () => edit("note", {note: $("note").value}).catch(showError);
loadActors().catch(showError);
