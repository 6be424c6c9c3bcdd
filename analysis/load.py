"""Load one or several sweep directories into four pandas DataFrames.

A sweep directory (``<out_dir>/multirun/<date>/<time>``) holds one cell directory per Hydra job;
a cell directory is complete when it holds ``cells.parquet`` (``raycolloc.results`` writes it
last). Cell directories are found recursively, so a parent of several sweeps works too. Every
row gets a ``sweep`` column naming the directory it was loaded from; ``cells`` also gets
``cell_dir`` and ``failed`` (status other than ``ok``: oom, error, partial). Failed cells are
kept: the tables and the report show them as failed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from raycolloc.results import SCHEMA_VERSION, SCHEMAS, TABLES

__all__ = ["SweepData", "find_cell_dirs", "load_sweeps", "sweep_label"]

log = logging.getLogger(__name__)

_EXPECTED = ("a raycolloc sweep directory (e.g. results/multirun/<date>/<time>) with one cell "
             "directory per Hydra job, each holding cells.parquet, jobs.parquet, epochs.parquet "
             "and telemetry.parquet")


@dataclass(frozen=True)
class SweepData:
    """The four tables of one or several sweeps, each with a ``sweep`` column."""

    cells: pd.DataFrame
    jobs: pd.DataFrame
    epochs: pd.DataFrame
    telemetry: pd.DataFrame
    sweeps: tuple[str, ...]

    def table(self, name: str) -> pd.DataFrame:
        """One of the four tables by name (cells, jobs, epochs, telemetry)."""
        return getattr(self, name)


def find_cell_dirs(root: str | Path) -> list[Path]:
    """Cell directories (holding ``cells.parquet``) under ``root``, sorted.

    Raises:
        SystemExit: ``root`` does not exist, is not a directory, or holds no cells.parquet.
    """
    root = Path(root)
    if not root.exists():
        raise SystemExit(f"error: sweep directory {root} does not exist; expected {_EXPECTED}")
    if not root.is_dir():
        raise SystemExit(f"error: {root} is not a directory; expected {_EXPECTED}")
    dirs = sorted({p.parent for p in root.rglob("cells.parquet") if p.is_file()})
    if not dirs:
        raise SystemExit(f"error: no cells.parquet found anywhere under {root}; expected {_EXPECTED}")
    return dirs


def sweep_label(path: Path, others: Sequence[Path]) -> str:
    """A short name for a sweep dir: its last two path parts, or the full path if that is ambiguous."""
    short = "/".join(path.resolve().parts[-2:])
    clashes = [o for o in others if "/".join(o.resolve().parts[-2:]) == short]
    return short if len(clashes) <= 1 else str(path.resolve())


def _read(cell_dir: Path, name: str) -> pa.Table:
    """One table of a cell dir, with its schema version checked; a missing non-cells table is empty."""
    path = cell_dir / f"{name}.parquet"
    if not path.exists():
        log.warning("cell_dir=%s table=%s missing=true using=empty", cell_dir, name)
        return SCHEMAS[name].empty_table()
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise SystemExit(f"error: cannot read {path}: {exc}; expected a Parquet file written by raycolloc") from exc
    if "schema_version" not in table.column_names:
        raise SystemExit(f"error: {path} has no schema_version column; expected {_EXPECTED}")
    versions = set(table.column("schema_version").to_pylist())
    if versions - {SCHEMA_VERSION}:
        raise SystemExit(f"error: {path} has schema_version {sorted(versions)}; this analysis reads version "
                         f"{SCHEMA_VERSION} (re-run the sweep or use the raycolloc version that wrote it)")
    return table


def load_sweeps(paths: Sequence[str | Path]) -> SweepData:
    """Load every cell under each sweep dir into four DataFrames.

    Args:
        paths: sweep directories (or any directory above cell directories).

    Returns:
        The concatenated tables; a cell reachable from two of the paths is loaded once.

    Raises:
        SystemExit: a path is missing, holds no cells.parquet, or has another schema version.
    """
    if not paths:
        raise SystemExit(f"error: no sweep directory given; expected {_EXPECTED}")
    roots = [Path(p) for p in paths]
    parts: dict[str, list[pa.Table]] = {name: [] for name in TABLES}
    seen: set[Path] = set()
    labels = []
    for root in roots:
        label = sweep_label(root, roots)
        labels.append(label)
        for cell_dir in find_cell_dirs(root):
            if cell_dir.resolve() in seen:
                continue
            seen.add(cell_dir.resolve())
            for name in TABLES:
                table = _read(cell_dir, name)
                table = table.append_column("sweep", pa.array([label] * table.num_rows, pa.string()))
                if name == "cells":
                    table = table.append_column("cell_dir", pa.array([str(cell_dir)] * table.num_rows, pa.string()))
                parts[name].append(table)
        log.info("sweep=%s path=%s cells_total=%d", label, root, sum(t.num_rows for t in parts["cells"]))
    frames = {name: pa.concat_tables(tables, promote_options="default").to_pandas() for name, tables in parts.items()}
    cells = frames["cells"]
    cells["failed"] = cells["status"].fillna("error") != "ok"
    return SweepData(cells=cells, jobs=frames["jobs"], epochs=frames["epochs"], telemetry=frames["telemetry"],
                     sweeps=tuple(dict.fromkeys(labels)))
