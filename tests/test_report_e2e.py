"""Local mode end to end: one real sweep with repeats, a uniform cell and a mix (which brings the solo
cell of each of its jobs), then analysis.report and raycolloc.ls; the report's numbers are checked
against numbers computed here from the Parquet tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis.load import load_sweeps

from .conftest import ROOT, run_cli

CELLS = {"tiny_cnn-mps-x2", "mix-tiny_mixed-mps", "tiny_cnn-mps-x1", "tiny_dlrm-mps-x1"}


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )


def test_sweep_with_repeats_and_a_mix_then_report_and_ls(tmp_path: Path) -> None:
    out = tmp_path / "res"
    proc = run_cli(
        [
            "-m",
            "mix=none,tiny_mixed",
            "degree=2",
            "mode=mps",
            "repeats=2",
            "workload=tiny_cnn",
            "cluster=local",
            "epoch_samples=4096",
            "epoch_time_s=0.4",
            f"out_dir={out}",
        ],
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "mixed cells against their jobs run one after the other" in proc.stdout
    (sweep,) = (out / "multirun").glob("*/*")
    assert {p.name for p in sweep.iterdir() if p.is_dir()} == CELLS | {f"{c}-r1" for c in CELLS}
    data = load_sweeps([sweep])
    cells, jobs, epochs = data.cells.set_index("label"), data.jobs, data.epochs
    assert set(cells["status"]) == {"ok"} and sorted(cells["repeat"]) == [0] * 4 + [1] * 4

    # The time budget ended every epoch long before 4096 samples (tiny_cnn trains a few thousand a second):
    # each ran its 0.4 s and stopped short of its samples. (Not a bound on its seconds: how far the last
    # step runs past the budget is the machine's load, not the trainer's doing.)
    cnn = epochs.merge(jobs[["sweep", "cell_id", "job_index", "workload"]], on=["sweep", "cell_id", "job_index"])
    cnn = cnn[cnn["workload"] == "tiny_cnn"]
    assert (cnn["samples"] < 4096).all() and (cnn["wall_s"] >= 0.4).all(), cnn[["samples", "wall_s"]]
    assert jobs["peak_device_mem_mib"].notna().all()  # the simulated device's view of each process
    # Energy and power over one window; energy per sample from the measured epochs.
    uniform = cells[cells["mix"].isna()]
    assert uniform["energy_j"].notna().all()
    assert (uniform["energy_j"] - uniform["power_mean_w"] * uniform["makespan_s"]).abs().max() < 1e-6
    measured = epochs[~epochs["warmup"]].groupby("cell_id")["samples"].sum()
    per_sample = uniform["energy_j"] / uniform["cell_id"].map(measured)
    assert (per_sample - uniform["energy_per_sample_j"]).abs().max() < 1e-12
    assert cells.loc["mix-tiny_mixed-mps", "agg_samples_per_s"] is None or pd.isna(
        cells.loc["mix-tiny_mixed-mps", "agg_samples_per_s"]
    )

    report = tmp_path / "report"
    proc = _python("analysis.report", str(sweep), "--out", str(report))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Gain: each run against the solo of its own repeat, median of the two.
    gain = pd.read_csv(report / "gain.csv")
    x2 = gain[(gain["degree"] == 2)].iloc[0]
    paired = [
        cells.loc[f"tiny_cnn-mps-x2{s}", "agg_samples_per_s"] / cells.loc[f"tiny_cnn-mps-x1{s}", "agg_samples_per_s"]
        for s in ("", "-r1")
    ]
    assert x2["n_runs"] == 2 and x2["gain_vs_solo"] == pytest.approx(sum(paired) / 2)
    assert (x2["gain_vs_solo_min"], x2["gain_vs_solo_max"]) == pytest.approx((min(paired), max(paired)))

    # Table 2 is complete: every job's time alone, from its own solo cells, at the samples it trained.
    t2 = pd.read_csv(report / "table2.csv")
    assert len(t2) == 1 and t2["sequential_s"].notna().all() and t2["change_vs_sequential_pct"].notna().all()
    changes = []
    for sfx in ("", "-r1"):
        mix_id = cells.loc[f"mix-tiny_mixed-mps{sfx}", "cell_id"]
        mix_epochs = epochs[epochs["cell_id"] == mix_id]
        total = mix_epochs["end_ts"].max() - mix_epochs["start_ts"].min()
        serial = 0.0
        for workload in ("tiny_cnn", "tiny_dlrm"):
            solo = jobs[jobs["cell_id"].isin(cells.loc[[f"{workload}-mps-x1", f"{workload}-mps-x1-r1"], "cell_id"])]
            per_sample = (solo["total_s"] / solo["samples"]).median()
            mine = jobs[(jobs["cell_id"] == mix_id) & (jobs["workload"] == workload)]["samples"].iloc[0]
            serial += per_sample * mine
        changes.append(100 * (total / serial - 1))
    assert t2["change_vs_sequential_pct"].iloc[0] == pytest.approx(sum(changes) / 2)
    claims = pd.read_csv(report / "claims.csv")
    verdicts = r"supported|not supported|partly|inconclusive|not enough data"
    assert len(claims) == 7 and claims["verdict"].str.match(verdicts).all()
    mig = claims[claims["claim"].str.startswith("MIG")].iloc[0]
    assert mig["verdict"] == "not enough data" and "mig" in mig["evidence"].lower()
    page = (report / "report.html").read_text()
    assert "Simulated GPUs." in page and "fig8_mixed_total" in page and "fig1_gain_tiny_cnn" in page
    assert "http://" not in page and "https://" not in page and "<script" not in page

    listing = _python("raycolloc.ls", str(out))
    assert listing.returncode == 0, listing.stderr
    line = next(ln for ln in listing.stdout.splitlines() if sweep.name in ln)
    assert line.split()[3:7] == ["8", "8", "0", "0"]
    assert "python -m raycolloc.sweep -m mix=none,tiny_mixed degree=2 mode=mps repeats=2" in listing.stdout
    cells_listing = _python("raycolloc.ls", str(out), "--sweep", "last")
    assert "8 cells: 8 ok, 0 not ok" in cells_listing.stdout and "mix-tiny_mixed-mps-r1" in cells_listing.stdout
