"""Every number in the report carries its interval, and no interval crosses what its quantity can be
(issue 46, item 8): the first table (the best configuration per workload) shows each number's ±, and
no gain, rate, time or energy has a low bound below 0, in the tables or in the figures' error bars.

The sweep is built to make the old report fail: two runs per configuration (a t-interval with
t = 12.7) whose best configuration, mps x3, is noisy enough that its symmetric interval reaches
below 0.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import matplotlib.axes
import numpy as np
import pandas as pd
import pytest

from analysis.findings import best_configs
from analysis.gains import gain_table
from analysis.intervals import at_floor, pm_text
from analysis.load import load_sweeps
from analysis.report import build_report, build_tables
from analysis.sections import findings, workloads

from .test_analysis import cell, epochs_of, job

WORKLOAD = "resnet26_cifar10"
# (mode, degree) -> the two runs' epoch-2 time of each job: mps x3 is the fastest and the noisiest.
RUNS = {
    ("naive", 1): (2.0, 2.1),
    ("mps", 1): (1.9, 2.0),
    ("naive", 3): (5.0, 5.6),
    ("mps", 3): (1.2, 6.0),
}


def noisy_sweep(root: Path) -> Path:
    """Four configurations x two interleaved runs (8 cells), energy proportional to time."""
    n = 0
    for repeat in (0, 1):
        for (mode, degree), times in RUNS.items():
            e2 = times[repeat]
            jobs = [job(i, WORKLOAD, e2, samples=50_000) for i in range(degree)]
            cell(
                root,
                str(n),
                WORKLOAD,
                mode,
                jobs,
                agg=degree * 50_000 / e2,
                energy_j=300.0 * e2,
                epochs=[e for j in jobs for e in epochs_of(j, warmup_s=3.0)],
                repeat=repeat,
                repeat_group=f"{mode}-{degree}",
            )
            n += 1
    return root


def _lows(tables: dict[str, pd.DataFrame]) -> dict[str, float]:
    """The smallest ``_low`` of each table's columns (a change in % excepted: its floor is -100)."""
    return {
        f"{name}.{column}": float(frame[column].min())
        for name, frame in tables.items()
        for column in frame.columns
        if column.endswith("_low") and not column.startswith("change_") and frame[column].notna().any()
    }


def _first_table(page: str) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the page's first table (the best configuration per workload)."""
    table = re.search(r"<table>(.*?)</table>", page, re.S)
    assert table is not None
    head = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table.group(1))]
    rows = [
        [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r)]
        for r in re.findall(r"<tr>(.*?)</tr>", table.group(1).split("</thead>")[1])
    ]
    return head, rows


def test_a_low_bound_is_held_at_the_floor_and_shown_with_its_two_sides() -> None:
    frame = pd.DataFrame({"gain": [2.0, 2.0], "gain_low": [-0.4, 1.9], "gain_high": [4.4, 2.1]})
    held = at_floor(frame, ["gain"])
    assert held["gain_low"].tolist() == [0.0, 1.9] and held["gain_high"].tolist() == [4.4, 2.1]
    assert pm_text(2.0, 0.0, 4.4) == "+120.0%/-100.0%"
    assert pm_text(2.0, 1.9, 2.1) == "±5.0%"
    change = pd.DataFrame({"pct": [-50.0], "pct_low": [-180.0], "pct_high": [80.0]})
    assert at_floor(change, ["pct"], floor=-100.0)["pct_low"].tolist() == [-100.0]


def test_the_first_table_shows_every_number_with_its_interval_and_none_below_zero(tmp_path: Path) -> None:
    data = load_sweeps([noisy_sweep(tmp_path / "sweep")])
    tables = build_tables(data)
    best = tables["best"]
    assert (best["mode"].tolist(), best["degree"].tolist()) == (["mps"], [3])
    # The sweep does what it is for: the gain's symmetric interval would reach below 0.
    raw = gain_table(data.cells, data.jobs).query("mode == 'mps' and degree == 3")
    assert float(raw["gain_vs_solo_low"].iloc[0]) == 0.0
    lows = _lows(tables)
    assert lows and all(low >= 0.0 for low in lows.values()), lows
    assert {"best.gain_vs_solo_low", "best.agg_samples_per_s_low", "best.energy_vs_solo_low"} <= set(lows)
    assert best_configs(tables["gain"]).filter(like="_low").notna().all(axis=None)

    head, rows = _first_table(findings(best, []))
    numbers = ["samples/s", "gain vs same settings alone", "gain vs best solo", "J/sample vs solo"]
    for label in numbers:
        assert f"{label} ±" in head, head
        shown = rows[0][head.index(f"{label} ±")]
        assert re.fullmatch(r"±\d+\.\d%|\+\d+\.\d%/-\d+\.\d%", shown), (label, shown)
    assert rows[0][head.index("gain vs same settings alone ±")].endswith("/-100.0%")


def test_the_epoch2_table_shows_each_time_with_its_interval(tmp_path: Path) -> None:
    data = load_sweeps([noisy_sweep(tmp_path / "sweep")])
    gain = build_tables(data)["gain"]
    assert gain[["epoch2_s_low", "epoch2_s_high"]].notna().all(axis=None)
    assert (gain["epoch2_s_low"] >= 0.0).all() and (gain["epoch2_s_high"] > gain["epoch2_s"]).all()
    page = "".join(workloads(gain, []))
    epoch2 = page[page.index("Epoch-2 time per job") :]
    head, rows = _first_table(epoch2)
    assert "epoch 2 (s) ±" in head and all(r[head.index("epoch 2 (s) ±")] for r in rows), (head, rows)


@pytest.mark.slow  # every figure of an 8-cell sweep: ~10 CPU-seconds
def test_the_report_and_its_gain_bars_stay_above_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[tuple[float, float]] = []  # each bar's height and the bottom of its error bar
    bar = matplotlib.axes.Axes.bar

    def recording(self: matplotlib.axes.Axes, x: Any, height: Any, *args: Any, **kwargs: Any) -> Any:
        yerr = kwargs.get("yerr")
        if yerr is not None:
            heights = np.atleast_1d(np.asarray(height, dtype=float))
            below = np.atleast_2d(np.asarray(yerr, dtype=float))[0]
            drawn.extend(zip(heights.tolist(), (heights - below).tolist(), strict=True))
        return bar(self, x, height, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", recording)
    report = build_report([noisy_sweep(tmp_path / "sweep")], tmp_path / "report")
    assert any(p.stem == f"fig1_gain_{WORKLOAD}" for p in report.figures)
    bottoms = [low for height, low in drawn if np.isfinite(height)]
    assert bottoms and min(bottoms) >= 0.0, drawn
    for name in ("gain", "best", "epoch2"):
        frame = pd.read_csv(tmp_path / "report" / f"{name}.csv")
        lows = frame.filter(regex="_low$").dropna(axis=1, how="all")
        assert not lows.empty and (lows.fillna(0.0) >= 0.0).all(axis=None), (name, lows.min())
    head, rows = _first_table(report.html_path.read_text() if report.html_path else "")
    assert "gain vs same settings alone ±" in head and rows[0][head.index("gain vs same settings alone ±")]


def test_a_claim_number_with_no_interval_known_shows_no_plus_minus() -> None:
    # One run each (no bounds): the claim once read "1.03x ±0.0% the solo's J/sample", a certainty no
    # measurement gave; a number with bounds keeps its ±.
    from analysis.findings import _energy

    def row(degree: int, energy: float, low: float, high: float) -> dict[str, Any]:
        return {
            "workload": "w", "mode": "naive", "degree": degree, "status": "ok", "energy_vs_solo": energy,
            "energy_vs_solo_min": energy, "energy_vs_solo_max": energy,
            "energy_vs_solo_low": low, "energy_vs_solo_high": high,
        }  # fmt: skip

    table2 = pd.DataFrame({"mix": [], "status": [], "energy_vs_sequential": []})
    lone = _energy(pd.DataFrame([row(1, 1.0, np.nan, np.nan), row(2, 1.025, np.nan, np.nan)]), table2)
    assert "w: 1.02x the solo's J/sample" in lone.evidence and "±" not in lone.evidence
    bounded = _energy(pd.DataFrame([row(1, 1.0, np.nan, np.nan), row(2, 0.9, 0.85, 0.95)]), table2)
    assert "0.90x ±5.6%" in bounded.evidence
