"""Load one or several sweep directories into four pandas DataFrames.

A sweep directory (``<out_dir>/multirun/<date>/<time>``) holds one cell directory per Hydra job;
a cell directory is complete when it holds ``cells.parquet`` (``raycolloc.results.store`` writes it
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

from raycolloc.results.errors import SweepDirError
from raycolloc.results.index import REFERENCE, read_reference
from raycolloc.results.schema import TABLES
from raycolloc.results.store import InvalidResult, UnknownSchemaVersion, read_cell

__all__ = ["SweepData", "SweepDirError", "check_sweep_dir", "find_cell_dirs", "load_sweeps", "sweep_label"]

log = logging.getLogger(__name__)

_EXPECTED = (
    "a raycolloc sweep directory (e.g. results/multirun/<date>/<time>) with one cell "
    "directory per Hydra job, each holding cells.parquet, jobs.parquet, epochs.parquet "
    "and telemetry.parquet"
)


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
    """Cell directories (holding ``cells.parquet`` or a reference) under ``root``, sorted.

    Raises:
        SweepDirError: ``root`` does not exist, is not a directory, or holds no cells.
    """
    root = Path(root)
    if not root.exists():
        raise SweepDirError(f"error: sweep directory {root} does not exist; expected {_EXPECTED}")
    if not root.is_dir():
        raise SweepDirError(f"error: {root} is not a directory; expected {_EXPECTED}")
    dirs = sorted({p.parent for name in ("cells.parquet", REFERENCE) for p in root.rglob(name) if p.is_file()})
    if not dirs:
        raise SweepDirError(f"error: no cells.parquet found anywhere under {root}; expected {_EXPECTED}")
    return dirs


def sweep_label(path: Path, others: Sequence[Path]) -> str:
    """A short name for a sweep dir: its last two path parts, or the full path if that is ambiguous."""
    short = "/".join(path.resolve().parts[-2:])
    clashes = [o for o in others if "/".join(o.resolve().parts[-2:]) == short]
    return short if len(clashes) <= 1 else str(path.resolve())


def _tables(cell_dir: Path) -> tuple[Path, dict[str, pa.Table]] | str:
    """The result a cell directory holds or references, checked whole; why not, if it is invalid."""
    target = read_reference(cell_dir) or cell_dir
    try:
        found = read_cell(target)
    except UnknownSchemaVersion as exc:
        raise SweepDirError(f"error: {exc} (re-run the sweep or use the raycolloc version that wrote it)") from None
    except InvalidResult as exc:
        log.warning("cell_dir=%s invalid=true skipped: %s", cell_dir, exc)
        return str(exc)
    reused = target != cell_dir
    cells = found.cells
    if reused and cells.column("resumed_from")[0].as_py() is None:
        idx = cells.schema.get_field_index("resumed_from")
        cells = cells.set_column(idx, "resumed_from", pa.array([str(target)], pa.string()))
    return target.resolve(), {"cells": cells, "jobs": found.jobs, "epochs": found.epochs, "telemetry": found.telemetry}


def _unreadable(roots: Sequence[Path], invalid: Sequence[str]) -> SweepDirError:
    corrupt = f" ({len(invalid)} corrupt: {'; '.join(invalid[:3])}{'; ...' if len(invalid) > 3 else ''})"
    return SweepDirError(
        f"error: no readable cell under {', '.join(map(str, roots))}{corrupt if invalid else ''}; expected {_EXPECTED}"
    )


def check_sweep_dir(root: str | Path) -> None:
    """Refuse a directory given to read before the work that needs it starts: missing, not a directory,
    holding no cell or only corrupt ones (cells are read until one is whole, not the whole sweep).

    Raises:
        SweepDirError: naming the path and why.
    """
    invalid = []
    for cell_dir in find_cell_dirs(root):
        loaded = _tables(cell_dir)
        if not isinstance(loaded, str):
            return
        invalid.append(loaded)
    raise _unreadable([Path(root)], invalid)


def load_sweeps(paths: Sequence[str | Path], all_results: bool = False) -> SweepData:
    """Load every cell under each sweep dir into four DataFrames.

    Args:
        paths: sweep directories (or any directory above cell directories).
        all_results: keep every result of a config, not only its newest.

    Returns:
        The concatenated tables; a result reachable from several paths or references is loaded once.

    Raises:
        SweepDirError: a path is missing, holds no readable cell, or holds another schema version.
    """
    if not paths:
        raise SweepDirError(f"error: no sweep directory given; expected {_EXPECTED}")
    roots = [Path(p) for p in paths]
    parts: dict[str, list[pa.Table]] = {name: [] for name in TABLES}
    seen: set[Path] = set()
    labels = []
    invalid: list[str] = []
    for root in roots:
        label = sweep_label(root, roots)
        labels.append(label)
        for cell_dir in find_cell_dirs(root):
            loaded = _tables(cell_dir)
            if isinstance(loaded, str):
                invalid.append(loaded)
                continue
            if loaded[0] in seen:
                continue
            where, tables = loaded
            seen.add(where)
            for name in TABLES:
                table = tables[name].append_column("sweep", pa.array([label] * tables[name].num_rows, pa.string()))
                if name == "cells":
                    table = table.append_column("cell_dir", pa.array([str(where)], pa.string()))
                parts[name].append(table)
        log.info("sweep=%s path=%s cells_total=%d", label, root, sum(t.num_rows for t in parts["cells"]))
    if not parts["cells"]:
        raise _unreadable(roots, invalid)
    frames = {name: pa.concat_tables(tables, promote_options="default").to_pandas() for name, tables in parts.items()}
    cells = frames["cells"]
    if not all_results:
        cells = _newest_per_config(cells)
        ids = set(zip(cells["sweep"], cells["cell_id"], strict=True))
        for name in ("jobs", "epochs", "telemetry"):
            frame = frames[name]
            frames[name] = frame[[k in ids for k in zip(frame["sweep"], frame["cell_id"], strict=True)]]
    cells = cells.reset_index(drop=True)
    cells["failed"] = cells["status"].fillna("error") != "ok"
    jobs, epochs = frames["jobs"].reset_index(drop=True), frames["epochs"].reset_index(drop=True)
    _derive_missing(cells, jobs, epochs)
    return SweepData(
        cells=cells,
        jobs=jobs,
        epochs=epochs,
        telemetry=frames["telemetry"].reset_index(drop=True),
        sweeps=tuple(dict.fromkeys(labels)),
    )


def _derive_missing(cells: pd.DataFrame, jobs: pd.DataFrame, epochs: pd.DataFrame) -> None:
    """Fill columns that results written before they existed lack (read back as nulls), in place:
    ``repeat`` 0, ``repeat_group`` = the config hash (or the cell id), a job's ``samples`` and a
    cell's ``measured_samples`` from its epochs, and a uniform cell's ``energy_per_sample_j``."""
    cells["repeat"] = cells["repeat"].fillna(0).astype(int)
    cells["repeat_group"] = (
        cells["repeat_group"].fillna(cells["config_hash"]).fillna(cells["sweep"] + "/" + cells["cell_id"])
    )
    key = ["sweep", "cell_id"]
    if not epochs.empty:
        per_job = epochs.groupby([*key, "job_index"])["samples"].sum().rename("_samples").reset_index()
        filled = jobs.merge(per_job, on=[*key, "job_index"], how="left")["_samples"]
        jobs["samples"] = jobs["samples"].fillna(pd.Series(filled.to_numpy(), index=jobs.index))
        measured = (
            epochs[~epochs["warmup"].astype(bool)].groupby(key)["samples"].sum().rename("_measured").reset_index()
        )
        filled = cells.merge(measured, on=key, how="left")["_measured"]
        cells["measured_samples"] = cells["measured_samples"].fillna(pd.Series(filled.to_numpy(), index=cells.index))
    derived = (cells["energy_j"] / cells["measured_samples"].where(cells["measured_samples"] > 0)).where(
        cells["mix"].isna()
    )
    cells["energy_per_sample_j"] = cells["energy_per_sample_j"].fillna(derived)


def _newest_per_config(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per run of a configuration: the newest result of each config hash, and of each
    ``(repeat_group, repeat)`` (a solo's repeat run again under another ``measure.repeat_floor`` has
    another hash, raycolloc/driver/floor.py); cells without a hash are all kept."""
    if "config_hash" not in cells or cells["config_hash"].isna().all():
        return cells
    hashed = cells[cells["config_hash"].notna()].sort_values("finished_at", na_position="first")
    newest = hashed.drop_duplicates("config_hash", keep="last")
    if "repeat_group" in newest and "repeat" in newest:
        grouped = newest["repeat_group"].notna() & newest["repeat"].notna()
        runs = newest[grouped].drop_duplicates(["repeat_group", "repeat"], keep="last")
        newest = pd.concat([runs, newest[~grouped]])
    return pd.concat([newest, cells[cells["config_hash"].isna()]]).sort_index()
