"""Confirm before advising: the top candidates of a ranking measured by successive halving.

All of the top ``k`` contenders (those that fit and could be the best: :func:`contenders`; best
predicted gain first, the other end of its plateau second: :func:`plateau_order`) run a short cell
(rung 0: the profile's own length), the better half runs again twice as long (rung 1), and so on
until one is left; the pick is the best *measured*
configuration, the last rung's best. Configurations the advisor probed (``free``) join rung 0 beside
them: their probe cells are rung-0 cells already. Each rung's cells run through the engine as a
sweep (:func:`raycolloc.advise.run.run_cells`), which reuses any valid cell of the same
configuration hash under ``out_dir``: a rung-0 degree-1 naive cell is the profile.

The schedule is planned within ``confirm_budget_s`` from an estimate of one short cell's cost
(``unit_s``: 60 s before any cell is timed, ``measure.UNIT_S``); cells run one at a time, the
estimate corrected upwards by each cell that runs, and a cell whose estimate would take the time
spent past the budget is not started (the pick is then the best at the highest rung measured).

Why not Ray Tune's ASHA: see docs/architecture.md ("Confirming the advice").
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from raycolloc.advise.shapes import Measurement, Prediction

__all__ = [
    "DEFAULT_BUDGET_S",
    "DEFAULT_K",
    "KNEE_BAND",
    "TIE_BAND",
    "Halving",
    "Rung",
    "confirm",
    "contenders",
    "plateau_order",
    "schedule",
    "successive_halving",
]

# Two candidates, one short cell each: the best predicted and the other end of its plateau (issue 44:
# advise + confirm in at most 30% of the GPU time of measuring what it ranks); one where no other
# could be the best (:func:`contenders`). On the corpus, leave-one-
# out at the degrees an H200 ranks, the best predicted alone lost 11.6% (resnet26: MPS x16 against x7)
# and 5.7% (resnet50); with the knee beside it at most 1.7%. confirm_k=4 runs two rungs (4 short cells,
# the better 2 twice as long).
DEFAULT_K = 2
# How far below the best prediction another may lie and still be a tie (at most; less where the best's
# own 95% interval is narrower): the plateau past saturation, where the model is least sure.
TIE_BAND = 0.25
# The knee the confirmation measures second, where the plateau lies below the best predicted: the
# smallest degree predicted within 5% of the best (saturated, or nearly), not merely inside the best's
# interval. On the corpus (leave-one-out), with one solo's wide interval resnet50's MPS plateau reached
# down to x2 (predicted 19% below x16): the knee x2 measured 15,000 samples/s against x16's 16,340 and
# x3's 17,065; x3, predicted 1.9% below, is the knee this takes (resnet26: x7, as before).
KNEE_BAND = 0.05
DEFAULT_BUDGET_S = 900.0  # ~ 8 short cells of a GPU profile (~60-100 s each) and the margin of a rung

# (predictions to measure, the rung's length factor) -> per label: (samples/s or None, cell dir, reused)
Measure = Callable[[list[Prediction], int], dict[str, tuple[float | None, str, bool]]]


@dataclass(frozen=True)
class Rung:
    """One rung: how many candidates run in it, and its cells' length relative to the profile's."""

    index: int
    size: int
    scale: int

    def cost(self, unit_s: float) -> float:
        return self.size * self.scale * unit_s


@dataclass(frozen=True)
class Halving:
    """What the halving measured, which configuration it picked (None: nothing measured), why it
    stopped, and the time it took."""

    measured: tuple[Measurement, ...]
    pick: str | None
    stopped: str
    spent_s: float


def _rungs(k: int) -> list[Rung]:
    """k, ceil(k/2), ... down to 2, each twice as long as the one before; one rung of 1 for k = 1."""
    sizes = [k]
    while sizes[-1] > 2:
        sizes.append(math.ceil(sizes[-1] / 2))
    return [Rung(i, n, 2**i) for i, n in enumerate(sizes)]


def schedule(k: int, budget_s: float, unit_s: float) -> list[Rung]:
    """The largest halving of at most ``k`` candidates whose cells fit ``budget_s`` (one short cell
    costs ``unit_s``); empty if not even one short cell fits."""
    for n in range(k, 0, -1):
        rungs = _rungs(n)
        if sum(r.cost(unit_s) for r in rungs) <= budget_s:
            return rungs
    return []


def contenders(
    candidates: Sequence[Prediction], keep: frozenset[str] = frozenset(), measured: Mapping[str, float] | None = None
) -> list[Prediction]:
    """The candidates that could be the best: those whose predicted 95% interval reaches the best
    predicted one's (its low bound) and the best rate already measured among them (``measured``: the
    probes' samples/s by label), in the order given. On one H200, for regnetx_004, the probe measured
    MPS x16 at 65,486 samples/s and MPS x7, predicted [43,994, 62,324], took a confirmation cell of its
    own (8 s of the advice's 35 s) to measure 33,386. A configuration whose whole interval lies
    below the best's needs no cell to be ruled out: on one H200, for regnetx_004 (named nowhere),
    the second confirmation measured MPS x7, predicted [29,094, 41,762] samples/s against x16's
    [53,265, 75,533], and both measured as predicted (32,269 and 51,727); that cell was 12.0 s of
    the advice's 50.0 s of GPU time. A candidate without an interval (nothing to judge it by) stays, and
    so does one labelled in ``keep`` (a probe: measured already, at no cost)."""
    best = max(candidates, key=lambda p: p.agg_samples_per_s or 0.0, default=None)
    if best is None or best.agg_interval is None:
        return list(candidates)
    floor = max(best.agg_interval.low, *((measured or {}).get(p.label) or 0.0 for p in candidates))
    return [
        p for p in candidates if p is best or p.agg_interval is None or p.agg_interval.high >= floor or p.label in keep
    ]


def plateau_order(candidates: Sequence[Prediction]) -> list[Prediction]:
    """The order the halving measures the candidates in: the best predicted first, then the other end
    of the plateau it sits on, then the rest as predicted, and last any configuration that differs
    from one already listed only in its MPS active-thread percentages (a split the model predicts
    alike: measured second, it would spend a rung on the same mode and degree twice, as it did for
    mobilenetv3 on one H200, twenty-third session).

    The plateau is the candidates of the best's mode tied with it (within the best's interval, at
    most ``TIE_BAND`` below). Past saturation the predictions are flat where the model is least sure, and
    the truth may fall or still rise along it. Where the plateau lies below the best's degree, its
    smallest degree (the knee) comes second: on 2 x H200 resnet26's MPS x7 measured 70,802 samples/s
    and x28, predicted the best, 61,247 (docs/measurements.md, nineteenth session); the knee also
    costs the least memory and slowdown. Where the best is the plateau's smallest degree, its largest
    degree comes second (one inside the fitted range before an extrapolated one): on one H200
    mobilenetv3's MPS x14 measured 23% above x7, predicted 1% below it (twenty-third session)."""
    seen: set[tuple[str, int]] = set()
    distinct: list[Prediction] = []
    variants: list[Prediction] = []
    for p in candidates:
        key = (p.mode, p.degree)
        (variants if key in seen else distinct).append(p)
        seen.add(key)
    best = distinct[0] if len(distinct) >= 3 else None
    if best is None or not best.agg_samples_per_s or best.agg_interval is None:
        return [*distinct, *variants]
    band = min(TIE_BAND, max(0.0, best.agg_interval.high / best.agg_samples_per_s - 1.0))
    floor = best.agg_samples_per_s * (1.0 - band)
    tied = [
        p
        for p in distinct[1:]
        if p.mode == best.mode and (p.agg_samples_per_s or 0.0) >= floor and p.degree != best.degree
    ]
    below = [p for p in tied if p.degree < best.degree]
    above = [p for p in tied if p.degree > best.degree]
    if below:
        # The knee: the smallest degree predicted within KNEE_BAND of the best, else the smallest tied.
        near = [p for p in below if (p.agg_samples_per_s or 0.0) >= best.agg_samples_per_s * (1.0 - KNEE_BAND)]
        second = min(near or below, key=lambda p: p.degree)  # min keeps the better predicted among equal degrees
    elif above:
        fitted = [p for p in above if not p.extrapolated] or above
        second = max(fitted, key=lambda p: (p.degree, p.agg_samples_per_s or 0.0))
    else:
        return [*distinct, *variants]
    return [best, second, *(p for p in distinct[1:] if p is not second), *variants]


def confirm(
    candidates: Sequence[Prediction],
    k: int,
    budget_s: float,
    unit_s: float,
    measure: Measure,
    free: frozenset[str] = frozenset(),
    known: Mapping[str, float] | None = None,
) -> Halving:
    """The halving over the :func:`contenders` of ``candidates`` (best predicted first; ``known``: the
    rates the probes among them measured), in
    :func:`plateau_order`; where they measured nothing (their cells failed: out of memory, an error),
    over the candidates they ruled out, within what is left of the budget, so that the pick is a
    measured configuration whenever one could be measured."""
    kept = contenders(candidates, keep=free, measured=known)
    h = successive_halving(plateau_order(kept), k, budget_s, unit_s, measure, free=free)
    labels = {p.label for p in kept}
    rest = [p for p in candidates if p.label not in labels]
    if h.pick is not None or not rest:
        return h
    more = successive_halving(plateau_order(rest), k, budget_s - h.spent_s, unit_s, measure)
    stopped = f"{h.stopped}; then the candidates ruled out: {more.stopped}"
    return Halving(h.measured + more.measured, more.pick, stopped, h.spent_s + more.spent_s)


def _keep(rows: Sequence[Prediction], got: dict[str, float | None], size: int) -> list[Prediction]:
    """The ``size`` best measured; a tie (or no measurement) goes to the better predicted, which
    ``rows`` lists first. A cell that measured nothing (failed, out of memory) is dropped."""
    order = {p.label: i for i, p in enumerate(rows)}
    ok = [p for p in rows if got.get(p.label) is not None]
    ok.sort(key=lambda p: (-(got[p.label] or 0.0), order[p.label]))
    return ok[:size]


def successive_halving(
    candidates: Sequence[Prediction],
    k: int,
    budget_s: float,
    unit_s: float,
    measure: Measure,
    clock: Callable[[], float] = time.monotonic,
    free: frozenset[str] = frozenset(),
) -> Halving:
    """Measure the top ``k`` of ``candidates`` (best predicted first) by successive halving within
    ``budget_s`` (see the module docstring). Cells run one at a time, and none starts that the time
    spent plus its estimate (the slowest short cell so far, times its rung's length) would take past
    the budget; the pick is the best measured at the highest rung anything was measured at.
    Candidates labelled in ``free`` have their rung-0 cell already (the advisor's probes): they join
    rung 0 beside the top ``k``, measured first and outside the budget (their cells are reused), and
    the better of all go on."""
    start = clock()
    rungs = schedule(min(k, len(candidates)), budget_s, unit_s)
    alive = list(candidates[: rungs[0].size]) if rungs else []
    labels = {p.label for p in alive}
    alive += [p for p in candidates if p.label in free and p.label not in labels] if rungs else []
    measured: list[Measurement] = []
    stopped = "no candidate fits" if not candidates else "the budget holds no short cell" if not rungs else "done"
    best: list[Prediction] = []
    for i, rung in enumerate(rungs):
        rates: dict[str, float | None] = {}
        at_no_cost = free if i == 0 else frozenset()
        for p in sorted(alive, key=lambda p: p.label not in at_no_cost):  # stable: the rest as ranked
            spent = clock() - start
            if p.label not in at_no_cost and spent + rung.scale * unit_s > budget_s:
                stopped = (
                    f"rung {rung.index} stopped: its next cell would overrun confirm_budget_s ({spent:.0f} s spent)"
                )
                break
            t0 = clock()
            rate, where, reused = measure([p], rung.scale).get(p.label, (None, "", False))
            if not reused:  # what a short cell really costs here, for the cells still to come
                unit_s = max(unit_s, (clock() - t0) / rung.scale)
            rates[p.label] = rate
            measured.append(Measurement(p.label, rung.index, rung.scale, rate, where, reused))
        ranked = _keep([p for p in alive if p.label in rates], rates, len(alive))
        best = ranked or best
        if not ranked or stopped != "done":
            stopped = stopped if stopped != "done" else f"no candidate of rung {rung.index} measured a throughput"
            break
        alive = ranked[: rungs[i + 1].size] if i + 1 < len(rungs) else ranked[:1]
    return Halving(tuple(measured), best[0].label if best else None, stopped, clock() - start)
