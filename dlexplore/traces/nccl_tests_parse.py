"""The lines of nccl-tests output (``all_reduce_perf`` and its siblings) read into tests: each test's
binary, command, devices, column header and result rows, as nccl-tests prints them (the 2.x formats
with ``#wrong``, the older ones with ``error``, launchers' prefixes and NCCL's own log lines in
between). :mod:`dlexplore.traces.nccl_tests` turns them into datasets.

Kept whole: one scanner reads every kind of line, and what a line means depends on the state the
lines before it left (the test being read, its table's columns, the echoed command's options, a
failure reported); :func:`parse_tests` judges the tests that state describes (died, stopped, sound).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .._io import read_text
from ..errors import DlexploreError, InputFileError
from .nccl_tests_columns import PLACEMENTS, Layout, by_position, fill_blanks, layout_of, split_row

__all__ = ["COLLECTIVE_OF_BINARY", "PLACEMENTS", "Test", "canonical_collective", "collective_of", "parse"]

#: nccl-tests binary stem (``<stem>_perf``) -> collective name (the model's names where it has one).
COLLECTIVE_OF_BINARY = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "alltoall",
    "sendrecv": "sendrecv",
    "gather": "gather",
    "scatter": "scatter",
    "hypercube": "hypercube",
}


# What launchers put before each line: mpirun --tag-output, srun -l, pdsh/clush "host: ".
#: What launchers put before each line: mpirun's "[1,0]<stdout>:", srun -l's "0: ", pdsh's "host: ",
#: Ray's "(head, rank=0, pid=3808) " (SkyPilot runs mpirun under Ray: both, in that order).
LAUNCHER_PREFIX = (
    r"(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+:\s|[A-Za-z][\w.-]*:\s(?=\s*[#\d])"
    r"|\([^()]{0,200}\bpid=\d+[^()]{0,200}\)\s)"  # (bounded: a "(" line without ")" is not quadratic)
)
_LAUNCHER_PREFIX = re.compile(r"^" + LAUNCHER_PREFIX + r"{1,3}")


# NCCL puts the source location before WARN ("host:pid:tid [0] misc/strongstream.cc:60 NCCL WARN")
_NCCL_LOG = re.compile(r"^\S+:\d+:\d+ \[\d+\] (?:\S+:\d+ )?NCCL (?:INFO|WARN|TRACE|ABORT)")


#: A binary's name in a line: ``all_reduce_perf``, ``alltoall_perf_mpi`` (group 1: the stem).
BINARY = re.compile(
    r"(?<![A-Za-z0-9])("
    + "|".join(sorted(COLLECTIVE_OF_BINARY, key=len, reverse=True))
    + r")_perf(?:_mpi)?(?![A-Za-z0-9])"
)


# older nccl-tests and rccl-tests print "# nThread: 1 nGpus: 1 minBytes: 8 ..."
_HEADER = re.compile(r"^#\s*nThread:?\s+(\d+)\s+nGpus:?\s+(\d+)")


# mscclpp-test's header: no threads or GPUs per thread, and no "# Avg bus bandwidth" at the end
_MSCCLPP_HEADER = re.compile(r"^#\s*minBytes\s+\d+\s+maxBytes\s+\d+")


_DEVICE = re.compile(r"^#\s+Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+")


_VERSION = re.compile(r"^#\s*(nccl|rccl)-tests version\s+(.*)$")  # rccl-tests 2.17: "# rccl-tests version"


# rccl-tests print their version on a line of its own, not a comment
_RCCL_VERSION = re.compile(r"^rccl-tests:\s*Version\s+(.*)$")


# what nccl-tests print when a test dies ("host: Test NCCL failure all_reduce.cu:44 '...'"), and
# NCCL's warnings before it
_FAILURE = re.compile(r"Test (?:\w+ )?failure\b.*")
_WARN = re.compile(r"NCCL WARN .*")


_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")


_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([-+0-9.eE]+|[-+]?nan|[-+]?inf)")


_ROW_START = re.compile(r"^\s*[-+]?\d")


# nccl-tests before 2019 printed their header, column header and summary without the "#"
_BARE_COMMENT = re.compile(
    r"^(?:nThread:?\s+\d+\s+nGpus|Using devices$|Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s|"
    r"(?:out-of-place|in-place)\b|size\s+count\s|\(B\)\s|Out of bounds values|Avg bus bandwidth|"
    r"Errors with asterisks)"
)


# the threads (-t) and GPUs per thread (-g) of an echoed command, where no header says them
_COMMAND_OPTION = re.compile(r"(?:^|\s)-([tg])\s*(\d+)")
# the processes an echoed launcher starts: "mpirun -n 256 ...", "mpiexec -np 8", "srun --ntasks=16"
_LAUNCHER = re.compile(
    r"\b(?:mpirun|mpiexec|orterun)\b.*?(?:^|\s)(?:-n|-np|--np|-c)[\s=]+(\d+)"
    r"|\bsrun\b.*?(?:^|\s)(?:-n|--ntasks)[\s=]+(\d+)"
)


#: More processes than any launcher starts: a number beyond it is damage, not a count.
MAX_PROCESSES = 1 << 20


def launched_processes(command: str) -> int | None:
    """The number of processes an echoed ``mpirun``/``mpiexec``/``srun`` command starts, or None."""
    match = _LAUNCHER.search(command)
    if match is None:
        return None
    count = int(match.group(1) or match.group(2))
    return count if 1 <= count <= MAX_PROCESSES else None


@dataclass
class Test:
    """One test's lines as found in the file, before they become a dataset."""

    first_line: int
    binary: str | None = None
    header: str = ""
    nthreads: int | None = None
    ngpus: int | None = None
    processes: int | None = None  # what an echoed launcher command starts (mpirun -n N ...)
    version: str = ""
    devices: list[str] = field(default_factory=list)
    columns: tuple[str, ...] = ()
    layout: Layout | None = None  # the columns as groups (nccl_tests_columns)
    placements: tuple[str, ...] = ()
    column_line: int = 0
    edges: list[int] = field(default_factory=list)  # where each column header ends: places blank cells
    rows: list[tuple[int, list[str]]] = field(default_factory=list)
    avg_busbw: float | None = None
    out_of_bounds: str = ""
    skipped: list[int] = field(default_factory=list)
    closed: bool = False
    closed_line: int = 0
    failure: str = ""  # the first "Test ... failure" nccl-tests printed after the test's header
    failure_line: int = 0
    warning: str = ""  # NCCL's last warning before it
    ranks: int | None = None  # what the file states outright (a JSON results file's config)


def canonical_collective(name: str) -> str:
    key = str(name).strip().lower().replace("-", "_")
    key = key.removesuffix("_perf").removesuffix("_mpi").removesuffix("_perf")
    if key in COLLECTIVE_OF_BINARY:
        return COLLECTIVE_OF_BINARY[key]
    aliases = {"all_to_all": "alltoall", "bcast": "broadcast", "reducescatter": "reduce_scatter"}
    key = aliases.get(key, key)
    known = set(COLLECTIVE_OF_BINARY.values())
    if key not in known:
        raise DlexploreError(f"unknown nccl-tests collective {name!r}; expected one of {sorted(known)}")
    return key


def collective_of(test: Test) -> str | None:
    return COLLECTIVE_OF_BINARY[test.binary] if test.binary else None


def parse(path: Path) -> list[Test]:
    """Every test in the file at ``path`` that printed a result table, in file order, each with its
    rows (:func:`parse_tests`, whose warnings it gives)."""
    return parse_tests(path)[0]


def parse_tests(path: Path) -> tuple[list[Test], list[Test]]:
    """The tests in the file at ``path`` with a result table, and those that died before theirs.

    A file where every test died is refused, naming the failure; a test that died beside others
    that ran, or that stopped inside its table, is a warning."""
    scanner = _Scanner(path)
    for number, raw in enumerate(read_text(path, "nccl-tests output").split("\n"), start=1):
        scanner.line(number, _LAUNCHER_PREFIX.sub("", raw.rstrip("\r"), count=1))
    tests = [t for t in scanner.tests if t.columns or t.rows]
    died = [t for t in scanner.tests if t.failure and not (t.columns or t.rows)]
    if not tests:
        if died:  # it died before printing its table (a busy GPU, a failed init ...)
            raise InputFileError(path, died_before_table(died[0]), line=died[0].failure_line)
        raise InputFileError(
            path,
            "holds no nccl-tests result table; expected a column header line "
            "'#  size  count  type ... time  algbw  busbw ...' followed by result rows",
        )
    for test in tests:
        if not test.rows:
            why = f"; {_said(test)}" if test.failure or test.warning else " (truncated output?)"
            raise InputFileError(
                path, f"the result table has a header but no rows{why}", line=test.column_line
            )
        if test.failure and (not test.closed or test.failure_line < test.closed_line):
            warnings.warn(
                f"{path}, line {test.failure_line}: the test whose header is on line {test.first_line} "
                f"died inside its result table, after {len(test.rows)} rows; {_said(test)}",
                stacklevel=4,
            )
        elif not test.closed and not test.out_of_bounds:  # mscclpp-test prints the first line only
            warnings.warn(
                f"{path}, line {test.rows[-1][0]}: the test whose header is on line {test.first_line} "
                f"ends after {len(test.rows)} rows without nccl-tests' closing lines ('# Out of bounds "
                "values', '# Avg bus bandwidth'): the output may be cut there; the rows are read and "
                "avg_busbw is NaN",
                stacklevel=4,
            )
    for test in died:
        warnings.warn(
            f"{path}, line {test.failure_line}: {died_before_table(test)}; the file's other tests are read",
            stacklevel=4,
        )
    return tests, died


def died_before_table(test: Test) -> str:
    """What to say of a test that died before its result table."""
    return f"the test whose header is on line {test.first_line} died before its result table; {_said(test)}"


def _said(test: Test) -> str:
    """What a test that died reported, and NCCL's warning before it."""
    said = [f"the test reported: {test.failure!r}"] if test.failure else []
    said += [f"NCCL warned: {test.warning!r}"] if test.warning else []
    return ", after ".join(said)


class _Scanner:
    """Reads the file line by line; a test starts at its ``# nThread`` header (the binary's name and
    the version come before it), its table at its column header, and ends at ``# Avg bus bandwidth``."""

    def __init__(self, path: Path):
        self.path = path
        self.tests: list[Test] = []
        self.current: Test | None = None
        self.binary: str | None = None
        self.version = ""
        self.options: dict[str, str] = {}  # the -t and -g of the last echoed command
        self.processes: int | None = None  # and the processes its launcher starts
        self.pending_placements: tuple[str, ...] = ()
        self.raw = ""  # the line being read, as written (columns are placed by where they end)
        self.pending_devices: list[str] = []  # device lines before any test header

    def line(self, number: int, line: str) -> None:
        self.raw = line
        stripped = line.strip()
        if not stripped:
            return
        current = self.current
        in_table = current is not None and bool(current.columns) and not current.closed
        if stripped.startswith("#"):
            self._comment(number, stripped, in_table)
            return
        if _BARE_COMMENT.match(stripped):
            self._comment(number, "# " + stripped, in_table)
            return
        # before the row test: a host named by a container id ("3767c65d25c4:880:880 [1] NCCL
        # INFO ...", "3767c65d25c4: Test NCCL failure ...") starts with a digit
        if _NCCL_LOG.match(stripped):
            if current is not None and not current.failure and (warning := _WARN.search(stripped)):
                current.warning = warning.group(0)  # the last before the failure: its cause
            return
        if failure := _FAILURE.search(stripped):
            if current is None or current.closed:
                self.pending_devices = []  # the devices of a run that died: not the next table's
            if current is not None and not current.failure:
                current.failure, current.failure_line = failure.group(0), number
            if in_table:
                current.skipped.append(number)
            return
        if in_table and _ROW_START.match(line):
            fields = fill_blanks(split_row(line.split(), current.layout), current.columns)
            if len(fields) != len(current.columns) and "type" not in current.columns:
                fields = by_position(line, current.edges, current.layout) or fields
            if len(fields) != len(current.columns):
                names = " ".join(current.columns)
                raise InputFileError(
                    self.path,
                    f"a result row needs {len(current.columns)} columns ({names}, from the header on "
                    f"line {current.column_line}); found {len(fields)}: {stripped[:80]!r}",
                    line=number,
                )
            current.rows.append((number, fields))
            return
        if in_table:
            current.skipped.append(number)
            return
        match = _RCCL_VERSION.match(stripped)
        if match:
            version = f"rccl-tests {match.group(1).strip()}"
            if current is not None and not current.columns and not current.version:
                current.version = version  # rccl-tests print it after the test's header
            else:
                self.version = version
            return
        match = BINARY.search(stripped)
        if match and not in_table:
            if current is not None and not current.columns and current.binary is None:
                current.binary = match.group(1)  # e.g. "$ ./all_reduce_perf ..." echoed after the header
            else:
                self.binary = match.group(1)
                self.options = dict(_COMMAND_OPTION.findall(stripped[match.end() :]))
                self.processes = launched_processes(stripped[: match.start()])

    def _comment(self, number: int, stripped: str, in_table: bool) -> None:
        match = _HEADER.match(stripped) or _MSCCLPP_HEADER.match(stripped)
        if match:
            self._header(number, stripped, match)
            return
        match = _VERSION.match(stripped)
        if match:
            self.version = ("rccl-tests " if match.group(1) == "rccl" else "") + match.group(2).strip()
            return
        match = BINARY.search(stripped)
        current = self.current
        if match and "concluded" in stripped:
            if current is not None and current.binary is None and (current.closed or current.rows):
                current.binary = match.group(1)  # a paste that lost the binary's name before it
            return
        if match and ("starting" in stripped or current is None or current.closed):
            self.binary = match.group(1)
            return
        tokens = stripped.lstrip("#").split()
        if current is None and (tokens[:2] == ["size", "count"] or ("size" in tokens and "time" in tokens)):
            current = self._headerless(number)  # a column header with no "# nThread" header before it
        if "out-of-place" in tokens or "in-place" in tokens:  # (mscclpp-test: before any test)
            self.pending_placements = tuple(t for t in tokens if t in PLACEMENTS)
            return
        if _DEVICE.match(stripped) and (current is None or current.closed):
            self.pending_devices.append(stripped.lstrip("#").strip())  # a paste that lost its header
            return
        if current is None:
            return
        if _DEVICE.match(stripped):
            if not current.rows:
                current.devices.append(stripped.lstrip("#").strip())
            return
        if tokens[:2] == ["size", "count"] or ("size" in tokens and "time" in tokens):
            self._column_header(number, tokens)
            return
        match = _OOB.match(stripped)
        if match and in_table:
            current.out_of_bounds = f"{match.group(1)} {match.group(2)}".strip()
            return
        match = _AVG.match(stripped)
        if match and current.columns and not current.closed:  # (a stray second line: the first holds)
            try:
                current.avg_busbw = float(match.group(1))
            except ValueError:  # "5e": the pattern admits what float() does not
                raise InputFileError(
                    self.path,
                    f"'# Avg bus bandwidth' is {match.group(1)!r}; expected a number of GB/s",
                    line=number,
                ) from None
            current.closed, current.closed_line = True, number

    def _headerless(self, number: int) -> Test:
        """A test whose header is missing (cut from a pasted log): its threads and GPUs per thread
        from the echoed command's -t and -g, where there is one."""
        options = self.options
        self.current = Test(
            first_line=number,
            binary=self.binary,
            version=self.version,
            nthreads=int(options["t"]) if "t" in options else None,
            ngpus=int(options["g"]) if "g" in options else None,
            processes=self.processes,
            devices=self.pending_devices,
        )
        self.pending_devices = []
        self.tests.append(self.current)
        self.binary, self.version = None, ""
        return self.current

    def _header(self, number: int, stripped: str, match: re.Match) -> None:
        current = self.current
        same = current is not None and not current.rows and current.header == stripped
        if same:  # older MPI runs print the header once per process
            return
        self.current = Test(
            first_line=number,
            binary=self.binary,
            header=stripped,
            version=self.version,
            nthreads=int(match.group(1)) if match.re is _HEADER else None,
            ngpus=int(match.group(2)) if match.re is _HEADER else None,
            processes=self.processes,
        )
        self.tests.append(self.current)
        self.pending_placements, self.pending_devices = (), []
        self.binary, self.version = None, ""

    def _column_header(self, number: int, tokens: list[str]) -> None:
        current = self.current
        if current.rows and not current.closed:
            raise InputFileError(
                self.path,
                "a second column header inside one result table; expected "
                "'# Avg bus bandwidth' to end the first",
                line=number,
            )
        if current.columns and current.closed:
            # A new table without its own "# nThread" header (e.g. a second run pasted).
            current = Test(
                first_line=number,
                binary=self.binary,
                header=current.header,
                nthreads=current.nthreads,
                ngpus=current.ngpus,
                processes=current.processes,
                devices=self.pending_devices or list(current.devices),
            )
            self.pending_devices = []
            self.tests.append(current)
            self.current = current
        current.layout = layout_of(self.path, tokens, number)
        current.columns = current.layout.columns
        placements = self.pending_placements
        current.placements = (
            placements
            if len(placements) == current.layout.n_groups
            else PLACEMENTS[: current.layout.n_groups]
        )
        current.column_line = number
        ends = [m.end() for m in re.finditer(r"\S+", self.raw.expandtabs()) if m.group() != "#"]
        current.edges = ends[-len(current.columns) :] if len(ends) >= len(current.columns) else []
