"""jobs/floor_whatif.py: a solo's repeats cut to a share of their measured epoch, read off runs measured
whole (the corpus's H200 runs keep their windows)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pandas as pd
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


def test_a_cut_epoch_is_its_earliest_windows_within_the_share_of_its_time() -> None:
    cut_rate = _script().cut_rate
    assert cut_rate([1, 1, 1, 1], [1.0, 1.0, 2.0, 2.0], 10, 0.5) == (10.0, 4.0)  # 2 windows, 2 s of 6
    assert cut_rate([3, 1], [4.0, 1.0], 10, 0.5) == (7.5, 1.0)  # never fewer than one window
    assert cut_rate([1, 1], [1.0, 1.0], 10, 1.0) == (10.0, 0.0)


def test_the_whole_intervals_are_the_runs_rates_and_a_whole_share_changes_nothing(tmp_path: Path) -> None:
    script = _script()
    rows = script.whatif(PASS, 0.5, 3)
    assert {r.configuration for r in rows} >= {"resnet26_cifar10:mps:x1", "mobilenetv3_cifar10:naive:x1"}
    cells = pd.read_parquet(PASS / "cells.parquet")
    for row in rows:
        entry, mode, _ = row.configuration.split(":")
        solo = cells[(cells["entry"] == entry) & (cells["mode"] == mode) & (cells["degree"] == 1)]
        rates = solo.loc[solo["status"] == "ok", "agg_samples_per_s"].tolist()  # as the sweep recorded them
        assert row.runs == len(rates)
        assert row.whole_pm_pct == pytest.approx(100 * mean_interval(rates).rel_half_width, abs=0.1)
        assert row.saved_s > 0
    assert any(r.cut_pm_pct != r.whole_pm_pct for r in rows)
    # The first run's drift, by hand: its measured epoch's later half of windows against its earlier half.
    (r26,) = [r for r in rows if r.label == "resnet26_cifar10-mps-x1"]
    epochs = pd.read_parquet(PASS / "epochs.parquet")
    first = cells.loc[cells["label"] == r26.label, "cell_id"].iloc[0]
    measured = epochs[(epochs["cell_id"] == first) & (epochs["epoch"] == 2)].iloc[0]
    steps, secs = list(measured["window_steps"]), list(measured["window_s"])
    half = len(secs) // 2
    by_hand = (sum(steps[-half:]) / sum(secs[-half:])) / (sum(steps[:half]) / sum(secs[:half])) - 1
    assert r26.first_drift_pct == pytest.approx(100 * by_hand, abs=0.05) and r26.windows == len(secs)
    assert r26.drift_ok == (abs(by_hand) <= 0.02)
    same = script.whatif(PASS, 1.0, 3)
    assert [(r.cut_pm_pct, r.saved_s, r.cut_rate_change_pct) for r in same] == [
        (r.whole_pm_pct, 0.0, 0.0) for r in same
    ]
    out = tmp_path / "w.json"
    assert script.main([str(PASS), "--json", str(out)]) == 0
    assert len(json.loads(out.read_text())) == len(rows)
    with pytest.raises(SystemExit) as bad:
        script.main([str(PASS), "--share", "0"])
    assert bad.value.code == 2
