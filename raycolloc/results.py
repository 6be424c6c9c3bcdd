"""Results: four Parquet tables per cell, one Arrow schema each, written atomically.

``cells`` (one row per cell, with the resolved config and the environment), ``jobs`` (one row per
training run), ``epochs`` (one row per job and epoch) and ``telemetry`` (one row per sample:
``scope`` gpu, mig or process). Every table carries ``schema_version`` and ``cell_id``.
Each file is written to a temporary name and renamed; ``cells.parquet`` is written last, so a
cell directory with it is complete, which is what resume looks for.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from raycolloc.telemetry import METRIC_COLUMNS

__all__ = ["SCHEMAS", "SCHEMA_VERSION", "TABLES", "completed_index", "find_completed", "read_table", "write_cell"]

SCHEMA_VERSION = 1
TABLES = ("epochs", "jobs", "telemetry", "cells")  # write order: cells last
_f64, _i64, _str, _bool = pa.float64(), pa.int64(), pa.string(), pa.bool_()


def _schema(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([("schema_version", pa.int32()), ("cell_id", _str), *fields])


SCHEMAS: dict[str, pa.Schema] = {
    "cells": _schema(
        ("label", _str), ("config_hash", _str), ("status", _str), ("reason", _str), ("mode", _str),
        ("degree", _i64), ("workload", _str), ("mix", _str), ("gpu_uuid", _str), ("gpu_name", _str),
        ("gpu_index", _i64), ("gpu_memory_mib", _i64), ("gpu_sm_count", _i64), ("node_id", _str), ("hostname", _str),
        ("backend", _str), ("driver", _str), ("telemetry_source", _str), ("started_at", _f64),
        ("finished_at", _f64), ("lease_wait_s", _f64), ("prepare_s", _f64), ("setup_s", _f64),
        ("teardown_s", _f64), ("measured_start_ts", _f64),
        ("measured_end_ts", _f64), ("makespan_s", _f64), ("overlap_s", _f64), ("total_s", _f64),
        ("agg_samples_per_s", _f64), ("window_samples_per_s", _f64), ("n_jobs", _i64), ("n_ok", _i64),
        ("sm_active_mean", _f64), ("sm_active_max", _f64), ("gpu_util_mean", _f64), ("mem_used_max_mib", _f64),
        ("energy_j", _f64), ("power_mean_w", _f64), ("pcie_rx_mean_bytes_s", _f64),
        ("pcie_tx_mean_bytes_s", _f64), ("resumed_from", _str), ("config_json", _str), ("env_json", _str),
        ("tags_json", _str),
    ),
    "jobs": _schema(
        ("job_index", _i64), ("job_name", _str), ("workload", _str), ("status", _str), ("error", _str),
        ("pid", _i64), ("hostname", _str), ("gpu_uuid", _str), ("mig_uuid", _str), ("mig_profile", _str),
        ("cuda_visible_devices", _str), ("cpus", _str), ("mps_client", _bool), ("mps_server_pid", _i64), ("batch_size", _i64),
        ("epochs", _i64), ("epoch_samples", _i64), ("params", _i64), ("setup_s", _f64), ("compile_s", _f64),
        ("total_s", _f64), ("measured_s", _f64), ("epoch2_s", _f64), ("epoch2_samples_per_s", _f64),
        ("peak_mem_allocated_mib", _f64), ("peak_mem_reserved_mib", _f64), ("nvml_mem_mib", _f64),
        ("compile", _str), ("amp", _str), ("channels_last", _bool), ("allocator", _str),
        ("data_source", _str), ("data_placement", _str),
    ),
    "epochs": _schema(
        ("job_index", _i64), ("epoch", _i64), ("warmup", _bool), ("start_ts", _f64), ("end_ts", _f64),
        ("wall_s", _f64), ("samples", _i64), ("samples_per_s", _f64), ("steps", _i64), ("loss", _f64),
        ("thread_cpu_s", _f64), ("thread_sys_s", _f64), ("minor_faults", _i64),
        ("involuntary_switches", _i64), ("voluntary_switches", _i64),
        ("peak_mem_allocated_mib", _f64), ("peak_mem_reserved_mib", _f64),
    ),
    "telemetry": _schema(
        ("gpu_uuid", _str), ("mig_uuid", _str), ("gi_id", _i64), ("scope", _str), ("ts", _f64), ("source", _str),
        ("pid", _i64), ("job_index", _i64), *((c, _f64) for c in METRIC_COLUMNS),
    ),
}


def _table(name: str, rows: Iterable[Mapping[str, Any]]) -> pa.Table:
    schema = SCHEMAS[name]
    rows = list(rows)
    columns: dict[str, list[Any]] = {f.name: [] for f in schema}
    for row in rows:
        unknown = set(row) - set(columns) - {"schema_version"}
        if unknown:
            raise KeyError(f"{name}: columns not in the schema: {sorted(unknown)}")
        for key in columns:
            columns[key].append(SCHEMA_VERSION if key == "schema_version" else row.get(key))
    return pa.table(columns, schema=schema)


def _atomic_write(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def write_cell(job_dir: str | Path, tables: Mapping[str, Iterable[Mapping[str, Any]]]) -> dict[str, Path]:
    """Write one cell's four tables into ``job_dir`` (cells.parquet last). Returns their paths."""
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in TABLES:
        path = job_dir / f"{name}.parquet"
        _atomic_write(_table(name, tables.get(name, ())), path)
        paths[name] = path
    return paths


def read_table(job_dir: str | Path, name: str) -> pa.Table:
    """Read one table of a cell directory."""
    return pq.read_table(Path(job_dir) / f"{name}.parquet")


def completed_index(root: str | Path, exclude: str | Path | None = None) -> dict[str, Path]:
    """Config hash -> newest cell directory under ``root`` (other than ``exclude``) holding a result for it.

    A result is a cell with status ok, partial or oom; a cell that ended in ``error`` (a crash, a
    lease timeout, a refused GPU) is not, so re-running the sweep tries it again.
    """
    root = Path(root)
    best: dict[str, tuple[float, Path]] = {}
    if not root.exists():
        return {}
    skip = Path(exclude).resolve() if exclude is not None else None
    for path in root.rglob("cells.parquet"):
        if skip is not None and path.parent.resolve() == skip:
            continue
        try:
            table = pq.read_table(path, columns=["config_hash", "status"])
            mtime = path.stat().st_mtime
        except (OSError, pa.ArrowInvalid, KeyError):
            continue
        for digest, status in zip(table.column("config_hash").to_pylist(), table.column("status").to_pylist(),
                                  strict=True):
            if status != "error" and (digest not in best or best[digest][0] < mtime):
                best[digest] = (mtime, path.parent)
    return {digest: where for digest, (_, where) in best.items()}


def find_completed(root: str | Path, config_hash: str, exclude: str | Path | None = None) -> Path | None:
    """The newest cell directory under ``root`` with a result for ``config_hash`` (see
    :func:`completed_index`), other than ``exclude``; None if there is none."""
    return completed_index(root, exclude).get(config_hash)
