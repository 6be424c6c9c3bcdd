"""List past sweeps and their cells without opening Parquet files by hand.

Usage::

    python -m raycolloc.ls [OUT_DIR]                # every sweep under OUT_DIR (default: results)
    python -m raycolloc.ls OUT_DIR --sweep last     # the cells of the newest sweep (or --sweep N)
    python -m raycolloc.ls SWEEP_DIR                # the cells of one sweep

A sweep is a directory Hydra made for one command: ``<out_dir>/multirun/<date>/<time>`` (its
``multirun.yaml`` holds the command's overrides) or ``<out_dir>/runs/<date>/<time>`` for a single
run (``.hydra/hydra.yaml``). Its cells are the directories below it holding ``cells.parquet`` or a
``reused.json`` reference to an earlier result (followed here, as the report does). Each cell's
result is checked whole as the resume index checks it (:func:`raycolloc.results.store.read_cell`: the
four tables read and agree): a cell whose tables do not is listed as ``corrupt`` with the table and
the error, and the exit status is 2, as for a directory that is missing or holds no sweep.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from raycolloc.results.index import REFERENCE, read_reference
from raycolloc.results.stats import bounds, fmt_pm
from raycolloc.results.store import InvalidResult, UnknownSchemaVersion, read_cell
from raycolloc.results.summary_tables import gain_lines, read_runs

__all__ = ["CellEntry", "SweepEntry", "find_sweeps", "list_cells", "main"]

CORRUPT = "corrupt"
_COLUMNS = [
    "label",
    "status",
    "mode",
    "degree",
    "workload",
    "mix",
    "repeat",
    "started_at",
    "agg_samples_per_s",
    "agg_rate_low",
    "agg_rate_high",
    "energy_per_sample_j",
    "total_s",
    "total_energy_j",
    "reason",
]


@dataclass(frozen=True)
class CellEntry:
    """One cell of a sweep as listed: its directory, its result's headline, and where it came from."""

    name: str
    status: str
    mode: str | None
    degree: int | None
    what: str
    repeat: int
    started_at: float | None
    headline: str
    reused_from: Path | None
    reason: str | None


@dataclass(frozen=True)
class SweepEntry:
    """One sweep: its directory, when it started, the command that made it and its cells."""

    path: Path
    started_at: float | None
    command: str
    cells: list[CellEntry]

    @property
    def n_ok(self) -> int:
        return sum(c.status == "ok" for c in self.cells)

    @property
    def corrupt(self) -> list[CellEntry]:
        """The cells whose tables do not read back as one result."""
        return [c for c in self.cells if c.status == CORRUPT]


def _cell_dirs(root: Path) -> list[Path]:
    return sorted({p.parent for name in ("cells.parquet", REFERENCE) for p in root.rglob(name) if p.is_file()})


def _sweep_of(cell_dir: Path, root: Path) -> Path:
    """The directory of the command that made a cell: the nearest one holding Hydra's record."""
    for candidate in (cell_dir, *cell_dir.parents):
        if (candidate / "multirun.yaml").is_file() or (candidate / ".hydra" / "hydra.yaml").is_file():
            return candidate
        if candidate == root:
            break
    return cell_dir.parent


def _command(sweep: Path) -> str:
    """``python -m raycolloc.sweep [-m] OVERRIDES`` from Hydra's record of the sweep."""
    for name, flag in (("multirun.yaml", " -m"), (".hydra/hydra.yaml", "")):
        path = sweep / name
        if path.is_file():
            try:
                record = yaml.safe_load(path.read_text()) or {}
                overrides = record.get("hydra", {}).get("overrides", {}).get("task", [])
            except (OSError, yaml.YAMLError, AttributeError):
                return "?"
            return f"python -m raycolloc.sweep{flag} " + " ".join(map(str, overrides))
    return "?"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _entry(cell_dir: Path) -> CellEntry:
    try:
        target = read_reference(cell_dir) or cell_dir
    except (OSError, ValueError, KeyError) as exc:
        return CellEntry(
            cell_dir.name,
            CORRUPT,
            None,
            None,
            "-",
            0,
            None,
            "-",
            None,
            f"{cell_dir / REFERENCE}: {type(exc).__name__}: {exc}",
        )
    try:
        table = read_cell(target).cells  # the one check of a result: four tables that read and agree
    except UnknownSchemaVersion as exc:  # not corrupt: written by another raycolloc
        return CellEntry(cell_dir.name, "unreadable", None, None, "-", 0, None, "-", None, str(exc))
    except InvalidResult as exc:
        return CellEntry(cell_dir.name, CORRUPT, None, None, "-", 0, None, "-", None, str(exc))
    row = {c: table.column(c)[0].as_py() if c in table.column_names else None for c in _COLUMNS}
    if row["mix"]:
        what = f"mix {row['mix']}"
        headline = f"total {_fmt(row['total_s'], '.2f')} s, {_fmt(row['total_energy_j'], ',.1f')} J"
    else:
        what = str(row["workload"])
        rate = "-"
        if row["agg_samples_per_s"] is not None:  # with its within-run interval where the row has one
            rate = fmt_pm(bounds(row["agg_samples_per_s"], row["agg_rate_low"], row["agg_rate_high"]), ",.0f")
        headline = f"{rate} samples/s, {_fmt(row['energy_per_sample_j'], '.3g')} J/sample"
    return CellEntry(
        cell_dir.name,
        str(row["status"]),
        row["mode"],
        row["degree"],
        what,
        row["repeat"] or 0,
        row["started_at"],
        headline,
        target if target != cell_dir else None,
        row["reason"],
    )


def find_sweeps(root: str | Path) -> list[SweepEntry]:
    """Every sweep under ``root`` (or ``root`` itself), oldest first."""
    root = Path(root)
    by_sweep: dict[Path, list[Path]] = {}
    for cell_dir in _cell_dirs(root):
        by_sweep.setdefault(_sweep_of(cell_dir, root), []).append(cell_dir)
    sweeps = []
    for path, dirs in by_sweep.items():
        cells = [_entry(d) for d in dirs]
        started = min((c.started_at for c in cells if c.started_at is not None), default=None)
        sweeps.append(SweepEntry(path, started, _command(path), cells))
    return sorted(sweeps, key=lambda s: (s.started_at or 0.0, str(s.path)))


def list_cells(sweep: SweepEntry) -> str:
    """The cells of one sweep, one line each: status, what ran, the headline numbers."""
    corrupt = f" ({len(sweep.corrupt)} with corrupt tables)" if sweep.corrupt else ""
    lines = [
        f"sweep {sweep.path}",
        f"  command: {sweep.command}",
        f"  {len(sweep.cells)} cells: {sweep.n_ok} ok, {len(sweep.cells) - sweep.n_ok} not ok{corrupt}",
        "",
    ]
    width = max((len(c.name) for c in sweep.cells), default=4)
    lines.append(f"  {'cell':<{width}}  {'status':<8}{'mode':<7}{'jobs':>4}  {'workload':<22}headline")
    for c in sorted(sweep.cells, key=lambda c: (c.repeat, c.name)):
        note = f"  (reused: {c.reused_from})" if c.reused_from else ""
        if c.status == CORRUPT:
            note += f"  corrupt: {c.reason}"  # whole: it names the table
        elif c.status != "ok" and c.reason:
            note += f"  reason: {c.reason[:120]}"
        lines.append(
            f"  {c.name:<{width}}  {c.status:<8}{c.mode or '-':<7}{c.degree or 0:>4}  {c.what:<22}{c.headline}{note}"
        )
    readable = [sweep.path / c.name for c in sweep.cells if c.status not in (CORRUPT, "unreadable")]
    gains = gain_lines(read_runs(readable))
    if gains:
        lines += ["", "  gains (±: 95% interval; several runs: their t-interval, one run: its epochs timed in windows)"]
        lines += [f"  {line}" for line in gains]
    return "\n".join(lines)


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else "?"


def list_sweeps(sweeps: Sequence[SweepEntry], root: Path) -> str:
    """One line per sweep: index, start, cells ok/failed, reused, directory, command."""
    if not sweeps:
        return f"no sweeps under {root} (no cells.parquet or reused.json found)"
    lines = [f"{'#':>3}  {'started':<16}  {'cells':>5} {'ok':>4} {'not ok':>6} {'reused':>6}  sweep / command"]
    for i, s in enumerate(sweeps, start=1):
        reused = sum(c.reused_from is not None for c in s.cells)
        where = s.path.relative_to(root) if s.path.is_relative_to(root) else s.path
        lines.append(
            f"{i:>3}  {_when(s.started_at):<16}  {len(s.cells):>5} {s.n_ok:>4} {len(s.cells) - s.n_ok:>6} "
            f"{reused:>6}  {where}"
        )
        lines.append(f"{'':>3}  {'':<16}  {'':>5} {'':>4} {'':>6} {'':>6}  {s.command}")
    lines.append(f"\n{len(sweeps)} sweeps; the cells of one: python -m raycolloc.ls {root} --sweep N|last")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (2: the directory does not exist or holds no sweep, --sweep is out
    of range, or a cell listed has corrupt tables)."""
    parser = argparse.ArgumentParser(prog="python -m raycolloc.ls", description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default="results", help="an out_dir (default: results) or one sweep dir")
    parser.add_argument("--sweep", metavar="N|last", help="list the cells of the N-th sweep shown (1 = oldest)")
    args = parser.parse_args(argv)
    root = Path(args.path)
    if not root.is_dir():
        print(f"error: {root} is not a directory; give an out_dir (results) or a sweep directory", file=sys.stderr)
        return 2
    sweeps = find_sweeps(root)
    if not sweeps:
        print(f"error: {list_sweeps(sweeps, root)}; give an out_dir (results) or a sweep directory", file=sys.stderr)
        return 2
    own = [s for s in sweeps if s.path.resolve() == root.resolve()]
    if own and args.sweep is None:
        print(list_cells(own[0]))
        return _corrupt_status(own)
    if args.sweep is None:
        print(list_sweeps(sweeps, root))
        return _corrupt_status(sweeps)
    try:
        chosen = sweeps[-1] if args.sweep == "last" else sweeps[int(args.sweep) - 1]
        if args.sweep != "last" and int(args.sweep) < 1:
            raise IndexError
    except (ValueError, IndexError):
        print(f"error: --sweep={args.sweep!r} is not allowed; choose last or 1..{len(sweeps)}", file=sys.stderr)
        return 2
    print(list_cells(chosen))
    return _corrupt_status([chosen])


def _corrupt_status(sweeps: Sequence[SweepEntry]) -> int:
    """2 with a line per corrupt cell on stderr (the table and the error), else 0."""
    corrupt = [c for s in sweeps for c in s.corrupt]
    for c in corrupt:
        print(f"error: cell {c.name}: corrupt tables: {c.reason}", file=sys.stderr)
    if corrupt:
        print(
            f"{len(corrupt)} cell(s) with corrupt tables: a re-run of their sweep sets them aside and measures "
            f"them again",
            file=sys.stderr,
        )
    return 2 if corrupt else 0


if __name__ == "__main__":
    raise SystemExit(main())
