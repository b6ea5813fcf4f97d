// The trace report's step selector: swaps in the breakdown, collective table, titles and x range
// of the chosen step (dlexplore.report.trace_report). A CustomJS callback body.
const get = (o, k) => (o instanceof Map ? o.get(k) : o[k]);
// a DataTable reads its columns as properties: give it a plain object, not a Map
const plain = (o) => (o instanceof Map ? Object.fromEntries(o) : o);
const s = get(states, cb_obj.value);
breakdown.data = plain(get(s, "breakdown"));
table.data = plain(get(s, "collectives"));
bars.title.text = get(s, "breakdown_title");
heading.text = get(s, "collectives_title");
const w = get(s, "window");
x_range.setv({start: w[0], end: w[1]});
