"""Issue 29, item 1: resume wherever the sweep wrote, not only under ``out_dir``.

Issue 15's item-1 command, run twice with ``hydra.sweep.dir`` outside ``out_dir``, trained both cells
again and overwrote them: the resume index looked under ``out_dir`` only."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from raycolloc.results.index import REFERENCE, SWEEPS_FILE, ResultIndex, known_sweeps, register_sweeps, sweep_root

from .conftest import run_cli, used_ray, write_fixture_cell

# Issue 15's item-1 command as the issue writes it; X is appended as the issue's `hydra.sweep.dir=X`.
COMMAND = ["-m", "degree=1,2", "mode=naive", "workload=tiny_cnn", "cluster=local", "cluster.num_gpus=2", "repeats=1"]


def _parquet(sweep: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in sweep.rglob("*.parquet")}


@pytest.mark.slow  # three sweeps (two train, on the session's Ray instance)
def test_issue29_item1_a_rerun_into_a_sweep_dir_outside_out_dir_trains_nothing(tmp_path: Path) -> None:
    """The command, twice, from a working directory of its own (so ``out_dir`` is its default,
    ``results/`` there) with X a directory beside it, not under it. The runs that train join the
    session's Ray instance (``cluster.address``, a key that is no part of a cell's hash: a Ray start of
    their own cost each ~13 CPU-seconds, tests/conftest.py, and changed nothing checked here); the dry run and the
    second run are the command verbatim (``own_ray``: nothing added), and the second starts no Ray at all."""
    work, sweep = tmp_path / "work", tmp_path / "elsewhere" / "X"
    work.mkdir()
    command = [*COMMAND, f"hydra.sweep.dir={sweep}"]
    first = run_cli(command, cwd=work)
    assert first.returncode == 0 and used_ray(first), first.stdout[-3000:] + first.stderr[-3000:]
    out_dir = work / "results"
    assert not sweep.is_relative_to(out_dir) and not list(out_dir.rglob("*.parquet"))
    written = _parquet(sweep)
    assert len(written) == 8  # four tables of each of the two cells
    assert sweep.resolve().as_posix() in (out_dir / SWEEPS_FILE).read_text().splitlines()  # the index knows X

    # A dry run reports both cells as reused, where they are.
    dry = run_cli([*command, "+dry_run=true"], cwd=work, own_ray=True)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert dry.stdout.count(f"result in {sweep.resolve()}/") == 2, dry.stdout
    assert "0 cell(s) to run, 2 to reuse" in dry.stdout

    # The same command again: nothing trained, nothing overwritten, one result per cell.
    t0 = time.monotonic()
    second = run_cli(command, cwd=work, own_ray=True)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert time.monotonic() - t0 < 60  # no Ray, no training
    assert not used_ray(second), second.stdout[-3000:]
    assert second.stdout.count("reused; +rerun=true runs it again") == 2, second.stdout[-3000:]
    assert "2 of 2 cells have a result (exit 0)" in second.stdout, second.stdout[-3000:]
    assert _parquet(sweep) == written  # the same files, untouched
    assert len(list(sweep.rglob("cells.parquet"))) == 2 and not list(sweep.rglob(REFERENCE))

    # +rerun=true runs a cell again, result or not.
    x1 = {p for p in written if p.parent.name.endswith("-x1")}
    assert len(x1) == 4
    forced = run_cli([*command, "+rerun=true", "degree=1"], cwd=work)
    assert forced.returncode == 0 and used_ray(forced), forced.stdout[-3000:] + forced.stderr[-3000:]
    assert "reused" not in forced.stdout
    now = _parquet(sweep)
    assert all(now[p] != written[p] for p in x1) and all(now[p] == written[p] for p in set(written) - x1)


def _result(cell_dir: Path, digest: str) -> Path:
    write_fixture_cell(
        cell_dir,
        {"cells": [{"cell_id": cell_dir.name, "config_hash": digest, "status": "ok", "finished_at": 1.0, "n_jobs": 0}]},
    )
    return cell_dir


def test_the_index_of_an_out_dir_finds_results_in_the_sweep_dirs_outside_it_its_sweeps_wrote_to(tmp_path: Path) -> None:
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    a = _result(elsewhere / "X" / "tiny_cnn-naive-x1", "h1")
    b = _result(out / "multirun" / "d" / "t" / "tiny_cnn-naive-x2", "h2")
    c = _result(tmp_path / "unknown" / "tiny_cnn-naive-x3", "h3")
    assert sweep_root([a, a.with_name("tiny_cnn-naive-x2")]) == a.parent and sweep_root([a]) == a
    # Before the sweep into X is registered, only out_dir and the sweep's own directory are looked in.
    assert ResultIndex(out).find("h1") is None and ResultIndex(out, also=[a.parent]).find("h1").path == a.resolve()
    register_sweeps(out, [a.parent, b.parent, tmp_path / "gone"])  # under out_dir: not listed
    register_sweeps(out, [a.parent])  # listed once
    assert known_sweeps(out) == [a.parent.resolve(), (tmp_path / "gone").resolve()]
    index = ResultIndex(out)
    assert index.find("h1").path == a.resolve() and index.find("h2").path == b.resolve()
    assert index.find("h3") is None and c.exists()  # a sweep of another out_dir is not this index's
    assert index.roots == [out.resolve(), a.parent.resolve()]  # a directory gone since is skipped
    assert ResultIndex(tmp_path / "other").find("h1") is None  # the index is one per out_dir
