"""The advisor's model: from solo profiles to a collocated cell's memory, throughput, slowdown, energy.

A roofline with smooth corners. Each job, alone, used a share of some GPU resources (its profile);
collocated, the jobs of a cell offer their demands to the same resources, and a resource that
cannot serve them all slows every job that uses it in proportion. Which resources are shared
depends on the mode:

* **naive** (time-slicing): the GPU's time. Only one context runs at a time, so the shares of time
  during which a kernel ran (``busy``) add up; the time-slicer serves at most ``capacity`` of the
  time (context switches take the rest).
* **mps**: the SMs and the DRAM bandwidth (SM and DRAM activity add up: kernels of all clients run
  at once) up to ``capacity``; of the SMs, the share the busiest job keeps active alone is served as
  alone and only the rest at ``capacity`` (:func:`sm_capacity`); with ``active_thread_percentage`` a
  job also has only its share of the SMs.
* **mig**: each job has its instance's SMs (SM activity is scaled by the instance's share of the
  GPU's SMs), the jobs of one GPU instance share its memory bandwidth.
* every mode: the host's cores (each job's launching thread needs its CPU time per step; the node
  gives the cell ``cores``, of which ``cpu_capacity``, fitted, serve launching: past them every
  job's CPU-side time per step stretches by the demand over them) and the PCIe link (each job's
  host-to-device bytes per second).

A resource of capacity ``C`` that is offered ``O`` serves ``W(O) = (O^-k + C^-k)^(-1/k)``: close
to ``O`` when it is lightly loaded, close to ``C`` when it is saturated; the sharpness ``k`` sets how
much jobs already interfere before saturation. A solo job's measured share ``a`` is what the
resource served it, so it offered ``W^-1(a)``; collocated, each job gets its part of ``W(sum of the
offers)``, and its rate relative to alone is that part over ``a``. A job's rate is bound by its
tightest resource. Throughput per unit of SM activity is assumed constant (the SM activity of a
cell is the profiles' activity scaled by each job's predicted rate), and power linear in SM
activity (slope fitted on measured sweeps). ``capacity`` and ``k`` per mode, and the power slope,
are the model's only fitted parameters (:mod:`raycolloc.advise.fit`), with the CPU term's
``cpu_capacity`` and MPS's many-clients loss ``mps_thrash`` (:func:`_thrash`).

Memory is predicted on the safe side (:mod:`raycolloc.advise.memory`).
"""

from __future__ import annotations

import dataclasses
import math

from raycolloc.advise.memory import MEM_HEADROOM_MIB, MEM_MARGIN, MPS_MAX_CLIENTS, MPS_SERVER_MIB, memory_need
from raycolloc.advise.profile import Profile
from raycolloc.advise.shapes import (
    DEFAULT_PARAMS,
    Candidate,
    Gpu,
    JobPrediction,
    ModeParams,
    Params,
    Prediction,
    Slot,
)
from raycolloc.advise.spread import with_intervals
from raycolloc.mode_kinds import Sharing, mode_of

__all__ = [
    "ASSUMPTIONS",
    "DEFAULT_PARAMS",
    "Candidate",
    "Gpu",
    "JobPrediction",
    "ModeParams",
    "Params",
    "Prediction",
    "Slot",
    "baseline_share",
    "calibrate_mps",
    "job_rates",
    "predict",
    "served",
    "sm_capacity",
]

ASSUMPTIONS = (
    "a job alone is the profile measured (its epoch-2 samples/s, SM activity, GPU time busy, DRAM and PCIe "
    "activity, CPU time per step of its launching thread, peak memory); collocated jobs are alike to it",
    "naive: the jobs' shares of GPU time add up, served up to `capacity` (time-slicing); mps: SM and DRAM "
    "activity add up, served up to `capacity` (concurrent kernels until the SMs or DRAM saturate; of the SMs, "
    "the busiest job's solo share a is served as alone: a + (1 - a) x capacity); mig: each job "
    "has its instance's share of the SMs and of the memory bandwidth; every mode: the cores the node gives the cell "
    "(times a fitted cpu_capacity) and PCIe",
    "a loaded resource serves W(O) = (O^-k + C^-k)^(-1/k) of an offer O (capacity C, sharpness k); a job's rate "
    "is bound by its tightest resource, and the jobs sharing a resource slow down in proportion",
    "mps past saturation: each client loses 1 / (1 + thrash x DRAM activity x (offered SM activity / C - 1)) "
    "(thrash fitted; the many-clients limit seen on an H200); a workload with over 1.5x the DRAM activity of "
    "those the fit saw past saturation is extrapolated there (marked *, its interval widened); where the advice "
    "measured the workload under MPS at a high degree (its probe), each client's rate past saturation is "
    "also scaled by (offered SM activity / capacity) ^ e, e set so that the probe's aggregate is met",
    "samples per unit of SM activity stay as alone; power is linear in SM activity (slope fitted); "
    "energy per sample = predicted power / predicted throughput",
    "memory: each job's measured memory (NVML per process, or PyTorch's reserved peak + the GPU model's "
    f"context overhead) + {MEM_MARGIN:.0%}, the GPU's base reservation, {MPS_SERVER_MIB:.0f} MiB for an MPS "
    f"server and {MEM_HEADROOM_MIB:.0f} MiB headroom must fit (MIG: per GPU instance); at most "
    f"{MPS_MAX_CLIENTS} MPS clients",
    "parameters (capacity, sharpness per mode, cpu capacity, mps thrash, power slope) are fitted on measured "
    "sweeps (each configuration the median of its runs) of other workloads on the same GPU model and on the "
    "advisor's short probes of the workload itself at high degrees (probe_degrees), never on its other cells",
)


def served(offered: float, capacity: float, k: float) -> float:
    """W(O): what a resource of ``capacity`` serves of an offer (smooth minimum of the two)."""
    return (offered**-k + capacity**-k) ** (-1.0 / k) if offered > 0 else 0.0


def _offered(achieved: float, capacity: float, k: float) -> float:
    """W^-1: the offer that a resource of ``capacity`` served as ``achieved`` (below capacity)."""
    return (achieved**-k - capacity**-k) ** (-1.0 / k) if achieved > 0 else 0.0


class _Rates:
    """Each job's rate relative to alone, and the resource that binds it, lowered resource by resource."""

    def __init__(self, n: int) -> None:
        self.ratio = [1.0] * n
        self.bound = ["none"] * n

    def smooth(
        self,
        members: list[int],
        achieved: list[float | None],
        capacity: float,
        share: float,
        k: float,
        name: str,
        alone_served: bool = True,
    ) -> None:
        """A resource the jobs ``members`` share, each alone having used ``achieved`` of the whole GPU's;
        ``share`` of the GPU's capacity is this pool's (MIG instance, MPS limit: 1 = the whole GPU).
        ``alone_served``: alone, the job was served through the same capacity (its offer is W^-1 of
        what it used); False where the loss only exists among several jobs (time-slicing's switches:
        alone a job keeps the GPU, so it offers what it used)."""
        if alone_served:
            # A solo at or above capacity is taken as just below it: its offer stays finite, and alone it
            # is as measured (a job that saturated a resource alone gains nothing from company).
            used = [
                (j, min(a, 0.98 * capacity)) for j, a in zip(members, achieved, strict=True) if a is not None and a > 0
            ]
        else:
            used = [(j, a) for j, a in zip(members, achieved, strict=True) if a is not None and a > 0]
        if not used or (not alone_served and len(used) < 2):
            return
        pool = capacity * share
        offers = {j: _offered(a, capacity, k) if alone_served else a for j, a in used}
        total = sum(offers.values())
        given = served(total, pool, k)
        for j, a in used:
            self._lower(j, offers[j] * given / total / a, name)

    def hard(self, demands: list[float], capacity: float, name: str) -> None:
        """A resource with a hard limit (cores, the PCIe link): shared in proportion beyond it."""
        total = sum(demands)
        if total > capacity > 0:
            for j, d in enumerate(demands):
                if d > 0:
                    self._lower(j, capacity / total, name)

    def scale(self, j: int, factor: float) -> None:
        """A loss on top of whatever binds the job (the bound keeps its name)."""
        self.ratio[j] *= min(1.0, factor)

    def _lower(self, j: int, ratio: float, name: str) -> None:
        if ratio < self.ratio[j] - 1e-9:
            self.ratio[j], self.bound[j] = ratio, name


def sm_capacity(capacity: float, jobs: tuple[Profile, ...]) -> float:
    """The SM activity concurrent clients reach together: the part of the SMs the busiest job kept
    active alone (``a``) is served as alone, the rest (``1 - a``), filled by interleaving the other
    clients' kernels, at the fitted ``capacity``: ``a + (1 - a) x capacity``.

    The corpus (one H200, MPS at x7-x16, each workload's aggregate in units of its solo's samples per
    SM activity): vit_tiny (0.71 active alone) and resnet152 (0.82) reached 0.97-1.00, the 32-64 px
    CNNs (0.09-0.38 alone) 0.76-0.94 (mobilenetv3: 1.00). One capacity for all predicted vit_tiny and
    resnet152 7-11% low, whatever the fit; a job that fills the SMs alone has nothing to lose to company."""
    busiest = min(1.0, max((j.sm_active for j in jobs), default=0.0))
    return busiest + (1.0 - busiest) * capacity


def _thrash(rates: _Rates, jobs: tuple[Profile, ...], capacity: float, thrash: float) -> None:
    """Many MPS clients past saturation: on 2 x H200 sweeps of three models (docs/measurements.md,
    nineteenth session) the aggregate fell past the degree that saturates the SMs, more for the model
    with more DRAM activity (resnet26: 3.5%, x7 -> x28 -14%; convnext_atto and mobilenetv3: 0.8-0.9%,
    -1% and -3%). Our reading, not a measurement: the clients' kernels take turns on the SMs and find
    less of their data in the L2 cache. Every job's rate is divided by 1 + thrash x the jobs' mean
    DRAM activity x (offered SM activity / capacity - 1), after every other bound (it compounds)."""
    if len(jobs) < 2 or thrash <= 0:  # alone, a job is its profile
        return
    offered = _load(jobs, capacity) - 1.0
    dram = sum(j.dram_active or 0.0 for j in jobs) / len(jobs)
    if thrash <= 0 or offered <= 0 or dram <= 0:
        return
    factor = 1.0 / (1.0 + thrash * dram * offered)
    for i in range(len(jobs)):
        rates.scale(i, factor)


def _rates(c: Candidate, gpu: Gpu, params: Params) -> _Rates:
    """Each job's rate relative to alone (and what binds it) for the candidate's mode."""
    jobs, n = c.jobs, c.degree
    rates = _Rates(n)
    everyone = list(range(n))
    p = params.mode(c.mode)
    sharing = mode_of(c.mode).sharing
    if sharing is Sharing.TIME_SLICED:
        # Alone a job keeps the GPU (no other context to switch to): it offers the time it was busy, and
        # only several contexts lose the switches (corpus: vit_tiny and resnet152, busy 99-100% alone,
        # give 0.91-0.93x their solo rate at x2 to x16; the solo taken as just below capacity gave 1.0x).
        busy: list[float | None] = [j.busy for j in jobs]
        rates.smooth(everyone, busy, p.capacity, 1.0, p.sharpness, "GPU time (time-slicing)", alone_served=False)
    elif sharing is Sharing.CONCURRENT:
        sms = sm_capacity(p.capacity, jobs)
        rates.smooth(everyone, [j.sm_active for j in jobs], sms, 1.0, p.sharpness, "SMs")
        rates.smooth(everyone, [j.dram_active for j in jobs], p.capacity, 1.0, p.sharpness, "DRAM bandwidth")
        for i, slot in enumerate(c.slots):
            if slot.sm_fraction < 1.0:
                rates.smooth(
                    [i], [jobs[i].sm_active], p.capacity, slot.sm_fraction, p.sharpness, "SMs (active-thread %)"
                )
    elif sharing is Sharing.PARTITIONED:
        for i, slot in enumerate(c.slots):
            rates.smooth([i], [jobs[i].sm_active], p.capacity, slot.sm_fraction, p.sharpness, "SMs (MIG)")
        for group in sorted({s.group for s in c.slots}):
            idx = [i for i, s in enumerate(c.slots) if s.group == group]
            rates.smooth(
                idx,
                [jobs[i].dram_active for i in idx],
                p.capacity,
                c.slots[idx[0]].mem_fraction,
                p.sharpness,
                "DRAM bandwidth (MIG)",
            )
    else:
        raise ValueError(f"mode={c.mode!r}: the advisor predicts naive, mps and mig")
    if gpu.cores is not None:
        # Many clients: each job's launching thread needs its share of a core per step; past the cores
        # the cell is given, every job's CPU-side time per step stretches by about demand / cores.
        # ``cpu_capacity`` (fitted) is how many cores' worth of launching the node's cores deliver
        # (below 1: the MPS server, the steward and the data loaders take some; above: SMT).
        # A job alone is as measured (its profile already ran on these cores): never below its own demand.
        cpu_pool = max(params.cpu_capacity * gpu.cores, max(j.cpu_busy for j in jobs))
        rates.hard([j.cpu_busy for j in jobs], cpu_pool, "CPU cores")
    rates.hard([(j.pcie_rx_bytes_s or 0.0) for j in jobs], gpu.pcie_bytes_s, "PCIe")
    if sharing is Sharing.CONCURRENT:  # a loss on top of whatever binds (the CPU, PCIe): applied last
        sms = sm_capacity(p.capacity, jobs)
        _thrash(rates, jobs, sms, params.mps_thrash)
        _past_saturation(rates, jobs, c.slots, sms)
    return rates


# A probe calibrates the course past saturation only where its SMs were offered at least this many
# times what they serve (closer to saturation the exponent is a ratio of two small numbers), and the
# exponent stays within +-PAST_LIMIT (the corpus's eight models: -0.13 to +0.15).
PAST_MIN_LOAD = 1.5
PAST_LIMIT = 1.0


def _load(jobs: tuple[Profile, ...], capacity: float) -> float:
    """The SM activity the jobs offer over what the SMs serve (1 = saturated; a solo counts at most just
    below capacity), as :func:`_thrash` and :func:`_past_saturation` count it."""
    return sum(min(j.sm_active, 0.98 * capacity) for j in jobs) / capacity if capacity > 0 else 0.0


def _past_saturation(rates: _Rates, jobs: tuple[Profile, ...], slots: tuple[Slot, ...], capacity: float) -> None:
    """MPS past saturation as the workload's own probe measured it (:func:`calibrate_mps`): each job
    with ``mps_past`` runs at its rate times load ** mps_past, where the load (offered SM activity over
    capacity) exceeds 1; a job's rate never exceeds its solo's. The corpus (one H200, x7 -> x16): the
    aggregate fell 11% for resnet26 and rose 13-22% for mobilenetv3 and convnext_atto, which no term of
    the solo profile told apart (DRAM activity, SM occupancy: docs/measurements.md)."""
    if len(jobs) < 2 or not any(j.mps_past for j in jobs) or any(s.sm_fraction < 1.0 for s in slots):
        return  # (a thread limit's SM share is its own ceiling: no probe measured that course)
    load = _load(jobs, capacity)
    if load <= 1.0:
        return
    for i, j in enumerate(jobs):
        if j.mps_past:
            rates.ratio[i] = min(1.0, rates.ratio[i] * load**j.mps_past)


def calibrate_mps(profile: Profile, degree: int, measured: float, gpu: Gpu, params: Params) -> Profile:
    """The profile with its own course past MPS saturation, from one measured cell of ``degree`` of its
    jobs under MPS (``measured`` samples/s, the aggregate): the exponent that makes the model's
    aggregate there the measured one (:func:`_past_saturation`). Unchanged where that cell's SMs were
    not past ``PAST_MIN_LOAD`` times their capacity (before saturation the fit already rests on the
    solo) or nothing was measured."""
    base = dataclasses.replace(profile, mps_past=None, mps_probe=None)
    if degree < 2 or not measured or measured <= 0:
        return base
    c = Candidate("mps", (base,) * degree, (Slot(),) * degree)
    load = _load(c.jobs, sm_capacity(params.mode("mps").capacity, c.jobs))
    predicted = sum(job_rates(c, gpu, params))
    if load < PAST_MIN_LOAD or predicted <= 0:
        return base
    exponent = math.log(measured / predicted) / math.log(load)
    bounded = max(-PAST_LIMIT, min(PAST_LIMIT, exponent))
    return dataclasses.replace(base, mps_past=bounded, mps_probe=(degree, measured))


def job_rates(c: Candidate, gpu: Gpu, params: Params) -> tuple[float, ...]:
    """Each job's predicted samples/s (what a fit scores; :func:`predict` adds everything else)."""
    ratio = _rates(c, gpu, params).ratio
    return tuple(p.samples_per_s * r for p, r in zip(c.jobs, ratio, strict=True))


def _as_if_faster(p: Profile, f: float) -> Profile:
    """The solo run ``f`` times as fast, its activities per sample as measured (they scale with it)."""
    dram, pcie = p.dram_active, p.pcie_rx_bytes_s
    return dataclasses.replace(
        p,
        samples_per_s=p.samples_per_s * f,
        sm_active=p.sm_active * f,
        busy=p.busy * f,
        dram_active=None if dram is None else dram * f,
        pcie_rx_bytes_s=None if pcie is None else pcie * f,
        cpu_busy=p.cpu_busy * f,
    )


def baseline_share(c: Candidate, gpu: Gpu, params: Params) -> float:
    """How much of the solo rate's error a candidate's predicted throughput carries: d log(predicted)
    / d log(solo rate) at +-5%, the solo's activities per sample held (0..1). Below saturation a job
    runs about as alone (1); where a resource saturates, the aggregate is the solo's samples per unit
    of activity times the capacity, which a slow solo run (with less activity) moves little (0). On
    the corpus the solo runs of the 32-64 px models spread by CV 16-23%, their SM activity per sample
    by 1-6%."""
    if c.degree < 2:
        return 1.0

    def faster(p: Profile, f: float) -> Profile:
        # A probe's measurement stays what it was: the course past saturation is fitted to it again.
        q = _as_if_faster(p, f)
        return q if p.mps_probe is None else calibrate_mps(q, *p.mps_probe, gpu, params)

    def total(f: float) -> float:
        return sum(job_rates(dataclasses.replace(c, jobs=tuple(faster(p, f) for p in c.jobs)), gpu, params))

    low, high = total(1 / 1.05), total(1.05)
    if low <= 0 or high <= 0:
        return 1.0
    return min(1.0, max(0.0, math.log(high / low) / (2.0 * math.log(1.05))))


def predict(c: Candidate, gpu: Gpu, params: Params) -> Prediction:
    """The candidate's memory fit, each job's rate and slowdown, and the cell's throughput and energy."""
    fits, why, need, expected, capacity = memory_need(c, gpu)
    rates = _rates(c, gpu, params)
    jobs = tuple(
        JobPrediction(p.workload, p.samples_per_s * r, 1.0 / r, b, p.job_mem_mib * (1 + MEM_MARGIN))
        for p, r, b in zip(c.jobs, rates.ratio, rates.bound, strict=True)
    )
    sm = min(1.0, sum(p.sm_active * r for p, r in zip(c.jobs, rates.ratio, strict=True)))
    power = _power(c.jobs, sm, params.power_slope_w)
    agg = sum(j.samples_per_s for j in jobs) if c.uniform else None
    alone = sum(r * p.power_w for p, r in zip(c.jobs, rates.ratio, strict=True) if p.power_w is not None)
    worst = max(range(c.degree), key=lambda i: jobs[i].slowdown)
    dram = max(p.dram_active or 0.0 for p in c.jobs)
    beyond = params.dram_beyond(c.mode, sum(p.sm_active for p in c.jobs), dram) if c.degree > 1 else 1.0
    pred = Prediction(
        label=c.label,
        mode=c.mode,
        degree=c.degree,
        workloads=c.workloads,
        fits=fits,
        why_not=why,
        mem_need_mib=need,
        mem_expected_mib=expected,
        mem_capacity_mib=capacity,
        gain=sum(rates.ratio),
        agg_samples_per_s=agg,
        max_slowdown=jobs[worst].slowdown,
        sm_active=100.0 * sm,
        power_w=power,
        energy_per_sample_j=power / agg if power is not None and agg else None,
        energy_vs_alone=power / alone if power is not None and alone > 0 else None,
        bound=jobs[worst].bound if jobs[worst].slowdown > 1.02 else "none",
        active_thread_percentage=c.active_thread_percentage,
        mig_profiles=c.mig_profiles,
        jobs=jobs,
        extrapolated=params.extrapolated(c.mode, c.degree) or beyond > 1.0,
        dram_beyond=beyond,
        unfitted=c.mode in params.unfitted_modes,
    )
    share = baseline_share(c, gpu, params)
    return with_intervals(pred, params, [p.rate_rel_hw for p in c.jobs], share, [p.activity_rel_hw for p in c.jobs])


def _power(jobs: tuple[Profile, ...], sm: float, slope: float | None) -> float | None:
    """Power at SM activity ``sm`` (0..1): each profile's idle-plus-slope line, averaged; the solo's
    power where no slope was fitted."""
    known = [(p.power_w, p.sm_active) for p in jobs if p.power_w is not None]
    if not known:
        return None
    if slope is None:
        return sum(power for power, _ in known) / len(known)
    idle = sum(power - slope * sm_active for power, sm_active in known) / len(known)
    return idle + slope * sm
