"""Measured cells as the model sees them, and the model's few parameters fitted on them.

An :class:`Observation` is one measured cell: the :class:`~raycolloc.advise.model.Candidate` it was
(its mode, its jobs' profiles, their MIG devices or MPS limits) and what it measured. :func:`fit`
chooses each mode's ``capacity`` and ``sharpness`` by least squares on the log of the measured
throughput (a uniform cell's aggregate, a mixed cell's every job), over a grid, and the power slope
by least squares within each workload. Cells of the excluded workloads never enter a fit: a
workload is predicted with parameters fitted on the others only (leave-one-out).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from raycolloc.advise.model import DEFAULT_PARAMS, ModeParams, Params, job_rates
from raycolloc.advise.observe import Observation, by_configuration
from raycolloc.mode_kinds import MODE_NAMES, Sharing, mode_of
from raycolloc.results.stats import t_quantile

__all__ = ["fit"]

# A capacity is a share of a resource: at most the whole of it. The grid once reached 1.20 and its
# fine search 1.22, where every leave-one-out fit of MPS ended (see :func:`_fit_mode`).
CAPACITY_MAX = 1.0
_CAPACITIES = tuple(round(0.30 + 0.02 * i, 2) for i in range(36))  # 0.30 .. 1.00
_SHARPNESS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0)
_CPU_CAPACITIES = tuple(round(0.25 + 0.05 * i, 2) for i in range(26))  # 0.25 .. 1.50
_THRASH = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0)
_PRIOR = 1e-4  # a tie between grid points (a resource no fit cell saturated) goes to the defaults


def _log_error(o: Observation, params: Params) -> float | None:
    """Squared log error of one cell's throughput: the aggregate of a uniform cell, the mean over a
    mixed cell's jobs; None where nothing was measured."""
    rates = job_rates(o.candidate, o.gpu, params)
    if o.candidate.uniform:
        if o.agg_samples_per_s is None or not sum(rates) or o.status != "ok":
            return None
        return math.log(sum(rates) / o.agg_samples_per_s) ** 2
    errs = [math.log(r / m) ** 2 for r, m in zip(rates, o.job_samples_per_s, strict=True) if m]
    return sum(errs) / len(errs) if errs else None


def _fit_mode(
    obs: list[Observation], mode: str, start: ModeParams, cpu: float, thrash: float
) -> tuple[ModeParams, float, int]:
    """Grid search of one mode's (capacity, sharpness), then a finer capacity around the best; returns
    them, the RMS log error and the number of cells scored (``cpu``, ``thrash``: the other terms)."""

    def loss(mp: ModeParams) -> tuple[float, float, int]:
        pick = {name: mp if name == mode else DEFAULT_PARAMS.mode(name) for name in MODE_NAMES}
        params = replace(
            DEFAULT_PARAMS, naive=pick["naive"], mps=pick["mps"], mig=pick["mig"], cpu_capacity=cpu, mps_thrash=thrash
        )
        errs = [e for o in obs if (e := _log_error(o, params)) is not None]
        if not errs:
            return math.inf, math.nan, 0
        mse = sum(errs) / len(errs)
        prior = _PRIOR * ((mp.capacity - start.capacity) ** 2 + math.log(mp.sharpness / start.sharpness) ** 2)
        return mse + prior, math.sqrt(mse), len(errs)

    # Coarse (capacity every 0.06, each sharpness), then the grid's 0.02 around the best and the
    # sharpness either side of it, then 0.0025 (within the bound: the coarse grid once stopped at 1.20
    # and this last step went to 1.22, where every MPS fit ended: the optimum lay beyond the grid).
    scores: dict[ModeParams, float] = {}

    def score(mp: ModeParams) -> float:
        if mp not in scores:
            scores[mp] = loss(mp)[0]
        return scores[mp]

    best = min((ModeParams(c, k) for c in _CAPACITIES[::3] for k in _SHARPNESS), key=score)
    near = _SHARPNESS.index(best.sharpness)
    best = min(
        (
            ModeParams(c, k)
            for c in _CAPACITIES
            if abs(c - best.capacity) <= 0.061
            for k in _SHARPNESS[max(0, near - 1) : near + 2]
        ),
        key=score,
    )
    fine = [
        ModeParams(c, best.sharpness)
        for i in range(-8, 9)
        if (c := round(best.capacity + 0.0025 * i, 4)) <= CAPACITY_MAX
    ]
    best = min([best, *fine], key=score)
    value, rms, n = loss(best)
    return (best, rms, n) if math.isfinite(value) else (start, math.nan, 0)


def _fit_cpu(obs: list[Observation], params: Params) -> float:
    """The cores' worth of launching per core given (``cpu_capacity``) that best explains the cells,
    with the modes' parameters already fitted; the default where no cell was CPU-bound (a tie)."""

    def loss(capacity: float) -> float:
        trial = replace(params, cpu_capacity=capacity)
        errs = [e for o in obs if (e := _log_error(o, trial)) is not None]
        return sum(errs) / len(errs) + _PRIOR * (capacity - 1.0) ** 2 if errs else math.inf

    return min(_CPU_CAPACITIES, key=loss)


def _fit_thrash(obs: list[Observation], cpu: float) -> float:
    """The MPS clients' loss past saturation (``mps_thrash``) that best explains the MPS cells, fitted
    jointly with MPS's capacity and sharpness (the loss and the capacity trade against each other);
    0 where no cell shows it (a tie goes to 0), or where none could (no DRAM activity, or no cell
    offering more SM activity than the lowest capacity the fit tries: the search is skipped)."""
    if not any(
        sum(p.dram_active or 0.0 for p in o.candidate.jobs) > 0
        and sum(p.sm_active for p in o.candidate.jobs) > _CAPACITIES[0]
        for o in obs
    ):
        return 0.0

    def loss(thrash: float) -> float:
        _, rms, n = _fit_mode(obs, "mps", DEFAULT_PARAMS.mps, cpu, thrash)
        return rms**2 + _PRIOR * thrash**2 if n else math.inf

    return min(_THRASH, key=loss)


def _power_slope(obs: Iterable[Observation]) -> float | None:
    """Watts per unit of SM activity, from the cells of each workload (and mode) around their mean:
    the slope shared by every workload, their idle-plus-activity lines differing by an offset."""
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for o in obs:
        if o.candidate.uniform and o.power_w is not None and o.sm_active is not None and o.status == "ok":
            groups.setdefault((o.candidate.workloads, o.gpu.name), []).append((o.sm_active, o.power_w))
    sxy = sxx = 0.0
    for points in groups.values():
        mx = sum(x for x, _ in points) / len(points)
        my = sum(y for _, y in points) / len(points)
        sxy += sum((x - mx) * (y - my) for x, y in points)
        sxx += sum((x - mx) ** 2 for x, _ in points)
    return sxy / sxx if sxx > 1e-4 else None


def _fit_modes(usable: list[Observation], cpu: float, thrash: float = 0.0) -> Params:
    """Each mode's parameters, fitted degrees and residual spread, with the CPU term at ``cpu``."""
    fitted: dict[str, ModeParams] = {}
    degrees: dict[str, tuple[int, ...]] = {}
    residual: dict[str, float] = {}
    dram_reach = 0.0
    notes = []
    for mode in MODE_NAMES:
        kind = mode_of(mode)
        cells = [o for o in usable if o.candidate.mode == mode and o.candidate.degree > 1 and o.status == "ok"]
        # A mode fitted from another (MIG from MPS) starts from that one's fit, and borrows it where no cell
        # of its own was measured.
        start = fitted.get(kind.fit_from, DEFAULT_PARAMS.mode(mode)) if kind.fit_from else DEFAULT_PARAMS.mode(mode)
        if not cells:
            if kind.fit_from and kind.fit_from in fitted:
                fitted[mode] = fitted[kind.fit_from]
                notes.append(f"{mode}: as {kind.fit_from} (no {mode} cell)")
            continue
        fitted[mode], rms, n = _fit_mode(cells, mode, start, cpu, thrash)
        degrees[mode] = tuple(sorted({o.candidate.degree for o in cells}))
        if kind.sharing is Sharing.CONCURRENT:
            dram_reach = _dram_reach(cells, fitted[mode].capacity)
        if n >= 2:  # a 95% half-width of the relative error: the t-quantile (n - 1 dof) times the RMS
            residual[mode] = t_quantile(n - 1) * rms
        edge = f", capacity at its bound {CAPACITY_MAX:g}" if fitted[mode].capacity >= CAPACITY_MAX else ""
        notes.append(f"{mode}: {len(cells)} cells, rms log error {rms:.3f}{edge}")
    names = sorted({w for o in usable for w in o.workloads})
    source = (
        f"fitted on {', '.join(names)} ({'; '.join(notes)}; cpu capacity {cpu:g}; mps thrash {thrash:g})"
        if fitted
        else "defaults (no measured collocated cell of another workload on this GPU)"
    )
    return Params(
        naive=fitted.get("naive", DEFAULT_PARAMS.naive),
        mps=fitted.get("mps", DEFAULT_PARAMS.mps),
        mig=fitted.get("mig", DEFAULT_PARAMS.mig),
        power_slope_w=_power_slope(usable),
        source=source,
        degrees=tuple(degrees.items()),
        residual_rel=tuple(residual.items()),
        cpu_capacity=cpu,
        mps_thrash=thrash,
        mps_dram_reach=dram_reach,
        unfitted_modes=tuple(m for m in MODE_NAMES if m not in degrees),
    )


def _dram_reach(cells: list[Observation], capacity: float) -> float:
    """The largest DRAM activity of a job alone among the (MPS) ``cells`` past saturation (their jobs'
    SM activity alone, summed, above ``capacity``): what the thrash term was fitted on (0: none)."""
    return max(
        (
            p.dram_active or 0.0
            for o in cells
            if sum(q.sm_active for q in o.candidate.jobs) > capacity
            for p in o.candidate.jobs
        ),
        default=0.0,
    )


def fit(
    observations: list[Observation],
    exclude: frozenset[str] = frozenset(),
    gpu_name: str | None = None,
    keep: frozenset[str] = frozenset(),
) -> Params:
    """Parameters fitted on the observations of workloads not in ``exclude`` (and of ``gpu_name``'s
    cells when given), each configuration's repeats as one (:func:`by_configuration`); a mode without
    such cells keeps its default (MIG: the fitted MPS values). Cells whose directory is in ``keep``
    enter whatever their workload (the advisor's own probes of the workload it ranks, at high
    degrees: the fit then covers the degrees it ranks).

    The CPU term's capacity is fitted after the modes' parameters, on every collocated cell, and the
    modes are fitted again with it where it binds (two passes: a CPU-bound cell would otherwise
    pull a mode's capacity down); then the MPS clients' loss (``mps_thrash``), jointly with MPS's
    parameters."""
    usable = by_configuration(
        [
            o
            for o in observations
            if (o.cell_dir in keep or not (o.workloads & exclude)) and (gpu_name is None or o.gpu.name == gpu_name)
        ]
    )
    params = _fit_modes(usable, 1.0)
    collocated = [o for o in usable if o.candidate.degree > 1 and o.status == "ok" and o.gpu.cores]
    cpu = _fit_cpu(collocated, params) if collocated else 1.0
    if cpu != 1.0:
        params = _fit_modes(usable, cpu)
    mps = [
        o
        for o in usable
        if mode_of(o.candidate.mode).sharing is Sharing.CONCURRENT and o.candidate.degree > 1 and o.status == "ok"
    ]
    thrash = _fit_thrash(mps, cpu) if mps else 0.0
    return params if thrash == 0.0 else _fit_modes(usable, cpu, thrash)
