// BokehJS code that redraws dlexplore's trace_timeline from plots.timeline.timeline_payload when the
// x range or the category boxes change: the same algorithm as timeline_columns (all rows shown).
// Arguments: src (the source), fig (the timeline figure), payload, boxes (a CheckboxGroup of
// categories, or null), present (its labels). Run as a CustomJS callback body.
const P = (payload instanceof Map) ? Object.fromEntries(payload) : payload;
if (fig.__dlx_pending) return;
fig.__dlx_pending = true;
setTimeout(() => { fig.__dlx_pending = false; draw(); }, 0);

const fmt = (v, d) => v.toLocaleString("en-US", {minimumFractionDigits: d, maximumFractionDigits: d});
function upper(a, lo, hi, x) {  // first index in [lo, hi) with a[i] > x
  while (lo < hi) { const m = (lo + hi) >> 1; if (a[m] <= x) lo = m + 1; else hi = m; }
  return lo;
}
function lower(a, lo, hi, x) {  // first index in [lo, hi) with a[i] >= x
  while (lo < hi) { const m = (lo + hi) >> 1; if (a[m] < x) lo = m + 1; else hi = m; }
  return lo;
}
function rint(x) {  // numpy's round: halves to even
  return (Math.abs(x - Math.trunc(x)) === 0.5) ? 2 * Math.round(x / 2) : Math.round(x);
}
function human(n) {
  if (!isFinite(n)) return "";
  for (const [u, s] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]])
    if (n >= s) return `${fmt(n / s, 1)} ${u} (${fmt(n, 0)} bytes)`;
  return `${fmt(n, 0)} bytes`;
}
function C(g, t) {  // busy time of group g before t: piecewise linear between its breakpoints
  const lo = P.bp_lo[g], hi = P.bp_hi[g];
  const j = upper(P.bp_t, lo, hi, t) - 1;
  if (j < lo) return 0.0;
  const tj = P.bp_t[j], cj = P.bp_c[j];
  if (j + 1 < hi) {
    const dt = P.bp_t[j + 1] - tj;
    if (dt > 0) return cj + (P.bp_c[j + 1] - cj) / dt * (t - tj);
  }
  return cj;
}
function columns() {
  const out = {};
  for (const c of ["left", "right", "top", "bottom", "row", "rank", "stream", "name", "category",
                   "start_ms", "duration_ms", "busy", "count", "size", "collective", "step"]) out[c] = [];
  return out;
}
function draw() {
  const x0 = fig.x_range.start, x1 = fig.x_range.end;
  const on = new Array(P.categories.length).fill(boxes === null);
  if (boxes !== null) for (const i of boxes.active) on[P.categories.indexOf(present[i])] = true;
  let count = 0;
  const idx = [];
  if (P.exact) {
    for (let i = 0; i < P.start.length; i++) {
      if (on[P.cat[i]] && P.start[i] < x1 && P.end[i] > x0) {
        count++;
        if (count <= P.max_events) idx.push(i);
      }
    }
  }
  let data, text;
  const width = fmt(x1 - x0, 3);
  if (P.exact && count <= P.max_events) {
    data = events(idx);
    text = count ? `${fmt(count, 0)} events in ${width} ms, each drawn` : "no events in this window";
  } else {
    const nb = Math.max(8, Math.min(P.bins, Math.floor(P.max_bars / Math.max(1, P.n_rows))));
    data = binned(Math.max(x0, P.span[0]), Math.min(x1, P.span[1]), nb, on);
    const what = P.exact ? `${fmt(count, 0)} events` : "events";
    const how = P.exact ? "zoom in for each event" :
      `this page holds binned busy time only (${fmt(P.n_events, 0)} events): ` +
      "open the trace in TraceView for each event";
    const bars = fmt(data.left.length, 0);
    text = `${what} in ${width} ms, merged into ${nb} bins per row (${bars} bars): ${how}`;
  }
  src.data = data;
  fig.title.text = "Timeline: " + text;
}
function events(idx) {
  const k = idx.length;
  const row = idx.map((i) => P.row[i]), st = idx.map((i) => P.start[i]), en = idx.map((i) => P.end[i]);
  // nesting depth among the events drawn, as timeline_columns: open events on the row at its start
  const ord = [...Array(k).keys()].sort((a, b) => (row[a] - row[b]) || (st[a] - st[b])
    || ((en[b] - st[b]) - (en[a] - st[a])) || (idx[a] - idx[b]));
  const pos = new Array(k);
  let first = 0;
  for (let q = 0; q < k; q++) {
    if (q > 0 && row[ord[q]] !== row[ord[q - 1]]) first = q;
    pos[ord[q]] = q - first;
  }
  const ends = new Map();
  for (let j = 0; j < k; j++) {
    if (!ends.has(row[j])) ends.set(row[j], []);
    ends.get(row[j]).push(en[j]);
  }
  for (const a of ends.values()) a.sort((p, q) => p - q);
  const depth = new Array(k);
  for (let j = 0; j < k; j++) {
    const a = ends.get(row[j]);
    depth[j] = Math.max(pos[j] - upper(a, 0, a.length, st[j]), 0);
  }
  const order = [...Array(k).keys()].sort((a, b) => (depth[a] - depth[b]) || (st[a] - st[b]));
  const out = columns();
  for (const j of order) {
    const i = idx[j], half = 0.4 * Math.pow(0.72, Math.min(depth[j], 5)), y = row[j];
    out.left.push(st[j]); out.right.push(en[j]); out.top.push(y - half); out.bottom.push(y + half);
    out.row.push(y); out.rank.push(P.rank[i]); out.stream.push(P.row_stream[row[j]]);
    out.name.push(P.name_code[i] >= 0 ? P.names[P.name_code[i]] : "");
    out.category.push(P.categories[P.cat[i]]);
    out.start_ms.push(st[j]); out.duration_ms.push(en[j] - st[j]); out.busy.push(1); out.count.push(1);
    out.size.push(human(P.bytes[i]));
    out.collective.push(P.coll_code[i] >= 0 ? P.collectives[P.coll_code[i]] : "");
    out.step.push(isFinite(P.step[i]) ? String(Math.trunc(P.step[i])) : "");
  }
  return out;
}
function binned(x0, x1, nb, on) {
  const out = columns();
  const groups = [];
  for (let g = 0; g < P.group_row.length; g++) if (on[P.group_cat[g]]) groups.push(g);
  if (!groups.length || !(x1 > x0)) return out;
  const step = (x1 - x0) / nb, edges = new Float64Array(nb + 1);
  for (let k = 0; k <= nb; k++) edges[k] = x0 + k * step;
  edges[nb] = x1;
  const G = groups.length, busy = [], started = [], share = [];
  for (const g of groups) {
    const b = new Float64Array(nb), s = new Float64Array(nb), c = new Float64Array(nb);
    let prev = C(g, edges[0]);
    let before = P.exact ? lower(P.g_start, P.g_lo[g], P.g_hi[g], edges[0]) : 0;
    for (let k = 0; k < nb; k++) {
      const w = edges[k + 1] - edges[k], next = C(g, edges[k + 1]);
      b[k] = Math.min(Math.max(next - prev, 0), w);
      c[k] = b[k] / w;
      prev = next;
      if (P.exact) {
        const n = lower(P.g_start, P.g_lo[g], P.g_hi[g], edges[k + 1]);
        s[k] = n - before;
        before = n;
      } else s[k] = NaN;
    }
    busy.push(b); started.push(s); share.push(c);
  }
  // stack the categories of each row (groups are sorted by row, then category), in 1 % steps
  const height = [], offset = [];
  for (let q = 0; q < G;) {
    let r = q;
    while (r < G && P.group_row[groups[r]] === P.group_row[groups[q]]) r++;
    const total = new Float64Array(nb), below = new Float64Array(nb);
    for (let u = q; u < r; u++) for (let k = 0; k < nb; k++) total[k] += share[u][k];
    for (let u = q; u < r; u++) {
      const h = new Float64Array(nb), o = new Float64Array(nb);
      for (let k = 0; k < nb; k++) {
        const scale = 1 / Math.max(total[k], 1);
        h[k] = rint(share[u][k] * scale * 100);
        o[k] = rint(below[k] * scale * 100);
        below[k] += share[u][k];
      }
      height.push(h); offset.push(o);
    }
    q = r;
  }
  const lane = 0.8 / 100;
  for (let u = 0; u < G; u++) {
    const g = groups[u], rowi = P.group_row[g], cat = P.categories[P.group_cat[g]];
    const h = height[u], o = offset[u];
    for (let k = 0; k < nb;) {
      if (!(busy[u][k] > 0)) { k++; continue; }
      let e = k, b = busy[u][k], n = started[u][k];
      while (e + 1 < nb && busy[u][e + 1] > 0 && h[e + 1] === h[k] && o[e + 1] === o[k]) {
        e++;
        b += busy[u][e];
        n += started[u][e];
      }
      const left = edges[k], right = edges[e + 1], bottom = rowi + 0.4 - o[k] * lane;
      const part = b / (right - left);
      out.left.push(left); out.right.push(right); out.bottom.push(bottom); out.top.push(bottom - h[k] * lane);
      out.row.push(rowi); out.rank.push(P.row_rank[rowi]); out.stream.push(P.row_stream[rowi]);
      out.name.push("(merged)");
      out.category.push(cat); out.start_ms.push(left); out.duration_ms.push(b); out.busy.push(part);
      out.count.push(n); out.size.push(""); out.collective.push(""); out.step.push("");
      k = e + 1;
    }
  }
  return out;
}
