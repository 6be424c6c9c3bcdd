"""How sure a prediction is: 95% intervals of a candidate's throughput and slowdown.

Two sources of error, independent, added in quadrature as half-widths of the logarithm (where the fit
is made: it minimises squared log errors), and the interval is the prediction times ``exp(-h)`` and
``exp(+h)``: never negative, wider above than below. A half-width taken in linear space around a
log-space fit once gave a simulated advice ``[-1,327, 3,291]`` samples/s.

* **the fit**: the mode's residuals on the cells it was fitted on (:attr:`Params.residual_rel`, the
  t-quantile times the RMS log error); a mode fitted on fewer than two cells has
  :data:`UNFITTED_REL` (the advisor's largest error seen in validation, rounded up);
* **the profile**: the solo rate's own interval (:attr:`Profile.rate_rel_hw`, relative, taken as
  ``log(1 + rel)``, times the share of it the prediction carries: all of it below saturation, little
  where a resource saturates, :func:`~raycolloc.advise.model.baseline_share`; the rest of it rests on
  the solo's SM activity per sample, whose interval over the runs, :attr:`Profile.activity_rel_hw`,
  counts for it: :func:`solo_rel`). A slowdown is a ratio to that same solo
  rate, so the profile's error cancels from it: a slowdown's interval is the fit's alone.

An extrapolated candidate (beyond the fitted degrees of its mode) has the fit's half-width widened by
``1 + log2(degree / largest fitted degree)``: twice as wide at twice the largest degree the fit saw,
three times at four times it. The residuals say nothing about the model's error where no cell was;
the widening only says that it grows with the distance. A degree-1 candidate is the profile itself:
its interval is the profile's alone. An MPS candidate past saturation whose jobs have more DRAM
activity than the fit saw there (:meth:`Params.dram_beyond`, a ratio r > 1) has the fit's half-width
widened by ``1 + log2(r)`` too, its slowdown's interval with it: the many-clients loss grows with
DRAM activity, and the fit has no evidence of how much at that level.
"""

from __future__ import annotations

import dataclasses
import math

from raycolloc.advise.shapes import Params, Prediction
from raycolloc.results.stats import Interval

__all__ = ["UNFITTED_REL", "fit_rel", "solo_rel", "with_intervals"]

# A mode with no fitted residuals: the advisor's worst leave-one-out throughput error inside the
# fitted range (18.8%, issue 32) rounded up.
UNFITTED_REL = 0.25


def fit_rel(params: Params, mode: str, degree: int) -> float:
    """The fit's 95% half-width of the log for a configuration, widened where it is extrapolated."""
    if degree <= 1:
        return 0.0
    rel = params.residual(mode)
    rel = UNFITTED_REL if rel is None else rel
    seen = params.fitted_degrees(mode)
    if params.extrapolated(mode, degree):
        reach = max(seen) if seen else 1
        rel *= 1.0 + math.log2(degree / reach)
    return rel


def _around(value: float, log_hw: float, n: int) -> Interval:
    """``value`` times ``exp(-log_hw)`` and ``exp(+log_hw)``: an interval of the log made linear."""
    return Interval(value, value * math.exp(-log_hw), value * math.exp(log_hw), n, "fit+profile")


def solo_rel(profile_rels: list[float | None], activity_rels: list[float | None], share: float) -> float | None:
    """The 95% half-width of the log that the solo's own intervals bring to a prediction: ``share`` of
    its rate's (:func:`~raycolloc.advise.model.baseline_share`) and the rest of its SM activity per
    sample's (what a saturated prediction rests on), in quadrature; None where the rate's is unknown."""
    known = [r for r in profile_rels if r is not None]
    if not known:
        return None
    activity = max((r for r in activity_rels if r is not None), default=0.0)
    return math.hypot(share * math.log1p(max(known)), (1.0 - share) * math.log1p(activity))


def with_intervals(
    pred: Prediction,
    params: Params,
    profile_rels: list[float | None],
    share: float = 1.0,
    activity_rels: list[float | None] | None = None,
) -> Prediction:
    """``pred`` with the intervals of its aggregate throughput and its largest slowdown; ``share``:
    how much of the solo rate's error the throughput carries, ``activity_rels``: the solos' SM
    activity per sample's relative half-widths (:func:`solo_rel`)."""
    fit = fit_rel(params, pred.mode, pred.degree) * (1.0 + math.log2(pred.dram_beyond))
    known = [r for r in profile_rels if r is not None]
    solo = solo_rel(profile_rels, activity_rels or [], share)
    profile = solo or 0.0
    agg = None
    if pred.agg_samples_per_s is not None:
        agg = _around(pred.agg_samples_per_s, math.hypot(fit, profile), max(1, len(known)))
    return dataclasses.replace(
        pred,
        agg_interval=agg,
        slowdown_interval=_around(pred.max_slowdown, fit, max(1, len(known))),
        baseline_share=share,
        baseline_rel=None if solo is None else math.expm1(solo),
    )
