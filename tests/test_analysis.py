"""Tests for analysis/: tables from fixture sweeps with known numbers, figures, the report CLI.

Fixture cells are written with the real writer (raycolloc.results.store.write_cell); the numbers are
chosen so each table's expected values can be computed by hand.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analysis.figures import make_figures
from analysis.gains import gain_table
from analysis.load import SweepDirError, load_sweeps
from analysis.meta import config_tables, environment_table, failed_cells_table
from analysis.mixed import mixed_table
from analysis.report import build_report, main
from analysis.tables import baseline_table, cell_metrics_table, epoch2_table
from raycolloc.results import rows as result_rows

from .conftest import write_fixture_cell

ROOT = Path(__file__).resolve().parents[1]
GPU = "Test GPU-80GB"
T0 = 1_000.0


def job(
    index: int,
    workload: str,
    epoch2_s: float | None,
    *,
    total_s: float | None = None,
    status: str = "ok",
    error: str | None = None,
    compile_mode: str = "off",
    samples: int = 300,
) -> dict[str, Any]:
    """A job row plus the ``_epochs`` it ran: warm-up of 2 s from T0, then epoch 2."""
    total = total_s if total_s is not None else (2.0 + epoch2_s if epoch2_s else None)
    return {
        "job_index": index,
        "job_name": f"{index}-{workload}",
        "workload": workload,
        "status": status,
        "error": error,
        "batch_size": 30,  # 300 samples: whole batches, as a real epoch runs
        "epochs": 2,
        "epoch_samples": samples,
        "total_s": total,
        "epoch2_s": epoch2_s,
        "measured_s": epoch2_s,
        "epoch2_samples_per_s": samples / epoch2_s if epoch2_s else None,
        "compile": compile_mode,
        "amp": "off",
        "channels_last": False,
        "gpu_uuid": "GPU-test",
    }


def epochs_of(j: dict[str, Any], warmup_s: float = 2.0, start: float = T0, gap: float = 0.0) -> list[dict[str, Any]]:
    if not j["epoch2_s"]:
        return []
    e1 = {
        "job_index": j["job_index"],
        "epoch": 1,
        "warmup": True,
        "start_ts": start,
        "end_ts": start + warmup_s,
        "wall_s": warmup_s,
        "samples": j["epoch_samples"],
        "samples_per_s": j["epoch_samples"] / warmup_s,
    }
    s2 = start + warmup_s + gap
    e2 = {
        "job_index": j["job_index"],
        "epoch": 2,
        "warmup": False,
        "start_ts": s2,
        "end_ts": s2 + j["epoch2_s"],
        "wall_s": j["epoch2_s"],
        "samples": j["epoch_samples"],
        "samples_per_s": j["epoch2_samples_per_s"],
    }
    return [e1, e2]


def telemetry(end: float, *, sm: bool = True, jobs: int = 1) -> list[dict[str, Any]]:
    """GPU-scope samples every 0.5 s from T0 to ``end`` and one process sample per job."""
    rows, ts = [], T0
    while ts <= end + 1e-9:
        rows.append(
            {
                "scope": "gpu",
                "ts": ts,
                "source": "sim-gpm" if sm else "sim-nvml",
                "gpu_uuid": "GPU-test",
                "sm_active": 50.0 if sm else None,
                "mem_used_mib": 1024.0 * jobs,
                "power_w": 200.0,
                "energy_mj": 200_000.0 * (ts - T0),
                "pcie_rx_bytes_s": 1e7,
            }
        )
        for i in range(jobs):
            rows.append(
                {
                    "scope": "process",
                    "ts": ts,
                    "source": "sim-gpm",
                    "gpu_uuid": "GPU-test",
                    "pid": 100 + i,
                    "job_index": i,
                    "proc_gpu_mem_mib": 1000.0,
                }
            )
        ts += 0.5
    return rows


def cell(
    root: Path,
    name: str,
    workload: str,
    mode: str,
    jobs: list[dict[str, Any]],
    *,
    agg: float | None,
    status: str = "ok",
    reason: str | None = None,
    mix: str | None = None,
    energy_j: float | None = 100.0,
    epochs: list[dict[str, Any]] | None = None,
    sm: bool = True,
    total_s: float | None = None,
    extra_config: dict[str, Any] | None = None,
    **columns: Any,
) -> str:
    """Write one cell dir ``root/name`` through the real writer (``columns``: more cell columns);
    returns its cell_id."""
    cell_id = f"{name}-{mode}"
    eps = epochs if epochs is not None else [e for j in jobs for e in epochs_of(j)]
    measured = [e for e in eps if not e["warmup"]]
    start = min((e["start_ts"] for e in measured), default=None)
    end = max((e["end_ts"] for e in measured), default=None)
    config = {
        "workload": {"name": workload},
        "mode": {"name": mode},
        "degree": len(jobs),
        "seed": 0,
        "mix": {"name": mix},
        **(extra_config or {}),
    }
    env = {"python": "3.11.7", "torch": "2.5.0", "gpu_name": GPU, "driver": "550.54"}
    row = {
        "cell_id": cell_id,
        "label": name,
        "status": status,
        "reason": reason,
        "mode": mode,
        "degree": len(jobs),
        "workload": workload,
        "mix": mix,
        "gpu_name": GPU,
        "driver": "550.54",
        "backend": "sim",
        "telemetry_source": "sim-gpm" if sm else "sim-nvml",
        "measured_start_ts": start,
        "measured_end_ts": end,
        "makespan_s": (end - start) if start is not None else None,
        "agg_samples_per_s": agg,
        "n_jobs": len(jobs),
        "n_ok": sum(j["status"] == "ok" for j in jobs),
        "total_s": total_s,
        "sm_active_mean": 50.0 if sm else None,
        "sm_active_max": 60.0 if sm else None,
        "mem_used_max_mib": 1024.0 * len(jobs),
        "energy_j": energy_j,
        "power_mean_w": 200.0,
        "config_json": json.dumps(config),
        "env_json": json.dumps(env),
        **columns,
    }
    for j in jobs:
        j["cell_id"] = cell_id
    for e in eps:
        e["cell_id"] = cell_id
    tel = [
        dict(r, cell_id=cell_id) for r in telemetry(max((e["end_ts"] for e in eps), default=T0), sm=sm, jobs=len(jobs))
    ]
    write_fixture_cell(root / name, {"cells": [row], "jobs": jobs, "epochs": eps, "telemetry": tel})
    return cell_id


def make_sweep(root: Path) -> Path:
    """A sweep with known numbers (solo epoch-2 throughput 200 samples/s for cnn naive)."""
    cell(root, "0", "cnn", "naive", [job(0, "cnn", 1.5, total_s=12.0)], agg=200.0, extra_config={"rerun": False})
    cell(root, "1", "cnn", "naive", [job(0, "cnn", 1.5), job(1, "cnn", 1.5)], agg=400.0)
    cell(root, "2", "cnn", "naive", [job(0, "cnn", 3.0), job(1, "cnn", 3.0), job(2, "cnn", 6.0)], agg=250.0)
    cell(
        root,
        "3",
        "cnn",
        "naive",
        [job(i, "cnn", None, status="oom", error="CUDA out of memory") for i in range(4)],
        agg=None,
        status="oom",
        reason="job 0: CUDA out of memory",
        energy_j=None,
    )
    cell(root, "4", "cnn", "mps", [job(0, "cnn", 1.0)], agg=300.0)
    cell(root, "5", "cnn", "mps", [job(0, "cnn", 1.5), job(1, "cnn", 1.0)], agg=450.0)
    cell(root, "6", "cnn", "naive", [job(0, "cnn", 0.5, compile_mode="default")], agg=600.0)  # compiled: best solo
    cell(root, "7", "mlp", "naive", [job(0, "mlp", 4.0, total_s=18.0)], agg=75.0)
    # Mixed: job 0 (cnn) trains 1000-1004 (warm-up) and 1004-1010, job 1 (mlp) 1002-1010 and 1013-1025:
    # totals 10 s and 20 s, makespan 25 s; solo runs 12 s + 18 s = 30 s in sequence.
    mixed = [job(0, "cnn", 6.0, total_s=10.0), job(1, "mlp", 12.0, total_s=20.0)]
    eps = epochs_of(mixed[0], warmup_s=4.0) + epochs_of(mixed[1], warmup_s=8.0, start=T0 + 2.0, gap=3.0)
    cell(root, "8", "cnn+mlp", "naive", mixed, agg=None, mix="cnn_mlp", epochs=eps, total_s=20.0)
    mixed_mps = [job(0, "cnn", 6.0, total_s=10.0), job(1, "mlp", 12.0, total_s=20.0)]
    cell(root, "9", "cnn+mlp", "mps", mixed_mps, agg=None, mix="cnn_mlp", total_s=20.0)
    return root


@pytest.fixture()
def sweep(tmp_path: Path) -> Path:
    return make_sweep(tmp_path / "multirun" / "2024-01-01" / "10-00-00")


def row(frame: pd.DataFrame, **match: Any) -> pd.Series:
    mask = pd.Series(True, index=frame.index)
    for key, value in match.items():
        mask &= frame[key] == value
    hits = frame[mask]
    assert len(hits) == 1, f"{match}: {len(hits)} rows"
    return hits.iloc[0]


def test_load_adds_sweep_and_keeps_failed_cells(sweep: Path) -> None:
    data = load_sweeps([sweep])
    assert len(data.cells) == 10 and len(data.jobs) == 19
    assert set(data.cells["sweep"]) == {"2024-01-01/10-00-00"} == set(data.telemetry["sweep"])
    assert data.sweeps == ("2024-01-01/10-00-00",)
    oom = row(data.cells, cell_id="3-naive")
    assert oom["status"] == "oom" and bool(oom["failed"])
    assert int(data.cells["failed"].sum()) == 1


def test_load_several_sweeps_loads_each_cell_once(sweep: Path, tmp_path: Path) -> None:
    other = tmp_path / "other" / "2024-01-02" / "11-00-00"
    cell(other, "0", "cnn", "naive", [job(0, "cnn", 1.5)], agg=210.0)
    data = load_sweeps([sweep, other, sweep.parent])  # the parent re-finds sweep's cells: no duplicates
    assert len(data.cells) == 11
    assert data.cells.groupby("sweep").size().to_dict() == {"2024-01-01/10-00-00": 10, "2024-01-02/11-00-00": 1}


def test_missing_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SweepDirError, match=r"does not exist.*cells\.parquet") as info:
        load_sweeps([tmp_path / "nope"])
    assert str(tmp_path / "nope") in str(info.value)


def test_foreign_dir_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "cells.csv").write_text("a,b\n1,2\n")
    with pytest.raises(SweepDirError, match=r"no cells\.parquet found anywhere under") as info:
        load_sweeps([tmp_path])
    assert str(tmp_path) in str(info.value)


def test_other_schema_version_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(result_rows, "SCHEMA_VERSION", 99)
    cell(tmp_path, "0", "cnn", "naive", [job(0, "cnn", 1.5)], agg=200.0)
    monkeypatch.undo()
    with pytest.raises(SweepDirError, match=r"schema_version \[99\].*reads versions 1, 2"):
        load_sweeps([tmp_path])


def test_gain_table_ratios_and_slowdown(sweep: Path) -> None:
    data = load_sweeps([sweep])
    gain = gain_table(data.cells, data.jobs)
    assert set(gain["workload"]) == {"cnn", "mlp"}  # mixed cells are in the mixed table, not here
    off = "compile=off amp=off channels_last=False"
    x2 = row(gain, workload="cnn", mode="naive", degree=2)
    assert x2["gain_vs_solo"] == 2.0 and x2["solo_samples_per_s"] == 200.0
    assert x2["gain_vs_best_solo"] == pytest.approx(400.0 / 600.0)
    assert x2["best_solo"] == "naive compile=default amp=off channels_last=False"
    assert x2["slowdown_mean"] == 1.0 and x2["slowdown_max"] == 1.0
    x3 = row(gain, workload="cnn", mode="naive", degree=3)
    assert x3["gain_vs_solo"] == 1.25
    assert x3["slowdown_mean"] == pytest.approx(8.0 / 3.0) and x3["slowdown_max"] == 4.0
    mps2 = row(gain, workload="cnn", mode="mps", degree=2)
    assert mps2["gain_vs_solo"] == 1.5 and mps2["gain_vs_best_solo"] == 0.75
    assert mps2["slowdown_max"] == 1.5  # 1.5 s against the mps solo's 1.0 s
    compiled = row(gain, workload="cnn", mode="naive", degree=1, settings=off.replace("off amp", "default amp"))
    assert compiled["gain_vs_solo"] == 1.0 and compiled["gain_vs_best_solo"] == 1.0
    oom = row(gain, workload="cnn", degree=4)
    assert oom["status"] == "oom" and math.isnan(oom["gain_vs_solo"]) and math.isnan(oom["gain_vs_best_solo"])


def test_epoch2_table_per_job(sweep: Path) -> None:
    data = load_sweeps([sweep])
    e2 = epoch2_table(data.cells, data.jobs)
    x3 = e2[(e2["mode"] == "naive") & (e2["degree"] == 3)].sort_values("job_index")
    assert x3["epoch2_s"].tolist() == [3.0, 3.0, 6.0]
    assert x3["slowdown"].tolist() == [2.0, 2.0, 4.0]
    mixed_mlp = row(e2, mix="cnn_mlp", mode="naive", job_workload="mlp")
    assert mixed_mlp["solo_epoch2_s"] == 4.0 and mixed_mlp["slowdown"] == 3.0  # per job workload
    oom_jobs = e2[e2["cell_status"] == "oom"]
    assert len(oom_jobs) == 4 and oom_jobs["slowdown"].isna().all() and set(oom_jobs["status"]) == {"oom"}


def test_cell_metrics_table(sweep: Path) -> None:
    data = load_sweeps([sweep])
    metrics = cell_metrics_table(data.cells, data.epochs)
    x2 = row(metrics, cell_id="1-naive")
    assert (x2["sm_active_mean"], x2["sm_active_max"], x2["mem_used_max_mib"]) == (50.0, 60.0, 2048.0)
    assert x2["measured_job_epochs"] == 2 and x2["energy_per_job_epoch_j"] == 50.0
    oom = row(metrics, cell_id="3-naive")
    assert oom["status"] == "oom" and oom["measured_job_epochs"] == 0 and math.isnan(oom["energy_per_job_epoch_j"])


def test_mixed_table_serial_baseline(sweep: Path) -> None:
    data = load_sweeps([sweep])
    mixed = mixed_table(data.cells, data.jobs, data.epochs)
    assert len(mixed) == 4  # two mixed cells, two jobs each
    naive = mixed[mixed["mode"] == "naive"].sort_values("job_index")
    assert naive["job_total_s"].tolist() == [10.0, 20.0]
    assert naive["solo_total_s"].tolist() == [12.0, 18.0]
    assert naive["job_slowdown"].tolist() == pytest.approx([10.0 / 12.0, 20.0 / 18.0])
    assert set(naive["cell_total_s"]) == {25.0}  # makespan from the epochs, not max job total (20 s)
    assert set(naive["serial_s"]) == {30.0}
    assert naive["change_vs_sequential_pct"].iloc[0] == pytest.approx(100.0 * (25.0 / 30.0 - 1.0))
    mps = mixed[mixed["mode"] == "mps"].sort_values("job_index")
    assert mps["solo_total_s"].iloc[0] == 3.0  # the mps cnn solo: 2 s warm-up + 1 s epoch 2
    assert mps["serial_s"].isna().all() and set(mps["solo_missing"]) == {"1-mlp"}
    assert mps["change_vs_sequential_pct"].isna().all()


def test_baseline_table_ratios(tmp_path: Path) -> None:
    cur, base = tmp_path / "cur", tmp_path / "base"
    cell(cur, "0", "cnn", "naive", [job(0, "cnn", 1.5)], agg=200.0, energy_j=100.0, energy_per_sample_j=0.5)
    cell(cur, "1", "cnn", "mps", [job(0, "cnn", 1.0)], agg=300.0)
    cell(base, "0", "cnn", "naive", [job(0, "cnn", 3.0)], agg=100.0, energy_j=50.0, energy_per_sample_j=0.25)
    a, b = load_sweeps([cur]), load_sweeps([base])
    table = baseline_table(a.cells, a.jobs, b.cells, b.jobs)
    both = row(table, mode="naive")
    assert (both["present"], both["agg_ratio"], both["epoch2_ratio"], both["energy_ratio"]) == ("both", 2.0, 0.5, 2.0)
    only = row(table, mode="mps")
    assert only["present"] == "current only" and math.isnan(only["agg_ratio"])


def test_meta_tables(sweep: Path) -> None:
    data = load_sweeps([sweep])
    failed = failed_cells_table(data.cells, data.jobs)
    assert failed["cell_id"].tolist() == ["3-naive"]
    assert failed["reason"].iloc[0] == "job 0: CUDA out of memory"
    assert failed["job_errors"].iloc[0].startswith("0-cnn: oom: CUDA out of memory")
    shared, varying = config_tables(data.cells)
    assert dict(zip(shared["key"], shared["value"], strict=True)) == {"seed": "0"}
    assert {"workload.name", "mode.name", "degree", "mix.name", "rerun"} <= set(varying.columns)  # rerun: one cell
    assert row(varying, cell_id="0-naive")["rerun"] == "false" and varying["rerun"].isna().sum() == 9
    env = dict(zip(*environment_table(data.cells)[["key", "value"]].T.values, strict=True))
    assert env["gpu_name"] == GPU and env["driver"] == "550.54" and env["torch"] == "2.5.0"
    assert env["telemetry_source"] == "sim-gpm"


@pytest.mark.slow  # every figure: ~9-16 s
def test_figures_from_fixture(sweep: Path, tmp_path: Path) -> None:
    data = load_sweeps([sweep])
    skipped: list[str] = []
    paths = make_figures(data, tmp_path / "figs", skipped)
    names = {p.name for p in paths}
    for workload in ("cnn", "mlp"):
        for fig in ("fig2_epoch2_time", "fig3_sm_activity", "fig4_memory", "fig5_pcie_rx", "fig6_energy", "fig7_power"):
            assert f"{fig}_{workload}.png" in names
    assert {"fig8_mixed_total.png", "fig9_mixed_timeline_8-naive.png", "fig9_mixed_timeline_9-mps.png"} <= names
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
    assert skipped == []


@pytest.mark.slow  # figures: ~4.5 s
def test_figures_skip_what_the_data_lacks(tmp_path: Path) -> None:
    cell(tmp_path, "0", "cnn", "mig", [job(0, "cnn", 1.5)], agg=200.0, sm=False)
    skipped: list[str] = []
    names = {p.name for p in make_figures(load_sweeps([tmp_path]), tmp_path / "figs", skipped)}
    assert "fig3_sm_activity_cnn.png" not in names and "fig2_epoch2_time_cnn.png" in names
    assert any(s.startswith("fig3_sm_activity_cnn: no sm_active") and "sim-nvml" in s for s in skipped)
    assert any(s.startswith("fig8_mixed_total: no mixed cells") for s in skipped)


@pytest.mark.slow  # every figure: ~9 s
def test_cli_writes_self_contained_report(sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "base"
    cell(base, "0", "cnn", "naive", [job(0, "cnn", 3.0)], agg=100.0)
    out = tmp_path / "report"
    assert main([str(sweep), "--out", str(out), "--baseline", str(base)]) == 0
    stdout = capsys.readouterr().out
    assert "gain_vs_solo" in stdout and " 2.00 " in stdout and "oom" in stdout
    assert "Mixing memory- and compute-bound jobs pays (collocated beats one after the other): SUPPORTED" in stdout
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == len(list(out.glob("*.png"))) >= 10
    assert "<th>gain vs solo</th>" in page and "<td>2.00</td>" in page
    assert '<td class="bad">oom</td>' in page and "CUDA out of memory" in page
    # Findings come first, the record (environment, configuration) last.
    assert page.index("<h2>Findings</h2>") < page.index("<h2>cnn</h2>") < page.index("<h2>Environment</h2>")
    assert "Test GPU-80GB" in page and "550.54" in page and "sim-gpm" in page
    assert "http://" not in page and "https://" not in page and "<script" not in page and "<link" not in page
    for name in ("gain", "epoch2", "cell_metrics", "mixed", "baseline", "failed_cells", "environment"):
        assert (out / f"{name}.csv").stat().st_size > 0
    assert pd.read_csv(out / "gain.csv").query("mode == 'naive' and degree == 2")["gain_vs_solo"].tolist() == [2.0]


def test_cli_module_errors_on_missing_dir(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "analysis.report", str(tmp_path / "missing"), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "does not exist" in proc.stderr and str(tmp_path / "missing") in proc.stderr
    assert not (tmp_path / "out" / "report.html").exists()


def _real_sweeps() -> list[Path]:
    roots = [Path("/tmp/ana_data"), Path("/tmp/ana_data_mig")]
    return sorted(p for r in roots if r.is_dir() for p in r.glob("multirun/*/*") if any(p.rglob("cells.parquet")))


@pytest.mark.skipif(not _real_sweeps(), reason="no real sweep under /tmp/ana_data (run raycolloc.sweep first)")
def test_report_on_real_sweep(tmp_path: Path) -> None:
    report = build_report(_real_sweeps(), tmp_path)
    gain = report.tables["gain"]
    solo = gain[(gain["degree"] == 1) & (gain["status"] == "ok")]
    assert not solo.empty and (solo["gain_vs_solo"] == 1.0).all()
    assert (gain["gain_vs_best_solo"].dropna() > 0).all()
    assert any(p.name.startswith("fig2_epoch2_time_") for p in report.figures)
    assert "data:image/png;base64," in report.html_path.read_text()


@pytest.mark.slow  # figures: ~4.5 s
def test_partial_and_error_cells_are_failed(tmp_path: Path) -> None:
    cell(tmp_path, "0", "cnn", "mps", [job(0, "cnn", 1.0)], agg=300.0)
    cell(
        tmp_path,
        "1",
        "cnn",
        "mps",
        [job(0, "cnn", 1.5), job(1, "cnn", None, status="error", error="trainer died")],
        agg=200.0,
        status="partial",
        reason="job 1: trainer died",
    )
    cell(
        tmp_path,
        "2",
        "cnn",
        "mps",
        [job(i, "cnn", None, status="error", error="not started") for i in range(3)],
        agg=None,
        status="error",
        reason="TimeoutError: no GPU lease",
    )
    data = load_sweeps([tmp_path])
    assert data.cells.set_index("cell_id")["failed"].to_dict() == {"0-mps": False, "1-mps": True, "2-mps": True}
    failed = failed_cells_table(data.cells, data.jobs)
    assert failed["status"].tolist() == ["partial", "error"]
    assert failed["reason"].tolist() == ["job 1: trainer died", "TimeoutError: no GPU lease"]
    gain = gain_table(data.cells, data.jobs)
    partial = row(gain, degree=2)
    assert partial["agg_samples_per_s"] == 200.0 and math.isnan(partial["gain_vs_solo"])
    assert partial["slowdown_max"] == 1.5  # the surviving job's epoch 2 is still measured
    page = build_report([tmp_path], tmp_path / "out").html_path.read_text()
    assert '<td class="bad">partial</td>' in page and '<td class="bad">error</td>' in page
    assert "TimeoutError: no GPU lease" in page
