"""Local mode end to end: a real sweep with uniform and mixed cells, then analysis.report."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .conftest import ROOT, run_cli


def test_sweep_then_report_has_gain_mixed_and_figures(tmp_path: Path) -> None:
    out = tmp_path / "res"
    common = ["cluster=local", "epoch_samples=256", f"out_dir={out}"]
    uniform = run_cli(["-m", "workload=tiny_cnn,tiny_dlrm", "degree=1,2", "mode=naive,mps", *common], cwd=ROOT)
    assert uniform.returncode == 0, uniform.stderr[-3000:]
    mixed = run_cli(["-m", "mix=tiny_mixed", "mode=naive,mps", *common], cwd=ROOT)
    assert mixed.returncode == 0, mixed.stderr[-3000:]
    assert "mixed cells against their jobs run one after the other" in mixed.stdout
    sweeps = sorted(str(p) for p in (out / "multirun").glob("*/*") if p.is_dir())
    report = tmp_path / "report"
    proc = subprocess_report([*sweeps, "--out", str(report)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = (report / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 5
    gain = pd.read_csv(next(report.glob("*gain*.csv")))
    naive2 = gain[(gain.workload == "tiny_cnn") & (gain["mode"] == "naive") & (gain.degree == 2)].iloc[0]
    naive1 = gain[(gain.workload == "tiny_cnn") & (gain["mode"] == "naive") & (gain.degree == 1)].iloc[0]
    assert naive2["gain_vs_solo"] == naive2["agg_samples_per_s"] / naive1["agg_samples_per_s"]
    mixed_csv = pd.read_csv(next(report.glob("*mixed*.csv")))
    assert set(mixed_csv["mode"]) == {"naive", "mps"}
    # The serial baseline exists: both workloads ran alone in the same mode with the same epochs.
    assert mixed_csv["serial_s"].notna().all() and (mixed_csv["serial_s"] > 0).all()
    assert any("fig8" in p.name for p in report.glob("*.png"))


def subprocess_report(args: list[str]):  # noqa: ANN201
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "analysis.report", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
