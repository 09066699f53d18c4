// Learner view: the metric CSV the learner writes (logs/online_<method>_seed<k>.csv) against env steps,
// and its summary.json; refreshed every 5 s.
"use strict";

const $ = id => document.getElementById(id);
const GROUPS = {
  "plot-rates": c => ["success_rate", "autonomous_success_rate", "intervention_rate"].includes(c),
  "plot-losses": c => c.endsWith("loss"),
  "plot-q": c => /(^|_)q(_|$)/.test(c) && !c.endsWith("loss"),
  "plot-speed": c => c === "updates_per_s" || c === "env_steps_per_s",
};
let runs = [], chosen = 0;

function draw() {
  const run = runs[chosen];
  if (!run) return;
  const x = run.columns.env_steps || [];
  for (const [id, pick] of Object.entries(GROUPS)) {
    const series = Object.keys(run.columns).filter(pick).map(name => ({name, x, y: run.columns[name]}));
    drawPlot($(id), series);
    $(id).dataset.series = series.map(s => s.name).join(",");
    $(id).dataset.points = x.length;
  }
  const body = $("summary").tBodies[0];
  body.replaceChildren();
  for (const [k, v] of Object.entries(run.summary || {})) {
    const tr = body.insertRow();
    tr.insertCell().textContent = k;
    tr.insertCell().textContent = typeof v === "number" ? +v.toPrecision(4) : JSON.stringify(v);
  }
}

async function refresh() {
  try {
    runs = await api("/api/history/learner");
    const select = $("run-select");
    if (select.options.length !== runs.length) select.replaceChildren(...runs.map((r, i) => new Option(r.name, i)));
    draw();
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    $("error").textContent = "";
  } catch (err) { $("error").textContent = err.message; }
}

$("run-select").onchange = e => { chosen = +e.target.value; draw(); };
refresh();
setInterval(refresh, 5000);
