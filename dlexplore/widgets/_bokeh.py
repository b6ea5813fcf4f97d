"""A bokeh figure as an ipywidget that sends a whole update in one message.

``jupyter_bokeh.BokehModel`` sends every change of its document as a PATCH-DOC message of its own:
three comm messages (header, metadata, content) plus two per binary buffer. A slider move that
replaces six sources and four titles made 78 messages, each one parsed and applied in the browser
with a re-render. :class:`BatchedBokehModel` holds the changes made inside ``with
model.batch():`` and sends them as one PATCH-DOC message, which BokehJS applies at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bokeh.protocol import Protocol
from jupyter_bokeh import BokehModel

__all__ = ["BatchedBokehModel"]


class BatchedBokehModel(BokehModel):
    """:class:`jupyter_bokeh.BokehModel` whose document changes inside :meth:`batch` travel
    together (changes outside it go at once, as before)."""

    def __init__(self, model: Any, **kwargs: Any) -> None:
        self._held: list | None = None
        super().__init__(model, **kwargs)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Collect the document's changes until the block ends, then send them in one message."""
        outer = self._held is None
        if outer:
            self._held = []
        try:
            yield
        finally:
            if outer:
                events, self._held = self._held, None
                if events:
                    self._send_patch(events)

    def _document_patched(self, event: Any) -> None:
        if event.setter is self:  # the change came from the browser: it has it already
            return
        if self._held is not None:
            self._held.append(event)
        else:
            self._send_patch([event])

    def _send_patch(self, events: list) -> None:
        msg = Protocol().create("PATCH-DOC", events)
        self.send({"msg": "patch", "payload": msg.header_json})
        self.send({"msg": "patch", "payload": msg.metadata_json})
        self.send({"msg": "patch", "payload": msg.content_json})
        for buffer in msg.buffers:
            self.send({"msg": "patch", "payload": json.dumps(buffer.ref)})
            self.send({"msg": "patch"}, [buffer.to_bytes()])
