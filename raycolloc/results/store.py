"""A cell's four Parquet tables on disk: written atomically, read back whole or not at all.

Each file is written to a temporary name and renamed; ``cells.parquet`` is written last, so a
cell directory holding it is complete. A write that fails (disk full, directory gone) leaves no
half result: the tables it wrote are removed, and a result that was there before it is gone too
(its ``cells.parquet`` is removed first), so the directory holds the new result or none. :func:`read_cell` is the one
reader of a cell directory: it
checks that the four tables read, carry a known schema version and agree on the cell id.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from raycolloc.results.errors import InvalidResult, ResultWriteError, UnknownSchemaVersion, free_space
from raycolloc.results.schema import READABLE_VERSIONS, SCHEMAS, TABLES, to_table

__all__ = [
    "CellTables",
    "InvalidResult",
    "ResultWriteError",
    "UnknownSchemaVersion",
    "free_space",
    "read_cell",
    "read_parquet",
    "read_table",
    "write_cell",
]


@dataclass(frozen=True)
class CellTables:
    """The four tables of one cell directory."""

    path: Path
    cells: pa.Table
    jobs: pa.Table
    epochs: pa.Table
    telemetry: pa.Table

    @property
    def cell(self) -> dict[str, Any]:
        """The cell's row as a dict."""
        return self.cells.slice(0, 1).to_pylist()[0]


def _atomic_write(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_cell(cell_dir: str | Path, rows: Mapping[str, Sequence[Any]]) -> dict[str, Path]:
    """Write one cell's tables into ``cell_dir`` (``cells.parquet`` last); returns their paths.

    Args:
        rows: table name -> row dataclasses (:mod:`raycolloc.results.schema`); a missing table is empty.

    Raises:
        ResultWriteError: a table could not be written; none of this call's tables is left.
    """
    cell_dir = Path(cell_dir)
    paths: dict[str, Path] = {}
    path = cell_dir
    try:
        cell_dir.mkdir(parents=True, exist_ok=True)
        (cell_dir / "cells.parquet").unlink(missing_ok=True)  # from here on the directory is no result
        for name in TABLES:
            path = cell_dir / f"{name}.parquet"
            _atomic_write(to_table(name, list(rows.get(name, ()))), path)
            paths[name] = path
    except (OSError, pa.ArrowException) as exc:
        for written in paths.values():
            written.unlink(missing_ok=True)
        why = getattr(exc, "strerror", None) or exc
        raise ResultWriteError(
            f"cannot write {path}: {why} ({free_space(cell_dir)}); this cell's result was not kept"
        ) from exc
    return paths


def read_parquet(path: str | Path, columns: list[str] | None = None) -> pa.Table:
    """One Parquet file as a table. (``pq.read_table`` goes through ``pyarrow.dataset``, whose import
    costs a process ~0.5 CPU-seconds; a sweep's driver reads its resume index at every start.)"""
    with pq.ParquetFile(path) as file:
        return file.read(columns=columns)


def read_table(cell_dir: str | Path, name: str) -> pa.Table:
    """One table of a cell directory, as written."""
    return read_parquet(Path(cell_dir) / f"{name}.parquet")


def read_cell(cell_dir: str | Path) -> CellTables:
    """All four tables of a cell directory, checked to be one valid result.

    Raises:
        InvalidResult: a table is missing or unreadable, has an unknown schema version, or names
            another cell than ``cells.parquet`` does.
    """
    cell_dir = Path(cell_dir)
    tables: dict[str, pa.Table] = {}
    for name in TABLES:
        path = cell_dir / f"{name}.parquet"
        try:
            table = read_parquet(path)
        except (OSError, pa.ArrowException) as exc:
            raise InvalidResult(f"{path}: {type(exc).__name__}: {exc}") from None
        if "schema_version" not in table.column_names or "cell_id" not in table.column_names:
            raise InvalidResult(f"{path}: not a raycolloc table (no schema_version or cell_id column)")
        versions = set(table.column("schema_version").to_pylist())
        if versions - set(READABLE_VERSIONS):
            raise UnknownSchemaVersion(
                f"{path}: schema_version {sorted(versions)}; this raycolloc reads versions "
                f"{', '.join(map(str, READABLE_VERSIONS))}"
            )
        tables[name] = _promote(table, name)
    if tables["cells"].num_rows != 1:
        raise InvalidResult(f"{cell_dir / 'cells.parquet'}: {tables['cells'].num_rows} rows; a cell has one")
    cell_id = tables["cells"].column("cell_id")[0].as_py()
    for name in ("jobs", "epochs", "telemetry"):
        others = set(tables[name].column("cell_id").to_pylist()) - {cell_id}
        if others:
            raise InvalidResult(f"{cell_dir / (name + '.parquet')}: rows of cell(s) {sorted(others)}, not {cell_id}")
    n_jobs = tables["cells"].column("n_jobs")[0].as_py()
    if n_jobs is not None and tables["jobs"].num_rows != n_jobs:
        raise InvalidResult(f"{cell_dir / 'jobs.parquet'}: {tables['jobs'].num_rows} jobs; cells.parquet says {n_jobs}")
    return CellTables(cell_dir, **tables)


def _promote(table: pa.Table, name: str) -> pa.Table:
    """A table of an older readable version, with the columns added since as nulls."""
    schema = SCHEMAS[name]
    for i, field in enumerate(schema):
        if field.name not in table.column_names:
            table = table.add_column(min(i, table.num_columns), field, pa.nulls(table.num_rows, field.type))
    return table
