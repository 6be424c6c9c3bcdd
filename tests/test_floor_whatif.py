"""jobs/floor_whatif.py: a solo baseline's interval and GPU time under other repeat policies, read off
runs that warmed up and measured whole (the corpus's H200 runs keep their windows)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from raycolloc.results.stats import mean_interval

from .conftest import ROOT

PASS = ROOT / "corpus" / "passes" / "2026-12-03"


def _script() -> ModuleType:  # jobs/ is no package: load the script as a module
    spec = importlib.util.spec_from_file_location("floor_whatif", ROOT / "jobs" / "floor_whatif.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _run(script: ModuleType, warm: list[float], measured: list[float], steps: int = 10) -> Any:
    rows = (
        {"job_index": 0, "epoch": 1, "window_steps": [steps] * len(warm), "window_s": warm},
        {"job_index": 0, "epoch": 2, "window_steps": [steps] * len(measured), "window_s": measured},
    )
    return script.Run(tuple((steps, t) for t in warm), tuple((steps, t) for t in measured), 2, steps * len(warm), rows)


def test_a_repeat_warms_up_its_steps_then_measures_its_share_of_the_floor_and_an_epoch() -> None:
    script = _script()
    run = _run(script, [1.0, 0.5, 0.1, 0.1], [0.2, 0.2, 0.2, 0.2, 0.2])  # 40 steps an epoch, 1 s measured
    assert script.repeat(run, 40, 1.0) == (run.rate, run.seconds) == (100.0, pytest.approx(2.7))
    # 20 steps warm-up (1.5 s), then 0.5 s and at least 40 steps: two warm-up windows and two measured ones.
    rate, secs = script.repeat(run, 20, 0.5)
    assert rate == pytest.approx(40 * 2 / 0.6) and secs == pytest.approx(2.1)
    # A whole share after a short warm-up reads as long as the floor, from the warm-up's rest on.
    rate, secs = script.repeat(run, 20, 1.0)
    assert rate == pytest.approx(60 * 2 / 1.0) and secs == pytest.approx(2.5)


def test_a_warm_up_learned_past_a_runs_own_is_its_whole_warm_up_and_never_an_empty_measurement() -> None:
    script = _script()
    run = _run(script, [1.0, 0.5, 0.1, 0.1], [0.2, 0.2, 0.2, 0.2, 0.2])
    # 60 steps learned from another run (whose warm-up was longer): this run warms up its own 40 (the tree
    # warms up a whole epoch where the learned steps are no fewer), then measures from its measured epoch.
    rate, secs = script.repeat(run, 60, 0.5)
    assert rate == pytest.approx(40 * 2 / 0.8) and secs == pytest.approx(1.7 + 0.8)
    assert script.repeat(run, 10_000, 0.1)[0] > 0


def test_a_repeat_over_a_shortened_floor_is_not_read_as_a_whole_run(tmp_path: Path) -> None:
    from .conftest import write_fixture_cell

    script = _script()
    for repeat, floor in ((0, 5.0), (1, 1.5)):
        cell = f"solo-r{repeat}"
        windows = {"window_steps": [10] * 6, "window_s": [0.1] * 6, "steps": 60, "wall_s": 0.6}
        write_fixture_cell(
            tmp_path / "multirun" / "d" / "t" / cell,
            {
                "cells": [
                    {
                        "cell_id": cell,
                        "label": "solo",
                        "degree": 1,
                        "mix": None,
                        "status": "ok",
                        "repeat": repeat,
                        "repeat_group": "g",
                        "config_hash": f"h{repeat}",
                        "fixed_s": 0.5,
                    }
                ],
                "jobs": [
                    {
                        "cell_id": cell,
                        "job_index": 0,
                        "batch_size": 2,
                        "epoch_samples": 120,
                        "epoch_time_s": None,
                        "min_epoch_s": floor,
                    }
                ],
                "epochs": [
                    {"cell_id": cell, "job_index": 0, "epoch": 1, "warmup": True, "samples": 120, **windows},
                    {"cell_id": cell, "job_index": 0, "epoch": 2, "warmup": False, "samples": 120, **windows},
                ],
                "telemetry": [],
            },
        )
    ((label, runs, setup_s),) = script.solo_runs(tmp_path).values()
    assert label == "solo" and len(runs) == 1 and setup_s == 0.5  # the repeat at 1.5 s of a 5 s floor is left out


def test_every_choice_of_first_run_and_repeats_is_averaged() -> None:
    script = _script()
    # Warm-ups that never settle teach nothing: each repeat warms up whole, so 3:1 is the runs as measured.
    runs = [_run(script, [1.0, 0.3, 0.3, 0.3], [0.1 * f] * 6) for f in (1.0, 1.1, 0.9, 1.3, 1.05)]
    count, widths, seconds, changes = script.evaluate(runs, script.Policy(3, 1.0))
    assert count == 5 * 6  # a first run, then two repeats of the other four
    by_hand = [
        mean_interval([runs[f].rate, *(runs[i].rate for i in pair)]).rel_half_width
        for f in range(5)
        for pair in itertools.combinations([i for i in range(5) if i != f], 2)
    ]
    assert widths == pytest.approx(by_hand)
    assert changes == [0.0] * (2 * count) and seconds[0] == pytest.approx(sum(r.seconds for r in runs[:3]))
    fewer = script.evaluate(runs, script.Policy(4, 0.5))
    # The first choice: run 0 whole (2.5 s), runs 1-3 each a whole warm-up (1.9 s) and an epoch's 40 steps
    # (four windows: more than half the floor).
    assert fewer[0] == 5 * 4 and fewer[2][0] == pytest.approx(2.5 + sum(1.9 + 0.4 * f for f in (1.1, 0.9, 1.3)))


def test_the_corpus_pass_reads_as_a_table_and_json(tmp_path: Path) -> None:
    script = _script()
    rows = script.whatif(PASS, [script.Policy(3, 1.0), script.Policy(4, 0.5)], 4)
    labels = {r.label for r in rows}
    assert "resnet26_cifar10-mps-x1" in labels and all(r.available >= 4 for r in rows)
    r26 = {r.policy: r for r in rows if r.label == "resnet26_cifar10-mps-x1"}
    assert r26["3:1"].choices == 5 * 6 and r26["4:0.5"].choices == 5 * 4
    out = tmp_path / "w.json"
    assert script.main([str(PASS), "--json", str(out)]) == 0
    assert {r["policy"] for r in json.loads(out.read_text())} == {"3:1", "4:0.3", "4:1"}
    assert all(r["with_setup_s"] > r["gpu_s"] for r in json.loads(out.read_text()))
    for bad in (["--policy", "1:0.5"], ["--policy", "4:0"], ["--policy", "x"], ["--min-runs", "1"]):
        with pytest.raises(SystemExit) as exit_:
            script.main([str(PASS), *bad])
        assert exit_.value.code == 2, bad
