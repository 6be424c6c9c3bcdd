"""The commands that read results refuse a directory that holds none as a bad argument: exit 2, the
path named, no traceback (issue 29, item 6: ``python -m analysis.report`` and ``python -m
raycolloc.advise --validate`` exited 1 on a missing, empty or corrupt directory); ``raycolloc.ls``
names the corrupt table (item 7: a cell with a truncated ``jobs.parquet`` was listed as ``ok``).
Each runs as the user types it, in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, write_fixture_cell

COMMANDS = {
    "report": lambda d, tmp: ["analysis.report", str(d), "--out", str(tmp / "report")],
    "advise-validate": lambda d, tmp: ["raycolloc.advise", "--validate", str(d)],
    "ls": lambda d, tmp: ["raycolloc.ls", str(d)],
}


def _corrupt_sweep(tmp_path: Path) -> tuple[Path, Path]:
    """A sweep of one cell written by the real writer, its ``jobs.parquet`` then cut short (a copy that
    did not finish); returns the sweep and the cut file."""
    sweep = tmp_path / "multirun" / "2026-01-01" / "10-00-00"
    cell = sweep / "tiny_cnn-naive-x1"
    write_fixture_cell(
        cell,
        {
            "cells": [
                {
                    "cell_id": "c1",
                    "config_hash": "h1",
                    "label": "tiny_cnn-naive-x1",
                    "status": "ok",
                    "mode": "naive",
                    "degree": 1,
                    "n_jobs": 1,
                    "workload": "tiny_cnn",
                }
            ],
            "jobs": [{"cell_id": "c1", "job_index": 0, "status": "ok", "workload": "tiny_cnn"}],
        },
    )
    jobs = cell / "jobs.parquet"
    jobs.write_bytes(jobs.read_bytes()[: jobs.stat().st_size // 2])
    return sweep, jobs


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize("state", ["missing", "empty", "corrupt"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_directory_without_results_is_a_bad_argument(command: str, state: str, tmp_path: Path) -> None:
    target = tmp_path / "results"
    if state == "empty":
        target.mkdir()
    elif state == "corrupt":
        target, cut = _corrupt_sweep(target)
    proc = _run(COMMANDS[command](target, tmp_path))
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-3000:]
    assert str(target) in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in text, text[-3000:]
    if state == "corrupt":
        assert f"{cut}: ArrowInvalid" in proc.stderr, proc.stderr[-3000:]  # the table, and why


def test_ls_lists_a_cell_with_a_truncated_table_as_corrupt_naming_it(tmp_path: Path) -> None:
    sweep, cut = _corrupt_sweep(tmp_path / "results")
    proc = _run(["raycolloc.ls", str(sweep)])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = next(line for line in proc.stdout.splitlines() if "tiny_cnn-naive-x1" in line)
    assert " corrupt " in line and f"corrupt: {cut}" in line and " ok " not in line, proc.stdout
    assert "1 cells: 0 ok, 1 not ok (1 with corrupt tables)" in proc.stdout
    assert f"error: cell tiny_cnn-naive-x1: corrupt tables: {cut}" in proc.stderr
