"""A solo's repeats over a share of the floor (``measure.repeat_floor``, raycolloc/driver/floor.py): the
rule on synthetic windows, the spec and hash it gives a repeat, and that a resume under another setting
does not take such a run for its own."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raycolloc.config import ConfigError, config_hash, first_run_hash, measured_floor
from raycolloc.driver.floor import Floor, judge
from raycolloc.driver.regrow import Regrow
from raycolloc.driver.repeats import group_key
from raycolloc.driver.resume import CellResult
from raycolloc.spec import CellSpec

from .conftest import load, write_fixture_cell

STEADY = [0.1, 0.1, 0.101, 0.099, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]  # ten windows of 10 steps, ~100 steps/s
RISING = [0.1] * 5 + [0.095] * 5  # the later half 5.3% faster: clocks still climbing


def _measured(seconds: list[float], job: int = 0, steps: int = 10) -> dict[str, Any]:
    return {
        "job_index": job,
        "epoch": 2,
        "window_steps": [steps] * len(seconds),
        "window_s": seconds,
        "wall_s": sum(seconds),
        "steps": steps * len(seconds),
    }


SOLO = ["degree=1", "epoch_samples=160", "batch_size=8", "min_epoch_s=1"]
HALF = "measure.repeat_floor=0.5"  # a share asked for (the default is 0.3)


def _solo(*words: str) -> CellSpec:
    # min_epoch_s=1: a floor on simulated GPUs too (auto is 5 s on a real one only); 20 steps an epoch,
    # so a first run of 100 steps in 1 s ran the floor: its own steps took 0.2 s of it
    return load([*SOLO, *words])


def test_a_solo_teaches_its_repeats_the_share_of_the_floor_and_what_that_saves() -> None:
    solo = _solo()
    assert measured_floor(solo.config) == 1.0 and solo.jobs[0].steps_per_epoch == 20
    # Its measured epoch ran the floor: 1.0 s, 100 steps; a repeat runs 0.5 s (its 20 steps take 0.2 s).
    floor = judge(solo, [_measured(STEADY)], 0.5)
    assert floor.share == 0.5 and floor.saved_s == pytest.approx(0.5)
    # A rate that moved within the epoch changes nothing: more runs, not longer ones, narrow a solo's
    # interval (raycolloc/driver/floor.py).
    assert judge(solo, [_measured(RISING)], 0.5).share == 0.5
    assert judge(solo, [_measured(STEADY)], 0.8).saved_s == pytest.approx(0.2)
    # An epoch whose own steps outlast the floor saves nothing: its repeats keep the whole floor (and hash).
    slow = judge(_solo("epoch_samples=800"), [_measured(STEADY)], 0.5)  # 100 steps: 1 s, the floor's own
    assert slow == Floor(1.0, 0.0, "its steps outlast the floor: nothing to save")


@pytest.mark.parametrize(
    ("rows", "words", "share", "why"),
    [
        ([], [], 0.5, "no measured epoch"),
        ([_measured(STEADY)], [], 1.0, "whole floor asked"),
        ([_measured(STEADY)], ["min_epoch_s=null"], 0.5, "no floor"),
    ],
)
def test_a_first_run_that_says_too_little_keeps_the_whole_floor(
    rows: list[dict[str, Any]], words: list[str], share: float, why: str
) -> None:
    floor = judge(_solo(*words), rows, share)
    assert floor.share == 1.0 and floor.saved_s == 0.0 and why in floor.why


def test_only_a_solos_repeats_and_never_a_scripts(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('trained')\n")
    x2 = load(["degree=2", "epoch_samples=160", "batch_size=8", "min_epoch_s=1"])
    assert judge(x2, [_measured(STEADY, 0), _measured(STEADY, 1)], 0.5).share == 1.0
    script = load(["degree=1", "workload=script", f"workload.command=[python,{tmp_path}/train.py]", "min_epoch_s=1"])
    assert judge(script, [_measured(STEADY)], 0.5) == Floor(1.0, 0.0, "a script runs as written")


def test_a_shortened_repeat_is_its_own_run_in_the_hash_and_its_first_runs_configuration() -> None:
    solo = _solo()
    whole = dataclasses.replace(solo.config, repeat=1)
    half = dataclasses.replace(solo.config, repeat=1, floor_share=0.5)
    assert measured_floor(half) == 0.5
    assert config_hash(half) != config_hash(whole)  # a resume under another setting does not take it
    assert first_run_hash(half) == first_run_hash(whole) == solo.config_hash  # one configuration
    assert config_hash(solo.config) == config_hash(dataclasses.replace(solo.config, floor_share=1.0))


@pytest.mark.parametrize(
    ("words", "match"),
    [
        (["floor_share=0.5"], r"floor_share=0.5 is not allowed on a first run \(repeat=0\)"),
        (["floor_share=0", "repeat=1"], r"floor_share=0\.0 is not allowed; it must be a number in \(0, 1\]"),
        (["floor_share=nan", "repeat=1"], r"floor_share=nan is not allowed"),
        (["measure.repeat_floor=0"], r"measure.repeat_floor=0\.0 is not allowed; it must be a number 0.1..1"),
        (["measure.repeat_floor=inf"], r"measure.repeat_floor=inf is not allowed"),
        (["measure.repeat_floor=1.5"], r"measure.repeat_floor=1.5 is not allowed"),
    ],
)
def test_a_bad_share_is_refused_by_name(words: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load(words)


def _first_run(tmp_path: Path, seconds: list[float]) -> Path:
    first = tmp_path / "first"
    first.mkdir(parents=True)
    warm = {**_measured([0.3, 0.2, *STEADY[2:]]), "epoch": 1}
    pq.write_table(pa.Table.from_pylist([warm, _measured(seconds)]), first / "epochs.parquet")
    return first


def _ok(gpu_s: float) -> SimpleNamespace:
    return SimpleNamespace(
        status="ok", agg_samples_per_s=100.0, agg_rate_low=80.0, agg_rate_high=120.0, started_at=0.0, finished_at=gpu_s
    )


def _repeats(tmp_path: Path, seconds: list[float], *words: str) -> list[CellSpec]:
    solo, x2 = _solo(*words), load(["degree=2", "epoch_samples=160", "batch_size=8", "min_epoch_s=1"])
    regrow = Regrow([solo, x2], place=lambda spec: tmp_path / spec.cell_id, rerun=True)
    first = _first_run(tmp_path, seconds)
    growth = regrow.expand([CellResult(solo, tmp_path / "gone", "ok", "", reused_from=first, row=_ok(10.0))])
    return [spec for spec, _ in growth.front + growth.back]


def test_a_steady_solos_repeat_runs_half_the_floor_under_its_own_hash_in_its_configuration(tmp_path: Path) -> None:
    (repeat,) = _repeats(tmp_path, STEADY, HALF)
    solo = _solo()
    assert repeat.config.repeat == 1 and repeat.config.floor_share == 0.5
    assert repeat.jobs[0].min_epoch_s == 0.5 and repeat.jobs[0].epoch_floor_s(2) == 0.5
    assert repeat.jobs[0].epoch_steps(2) == 20  # still every step of an epoch
    assert group_key(repeat) == solo.config_hash  # its configuration's first run
    # The same first run read again (a resume) gives the same run; another setting, another run.
    (again,) = _repeats(tmp_path / "again", STEADY, HALF)
    (whole,) = _repeats(tmp_path / "whole", STEADY, "measure.repeat_floor=1")
    assert again.config_hash == repeat.config_hash != whole.config_hash
    assert whole.jobs[0].min_epoch_s == 1.0 and whole.config.floor_share == 1.0


def test_by_default_a_solos_repeats_run_three_tenths_of_the_floor_drifting_or_not(tmp_path: Path) -> None:
    """The default: four runs, the repeats over 0.3 of the floor (on the corpus's H200 runs, narrower
    intervals than three whole runs for less GPU time: jobs/floor_whatif.py, docs/measurements.md)."""
    assert _solo().config.measure.repeat_floor == 0.3 and _solo().config.measure.min_solo_repeats == 4
    for seconds in (STEADY, RISING):
        (repeat,) = _repeats(tmp_path / str(len(set(seconds))), seconds)
        assert repeat.config.floor_share == 0.3 and repeat.jobs[0].min_epoch_s == pytest.approx(0.3)
        assert repeat.config_hash != config_hash(dataclasses.replace(_solo().config, repeat=1))
    (whole,) = _repeats(tmp_path / "whole", STEADY, "measure.repeat_floor=1")
    assert whole.config.floor_share == 1.0 and whole.jobs[0].min_epoch_s == 1.0
    assert whole.config_hash == config_hash(dataclasses.replace(_solo().config, repeat=1))


def test_a_half_floor_repeats_hydra_record_composes_it_again(tmp_path: Path) -> None:
    """Its ``.hydra`` record (the launcher's origin) gives back the same run: its floor share and hash."""
    from omegaconf import open_dict

    from raycolloc.config import load_config
    from raycolloc.driver.cell_specs import SweepOptions, validate_cell
    from raycolloc.driver.launcher import _origin

    from .conftest import CPU_OVERRIDES, compose

    overrides = [*CPU_OVERRIDES, *SOLO, HALF]
    solo = validate_cell(compose(overrides))
    (repeat,) = _repeats(tmp_path, STEADY, HALF)
    composed = compose(overrides)
    with open_dict(composed):
        composed.hydra = {"job": {"name": "sweep"}}  # the node Hydra's job config has, which the record drops
    origin = _origin([(composed, solo, SweepOptions())], [overrides], repeat)
    assert "floor_share=0.5" in origin.overrides and "repeat=1" in origin.overrides
    again = validate_cell(compose(list(origin.overrides)))
    assert again.config_hash == repeat.config_hash and again.jobs[0].min_epoch_s == 0.5
    assert validate_cell(load_config(origin.config)).config_hash == repeat.config_hash


def test_a_resume_finds_the_half_floor_repeat_on_disk_and_another_setting_does_not(tmp_path: Path) -> None:
    """``_on_disk`` looks the repeat up by the hash its first run teaches: the run the first invocation
    added is found again; under the default share or the whole floor it is another run."""
    out = tmp_path / "out"
    words = [f"out_dir={out}"]
    (repeat,) = _repeats(tmp_path / "a", STEADY, *words, HALF)
    row = {"cell_id": repeat.cell_id, "config_hash": repeat.config_hash, "status": "ok", "repeat": 1}
    write_fixture_cell(
        out / "multirun" / "d" / "t" / repeat.label, {"cells": [row], "jobs": [], "epochs": [], "telemetry": []}
    )

    def on_disk(*more: str) -> bool:
        solo = _solo(*words, *more)
        x2 = load(["degree=2", "epoch_samples=160", "batch_size=8", "min_epoch_s=1", *words])
        regrow = Regrow([solo, x2], place=lambda spec: tmp_path / spec.cell_id, rerun=False)
        first = _first_run(tmp_path / f"b{'-'.join(more)}", STEADY)
        regrow._first_run(CellResult(solo, tmp_path / "gone", "ok", "", reused_from=first, row=_ok(10.0)))
        return regrow._on_disk(solo, 1)

    assert on_disk(HALF) and not on_disk() and not on_disk("measure.repeat_floor=1")


@pytest.mark.slow  # one small sweep on the simulated backend, then its resume
def test_a_sim_sweeps_solo_repeats_over_half_its_floor_and_its_resume_finds_them(tmp_path: Path) -> None:
    """The engine's whole path: the first run judged, the repeats placed with their ``.hydra`` record
    (the launcher), run over half the floor, recorded with it, and found again on resume (under another
    setting it is not: test_a_resume_finds_the_half_floor_repeat_on_disk_and_another_setting_does_not). The jobs
    sleep 30 ms a step (tests/sleepy_workload.py): their epochs' lengths hold whatever the machine's load."""
    from analysis.load import load_sweeps
    from raycolloc.driver.cell_specs import validate_cell

    from . import sleepy_workload
    from .conftest import ROOT, compose, run_cli

    out = tmp_path / "res"
    args = [
        *sleepy_workload.WORDS[:2],
        "workload.args={step_ms:30}",
        "degree=1",
        "cluster=local",
        "batch_size=1",
        "epoch_samples=5",  # 5 steps (0.15 s): the floor's half (0.75 s) is the repeats' measured epoch
        "min_epoch_s=1.5",  # ~50 steps measured in ~10 windows of 5
        "measure.budget=0",  # no re-run for an interval: the runs are the solo's four
        HALF,
        f"out_dir={out}",
    ]
    proc = run_cli(args, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tables = load_sweeps([out], all_results=True)
    cells = tables.table("cells").sort_values("repeat")
    first = cells[cells["repeat"] == 0]
    epochs = tables.table("epochs")
    spec = validate_cell(compose(args))  # the first run's spec, composed again
    assert spec.config_hash == first["config_hash"].iloc[0]
    taught = judge(spec, epochs[epochs["cell_id"] == first["cell_id"].iloc[0]].to_dict("records"), 0.5)
    assert taught.share == 0.5, (taught, epochs[["cell_id", "epoch", "window_s"]].to_string())
    jobs = tables.table("jobs").merge(cells[["cell_id", "repeat"]]).set_index("repeat")
    assert jobs["min_epoch_s"].to_dict() == {0: 1.5, 1: 0.75, 2: 0.75, 3: 0.75}
    measured = epochs[epochs["epoch"] == 2].merge(cells[["cell_id", "repeat"]]).set_index("repeat")["wall_s"]
    assert all(0.75 <= measured[r] < 1.5 for r in (1, 2, 3)) and measured[0] >= 1.5
    groups = cells.set_index("repeat")["repeat_group"].to_dict()
    assert groups[1] == groups[2] == groups[3] == first["config_hash"].iloc[0]
    again = run_cli(args, cwd=ROOT)  # resume: the half-floor repeats found on disk, by their own hash
    assert again.returncode == 0, again.stderr[-3000:]
    assert re.search(r"repeats auto: 3 solo repeats, .* \(3 of them found on disk\)", again.stdout), again.stdout


def test_a_run_made_again_under_another_floor_share_replaces_the_older_in_the_analysis(tmp_path: Path) -> None:
    """A resume under another ``measure.repeat_floor`` runs a solo's repeat again under another hash: the
    analysis counts each run of a configuration once, the newest ``(repeat_group, repeat)``."""
    from analysis.load import load_sweeps

    from .test_analysis import cell, job

    common: dict[str, Any] = {"repeat_group": "g", "agg": 200.0}
    cell(tmp_path, "r0", "cnn", "naive", [job(0, "cnn", 1.5)], repeat=0, config_hash="g", finished_at=1.0, **common)
    cell(tmp_path, "half", "cnn", "naive", [job(0, "cnn", 1.5)], repeat=1, config_hash="h1", finished_at=2.0, **common)
    cell(tmp_path, "whole", "cnn", "naive", [job(0, "cnn", 1.5)], repeat=1, config_hash="h2", finished_at=3.0, **common)
    cells = load_sweeps([tmp_path]).cells
    assert sorted(cells["label"]) == ["r0", "whole"]
