"""Tests for the advisor's honesty about its own reach (issue 32): extrapolation marked, intervals
from the fit's residuals and the profile's spread, the CPU-core term, and the successive halving
that confirms the top candidates by measurement before the advice is printed.

Profiles and observations are built by hand (as in ``test_advise.py``), so each expectation can be
worked out on paper; the end-to-end test runs the engine on simulated GPUs.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest

from raycolloc.advise.__main__ import main
from raycolloc.advise.confirm import schedule, successive_halving
from raycolloc.advise.fit import fit
from raycolloc.advise.measure import probe_words
from raycolloc.advise.model import ModeParams, Params, Prediction, predict
from raycolloc.advise.observe import Observation, given_cores
from raycolloc.advise.profile import Profile, combine
from raycolloc.advise.rank import format_ranking, rank, uniform_candidates
from raycolloc.advise.run import Profiled, parse_request
from raycolloc.advise.spread import UNFITTED_REL
from raycolloc.config import ConfigError
from raycolloc.results.stats import Interval, mean_interval, t_quantile

from .test_advise import H200, _observations, cell, profile


def _profiled(p: Profile) -> Profiled:
    """A requested workload whose solo profile is ``p`` (no cell behind it: only its words are read)."""
    return Profiled((f"workload={p.workload}",), {"name": p.workload}, 2, None, Path("/x"), p, None, False)  # type: ignore[arg-type]


TRUTH = Params(ModeParams(0.8, 6.0), ModeParams(0.96, 3.0), ModeParams(0.9, 4.0), None, "truth")


def test_a_candidate_above_the_fitted_degrees_is_marked_extrapolated() -> None:
    others = {"a": profile("a", sm=0.2, busy=0.35), "b": profile("b", sm=0.35, busy=0.6, dram=0.2)}
    params = fit(_observations(TRUTH, others, degrees=(2, 3)), exclude=frozenset({"c"}))
    assert params.fitted_degrees("mps") == (2, 3) and params.fitted_degrees("mig") == ()
    c = profile("c", sm=0.25, busy=0.5)
    assert not predict(cell("mps", c, 3), H200, params).extrapolated
    assert not predict(cell("naive", c, 1), H200, params).extrapolated  # the profile itself
    assert predict(cell("mps", c, 7), H200, params).extrapolated
    ranking = rank("c", uniform_candidates(c, H200, (1, 2, 7)), H200, params)
    rows = {r.label: r for r in ranking.rows}
    assert rows["c mps x7"].extrapolated and not rows["c mps x2"].extrapolated
    table = format_ranking(ranking)
    assert "extrapolated" in table  # the legend
    assert re.search(r" mps +7 \* +- ", table) and re.search(r" mps +2 {5}- ", table)


def _noisy(observations: list[Observation], spread: float) -> list[Observation]:
    """Each measured aggregate off the model's by +-``spread``, alternately (a known residual spread)."""
    out = []
    for i, o in enumerate(observations):
        f = 1 + spread if i % 2 else 1 - spread
        rates = tuple(None if r is None else r * f for r in o.job_samples_per_s)
        agg = None if o.agg_samples_per_s is None else o.agg_samples_per_s * f
        out.append(dataclasses.replace(o, agg_samples_per_s=agg, job_samples_per_s=rates))
    return out


def test_the_fit_residual_spread_is_the_interval_of_the_fit() -> None:
    others = {"a": profile("a", sm=0.2, busy=0.35), "b": profile("b", sm=0.35, busy=0.6, dram=0.2)}
    exact = fit(_observations(TRUTH, others), exclude=frozenset({"c"}))
    assert exact.residual("mps") == pytest.approx(0.0, abs=1e-3)
    noisy = fit(_noisy(_observations(TRUTH, others), 0.05), exclude=frozenset({"c"}))
    rel = noisy.residual("mps")
    n = len(others) * 3  # two workloads, degrees 2, 3, 7
    # The fit cannot do better than the noise's RMS (~5% in log) by more than what 3 parameters absorb.
    assert rel is not None and t_quantile(n - 1) * 0.03 < rel <= t_quantile(n - 1) * 0.0502


def test_intervals_add_the_fit_and_the_profile_in_log_space_and_widen_when_extrapolated() -> None:
    params = dataclasses.replace(TRUTH, degrees=(("mps", (2, 3, 7)),), residual_rel=(("mps", 0.10),))
    p = dataclasses.replace(profile("c", sm=0.25, busy=0.5), rate_rel_hw=0.05)

    def log_hw(iv: Interval | None, value: float | None) -> float:
        assert iv is not None and value and iv.low > 0
        assert math.log(iv.high / value) == pytest.approx(-math.log(iv.low / value))  # symmetric in log
        return math.log(iv.high / value)

    inside = predict(cell("mps", p, 7), H200, params)
    # The solo's error counts by the share of it the prediction carries (past saturation, little of it).
    share = inside.baseline_share
    assert 0 <= share < 0.5
    assert log_hw(inside.agg_interval, inside.agg_samples_per_s) == pytest.approx(
        math.hypot(0.10, share * math.log(1.05))
    )
    assert log_hw(inside.slowdown_interval, inside.max_slowdown) == pytest.approx(0.10)  # the solo's error cancels
    far = predict(cell("mps", p, 14), H200, params)  # twice the largest fitted degree: twice as wide
    assert far.extrapolated
    assert log_hw(far.agg_interval, far.agg_samples_per_s) == pytest.approx(
        math.hypot(0.20, far.baseline_share * math.log(1.05))
    )
    solo = predict(cell("mps", p, 1), H200, params)
    assert log_hw(solo.agg_interval, solo.agg_samples_per_s) == pytest.approx(math.log(1.05))
    unfitted = predict(cell("naive", p, 2), H200, params)  # no naive cell in the fit
    assert unfitted.extrapolated
    assert log_hw(unfitted.agg_interval, unfitted.agg_samples_per_s) == pytest.approx(
        math.hypot(UNFITTED_REL * 2, unfitted.baseline_share * math.log(1.05))
    )
    below = predict(cell("mps", p, 2), H200, params)  # 0.5 offered: the solo's error is the prediction's
    assert below.baseline_share > 0.85
    assert log_hw(below.agg_interval, below.agg_samples_per_s) == pytest.approx(
        math.hypot(0.10, below.baseline_share * math.log(1.05))
    )
    # However wide, an interval of the log stays above zero (a linear one went to -1,327 samples/s).
    wide = predict(cell("mps", dataclasses.replace(p, rate_rel_hw=3.0), 14), H200, params)
    assert wide.agg_interval is not None and wide.agg_interval.low > 0
    table = format_ranking(rank("c", [cell("mps", p, 7)], H200, params))
    assert inside.agg_interval is not None and inside.agg_samples_per_s
    up = 100 * (inside.agg_interval.high / inside.agg_samples_per_s - 1)
    assert f"/+{up:.0f}%" in table and "-10/+11%" in table  # the slowdown's: exp(-0.1), exp(0.1)


def test_a_profile_combined_from_runs_carries_their_spread() -> None:
    runs = [dataclasses.replace(profile(), samples_per_s=r, cell_dirs=(f"/x/{r}",)) for r in (9_000.0, 11_000.0)]
    joined = combine(runs)
    assert joined.rate_rel_hw == pytest.approx(mean_interval([9_000.0, 11_000.0]).rel_half_width)
    # The same SM activity in both runs: per sample they differ as their rates do, and that spread is kept.
    per_sample = [runs[0].sm_active / 9_000.0, runs[1].sm_active / 11_000.0]
    assert joined.run_activity == pytest.approx(per_sample)
    assert joined.activity_rel_hw == pytest.approx(mean_interval(per_sample).rel_half_width)
    # Activity proportional to the rate (a slow run shows less): per sample the runs agree exactly.
    steady = [dataclasses.replace(r, sm_active=r.samples_per_s / 50_000.0) for r in runs]
    assert combine(steady).activity_rel_hw == pytest.approx(0.0, abs=1e-12)
    assert combine(runs[:1]).activity_rel_hw is None


def test_the_cpu_term_flattens_throughput_past_the_cores() -> None:
    four = dataclasses.replace(H200, cores=4)
    launch_bound = profile("cpu", sm=0.05, busy=0.1, dram=0.01, cpu=1.0)  # a core per launching thread
    rates = {d: predict(cell("mps", launch_bound, d), four, TRUTH).agg_samples_per_s or 0.0 for d in (2, 4, 8, 16)}
    assert rates[4] > 1.8 * rates[2]  # below the cores: the SMs have room
    assert rates[8] == pytest.approx(rates[4], rel=0.02) and rates[16] == pytest.approx(rates[4], rel=0.02)
    assert predict(cell("mps", launch_bound, 8), four, TRUTH).bound == "CPU cores"
    half = dataclasses.replace(TRUTH, cpu_capacity=0.5)  # half a core of launching per core given
    assert predict(cell("mps", launch_bound, 4), four, half).agg_samples_per_s == pytest.approx(rates[2], rel=0.02)


def test_the_fit_finds_the_cpu_capacity_and_the_cores_a_cell_is_given() -> None:
    truth = dataclasses.replace(TRUTH, cpu_capacity=0.25)
    others = {"a": profile("a", sm=0.05, busy=0.1, cpu=1.0), "b": profile("b", sm=0.1, busy=0.2, dram=0.1, cpu=0.8)}
    fitted = fit(_observations(truth, others, degrees=(2, 3, 7)))  # 16 cores x 0.25: bound from 4 clients on
    assert fitted.cpu_capacity == pytest.approx(0.25)
    for mode in ("naive", "mps"):  # the cells explained (MPS's SM capacity is not identified: never bound)
        residual = fitted.residual(mode)
        assert residual is not None and residual < 0.01
    assert given_cores(16, "0-1") == 14 and given_cores(16, None) == 16 and given_cores(None, "0") is None


def test_high_degree_probes_take_a_candidate_out_of_extrapolation() -> None:
    others = {"a": profile("a", sm=0.2, busy=0.35), "b": profile("b", sm=0.35, busy=0.6, dram=0.2)}
    c = profile("c", sm=0.25, busy=0.5)
    probes = [dataclasses.replace(o, cell_dir=f"/probe/{o.cell_id}") for o in _observations(TRUTH, {"c": c}, (8,))]
    observed = _observations(TRUTH, others, degrees=(2, 3)) + probes
    without = fit(observed, exclude=frozenset({"c"}))
    assert predict(cell("mps", c, 8), H200, without).extrapolated  # the probes of c are left out
    kept = fit(observed, exclude=frozenset({"c"}), keep=frozenset(o.cell_dir for o in probes))
    assert kept.fitted_degrees("mps") == (2, 3, 8) and not predict(cell("mps", c, 8), H200, kept).extrapolated


def test_probe_cells_cover_8_and_the_largest_ranked_degree() -> None:
    req = parse_request(["workload=tiny_cnn", "degrees=1,2,48"], (1,))
    p = profile("tiny_cnn", mem=2000.0)
    profiled = [_profiled(p)]
    words = dict(probe_words(profiled, req, dataclasses.replace(H200, cores=64)))
    # naive ranks its largest fitting degree too (64: a core per job); MPS takes at most 48 clients
    assert set(words) == {"tiny_cnn naive x8", "tiny_cnn naive x64", "tiny_cnn mps x8", "tiny_cnn mps x48"}
    assert words["tiny_cnn mps x48"] == ("workload=tiny_cnn", "mode=mps", "degree=48")
    capped = dict(probe_words(profiled, req, dataclasses.replace(H200, cores=6)))  # a core per job: at most 6
    assert set(capped) == {"tiny_cnn naive x6", "tiny_cnn mps x6"}
    off = parse_request(["workload=tiny_cnn", "probe_degrees=none"], (1,))
    assert off.probe_degrees == () and probe_words(profiled, off, H200) == []


def test_the_halving_schedule_splits_the_budget() -> None:
    assert [(r.size, r.scale) for r in schedule(4, 1e9, 60.0)] == [(4, 1), (2, 2)]
    assert [(r.size, r.scale) for r in schedule(8, 1e9, 60.0)] == [(8, 1), (4, 2), (2, 4)]
    assert [(r.size, r.scale) for r in schedule(5, 1e9, 60.0)] == [(5, 1), (3, 2), (2, 4)]
    assert [(r.size, r.scale) for r in schedule(1, 1e9, 60.0)] == [(1, 1)]
    # 8 units fit 4 candidates (4 + 2 x 2); 7 units do not: three candidates (3 + 2 x 2 = 7).
    assert schedule(4, 8 * 60.0, 60.0)[0].size == 4 and schedule(4, 7 * 60.0, 60.0)[0].size == 3
    assert schedule(4, 59.0, 60.0) == []


class _Bench:
    """A fake engine: each label's true rate, and a clock that advances a cell's length per cell run."""

    def __init__(self, rates: dict[str, float | None], unit_s: float, reused: frozenset[str] = frozenset()) -> None:
        self.rates, self.unit_s, self.reused, self.now = rates, unit_s, reused, 0.0
        self.calls: list[tuple[tuple[str, ...], int]] = []

    def clock(self) -> float:
        return self.now

    def measure(self, preds: list[Prediction], scale: int) -> dict[str, tuple[float | None, str, bool]]:
        self.calls.append((tuple(p.label for p in preds), scale))
        out = {}
        for p in preds:
            hit = p.label in self.reused and scale == 1
            self.now += 0.0 if hit else self.unit_s * scale
            out[p.label] = (self.rates[p.label], f"/cells/{p.label}/x{scale}", hit)
        return out


def _ranked(n: int) -> list[Prediction]:
    return [predict(cell("mps", profile("w"), d), H200, TRUTH) for d in range(2, 2 + n)]


def test_successive_halving_keeps_the_best_measured_within_its_budget() -> None:
    preds = _ranked(4)  # predicted best first: x2, x3, x4, x5
    truth = {"w mps x2": 100.0, "w mps x3": 130.0, "w mps x4": 120.0, "w mps x5": None}  # x5 failed
    bench = _Bench(truth, 60.0, reused=frozenset({"w mps x2"}))
    h = successive_halving(preds, 4, 1000.0, 60.0, bench.measure, bench.clock)
    assert [c for c, _ in bench.calls] == [(f"w mps x{d}",) for d in (2, 3, 4, 5, 3, 4)]
    assert [s for _, s in bench.calls] == [1, 1, 1, 1, 2, 2]  # the better half runs twice as long
    assert h.pick == "w mps x3" and h.stopped == "done" and h.spent_s <= 1000.0
    assert {(m.label, m.rung) for m in h.measured} >= {("w mps x3", 1), ("w mps x4", 1), ("w mps x2", 0)}
    assert next(m for m in h.measured if m.label == "w mps x2").reused
    # A budget too small for four: the halving of the best predicted two (2 short cells) fits it.
    tight = _Bench(truth, 60.0)
    h = successive_halving(preds, 4, 300.0, 60.0, tight.measure, tight.clock)
    assert [c[0] for c in tight.calls] == [("w mps x2",), ("w mps x3",)] and h.pick == "w mps x3"


def test_a_tie_goes_to_the_better_predicted_and_a_slow_engine_stops_early() -> None:
    preds = _ranked(4)
    tie = _Bench({p.label: 100.0 for p in preds}, 60.0)
    assert successive_halving(preds, 4, 1e6, 60.0, tie.measure, tie.clock).pick == "w mps x2"
    # Cells take four times the estimate: after the first, the estimate is corrected, and no cell
    # starts that would overrun; the pick is the best of the cells measured.
    slow = _Bench({p.label: float(i) for i, p in enumerate(preds)}, 240.0)
    h = successive_halving(preds, 4, 720.0, 60.0, slow.measure, slow.clock)
    assert len(slow.calls) == 3 and slow.now <= 720.0 and h.pick == "w mps x4" and "overrun" in h.stopped
    assert successive_halving([], 4, 1e6, 60.0, tie.measure, tie.clock).pick is None


@pytest.mark.parametrize(
    ("word", "key"),
    [("confirm_budget_s=-5", "confirm_budget_s"), ("confirm_k=0", "confirm_k"), ("probe_degrees=x", "probe_degrees")],
)
def test_a_bad_confirm_key_is_refused_naming_it(word: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_request(["workload=tiny_cnn", word], (1,))
    assert main(["workload=tiny_cnn", "cluster=local", word]) == 2  # before anything runs
