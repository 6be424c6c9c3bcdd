"""The cells the advisor measures beyond the solo profiles: probes at high degrees before the fit
(so the fit covers the degrees it ranks), and the top candidates confirmed after the ranking
(:mod:`raycolloc.advise.confirm`). Both run through the engine as the profiles do
(:func:`raycolloc.advise.run.run_cells`): an existing cell of the same configuration is reused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from raycolloc.advise.advice import Advice, with_history
from raycolloc.advise.confirm import confirm
from raycolloc.advise.memory import max_degree
from raycolloc.advise.model import Candidate, Gpu, Params, Prediction, Slot
from raycolloc.advise.profile import Profile, combine, profile_key
from raycolloc.advise.rank import Ranking
from raycolloc.advise.run import Profiled, Request, profile_in, run_cells
from raycolloc.mode_kinds import Sharing, mode_of, modes_where

__all__ = [
    "PROBE_DEGREE",
    "PROFILE_CI",
    "PROFILE_RUNS",
    "Probes",
    "UNIT_S",
    "confirm_rankings",
    "fitted_reach",
    "prior_covers",
    "probe_words",
    "run_probes",
    "scaled_common",
    "steady_profiles",
]

PROBE_DEGREE = 8  # the first high client count: where MPS started to flatten on an H200
# One short cell's cost before any has been timed (a GPU profile cell: start, warm-up, a 10 s window).
UNIT_S = 60.0
# The solo profile: measured again while its 95% interval is wider than this, up to PROFILE_RUNS runs
# (history from the fit sweeps included). Three: the median of three outvotes one slow run.
PROFILE_CI = 0.10
PROFILE_RUNS = 3
_EPOCH_KEYS = ("epoch_time_s", "epoch_samples")


class _Probe(NamedTuple):
    """One probe cell: the workload it probes, its mode and degree, its label (as the ranking labels
    it) and the words it runs with."""

    workload: str
    mode: str
    degree: int
    label: str
    words: tuple[str, ...]


def probe_words(
    profiled: list[Profiled], request: Request, gpu: Gpu, covered: Mapping[str, int] | None = None
) -> list[tuple[str, tuple[str, ...]]]:
    """The probe cells as ``(label, words)``: see :func:`_probes`."""
    return [(c.label, c.words) for c in _probes(profiled, request, gpu, covered)]


def _probes(
    profiled: list[Profiled], request: Request, gpu: Gpu, covered: Mapping[str, int] | None = None
) -> list[_Probe]:
    """The probe cells: each profiled workload in naive and MPS at ``probe_degrees`` (default: 8 and
    the largest degree the advice ranks), each capped at the largest that fits; degree 1 never. By
    default a degree the fit already covers in that mode (``covered``: the largest degree of the
    other workloads' cells it is fitted on) is not probed: a probe is there to take the ranking out
    of extrapolation, and one inside the fitted range spends GPU time on what the fit knows. The
    exception is MPS at the largest degree ranked, probed always: past saturation MPS goes where the
    workload takes it, not where the others went (corpus, one H200, x7 -> x16: resnet26's aggregate
    fell 11%, mobilenetv3's and convnext_atto's rose 13-22%, and no term of the solo profile told them
    apart). Its measurement calibrates the workload's course past saturation
    (:func:`raycolloc.advise.model.calibrate_mps`), and its cell is the confirmation's rung-0 cell of
    that configuration, reused if the halving measures it (the pick of a small model is usually there)."""
    covered = covered or {}
    out = []
    for p in profiled:
        if p.profile is None:
            continue
        for mode in modes_where(lambda k: k.advised):
            top = max_degree(p.profile, gpu, mode)
            wanted, reach, always = request.probe_degrees, 0, 0
            if wanted is None:
                # The largest degree ranked is the largest that fits (``max_degree``): the ranking adds it.
                wanted, reach = (PROBE_DEGREE, top), covered.get(mode, 0)
                # MPS at the largest ranked degree: the calibration past saturation (leave one workload
                # out on the corpus, the largest error fell from 15.3% to 9.7% with it).
                always = top if mode_of(mode).sharing is Sharing.CONCURRENT else 0
            for d in sorted({min(d, top) for d in wanted} - {0, 1}):
                if d <= reach and d != always:
                    continue
                label = Candidate(mode, (p.profile,) * d, (Slot(),) * d).label  # as the ranking labels it
                out.append(_Probe(p.profile.workload, mode, d, label, (*p.words, f"mode={mode}", f"degree={d}")))
    return list(dict.fromkeys(out))


def steady_profiles(
    profiled: list[Profiled],
    request: Request,
    found: dict[tuple[str, str, str], Profile],
    advice_dir: Path,
    covered: Callable[[Profile], bool] | None = None,
) -> list[Profiled]:
    """Each profile measured until it is steady: while its 95% interval (its own runs and those of the
    same workload found in the fit sweeps, ``found``) is wider than ``PROFILE_CI``, another solo run
    (the next ``repeat``), up to ``PROFILE_RUNS`` runs in all. Every prediction scales with the profile:
    on an H200 one short solo of mobilenetv3 ran 7,441 samples/s (CV 24% over its windows) against
    10,308-10,809 in six others, and the predictions fell 14% short with it.

    Not where ``covered(profile)`` says the prior covers every degree the profile ranks (the corpus
    on an H200, :func:`prior_covers`): the ranking then stands on the prior's saturated cells, which
    a slow solo moves little (its rate and its activities fall together: the aggregate where a
    resource saturates is the solo's samples per unit of activity times the capacity), and the
    confirmation measures the pick; a second and third solo would cost two thirds of what measuring
    naive and MPS at three degrees does (issue 44: advise + confirm within 30% of measuring all)."""
    out = []
    for p in profiled:
        if p.profile is None:
            out.append(p)
            continue
        runs = [p.profile]
        if covered is not None and covered(p.profile):
            out.append(p)
            continue
        out_root = Path(p.spec.config.out_dir).absolute()
        known = found.get(profile_key(p.profile.gpu_name, p.profile.workload, p.profile.settings))
        while len(runs) < PROFILE_RUNS:
            # Each run once: the first solo is among the history already where its cell lies under
            # the fit sweeps (out_dir), the further runs are not (they ran after it was read).
            joined = with_history(combine([r for r in runs if not _known(r, known)] or runs[:1]), found)
            if joined.rate_rel_hw is None or joined.rate_rel_hw <= PROFILE_CI or len(joined.runs) >= PROFILE_RUNS:
                break
            key = f"{p.profile.workload} naive x1 r{len(runs)}"
            words = (*p.words, "mode=naive", "degree=1", f"repeat={len(runs)}")
            run = run_cells(advice_dir / "profile", [(key, words)], request)[0]
            got = profile_in(Path(run.cell_dir), out_root)[0] if run.status == "ok" else None
            if got is None:
                break
            runs.append(got)
        out.append(dataclasses.replace(p, profile=combine(runs)) if len(runs) > 1 else p)
    return out


def _known(run: Profile, history: Profile | None) -> bool:
    """Whether the history already holds this run (its cell)."""
    return history is not None and set(run.cell_dirs) <= set(history.cell_dirs)


def prior_covers(params: Params, gpu: Gpu) -> Callable[[Profile], bool]:
    """Whether the fit's cells reach, in every mode the advisor measures (naive and MPS), the largest
    degree a profile ranks there."""
    reach = fitted_reach(params)
    return lambda p: all(0 < max_degree(p, gpu, mode) <= reach[mode] for mode in reach)


def fitted_reach(params: Params) -> dict[str, int]:
    """Per mode the advisor measures, the largest degree of the cells the parameters were fitted on (0: none)."""
    return {mode: max(params.fitted_degrees(mode), default=0) for mode in modes_where(lambda k: k.advised)}


class Probes(NamedTuple):
    """The probe cells that ran ok: their directories and their configurations' labels, as the
    rankings label them (the confirmation's rung 0 has them at no cost); per workload, its MPS probe of
    the largest degree (degree, measured samples/s, cell directory): the calibration past saturation."""

    dirs: frozenset[str]
    labels: frozenset[str]
    mps: Mapping[str, tuple[int, float, str]] = {}
    rates: Mapping[str, float] = {}  # each probe's measured samples/s, by label

    def fitted(self, covered: Mapping[str, int] | None) -> frozenset[str]:
        """The probe cells the fit keeps: all, but an MPS calibration probe at a degree the fit's other
        workloads already cover (``covered``: the corpus on its GPU model), which calibrates alone, as
        the validation on the corpus grades it."""
        mps = max(
            (covered or {}).get(m, 0) for m in modes_where(lambda k: k.sharing is Sharing.CONCURRENT and k.advised)
        )
        alone = {d for degree, _, d in self.mps.values() if covered is not None and degree <= mps}
        return self.dirs - alone

    def calibration(self) -> dict[str, tuple[int, float]]:
        return {w: (degree, rate) for w, (degree, rate, _) in self.mps.items()}


def run_probes(
    profiled: list[Profiled], request: Request, gpu: Gpu, advice_dir: Path, covered: Mapping[str, int] | None = None
) -> Probes:
    """Run the probe cells (short: the profile's length)."""
    cells = _probes(profiled, request, gpu, covered)
    runs = run_cells(advice_dir / "probe", [(c.label, c.words) for c in cells], request)
    ok = [(c, r) for c, r in zip(cells, runs, strict=True) if r.status == "ok"]
    mps: dict[str, tuple[int, float, str]] = {}
    for c, r in ok:  # each workload's concurrent probe of the largest degree that measured a rate
        if (
            mode_of(c.mode).sharing is Sharing.CONCURRENT
            and r.samples_per_s
            and c.degree > mps.get(c.workload, (0,))[0]
        ):
            mps[c.workload] = (c.degree, r.samples_per_s, r.cell_dir)
    rates = {r.key: r.samples_per_s for _, r in ok if r.samples_per_s}
    return Probes(frozenset(r.cell_dir for _, r in ok), frozenset(r.key for _, r in ok), mps, rates)


def scaled_common(common: tuple[str, ...], scale: int) -> tuple[str, ...]:
    """The words for every cell with the epoch length (``epoch_time_s`` or ``epoch_samples``) times ``scale``."""
    out = []
    for word in common:
        key, _, value = word.partition("=")
        if key in _EPOCH_KEYS and scale != 1:
            number = float(value) * scale
            word = f"{key}={int(number) if key == 'epoch_samples' else f'{number:g}'}"
        out.append(word)
    return tuple(out)


def _words(p: Prediction, profiled: list[Profiled]) -> tuple[str, ...]:
    job = next(q for q in profiled if q.profile is not None and q.profile.workload == p.workloads)
    words = (*job.words, f"mode={p.mode}", f"degree={p.degree}")
    if p.active_thread_percentage:
        words += (f"mode.active_thread_percentage={p.active_thread_percentage[0]}",)
    return words


def _confirm(
    r: Ranking,
    profiled: list[Profiled],
    request: Request,
    advice_dir: Path,
    probed: frozenset[str],
    known: Mapping[str, float],
) -> Ranking:
    if r.mix:
        return dataclasses.replace(r, confirm_note="a mix is not confirmed (its cells are in sweep.txt)")
    # The modes the engine runs on any GPU (MIG needs a GPU model's layout and reconfiguration rights).
    candidates = [p for p in r.rows if p.fits and mode_of(p.mode).advised and p.agg_samples_per_s]

    def measure(preds: list[Prediction], scale: int) -> dict[str, tuple[float | None, str, bool]]:
        cells = [(p.label, _words(p, profiled)) for p in preds]
        scaled = dataclasses.replace(request, common=scaled_common(request.common, scale))
        runs = run_cells(advice_dir / f"confirm-x{scale}", cells, scaled)
        return {x.key: (x.samples_per_s, x.cell_dir, x.reused) for x in runs}

    h = confirm(candidates, request.confirm_k, request.confirm_budget_s, UNIT_S, measure, free=probed, known=known)
    note = f"{h.stopped}; {len(h.measured)} measurement(s) in {h.spent_s:.0f} s of {request.confirm_budget_s:g} s"
    return dataclasses.replace(r, confirmed=h.pick, measured=h.measured, confirm_note=note)


def confirm_rankings(
    advice: Advice,
    profiled: list[Profiled],
    request: Request,
    advice_dir: Path,
    probed: frozenset[str] = frozenset(),
    known: Mapping[str, float] | None = None,
) -> Advice:
    """The advice with each workload's top candidates measured by successive halving; the configurations
    probed (``probed``: their labels; ``known``: what they measured) join its first rung at no cost
    (their cells are reused), and a candidate predicted below what a probe measured is not a contender."""
    rankings = tuple(_confirm(r, profiled, request, advice_dir, probed, known or {}) for r in advice.rankings)
    return dataclasses.replace(advice, rankings=rankings)
