"""The configurations the advisor weighs, and their ranking.

Per workload: naive and MPS at each degree asked for (1, 2, 3, 7 by default) and the largest that
fits, MPS with an equal active-thread percentage per job, and the GPU model's MIG layout for each
degree it can hold. For a mix of workloads: the mix in naive, MPS, MPS with active-thread
percentages (equal, and in proportion to each job's SM activity alone) and MIG. Each group is
ranked by gain (the jobs' summed rate relative to alone; a uniform cell's aggregate over its solo),
and three picks are named: best throughput, best energy per unit of work, and best throughput
with every job's slowdown within ``max_slowdown``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from raycolloc.advise.memory import max_degree
from raycolloc.advise.model import Candidate, Gpu, Params, Prediction, Slot, predict
from raycolloc.advise.profile import Profile
from raycolloc.advise.shapes import Measurement
from raycolloc.advise.slots import equal_share, mig_slots, mps_slots
from raycolloc.mode_kinds import modes_where
from raycolloc.results.stats import Interval

__all__ = ["DEFAULT_DEGREES", "Ranking", "format_ranking", "mix_candidates", "rank", "uniform_candidates"]

DEFAULT_DEGREES = (1, 2, 3, 7)


def uniform_candidates(profile: Profile, gpu: Gpu, degrees: Sequence[int] = DEFAULT_DEGREES) -> list[Candidate]:
    """Every configuration of ``degree`` copies of one workload the advisor predicts."""
    out = []
    for mode in modes_where(lambda k: k.advised):
        for d in sorted({*degrees, max_degree(profile, gpu, mode)} - {0}):
            out.append(Candidate(mode, (profile,) * d, (Slot(),) * d))
    for d in sorted(d for d in set(degrees) if d > 1):
        atp = (equal_share(d),) * d
        out.append(Candidate("mps", (profile,) * d, mps_slots(atp), active_thread_percentage=atp))
    for d in sorted(set(degrees)):
        placed = mig_slots(gpu.name, "auto", None, [None] * d)
        if placed is not None:
            out.append(Candidate("mig", (profile,) * d, placed[0], mig_profiles=placed[1]))
    return out


def mix_candidates(profiles: Sequence[Profile], gpu: Gpu) -> list[Candidate]:
    """The mix of ``profiles`` (one job each) in every mode the advisor predicts."""
    jobs = tuple(profiles)
    n = len(jobs)
    out = [Candidate("naive", jobs, (Slot(),) * n), Candidate("mps", jobs, (Slot(),) * n)]
    equal = (equal_share(n),) * n
    total = sum(p.sm_active for p in jobs) or 1.0
    # In proportion to what each job used alone: the heavier job keeps more of the SMs.
    share = tuple(max(1, min(100, round(100 * p.sm_active / total))) for p in jobs)
    for atp in dict.fromkeys((equal, share)):
        out.append(Candidate("mps", jobs, mps_slots(atp), active_thread_percentage=atp))
    placed = mig_slots(gpu.name, "auto", None, [None] * n)
    if placed is not None:
        out.append(Candidate("mig", jobs, placed[0], mig_profiles=placed[1]))
    return out


@dataclass(frozen=True)
class Ranking:
    """One group's predictions (a workload's configurations, or a mix's), best gain first (those that
    fit before those that do not), and the labels of the three picks (None: none qualifies)."""

    group: str
    rows: tuple[Prediction, ...]
    best_throughput: str | None
    best_energy: str | None
    best_within_cap: str | None
    max_slowdown: float | None
    mix: bool = False
    # Confirming (:mod:`raycolloc.advise.confirm`): the best measured configuration, every measurement
    # (label, rung, samples/s), and why the halving stopped (None: not confirmed).
    confirmed: str | None = None
    measured: tuple[Measurement, ...] = ()
    confirm_note: str | None = None

    def latest(self, label: str) -> Measurement | None:
        """The label's measurement at the highest rung it reached (None: not measured)."""
        found = [m for m in self.measured if m.label == label]
        return max(found, key=lambda m: m.rung) if found else None

    def picks(self) -> list[Prediction]:
        """The picked predictions (the confirmed pick first), each once, in pick order."""
        chosen = (self.confirmed, self.best_throughput, self.best_energy, self.best_within_cap)
        names = dict.fromkeys(n for n in chosen if n)
        return [next(r for r in self.rows if r.label == n) for n in names]


def _first(preds: list[Prediction], key: Callable[[Prediction], float]) -> Prediction | None:
    """The prediction with the best (lowest) ``key``; of those within 1% of it, the one with the fewest
    jobs (past a resource's saturation more jobs only slow each other down)."""
    if not preds:
        return None
    best = min(key(p) for p in preds)
    close = [p for p in preds if key(p) <= best + 0.01 * abs(best)]
    return min(close, key=lambda p: (p.degree, p.max_slowdown, key(p)))


def rank(
    group: str,
    candidates: Sequence[Candidate],
    gpu: Gpu,
    params: Params,
    max_slowdown: float | None = None,
    mix: bool = False,
) -> Ranking:
    """Predict and rank one group's candidates (equal gains to two decimals: fewer jobs first)."""
    preds = sorted(
        (predict(c, gpu, params) for c in candidates),
        key=lambda p: (not p.fits, -round(p.gain, 2), p.degree, p.max_slowdown),
    )
    fitting = [p for p in preds if p.fits]
    capped = [p for p in fitting if max_slowdown is None or p.max_slowdown <= max_slowdown]
    best, energy, within = (
        _first(fitting, lambda p: -p.gain),
        _first([p for p in fitting if p.energy_vs_alone is not None], lambda p: p.energy_vs_alone or 0.0),
        _first(capped, lambda p: -p.gain),
    )
    return Ranking(
        group=group,
        rows=tuple(preds),
        best_throughput=best.label if best else None,
        best_energy=energy.label if energy else None,
        best_within_cap=within.label if within else None,
        max_slowdown=max_slowdown,
        mix=mix,
    )


def _pm(value: float | None, interval: Interval | None, spec: str) -> str:
    """``36,524 -11/+12%``: the value and how far its interval reaches below and above it, in percent
    (an interval of the log made linear is wider above; the value alone without one)."""
    if not value:
        return "-"
    if interval is None or not interval.known or interval.half_width == 0:
        return format(value, spec)
    return f"{format(value, spec)} -{100 * (1 - interval.low / value):.0f}/+{100 * (interval.high / value - 1):.0f}%"


def format_ranking(r: Ranking) -> str:
    """A ranked table, as printed."""
    cap = f"max_slowdown={r.max_slowdown:g}" if r.max_slowdown is not None else "no max_slowdown"
    lines = [
        f"{r.group}: configurations ranked by throughput gain (T: best throughput, E: best energy per sample, "
        f"C: best throughput within {cap}; ext *: extrapolated, beyond the degrees or modes the parameters "
        f"were fitted on, or MPS past saturation with more DRAM activity than the fit saw there; "
        f"u: unfitted, no measured cell of its mode was fitted on (MIG takes MPS's parameters); "
        f"±: the 95% interval from the fit's residuals and the solo profile's spread; "
        f"M: the confirmed pick, the best measured; measured rN: its samples/s at halving rung N)"
    ]
    head = (
        f"{'#':>3} {'pick':<4} {'mode':<5} {'jobs':>4} {'ext':<3} {'layout / limit':<24} {'fits':<4} {'mem GiB':>13} "
        f"{'samples/s (95%)':>17} {'gain':>5} {'slowdown (95%)':>14} {'J/sample':>9} {'E/alone':>7}  bound"
    )
    lines += [head, "-" * len(head)]
    for i, p in enumerate(r.rows, 1):
        marks = "".join(
            m
            for m, name in (
                ("M", r.confirmed),
                ("T", r.best_throughput),
                ("E", r.best_energy),
                ("C", r.best_within_cap),
            )
            if name == p.label
        )
        layout = (
            ",".join(p.mig_profiles)
            if p.mig_profiles
            else "atp=" + "/".join(map(str, p.active_thread_percentage))
            if p.active_thread_percentage
            else "-"
        )
        mem = f"{p.mem_need_mib / 1024:.1f}/{p.mem_capacity_mib / 1024:.0f}"
        rate = _pm(p.agg_samples_per_s, p.agg_interval, ",.0f")
        slow = _pm(p.max_slowdown, p.slowdown_interval, ".2f")
        eps = f"{p.energy_per_sample_j:.4g}" if p.energy_per_sample_j else "-"
        eva = f"{p.energy_vs_alone:.2f}" if p.energy_vs_alone else "-"
        ext = ("u" if p.unfitted else "") + ("*" if p.extrapolated else "")
        seen = r.latest(p.label)
        meas = (
            "-"
            if seen is None
            else f"r{seen.rung}: " + (f"{seen.samples_per_s:,.0f}" if seen.samples_per_s else "failed")
        )
        note = p.bound if p.fits else f"does not fit: {p.why_not}"
        lines.append(
            f"{i:>3} {marks:<4} {p.mode:<5} {p.degree:>4} {ext:<3} {layout[:24]:<24} {'yes' if p.fits else 'no':<4} "
            f"{mem:>13} {rate:>17} {p.gain:>5.2f} {slow:>14} {eps:>9} {eva:>7} {meas:>14}  {note}"
        )
    return "\n".join(lines)
