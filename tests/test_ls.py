"""``python -m raycolloc.ls``: past sweeps and one sweep's cells, from fixture sweeps written with the
real writer (a reused cell's reference followed, as the report follows it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from raycolloc.ls import find_sweeps, main
from raycolloc.results.index import Reused, write_reference

from .test_analysis import cell, job

ROOT = Path(__file__).resolve().parents[1]


def _sweeps(out: Path) -> tuple[Path, Path]:
    first = out / "multirun" / "2024-01-01" / "10-00-00"
    cell(
        first,
        "tiny_cnn-naive-x1",
        "tiny_cnn",
        "naive",
        [job(0, "tiny_cnn", 1.5)],
        agg=213.0,
        started_at=1000.0,
        label="tiny_cnn-naive-x1",
        energy_per_sample_j=0.25,
    )
    cell(
        first,
        "tiny_cnn-naive-x2",
        "tiny_cnn",
        "naive",
        [job(i, "tiny_cnn", None, status="oom", error="CUDA OOM") for i in range(2)],
        agg=None,
        status="oom",
        reason="job 0: CUDA OOM",
        started_at=1001.0,
        label="tiny_cnn-naive-x2",
    )
    (first / "multirun.yaml").write_text(
        yaml.safe_dump({"hydra": {"overrides": {"task": ["degree=1,2", "mode=naive", "workload=tiny_cnn"]}}})
    )
    second = out / "multirun" / "2024-01-02" / "09-00-00"
    cell(
        second,
        "mix-tiny_mixed-mps",
        "tiny_cnn+tiny_dlrm",
        "mps",
        [job(0, "tiny_cnn", 1.0), job(1, "tiny_dlrm", 2.0)],
        agg=None,
        mix="tiny_mixed",
        total_s=4.25,
        total_energy_j=1234.5,
        started_at=2000.0,
        label="mix-tiny_mixed-mps",
    )
    write_reference(second / "tiny_cnn-naive-x1", Reused(first / "tiny_cnn-naive-x1", "ok"), "hash")
    (second / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"overrides": {"task": ["mix=tiny_mixed"]}}}))
    return first, second


def test_lists_sweeps_oldest_first_with_command_and_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = _sweeps(tmp_path)
    sweeps = find_sweeps(tmp_path)
    assert [s.path for s in sweeps] == [first, second]
    assert [(len(s.cells), s.n_ok) for s in sweeps] == [(2, 1), (2, 2)]
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "multirun/2024-01-01/10-00-00" in out and "python -m raycolloc.sweep -m degree=1,2 mode=naive" in out
    line = next(ln for ln in out.splitlines() if "2024-01-02/09-00-00" in ln)
    assert line.split()[3:7] == ["2", "2", "0", "1"]  # cells, ok, not ok, reused


def test_lists_one_sweeps_cells_with_headline_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = _sweeps(tmp_path)
    assert main([str(first)]) == 0
    out = capsys.readouterr().out
    assert "2 cells: 1 ok, 1 not ok" in out
    assert "213 samples/s, 0.25 J/sample" in out and "reason: job 0: CUDA OOM" in out
    assert main([str(tmp_path), "--sweep", "last"]) == 0
    out = capsys.readouterr().out
    assert "mix tiny_mixed" in out and "total 4.25 s, 1,234.5 J" in out
    assert f"(reused: {first / 'tiny_cnn-naive-x1'})" in out


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    _sweeps(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "raycolloc.ls", str(tmp_path), "--sweep", "7"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and "--sweep='7' is not allowed; choose last or 1..2" in proc.stderr
    assert main([str(tmp_path / "nowhere")]) == 2
