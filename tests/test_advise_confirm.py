"""Tests for the advisor's honesty about its own reach (issue 32): extrapolation marked, intervals
from the fit's residuals and the profile's spread, the CPU-core term, and the successive halving
that confirms the top candidates by measurement before the advice is printed.

Profiles and observations are built by hand (as in ``test_advise.py``), so each expectation can be
worked out on paper; the end-to-end test runs the engine on simulated GPUs.
"""

from __future__ import annotations

import re

from raycolloc.advise.fit import fit
from raycolloc.advise.model import ModeParams, Params, predict
from raycolloc.advise.rank import format_ranking, rank, uniform_candidates

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
