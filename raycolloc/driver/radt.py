"""Read a radT experiment-plan CSV into collocation cells.

A radT plan has the columns
``Experiment,Workload,Status,Run,Devices,Collocation,File,Listeners,Params``.
Rows sharing (Experiment, Workload) form a group that starts together; within a
group, rows with the same ``Devices`` value share that GPU and form one cell. Each row becomes a
job (:mod:`raycolloc.driver.radt_rows`); every row is checked, and all the errors of a plan are
reported at once, each naming its line, row and column, before anything runs.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from raycolloc.config_checks import listed
from raycolloc.driver.radt_rows import (
    COLUMNS,
    PlanError,
    PlanJob,
    Row,
    RowContext,
    parse_row,
    row_mode,
)

__all__ = ["PlanCell", "PlanError", "PlanGroup", "PlanJob", "groups_to_run", "line_ranges", "read_plan"]

log = logging.getLogger("raycolloc")


@dataclass(frozen=True)
class PlanCell:
    """Jobs of one group that share one ``Devices`` value (one GPU)."""

    experiment: str
    workload_group: str
    devices: str
    mode: str  # "naive" | "mps" | "mig"
    jobs: tuple[PlanJob, ...]


@dataclass(frozen=True)
class PlanGroup:
    """Cells that start together: one (Experiment, Workload) pair."""

    experiment: str
    workload: str
    status: str  # "run" | "finished" | "failed"
    cells: tuple[PlanCell, ...]


def _rows(path: Path) -> list[Row]:
    header: list[str] | None = None
    rows: list[Row] = []
    try:
        content = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:  # a binary file, or a spreadsheet saved in another format
        line = exc.object[: exc.start].count(b"\n") + 1
        raise PlanError(
            f"{path}:{line}: not a text CSV file (byte {exc.start} is not UTF-8); save the plan as "
            f"CSV (UTF-8) with the header {','.join(COLUMNS)}"
        ) from None
    for lineno, text in enumerate(content.splitlines(), 1):
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        try:
            cells = [c.strip() for c in next(csv.reader([text], skipinitialspace=True, strict=True))]
        except csv.Error as exc:
            raise PlanError(f"{path}:{lineno}: malformed CSV line: {exc}") from None
        if header is None:
            if missing := [c for c in COLUMNS if c.lower() not in (h.lower() for h in cells)]:
                raise PlanError(
                    f"{path}:{lineno}: header lacks column(s) {', '.join(missing)}; expected: {','.join(COLUMNS)}"
                )
            header = cells
            continue
        if len(cells) != len(header):
            raise PlanError(
                f"{path}:{lineno}: {len(cells)} fields, header has {len(header)} (quote Params that contain commas)"
            )
        by_lower = {h.lower(): v for h, v in zip(header, cells, strict=True)}
        rows.append(Row(lineno, {c: by_lower[c.lower()] for c in COLUMNS}))
    if header is None:
        raise PlanError(f"{path}: no header line; expected: {','.join(COLUMNS)}")
    return rows


def read_plan(
    path: str | Path,
    known_workloads: Sequence[str] | None = None,
    *,
    datasets: Mapping[str, str] | None = None,
    synthetic: bool = False,
    epoch_regex: str | None = None,
) -> list[PlanGroup]:
    """Parse a radT plan CSV into groups of cells, in file order.

    Args:
        known_workloads: preset names a row may ask for (default: every registered workload).
        datasets: ``+plan_datasets``: a data directory's name (or path) -> a dataset name.
        synthetic: ``data.source=synthetic``: a dataset not recognised trains on synthetic images.
        epoch_regex: ``+plan_epoch_regex``: marks epoch ends on the stdout of the script rows.

    Raises:
        PlanError: listing every row that cannot run, each with its line and column.
    """
    if known_workloads is None:
        from raycolloc.job.workloads.registry import list_workloads

        known_workloads = list_workloads()
    path = Path(path)
    ctx = RowContext(path.resolve().parent, tuple(known_workloads), dict(datasets or {}), synthetic, epoch_regex)
    grouped: dict[tuple[str, str], dict[str, list[Row]]] = {}
    for row in _rows(path):
        grouped.setdefault((row.f["Experiment"], row.f["Workload"]), {}).setdefault(row.f["Devices"], []).append(row)
    groups, errors = [], []
    for (experiment, workload), by_device in grouped.items():
        cells = []
        for devices, rows in by_device.items():
            modes, jobs = [], []
            for row in rows:
                try:
                    modes.append(mode := row_mode(path, row))
                    jobs.append(parse_row(path, row, mode, ctx))
                except PlanError as exc:
                    errors.append(str(exc))
            if len(set(modes)) > 1:
                rows_text = "; ".join(
                    f"line {r.line} Run {r.f['Run']!r}: {r.f['Collocation'] or '(empty)'} -> {m}"
                    for r, m in zip(rows, modes, strict=False)
                )  # a row in error has no mode
                errors.append(
                    f"{path}: Experiment {experiment!r} Workload {workload!r} Devices {devices!r} "
                    f"mixes collocation modes ({rows_text}); one cell needs one of naive, mps, mig"
                )
            if len(jobs) == len(rows) and len(set(modes)) == 1:
                cells.append(PlanCell(experiment, workload, devices, modes[0], tuple(jobs)))
        states = [j.status for c in cells for j in c.jobs]
        status = "finished" if all(s == "finished" for s in states) else "failed" if "failed" in states else "run"
        groups.append(PlanGroup(experiment, workload, status, tuple(cells)))
    if errors:
        raise PlanError(
            errors[0] if len(errors) == 1 else f"{len(errors):,} rows cannot run:\n" + "\n".join(listed(errors))
        )
    jobs = [j for g in groups for c in g.cells for j in c.jobs]
    # One line per distinct directory, not per row: the study's plan has 208 rows on one directory.
    for text, lines in _by_text((j.by_name, j.line) for j in jobs).items():
        log.info("plan %s: %s (%s)", path, text, line_ranges(lines))
    for text, lines in _by_text((j.note, j.line) for j in jobs).items():
        log.warning("plan %s: %s (%s)", path, text, line_ranges(lines))
    return groups


def _by_text(pairs: Iterable[tuple[str | None, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for text, line in pairs:
        if text is not None:
            out.setdefault(text, []).append(line)
    return out


def line_ranges(lines: Sequence[int], most: int = 6) -> str:
    """CSV lines as ranges: ``line 4`` or ``208 rows: lines 42-57, 60-61, ...``."""
    spans: list[list[int]] = []
    for line in sorted(lines):
        if spans and line == spans[-1][1] + 1:
            spans[-1][1] = line
        else:
            spans.append([line, line])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans[:most])
    text += ", ..." if len(spans) > most else ""
    return f"line {text}" if len(lines) == 1 else f"{len(lines)} rows: lines {text}"


def groups_to_run(groups: Sequence[PlanGroup], rerun: bool = False) -> list[PlanGroup]:
    """Groups still to run: never all-FINISHED ones; FAILED ones only with ``rerun``."""
    return [g for g in groups if g.status == "run" or (g.status == "failed" and rerun)]
