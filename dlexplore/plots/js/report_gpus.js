// The explorer report's GPU selector: swaps in the precomputed columns, titles and headline of
// the chosen GPU count (dlexplore.report.explorer_report). A CustomJS callback body.
const s = states[cb_obj.value];
for (const name in sources) { sources[name].data = s.data[name]; }
memory_title.text = s.memory_title;
memory_title.text_color = s.memory_color;
memory_title.text_font_style = s.memory_style;
memory.background_fill_color = s.memory_background;
memory.x_range.end = s.memory_end;
capacity.location = s.capacity;
comm_title.text = s.comm_title;
const p = document.createElement('p');
p.textContent = s.headline;
line.text = "<p style='font-size:15px'>" + p.innerHTML + "</p>";
