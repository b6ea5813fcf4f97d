"""Task-event files of a measured workflow (simulation ranks feeding training, or any tasks on
workers): CSV with a header, or JSON; columns ``task, worker, start, end, kind``
(:data:`dlexplore.model.workflow.TASK_COLUMNS`), the table that
:func:`dlexplore.model.workflow.coupled_tasks` predicts and
:func:`dlexplore.plots.tasks.task_timeline_figure` draws.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from .._io import read_text
from ..errors import InputFileError
from ..model.workflow import TASK_COLUMNS

__all__ = ["read_task_events"]


def _rows_from_csv(path: Path, text: str) -> list[tuple[int, dict]]:
    reader = csv.DictReader(io.StringIO(text))
    try:
        header = [h.strip() for h in (reader.fieldnames or [])]
    except csv.Error as err:  # e.g. a field over csv's size limit
        raise InputFileError(path, f"not readable as CSV ({err})", line=reader.line_num) from None
    if not header:
        raise InputFileError(
            path, "empty file: expected a CSV header with columns " + ", ".join(TASK_COLUMNS), line=1
        )
    reader.fieldnames = header
    missing = [c for c in TASK_COLUMNS if c not in header]
    if missing:
        raise InputFileError(
            path,
            f"the CSV header lacks column(s) {', '.join(missing)}; found "
            f"{', '.join(header)}; expected {', '.join(TASK_COLUMNS)}",
            line=1,
        )
    rows = []
    try:
        for record in reader:
            line = reader.line_num
            if None in record:
                raise InputFileError(
                    path, f"{len(header) + len(record[None])} fields, the header has {len(header)}", line=line
                )
            rows.append((line, record))
    except csv.Error as err:  # e.g. a field over csv's size limit
        raise InputFileError(path, f"not readable as CSV ({err})", line=reader.line_num) from None
    return rows


def _rows_from_json(path: Path, text: str) -> list[tuple[int, dict]]:
    try:
        data = json.loads(text)
    except RecursionError:
        raise InputFileError(path, "JSON nested too deeply; expected a list of task objects") from None
    except json.JSONDecodeError as err:
        raise InputFileError(
            path, f"not valid JSON ({err.msg}, column {err.colno})", line=err.lineno
        ) from None
    if isinstance(data, dict):
        data = data.get("events", data.get("tasks"))
    if not isinstance(data, list):
        raise InputFileError(
            path, 'expected a JSON list of task objects, or an object with an "events" (or "tasks") list'
        )
    rows = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise InputFileError(
                path,
                f"task {i} is a {type(item).__name__}, expected an object with "
                f"keys {', '.join(TASK_COLUMNS)}",
                row=i,
            )
        missing = [c for c in TASK_COLUMNS if c not in item]
        if missing:
            raise InputFileError(path, f"task {i} lacks key(s) {', '.join(missing)}", row=i)
        rows.append((i, item))
    return rows


def read_task_events(path: str | os.PathLike) -> pd.DataFrame:
    """Read a task-event file: CSV with a header, or JSON (a list of objects, or ``{"events": [...]}``).

    Each task has ``task`` (name), ``worker`` (where it ran: a row of the timeline), ``start`` and
    ``end`` (s, numbers, ``end >= start``) and ``kind`` (its colour in the timeline). Extra columns are
    kept. Errors name the file and the line (CSV, JSON syntax) or the task's index (JSON).

    Returns
    -------
    pandas.DataFrame
        Columns ``task``, ``worker``, ``kind`` (str), ``start``, ``end``, ``duration`` (float, s), then
        any extra columns; ``attrs["source"]`` is ``"measured: <file>"``.
    """
    path = Path(path)
    text = read_text(path, "a task-event file (CSV or JSON)")
    is_json = path.suffix.lower() == ".json" or text.lstrip()[:1] in ("[", "{")
    rows = _rows_from_json(path, text) if is_json else _rows_from_csv(path, text)
    where = "row" if is_json else "line"
    records = []
    for pos, record in rows:
        place = {where: pos}
        values = {}
        for col in ("start", "end"):
            raw_value = record[col]
            try:
                if isinstance(raw_value, bool):
                    raise ValueError
                values[col] = float(raw_value.strip() if isinstance(raw_value, str) else raw_value)
            except (TypeError, ValueError, OverflowError):
                raise InputFileError(
                    path, f"{col} is {raw_value!r}, expected a number of seconds", **place
                ) from None
            if not np.isfinite(values[col]):
                raise InputFileError(
                    path, f"{col} is {raw_value!r}, expected a finite number of seconds", **place
                )
        if values["end"] < values["start"]:
            raise InputFileError(
                path, f"end {values['end']:g} s is before start {values['start']:g} s", **place
            )
        for col in ("task", "worker", "kind"):
            value = record[col]
            if value is None or (isinstance(value, str) and not value.strip()):
                raise InputFileError(path, f"{col} is empty, expected a name", **place)
        records.append({**record, **values})
    if not records:
        raise InputFileError(path, "no task events in the file")
    frame = pd.DataFrame.from_records(records)
    for col in ("task", "worker", "kind"):
        frame[col] = frame[col].astype(str).str.strip()
    frame["start"] = frame["start"].astype(float)
    frame["end"] = frame["end"].astype(float)
    frame["duration"] = frame["end"] - frame["start"]
    extra = [c for c in frame.columns if c not in (*TASK_COLUMNS, "duration")]
    frame = frame[["task", "worker", "kind", "start", "end", "duration", *extra]]
    frame.attrs.update(source=f"measured: {path.name}", units={"start": "s", "end": "s", "duration": "s"})
    return frame
