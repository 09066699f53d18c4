// Small SVG line plots for the episode browser and the learner view (no library, no network).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"];

function svgEl(name, attrs, parent) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (parent) parent.appendChild(el);
  return el;
}

// Draw `series` ([{name, x: [...], y: [...]}], nulls skipped) into `svg` (cleared first).
// opts: {spans: [[x0, x1], ...] shaded, cursor: x or null, marker: {x, y, label}}.
// Returns {toPx(x)} so a caller can move a cursor without a redraw.
function drawPlot(svg, series, opts = {}) {
  const W = 560, H = 190, L = 48, R = 10, T = 24, B = 22;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.replaceChildren();
  const xs = [], ys = [];
  for (const s of series) s.x.forEach((x, i) => { if (s.y[i] !== null) { xs.push(x); ys.push(s.y[i]); } });
  if (opts.marker) { xs.push(opts.marker.x); ys.push(opts.marker.y); }
  if (!xs.length) { svgEl("text", {x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty"}, svg).textContent = "no data yet"; return null; }
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
  const px = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  const py = y => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  for (const [a, b] of opts.spans || []) {
    svgEl("rect", {x: px(a), y: T, width: Math.max(px(b) - px(a), 1), height: H - T - B, class: "span"}, svg);
  }
  svgEl("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis"}, svg);
  svgEl("line", {x1: L, y1: T, x2: L, y2: H - B, class: "axis"}, svg);
  for (const [y, anchor] of [[y0, H - B], [y1, T + 8]]) {
    svgEl("text", {x: L - 4, y: anchor, "text-anchor": "end", class: "tick"}, svg).textContent = +y.toPrecision(3);
  }
  svgEl("text", {x: L, y: H - 6, class: "tick"}, svg).textContent = +x0.toPrecision(4);
  svgEl("text", {x: W - R, y: H - 6, "text-anchor": "end", class: "tick"}, svg).textContent = +x1.toPrecision(4);
  series.forEach((s, k) => {
    const pts = s.x.map((x, i) => s.y[i] === null ? null : `${px(x).toFixed(1)},${py(s.y[i]).toFixed(1)}`).filter(p => p);
    const color = COLORS[k % COLORS.length];
    svgEl("polyline", {points: pts.join(" "), stroke: color, class: "line", "data-name": s.name}, svg);
    svgEl("text", {x: L + 150 * k, y: 14, fill: color, class: "legend"}, svg).textContent = s.name;
  });
  if (opts.marker) {
    const m = opts.marker;
    svgEl("circle", {cx: px(m.x), cy: py(m.y), r: 5, class: "marker"}, svg);
    svgEl("text", {x: px(m.x) - 8, y: Math.max(py(m.y) + 4, T + 24), "text-anchor": "end", class: "legend"}, svg).textContent = m.label;
  }
  const cursor = svgEl("line", {x1: L, y1: T, x2: L, y2: H - B, class: "cursor", visibility: "hidden"}, svg);
  return {
    moveCursor(x) { cursor.setAttribute("x1", px(x)); cursor.setAttribute("x2", px(x)); cursor.setAttribute("visibility", "visible"); },
  };
}

// The page's token (?token=...), passed on to every API call and frame URL.
const TOKEN = new URLSearchParams(location.search).get("token");

function withToken(url) {
  return TOKEN ? url + (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(TOKEN) : url;
}

async function api(url, body) {
  const init = body === undefined ? {} : {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  const reply = await fetch(withToken(url), init);
  const data = await reply.json();
  if (!reply.ok) throw new Error(typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail));
  return data;
}

// Header links keep the token.
for (const a of document.querySelectorAll("header a")) a.href = withToken(a.getAttribute("href"));
