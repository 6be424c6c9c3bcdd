"""A trace: training jobs and the times they arrive, one CSV row each, read strictly.

Columns (a header line first; ``job_id``, ``submit_s`` and ``kind`` are required, the others may be
left out or empty where they do not apply):

* ``job_id``: unique, letters, digits, ``_.-``;
* ``submit_s``: seconds after the trace starts (0 to 1e7, about 116 days);
* ``kind``: ``timm`` (``model`` x ``dataset``), ``python`` (``entry`` = ``module:function``) or
  ``script`` (``entry`` = the command line, run unmodified), the last two checked as a sweep's
  ``workload=python|script`` is; a timm row with an ``entry`` is refused. Only a live queue on Ray
  (``serve queue.runner=ray``) runs python and script jobs: it learns a workload's profile from its
  first run; the simulated cluster and a replay know profiles of catalogued timm models alone and
  refuse them (:func:`refuse_unprofiled_kind`);
* ``epochs`` or ``samples``: the job's length (exactly one, an integer: epochs 1 to 1e6, samples 1 to
  1e12);
* ``max_slowdown``: the job's bound on its slowdown against running alone (1 to 1e6; empty: the
  queue's ``queue.max_slowdown``).

Numbers are plain finite decimals (``12``, ``0.5``): no ``1_0``, ``1e3``, ``inf`` or ``nan``, and
none so long that it is infinite as a float (the upper bounds above keep a replay finite). The file is
UTF-8 (a byte-order mark is skipped) and ends with a line break: a last line without one is refused,
since a trace cut short (a copy or a write that stopped) ends inside its last number, and ``...,,,817``
of ``...,,,8170`` would replay as a shorter job. A malformed trace is refused whole (:class:`TraceError`
names the line and the column), before anything is queued from it: a column named twice, a field over
the CSV reader's size limit, a quote left open (named at the line it opens, the last line's too), bytes
that are not UTF-8 (named at their line) are refused like a bad value.

:func:`write_trace` refuses, before it writes, an ``--out`` that is a directory or whose folder cannot
be made or written (:class:`TraceOutError`, naming it); a write that fails leaves no temp file behind.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from raycolloc.config_checks import MAX_EPOCHS, MAX_SAMPLES, MAX_SECONDS, MAX_SLOWDOWN, ConfigError
from raycolloc.datasets import DATASETS
from raycolloc.workload_config import WorkloadConfig

__all__ = ["FIELDS", "KINDS", "TraceError", "TraceJob", "TraceOutError", "check_out", "parse_row", "read_trace"]
__all__ += ["refuse_unprofiled_kind", "write_trace"]

FIELDS = ("job_id", "submit_s", "kind", "model", "dataset", "entry", "epochs", "samples", "max_slowdown")
REQUIRED = ("job_id", "submit_s", "kind")
KINDS = ("timm", "python", "script")
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Plain decimals only: int() and float() would also take "1_0", "1e3", " inf", "nan", "infinity".
_INT = re.compile(r"^[0-9]+$")
_DECIMAL = re.compile(r"^-?([0-9]+(\.[0-9]*)?|\.[0-9]+)$")
# Upper bounds (issue 33, review item 3): 309+ digits pass _DECIMAL but float() makes them inf, and an
# inf or astronomically long job would make a replay run forever. The config's bounds, one set for both.
MAX_SUBMIT_S = MAX_SECONDS


class TraceError(ValueError):
    """A trace (or a submitted job) that cannot be queued; the message names the line and the field."""

    def __init__(self, where: str, field: str, message: str) -> None:
        super().__init__(f"{where}: {field}: {message}")
        self.where = where
        self.field = field


class TraceOutError(ConfigError):
    """Where a trace was to be written cannot take it (a directory, a folder that cannot be made or
    written); the message names the path (``--out``)."""


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace (or one submission): what it trains, how long, when it arrives."""

    job_id: str
    submit_s: float
    kind: str
    model: str | None
    dataset: str | None
    entry: str | None
    epochs: int | None
    samples: int | None
    max_slowdown: float | None

    @property
    def workload(self) -> str:
        """A short name of what it trains: ``model/dataset``, or the entry."""
        return f"{self.model}/{self.dataset}" if self.kind == "timm" else f"{self.kind}:{self.entry}"

    @property
    def length_samples(self) -> int | None:
        """Its length in samples (epochs times the dataset's size where that is known)."""
        if self.samples is not None:
            return self.samples
        size = DATASETS[self.dataset].size if self.dataset in DATASETS else None
        return self.epochs * size if self.epochs is not None and size is not None else None


def _number(where: str, field: str, text: str, kind: type, minimum: float, maximum: float) -> float | int:
    if not (_INT if kind is int else _DECIMAL).match(text):
        what = "an integer (digits only)" if kind is int else "a plain decimal number (e.g. 12 or 0.5)"
        raise TraceError(where, field, f"{text!r} is not {what}")
    value = kind(text)
    shown = text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"
    if not math.isfinite(value):  # 309+ digits: float() gives inf, which every ">=" check passes
        raise TraceError(where, field, f"{shown!r} is not a finite number")
    if not minimum <= value <= maximum:
        raise TraceError(where, field, f"{shown!r} is not allowed; it must be from {minimum:g} to {maximum:g}")
    return value


def parse_row(row: dict[str, str], where: str) -> TraceJob:
    """One row (column -> text) as a job.

    Raises:
        TraceError: a missing, malformed or inconsistent field, named.
    """
    get = {k: (row.get(k) or "").strip() for k in FIELDS}
    for field in REQUIRED:
        if not get[field]:
            raise TraceError(where, field, "missing (every job needs job_id, submit_s and kind)")
    if not _ID.match(get["job_id"]):
        raise TraceError(where, "job_id", f"{get['job_id']!r} is not allowed; use 1-64 letters, digits, '_', '.', '-'")
    submit = float(_number(where, "submit_s", get["submit_s"], float, 0.0, MAX_SUBMIT_S))
    kind = get["kind"]
    if kind not in KINDS:
        raise TraceError(where, "kind", f"{kind!r} is not allowed; choose one of: {', '.join(KINDS)}")
    if kind == "timm":
        for field in ("model", "dataset"):
            if not get[field]:
                raise TraceError(where, field, "missing (kind=timm trains a model on a dataset)")
        if get["dataset"] not in DATASETS:
            raise TraceError(
                where, "dataset", f"{get['dataset']!r} is not allowed; choose one of: {', '.join(DATASETS)}"
            )
        if get["entry"]:  # it would be ignored: the job trains model x dataset (review item 11)
            raise TraceError(where, "entry", f"{get['entry']!r} is not allowed on a kind=timm row; leave it empty")
    else:
        _check_entry(where, kind, get["entry"])
    if bool(get["epochs"]) == bool(get["samples"]):
        raise TraceError(where, "epochs/samples", "give exactly one of them (the job's length)")
    epochs = int(_number(where, "epochs", get["epochs"], int, 1, MAX_EPOCHS)) if get["epochs"] else None
    samples = int(_number(where, "samples", get["samples"], int, 1, MAX_SAMPLES)) if get["samples"] else None
    if epochs is not None and (kind != "timm" or DATASETS[get["dataset"]].size is None):
        raise TraceError(where, "epochs", "a length in epochs needs a dataset of known size; give samples")
    slowdown = get["max_slowdown"]
    bound = float(_number(where, "max_slowdown", slowdown, float, 1.0, MAX_SLOWDOWN)) if slowdown else None
    return TraceJob(
        job_id=get["job_id"],
        submit_s=submit,
        kind=kind,
        model=get["model"] or None,
        dataset=get["dataset"] or None,
        entry=get["entry"] or None,
        epochs=epochs,
        samples=samples,
        max_slowdown=bound,
    )


def _check_entry(where: str, kind: str, entry: str) -> None:
    """A python or script job's entry, checked as a sweep's workload is."""
    if not entry:
        what = "module:function" if kind == "python" else "the command line"
        raise TraceError(where, "entry", f"missing (kind={kind} runs {what})")
    try:
        if kind == "python":
            WorkloadConfig(name="python", entry=entry)
        else:
            WorkloadConfig(name="script", command=shlex.split(entry))
    except (ConfigError, ValueError) as exc:  # shlex: ValueError on an open quote
        what = "package.module:function" if kind == "python" else "a command line, e.g. python train.py --epochs 2"
        raise TraceError(where, "entry", f"{entry!r} is not {what} ({exc})") from None


def refuse_unprofiled_kind(job: TraceJob, where: str) -> None:
    """Refuse a python or script job where the queue places jobs by catalogued profiles alone (the
    simulated cluster, a replay): only a live queue on Ray learns a profile from a job's first run.

    Raises:
        TraceError: ``kind`` named, with where such a job runs.
    """
    if job.kind == "timm":
        return
    raise TraceError(
        where,
        "kind",
        f"kind={job.kind} is well formed but cannot be queued here: this queue places a job by its "
        "workload's profile, and it has profiles only of catalogued timm models (kind=timm). A live queue "
        f"on Ray learns a {job.kind} job's profile from its first run: serve queue.runner=ray",
    )


def read_trace(path: str | Path) -> list[TraceJob]:
    """Every job of the trace at ``path``, in order of arrival (ties: file order).

    Raises:
        TraceError: the file is missing or empty, has an unknown or missing column, a malformed row,
            or a job id twice (the first such line is named).
    """
    where = str(path)
    text = _read_text(where)
    lines = text.splitlines()
    cut = not text.endswith(("\n", "\r"))  # the last line has no line break: the file may end mid-number
    # strict: a quote still open at the end of the data raises (non-strict would take the rest as the field)
    reader = csv.reader(lines, strict=True)
    try:
        header = next(reader, [])
    except csv.Error as exc:
        raise TraceError(f"{where}:1", _long_column(lines[0], []), f"not CSV ({exc})") from None
    _check_header(where, header)
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    while True:
        line = reader.line_num + 1  # where the next row starts (a quoted field may run on)
        try:
            cells = next(reader, None)
        except csv.Error as exc:
            if reader.line_num >= line and "end of data" in str(exc):  # a quote open to the end of the file
                _open_quote(f"{where}:{line}", lines[line - 1], header)
            raise TraceError(f"{where}:{line}", _long_column(lines[line - 1], header), f"not CSV ({exc})") from None
        if cells is None:
            break
        if not cells:
            continue  # a blank line
        if reader.line_num > line:  # a quote opened on ``line`` ran over its end: no field has a line break
            _open_quote(f"{where}:{line}", lines[line - 1], header)
        if len(cells) > len(header):
            raise TraceError(f"{where}:{line}", "row", f"{len(cells)} cells; the header has {len(header)}")
        if cut and reader.line_num == len(lines):
            raise TraceError(
                f"{where}:{line}",
                "row",
                "the file ends inside this line (no line break after it): a trace cut short ends inside its "
                "last number; if the line is whole, end the file with a line break",
            )
        row = dict(zip(header, cells, strict=False))  # fewer cells: the rest are empty
        job = parse_row(row, f"{where}:{line}")
        if job.job_id in seen:
            raise TraceError(f"{where}:{line}", "job_id", f"{job.job_id!r} is already line {seen[job.job_id]}'s")
        seen[job.job_id] = line
        jobs.append(job)
    if not jobs:
        raise TraceError(where, "rows", "the trace has a header and no job")
    return sorted(jobs, key=lambda j: j.submit_s)  # sorted() is stable: ties keep the file's order


def _read_text(where: str) -> str:
    """The file's text (UTF-8; a byte-order mark skipped); bytes that are not UTF-8 named by line."""
    try:
        data = Path(where).read_bytes()
    except OSError as exc:
        raise TraceError(where, "file", f"cannot be read ({type(exc).__name__}: {exc})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TraceError(
            f"{where}:{line}", "file", f"not UTF-8 (byte {data[exc.start]:#04x}); save it as UTF-8"
        ) from None


def _open_quote(where: str, line: str, header: list[str]) -> None:
    """Refuse a quote opened on ``line`` and never closed, at the column it opens in."""
    cells = next(csv.reader([line]), [])  # non-strict: the open field runs to the line's end
    column = header[len(cells) - 1] if 0 < len(cells) <= len(header) else "row"
    raise TraceError(where, column, "a quote is opened and not closed on this line")


def _check_header(where: str, header: list[str]) -> None:
    """Every column known, named once; the required ones there."""
    if not header:
        raise TraceError(f"{where}:1", "header", f"empty trace; the first line names the columns: {', '.join(FIELDS)}")
    for i, name in enumerate(header):
        if name not in FIELDS:
            raise TraceError(f"{where}:1", name, f"unknown column; a trace has: {', '.join(FIELDS)}")
        if name in header[:i]:  # DictReader would keep the last cell of the two, silently
            raise TraceError(f"{where}:1", name, f"column named twice (columns {header.index(name) + 1} and {i + 1})")
    for name in REQUIRED:
        if name not in header:
            raise TraceError(f"{where}:1", name, "missing column (required: job_id, submit_s, kind)")


def _long_column(line: str, header: list[str]) -> str:
    """The column of ``line`` whose cell is over the CSV reader's size limit, as near as a plain split
    tells (a quoted comma may shift it); ``row`` where none is."""
    cells = line.split(",")
    at = next((i for i, c in enumerate(cells) if len(c) > csv.field_size_limit()), None)
    return header[at] if at is not None and at < len(header) else "row"


def check_out(path: str | Path) -> Path:
    """``path`` as a trace may be written there, checked before anything is made: not a directory, its
    nearest existing folder a writable directory (folders missing below it are made when it is written).

    Raises:
        TraceOutError: a directory; a folder on the way that is a file, or not writable by this user.
    """
    path = Path(path)
    if path.is_dir():
        raise TraceOutError(
            f"--out={path} is a directory; give the path of the file to write, e.g. {path / 'trace.csv'}"
        )
    folder = path.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise TraceOutError(f"--out={path} cannot be written: {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise TraceOutError(
            f"--out={path} cannot be written: {folder} is not writable by this user (uid {os.getuid()})"
        )
    return path


def write_trace(path: str | Path, jobs: Iterable[TraceJob]) -> Path:
    """Write ``jobs`` as a trace (atomically: a temp file renamed); returns the path.

    Raises:
        TraceOutError: ``path`` is a directory, or it (or its folder) cannot be written; no temp file is left.
    """
    path = check_out(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(FIELDS)
            for j in jobs:
                values = (j.job_id, f"{j.submit_s:.3f}", j.kind, j.model, j.dataset, j.entry, j.epochs, j.samples)
                bound = f"{j.max_slowdown:g}" if j.max_slowdown is not None else ""
                out.writerow(["" if v is None else v for v in values] + [bound])
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # a folder that is a file: there is no temp file to remove
            tmp.unlink(missing_ok=True)
        raise TraceOutError(f"--out={path} cannot be written ({type(exc).__name__}: {exc})") from None
    return path
