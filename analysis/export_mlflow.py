"""Export sweeps to MLflow, where radT's users keep their runs: one run per cell.

Usage::

    pip install 'raycolloc[mlflow]'
    python -m analysis.export_mlflow SWEEP_DIR [SWEEP_DIR ...] --tracking-uri URI [--experiment NAME]

Each sweep becomes a parent run holding the report (``report.html``, its CSVs and PNGs) as
artifacts; each cell a child run with the cell's configuration as params (flattened, as the report's
configuration table), its summary numbers as metrics (throughput, gains and energy against its
solo, a mix's change against sequential, per-job epoch-2 numbers; a number's 95% bounds as
``<metric>_low``/``<metric>_high`` where known) and its time series as metric
steps (GPU telemetry per sample, per-epoch times per job). Tags name the result directory and config
hash; a cell already exported to the experiment is skipped, so exporting again adds only new cells.

A local store is ``sqlite:///mlflow.db`` (what MLflow 3 recommends): its database store needs
SQLAlchemy and Alembic, which ``mlflow-skinny`` leaves out and the ``[mlflow]`` extra brings; without
them the exporter refuses (exit 2) naming what to install. A ``file:`` tracking URI is the older local
store; MLflow 3 keeps it in maintenance mode and refuses it unless ``MLFLOW_ALLOW_FILE_STORE=true``,
which this exporter sets for a URI the user named.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.gains import gain_cells
from analysis.load import SweepData, SweepDirError, load_sweeps
from analysis.meta import flatten, parse_json
from analysis.mixed import mixed_table
from analysis.report import build_report
from raycolloc.results.rows import SCOPE_MIG, SCOPE_PROCESS

__all__ = ["ExportError", "ExportResult", "export", "main"]

log = logging.getLogger(__name__)

_CELL_METRICS = (
    "agg_samples_per_s",
    "window_samples_per_s",
    "makespan_s",
    "overlap_s",
    "total_s",
    "sm_active_mean",
    "sm_active_max",
    "gpu_util_mean",
    "mem_used_max_mib",
    "energy_j",
    "power_mean_w",
    "measured_samples",
    "energy_per_sample_j",
    "total_energy_j",
    "pcie_rx_mean_bytes_s",
    "pcie_tx_mean_bytes_s",
    "lease_wait_s",
    "prepare_s",
    "setup_s",
    "teardown_s",
)
_JOB_METRICS = (
    "epoch2_s",
    "epoch2_samples_per_s",
    "total_s",
    "samples",
    "peak_mem_allocated_mib",
    "peak_device_mem_mib",
    "compile_s",
    "setup_s",
)
_SERIES = ("sm_active", "gpu_util", "mem_used_mib", "power_w", "pcie_rx_bytes_s", "pcie_tx_bytes_s")
_PROCESS_SERIES = ("proc_gpu_mem_mib", "proc_cpu_percent")
_PARAM_MAX = 500  # MLflow's smallest param value limit across versions


@dataclass
class ExportResult:
    """What an export did: the experiment, each sweep's parent run, each cell's run, cells skipped."""

    experiment_id: str
    parents: dict[str, str] = field(default_factory=dict)
    runs: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


class ExportError(Exception):
    """The export cannot start: MLflow, or what its store for this tracking URI needs, is missing."""


_INSTALL = "pip install 'raycolloc[mlflow]'"
_DB_MODULES = ("sqlalchemy", "alembic")  # MLflow's database store; mlflow-skinny ships without them


def _missing(modules: Sequence[str]) -> list[str]:
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def _client(tracking_uri: str) -> Any:
    if tracking_uri.startswith("file:") or "://" not in tracking_uri:
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    try:
        from mlflow.exceptions import MlflowException
        from mlflow.store.db.db_types import DATABASE_ENGINES
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise ExportError(f"MLflow is not installed; {_INSTALL}") from None
    scheme = tracking_uri.partition("://")[0].partition("+")[0]
    # Checked here, not left to MLflow: without SQLAlchemy it knows no database scheme at all and
    # answers with an UnsupportedModelRegistryStoreURIException that names neither module.
    if scheme in DATABASE_ENGINES and (missing := _missing(_DB_MODULES)):
        raise ExportError(
            f"--tracking-uri {tracking_uri} is MLflow's database store, which needs "
            f"{' and '.join(missing)} (mlflow-skinny comes without them); {_INSTALL} "
            f"(or pip install {' '.join(_DB_MODULES)})"
        )
    try:
        return MlflowClient(tracking_uri=tracking_uri)
    except ImportError as exc:  # a database's driver (psycopg, pymysql, ...): MLflow imports it here
        raise ExportError(
            f"--tracking-uri {tracking_uri} needs the database driver {exc.name}, which is not "
            f"installed; pip install {exc.name}"
        ) from None
    except MlflowException as exc:  # a scheme MLflow has no store for
        raise ExportError(f"--tracking-uri {tracking_uri}: {exc.message.strip()}") from None


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) or math.isinf(number) else number


def _metrics(values: dict[str, Any], when_ms: int) -> list[Any]:
    from mlflow.entities import Metric

    return [Metric(key, number, when_ms, 0) for key, v in values.items() if (number := _number(v)) is not None]


def _log(
    client: Any, run_id: str, metrics: Sequence[Any] = (), params: Sequence[Any] = (), tags: Sequence[Any] = ()
) -> None:
    """``log_batch`` within MLflow's limits (1000 metrics, 100 params, 100 tags per call)."""
    metrics, params, tags = list(metrics), list(params), list(tags)
    while metrics or params or tags:
        client.log_batch(run_id, metrics=metrics[:1000], params=params[:100], tags=tags[:100])
        metrics, params, tags = metrics[1000:], params[100:], tags[100:]


def _series(data: SweepData, cell: pd.Series) -> list[Any]:
    """The cell's time series as metric steps: GPU (and MIG) telemetry per sample, process samples
    per job, and every job's epochs."""
    from mlflow.entities import Metric

    key = (data.telemetry["sweep"] == cell["sweep"]) & (data.telemetry["cell_id"] == cell["cell_id"])
    tel = data.telemetry[key].sort_values("ts")
    out = []
    for scope, rows in tel.groupby("scope"):
        groups = (
            rows.groupby("gi_id")
            if scope == SCOPE_MIG
            else rows.groupby("job_index")
            if scope == SCOPE_PROCESS
            else [("", rows)]
        )
        names = _PROCESS_SERIES if scope == SCOPE_PROCESS else _SERIES
        for ident, part in groups:
            prefix = (
                f"mig{int(ident)}"
                if scope == SCOPE_MIG
                else f"job{int(ident)}"
                if scope == SCOPE_PROCESS
                else str(scope)
            )
            for step, (_, row) in enumerate(part.iterrows()):
                out += [
                    Metric(f"{prefix}.{name}", number, int(row["ts"] * 1000), step)
                    for name in names
                    if name in row and (number := _number(row[name])) is not None
                ]
    key = (data.epochs["sweep"] == cell["sweep"]) & (data.epochs["cell_id"] == cell["cell_id"])
    for _, e in data.epochs[key].iterrows():
        when = int(e["end_ts"] * 1000)
        out += [
            Metric(f"job{int(e['job_index'])}.epoch_s", float(e["wall_s"]), when, int(e["epoch"])),
            Metric(f"job{int(e['job_index'])}.epoch_samples_per_s", float(e["samples_per_s"]), when, int(e["epoch"])),
        ]
    return out


def _summary(data: SweepData, cell: pd.Series, ratios: pd.DataFrame, mixed: pd.DataFrame) -> dict[str, Any]:
    values: dict[str, Any] = {c: cell.get(c) for c in _CELL_METRICS}
    match = ratios[(ratios["sweep"] == cell["sweep"]) & (ratios["cell_id"] == cell["cell_id"])]
    for column in ("gain_vs_solo", "gain_vs_best_solo", "energy_vs_solo"):
        values[column] = match[column].iloc[0] if not match.empty else None
    # The run's 95% bounds (issue 30): its within-run interval, a ratio's propagated with its reference's.
    for column in ("agg_samples_per_s", "gain_vs_solo", "gain_vs_best_solo", "energy_vs_solo"):
        for side in ("_low", "_high"):
            values[column + side] = match[column + side].iloc[0] if not match.empty else None
    rows = mixed[(mixed["sweep"] == cell["sweep"]) & (mixed["cell_id"] == cell["cell_id"])]
    if not rows.empty:
        for column in (
            "cell_total_s",
            "serial_s",
            "change_vs_sequential_pct",
            "serial_energy_j",
            "energy_vs_sequential",
            "change_vs_sequential_pct_low",
            "change_vs_sequential_pct_high",
            "energy_vs_sequential_low",
            "energy_vs_sequential_high",
        ):
            values[column] = rows[column].iloc[0]
    jobs = data.jobs[(data.jobs["sweep"] == cell["sweep"]) & (data.jobs["cell_id"] == cell["cell_id"])]
    for _, job in jobs.iterrows():
        values.update({f"job{int(job['job_index'])}.{c}": job.get(c) for c in _JOB_METRICS})
    for _, row in rows.iterrows():
        values[f"job{int(row['job_index'])}.alone_s"] = row["solo_total_s"]
    return values


def _params(cell: pd.Series) -> list[Any]:
    from mlflow.entities import Param

    flat = {
        "workload": cell["workload"],
        "mode": cell["mode"],
        "degree": cell["degree"],
        "mix": cell.get("mix"),
        "gpu_name": cell.get("gpu_name"),
        "backend": cell.get("backend"),
        "repeat": cell.get("repeat"),
        "telemetry_source": cell.get("telemetry_source"),
    }
    flat.update({f"config.{k}": v for k, v in flatten(parse_json(cell.get("config_json"))).items()})
    return [Param(k[:250], str(v)[:_PARAM_MAX]) for k, v in flat.items() if v is not None and not pd.isna(v)]


def _tags(cell: pd.Series, sweep_dir: str, parent: str | None) -> list[Any]:
    from mlflow.entities import RunTag

    env = parse_json(cell.get("env_json"))
    tags = {
        "raycolloc.sweep": cell["sweep"],
        "raycolloc.sweep_dir": sweep_dir,
        "raycolloc.cell_id": cell["cell_id"],
        "raycolloc.result": cell.get("cell_dir") or "",
        "raycolloc.config_hash": cell.get("config_hash") or "",
        "raycolloc.status": cell["status"],
        "raycolloc.version": str(env.get("raycolloc")),
        "raycolloc.commit": str(env.get("raycolloc_commit")),
        "mlflow.runName": str(cell.get("label") or cell["cell_id"]),
    }
    if parent:
        tags["mlflow.parentRunId"] = parent
    if cell["status"] != "ok" and isinstance(cell.get("reason"), str):
        tags["raycolloc.reason"] = cell["reason"][:5000]
    return [RunTag(k, str(v)) for k, v in tags.items()]


def _find(client: Any, experiment_id: str, tag: str, value: str) -> str | None:
    escaped = value.replace("'", "\\'")
    found = client.search_runs([experiment_id], filter_string=f"tags.`{tag}` = '{escaped}'", max_results=1)
    return found[0].info.run_id if found else None


def _parent(client: Any, experiment_id: str, sweep_dir: Path, data: SweepData, report: bool) -> str:
    """The sweep's parent run (created once), with the report as its artifacts."""
    from mlflow.entities import RunTag

    key = str(sweep_dir.resolve())
    run_id = _find(client, experiment_id, "raycolloc.sweep_dir", key + "#sweep")
    if run_id is None:
        run = client.create_run(experiment_id, run_name=f"sweep {data.sweeps[0]}", start_time=int(time.time() * 1000))
        run_id = run.info.run_id
        _log(
            client,
            run_id,
            tags=[RunTag("raycolloc.sweep_dir", key + "#sweep"), RunTag("raycolloc.sweep", data.sweeps[0])],
        )
        client.set_terminated(run_id)
    if report:
        with tempfile.TemporaryDirectory(prefix="raycolloc-report-") as tmp:
            build_report([sweep_dir], tmp)
            client.log_artifacts(run_id, tmp, artifact_path="report")
    return run_id


def export(
    sweep_dirs: Iterable[str | Path], tracking_uri: str, experiment: str = "raycolloc", report: bool = True
) -> ExportResult:
    """Log every cell of each sweep as an MLflow run (see the module docstring).

    Raises:
        ExportError: MLflow, or what its store for ``tracking_uri`` needs, is missing.
        SweepDirError: a sweep directory holds no raycolloc cells.
    """
    client = _client(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    result = ExportResult(experiment_id)
    for sweep_dir in map(Path, sweep_dirs):
        data = load_sweeps([sweep_dir], all_results=True)
        ratios, mixed = gain_cells(data.cells, data.jobs), mixed_table(data.cells, data.jobs, data.epochs)
        parent = result.parents[str(sweep_dir)] = _parent(client, experiment_id, sweep_dir, data, report)
        for _, cell in data.cells.iterrows():
            ident = f"{cell.get('cell_dir')}#{cell.get('config_hash')}"
            if _find(client, experiment_id, "raycolloc.export_key", ident):
                result.skipped.append(cell["cell_id"])
                continue
            start = int((_number(cell.get("started_at")) or time.time()) * 1000)
            run = client.create_run(experiment_id, run_name=str(cell.get("label") or cell["cell_id"]), start_time=start)
            run_id = run.info.run_id
            from mlflow.entities import RunTag

            _log(
                client,
                run_id,
                params=_params(cell),
                tags=[*_tags(cell, str(sweep_dir.resolve()), parent), RunTag("raycolloc.export_key", ident)],
                metrics=_metrics(_summary(data, cell, ratios, mixed), start) + _series(data, cell),
            )
            end = cell.get("finished_at")
            client.set_terminated(
                run_id,
                status="FINISHED" if cell["status"] == "ok" else "FAILED",
                end_time=int(end * 1000) if _number(end) is not None else None,
            )
            result.runs[cell["cell_id"]] = run_id
        log.info(
            "sweep=%s experiment=%s runs=%d skipped=%d", sweep_dir, experiment, len(result.runs), len(result.skipped)
        )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m analysis.export_mlflow", description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", metavar="SWEEP_DIR", help="sweep directories to export")
    parser.add_argument(
        "--tracking-uri",
        required=True,
        metavar="URI",
        help="MLflow tracking URI: http(s)://server, sqlite:///mlflow.db, file:///path/mlruns",
    )
    parser.add_argument("--experiment", default="raycolloc", help="MLflow experiment name (default: raycolloc)")
    parser.add_argument("--no-report", action="store_true", help="do not attach report.html to the sweep's run")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    try:
        result = export(args.sweeps, args.tracking_uri, args.experiment, report=not args.no_report)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SweepDirError as exc:  # a bad argument: exit 2, as the report does
        print(exc, file=sys.stderr)
        return 2
    print(
        f"experiment {args.experiment} ({result.experiment_id}) at {args.tracking_uri}: {len(result.runs)} runs "
        f"logged, {len(result.skipped)} already there; sweep runs: {', '.join(result.parents.values())}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
