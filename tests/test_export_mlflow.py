"""``python -m analysis.export_mlflow`` against a local file-store tracking URI: one run per cell,
whose params, metrics and time series are the Parquet tables' numbers, under a sweep run holding
the report; a second export adds nothing. The local store MLflow 3 recommends (``sqlite:///``) works
with the ``[mlflow]`` extra, and without its database modules the export is refused by name."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from analysis.export_mlflow import export, main
from analysis.load import load_sweeps

from .test_analysis import make_sweep


@pytest.mark.slow  # the whole report (figures) and an MLflow store: ~25 s
def test_one_run_per_cell_with_the_tables_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # the exporter allows the store it was given
    sweep = make_sweep(tmp_path / "multirun" / "2024-01-01" / "10-00-00")
    uri = (tmp_path / "mlruns").as_uri()
    result = export([sweep], uri, experiment="study")
    data = load_sweeps([sweep], all_results=True)
    assert sorted(result.runs) == sorted(data.cells["cell_id"])
    client = MlflowClient(tracking_uri=uri)
    (parent,) = result.parents.values()
    artifacts = {a.path for a in client.list_artifacts(parent, "report")}
    assert "report/report.html" in artifacts and "report/table2.csv" in artifacts

    run = client.get_run(result.runs["1-naive"])  # cnn naive x2: 400 samples/s, twice the solo's 200
    assert run.data.tags["mlflow.parentRunId"] == parent and run.info.status == "FINISHED"
    assert run.data.params["mode"] == "naive" and run.data.params["degree"] == "2"
    assert run.data.params["config.workload.name"] == "cnn"
    cells = data.cells.set_index("cell_id")
    assert run.data.metrics["agg_samples_per_s"] == cells.loc["1-naive", "agg_samples_per_s"] == 400.0
    assert run.data.metrics["gain_vs_solo"] == 2.0
    assert run.data.metrics["job1.epoch2_s"] == 1.5
    # Time series: one step per GPU sample, timestamps from the telemetry table.
    tel = data.telemetry[(data.telemetry["cell_id"] == "1-naive") & (data.telemetry["scope"] == "gpu")]
    history = client.get_metric_history(run.info.run_id, "gpu.power_w")
    assert [m.step for m in history] == list(range(len(tel))) and {m.value for m in history} == {200.0}
    assert sorted(m.timestamp for m in history) == sorted((tel["ts"] * 1000).astype(int))
    epochs = client.get_metric_history(run.info.run_id, "job0.epoch_s")
    assert sorted((m.step, m.value) for m in epochs) == [(1, 2.0), (2, 1.5)]

    mixed = client.get_run(result.runs["8-naive"])  # the mix: 25 s against 12 + 18 s one after the other
    assert mixed.data.metrics["serial_s"] == 30.0
    assert mixed.data.metrics["change_vs_sequential_pct"] == pytest.approx(100 * (25 / 30 - 1))
    assert "agg_samples_per_s" not in mixed.data.metrics
    oom = client.get_run(result.runs["3-naive"])
    assert oom.info.status == "FAILED" and oom.data.tags["raycolloc.status"] == "oom"

    again = export([sweep], uri, experiment="study")
    assert again.runs == {} and sorted(again.skipped) == sorted(result.runs)
    found = client.search_runs([result.experiment_id], max_results=100)
    assert len(found) == len(data.cells) + 1  # the cells and the sweep's run, once


def test_cli_prints_what_it_logged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = make_sweep(tmp_path / "sweep")
    uri = (tmp_path / "mlruns").as_uri()
    assert main([str(sweep), "--tracking-uri", uri, "--no-report", "--log-level", "WARNING"]) == 0
    assert "10 runs logged, 0 already there" in capsys.readouterr().out
    runs = MlflowClient(tracking_uri=uri).search_runs(
        [MlflowClient(tracking_uri=uri).get_experiment_by_name("raycolloc").experiment_id], max_results=100
    )
    names = pd.Series([r.data.tags.get("mlflow.runName") for r in runs])
    assert names.str.startswith("sweep ").sum() == 1


@pytest.mark.slow  # the report (figures) and a new sqlite store's migrations: ~20 s
def test_sqlite_store_as_the_issue_ran_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29, item 9: ``--tracking-uri sqlite:///mlflow.db`` ended in an
    UnsupportedModelRegistryStoreURIException traceback under the ``[mlflow]`` extra."""
    sweep = make_sweep(tmp_path / "sweep")
    monkeypatch.chdir(tmp_path)  # the URI's path and MLflow's default artifact root (./mlruns) are relative
    assert main([str(sweep), "--tracking-uri", "sqlite:///mlflow.db"]) == 0
    assert "10 runs logged, 0 already there" in capsys.readouterr().out
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("raycolloc")
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    assert len(runs) == 11  # the 10 cells and the sweep's run
    (parent,) = [r for r in runs if r.data.tags["mlflow.runName"].startswith("sweep ")]
    assert "report/report.html" in {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    naive_x2 = next(r for r in runs if r.data.tags.get("raycolloc.cell_id") == "1-naive")
    assert naive_x2.data.metrics["agg_samples_per_s"] == 400.0 and naive_x2.data.metrics["gain_vs_solo"] == 2.0
    assert [m.value for m in client.get_metric_history(naive_x2.info.run_id, "job0.epoch_s")] == [2.0, 1.5]
    assert main([str(sweep), "--tracking-uri", "sqlite:///mlflow.db", "--no-report"]) == 0
    assert "0 runs logged, 10 already there" in capsys.readouterr().out


@pytest.mark.parametrize("absent", ["sqlalchemy", "alembic"])
def test_sqlite_store_without_its_modules_is_refused_by_name(
    absent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """mlflow-skinny alone (no SQLAlchemy or Alembic): exit 2 saying what to install, nothing written."""
    sweep = make_sweep(tmp_path / "sweep")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, absent, None)  # as if not installed: importing it raises ImportError
    assert main([str(sweep), "--tracking-uri", "sqlite:///mlflow.db"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"error: --tracking-uri sqlite:///mlflow.db is MLflow's database store, which needs {absent} ")
        and "pip install 'raycolloc[mlflow]'" in err
    )
    assert "Traceback" not in err and not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def test_unknown_store_scheme_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = make_sweep(tmp_path / "sweep")
    assert main([str(sweep), "--tracking-uri", "ftp://host/mlruns"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --tracking-uri ftp://host/mlruns: ") and "sqlite" in err and "Traceback" not in err
