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

import pytest

from raycolloc.advise.fit import Observation, fit
from raycolloc.advise.model import ModeParams, Params, predict
from raycolloc.advise.profile import combine
from raycolloc.advise.rank import format_ranking, rank, uniform_candidates
from raycolloc.advise.spread import UNFITTED_REL
from raycolloc.results.stats import mean_interval, t_quantile

from .test_advise import H200, _observations, cell, profile

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


def test_intervals_add_the_fit_and_the_profile_and_widen_when_extrapolated() -> None:
    params = dataclasses.replace(TRUTH, degrees=(("mps", (2, 3, 7)),), residual_rel=(("mps", 0.10),))
    p = dataclasses.replace(profile("c", sm=0.25, busy=0.5), rate_rel_hw=0.05)
    inside = predict(cell("mps", p, 7), H200, params)
    assert inside.agg_interval is not None and inside.slowdown_interval is not None
    assert inside.agg_interval.rel_half_width == pytest.approx(math.hypot(0.10, 0.05))
    assert inside.slowdown_interval.rel_half_width == pytest.approx(0.10)  # the solo's error cancels
    far = predict(cell("mps", p, 14), H200, params)  # twice the largest fitted degree: twice as wide
    assert far.extrapolated and far.agg_interval is not None
    assert far.agg_interval.rel_half_width == pytest.approx(math.hypot(0.20, 0.05))
    solo = predict(cell("mps", p, 1), H200, params)
    assert solo.agg_interval is not None and solo.agg_interval.rel_half_width == pytest.approx(0.05)
    unfitted = predict(cell("naive", p, 2), H200, params)  # no naive cell in the fit
    assert unfitted.extrapolated and unfitted.agg_interval is not None
    assert unfitted.agg_interval.rel_half_width == pytest.approx(math.hypot(UNFITTED_REL * 2, 0.05))
    table = format_ranking(rank("c", [cell("mps", p, 7)], H200, params))
    assert f"±{100 * math.hypot(0.10, 0.05):.0f}%" in table and "±10%" in table


def test_a_profile_combined_from_runs_carries_their_spread() -> None:
    runs = [dataclasses.replace(profile(), samples_per_s=r, cell_dirs=(f"/x/{r}",)) for r in (9_000.0, 11_000.0)]
    joined = combine(runs)
    assert joined.rate_rel_hw == pytest.approx(mean_interval([9_000.0, 11_000.0]).rel_half_width)
