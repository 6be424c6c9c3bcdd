"""What a report says about the runs themselves: environment, configuration, failed cells.

Pure functions from the loaded ``cells``/``jobs`` DataFrames to DataFrames. The configuration
comes from ``cells.config_json`` (the resolved config of each cell) and the environment from
``cells.env_json`` and the cell columns (GPU, driver, telemetry source); analysis never
re-parses YAML.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pandas as pd

__all__ = ["config_tables", "environment_table", "failed_cells_table", "flatten", "parse_json"]

_ENV_COLUMNS = ("gpu_name", "gpu_memory_mib", "gpu_sm_count", "driver", "backend", "telemetry_source", "hostname")
_ENV_SKIP = {"gpu_uuid", "hostname"}  # per-device identity: shown through gpu_name/hostname columns
_ENV_KEYS = ["key", "value", "n_cells"]


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """A nested JSON value as ``{"a.b.c": "json scalar"}``; lists stay one JSON string."""
    if isinstance(value, Mapping):
        out: dict[str, str] = {}
        for key, sub in value.items():
            out.update(flatten(sub, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value if isinstance(value, str) else json.dumps(value)}


def parse_json(text: Any) -> dict[str, Any]:
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {"unparsed": text}
    return value if isinstance(value, dict) else {"value": value}


def _distinct(values: pd.Series) -> tuple[str, int]:
    """``"a"`` when all cells agree, else ``"a (2 cells); b (1 cell)"``; and how many cells had a value."""
    values = values.dropna().astype(str)
    counts = values.value_counts(sort=False)
    if len(counts) == 1:
        return str(counts.index[0]), int(counts.iloc[0])
    parts = [f"{v} ({n} cell{'s' if n != 1 else ''})" for v, n in counts.items()]
    return "; ".join(parts), int(counts.sum())


def environment_table(cells: pd.DataFrame) -> pd.DataFrame:
    """GPU, driver, telemetry source and package versions of the cells.

    Columns: ``key``, ``value`` (one value, or each distinct value with its cell count),
    ``n_cells`` (cells that reported the key).
    """
    rows = []
    for column in _ENV_COLUMNS:
        if column in cells and cells[column].notna().any():
            value, n = _distinct(cells[column])
            rows.append({"key": column, "value": value, "n_cells": n})
    env = pd.DataFrame([flatten(parse_json(t)) for t in cells.get("env_json", pd.Series(dtype=object))])
    env = env.replace("null", None)  # a version that was not recorded is missing, not the word "null"
    for column in env.columns:
        if column in _ENV_SKIP or column in _ENV_COLUMNS or env[column].isna().all():
            continue
        value, n = _distinct(env[column])
        rows.append({"key": column, "value": value, "n_cells": n})
    return pd.DataFrame(rows, columns=_ENV_KEYS)


def config_tables(cells: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The sweep's resolved config, de-duplicated.

    Returns:
        ``(shared, varying)``: ``shared`` has ``key, value`` for the keys every cell has with
        the same value; ``varying`` has one row per cell (``sweep, cell_id``) and one column per
        key whose value differs between cells (a key missing in some cells counts as varying).
    """
    flat = pd.DataFrame(
        [flatten(parse_json(t)) for t in cells.get("config_json", pd.Series(dtype=object))], index=cells.index
    )
    shared, varying = [], []
    for column in flat.columns:
        values = flat[column]
        if values.notna().all() and values.astype(str).nunique() == 1:
            shared.append({"key": column, "value": str(values.iloc[0])})
        else:
            varying.append(column)
    table = pd.concat([cells[["sweep", "cell_id"]], flat[varying]], axis=1)
    return pd.DataFrame(shared, columns=["key", "value"]), table.sort_values(["sweep", "cell_id"], ignore_index=True)


def failed_cells_table(cells: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """Cells whose status is not ok (oom, error, partial), with the cell's reason and job errors.

    Columns: ``sweep, cell_id, workload, mix, mode, degree, status, n_ok, n_jobs, reason,
    job_errors`` (``job_name: status: error`` for each job that did not finish ok).
    """
    cols = ["sweep", "cell_id", "workload", "mix", "mode", "degree", "status", "n_ok", "n_jobs", "reason", "job_errors"]
    failed = cells[cells["status"].fillna("error") != "ok"]
    if failed.empty:
        return pd.DataFrame(columns=cols)
    bad = jobs[jobs["status"] != "ok"]
    text = (
        bad["job_name"].astype(str)
        + ": "
        + bad["status"].astype(str)
        + ": "
        + bad["error"].fillna("").astype(str).str.slice(0, 300)
    )
    errors = text.groupby([bad["sweep"], bad["cell_id"]]).agg("; ".join).rename("job_errors").reset_index()
    out = failed.merge(errors, on=["sweep", "cell_id"], how="left")
    return out[cols].sort_values(["sweep", "cell_id"], ignore_index=True)
