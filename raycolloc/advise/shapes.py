"""What the advisor's model reads and writes: the GPU and its node, a candidate configuration and
the slot each job runs in, the fitted parameters, and a prediction (:mod:`raycolloc.advise.model`
computes the predictions; this module holds only their shapes, so fitting, ranking and confirming
can name them without the model's arithmetic)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from raycolloc.advise.profile import Profile
from raycolloc.mode_kinds import MODE_NAMES, Sharing, mode_of
from raycolloc.results.stats import Interval

__all__ = [
    "DEFAULT_PARAMS",
    "DRAM_REACH",
    "DRAM_UNSEEN",
    "Candidate",
    "Measurement",
    "Gpu",
    "JobPrediction",
    "ModeParams",
    "Params",
    "Prediction",
    "Slot",
]

# A workload's DRAM activity up to this multiple of the fitted workloads' largest is within the fit's
# reach (the thrash term's evidence); beyond it an MPS configuration past saturation is extrapolated.
DRAM_REACH = 1.5
# How far beyond the reach counts at most (the interval's widening, 1 + log2 of it, stays finite): and
# what a workload with DRAM activity counts where the fit saw no MPS cell past saturation at all.
DRAM_UNSEEN = 4.0

# Host-to-device bandwidth a job's copies can reach over the GPU's PCIe link (pinned memory,
# measured ~ 80% of the theoretical 32 GB/s for Gen4 x16 and 64 GB/s for Gen5 x16).
_PCIE_BYTES_S = (("A100", 25e9), ("H100", 50e9), ("H200", 50e9), ("B200", 50e9))
_PCIE_DEFAULT = 25e9


@dataclass(frozen=True)
class ModeParams:
    """One mode's fitted parameters: the share of a resource it can serve, and how sharply it saturates."""

    capacity: float
    sharpness: float


@dataclass(frozen=True)
class Params:
    """Everything the model fits. ``power_slope_w``: watts per unit (0..1) of SM activity (None:
    power held at the solo's). ``source`` says what they were fitted on. ``degrees``: per mode, the
    degrees of the measured cells the mode's parameters were fitted on (a mode absent: fitted on no
    cell of its own): a prediction beyond them is an extrapolation."""

    naive: ModeParams
    mps: ModeParams
    mig: ModeParams
    power_slope_w: float | None
    source: str
    degrees: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # Per mode, the 95% relative half-width of the fit's residuals (t-quantile x RMS log error).
    residual_rel: tuple[tuple[str, float], ...] = ()
    # Cores' worth of launching threads per core the node gives a cell (fitted where cells were CPU-bound).
    cpu_capacity: float = 1.0
    # MPS past saturation: each client's rate falls by 1 / (1 + thrash x DRAM activity x excess), the
    # excess being the SM activity offered over capacity, less one (fitted; 0 = no such loss).
    mps_thrash: float = 0.0
    # The largest DRAM activity (0..1, per job alone) of the workloads whose MPS cells past saturation
    # the parameters were fitted on (0: the fit had no such cell; None: not fitted, nothing checked):
    # the reach of ``mps_thrash``, which only cells past saturation show and which grows with DRAM activity.
    mps_dram_reach: float | None = None
    # Modes no measured cell of their own was fitted on (their values are defaults or, for MIG, MPS's):
    # every output marks their predictions unfitted.
    unfitted_modes: tuple[str, ...] = ()

    def mode(self, name: str) -> ModeParams:
        mode_of(name)  # a KeyError naming the modes there are, for a name that is none
        return cast(ModeParams, getattr(self, name))

    def fitted_degrees(self, mode: str) -> tuple[int, ...]:
        """The degrees the mode's parameters saw (empty: none of its own)."""
        return dict(self.degrees).get(mode, ())

    def residual(self, mode: str) -> float | None:
        """The mode's 95% relative half-width from its fit's residuals (None: not fitted on two cells)."""
        return dict(self.residual_rel).get(mode)

    def dram_beyond(self, mode: str, offered_sm: float, dram: float) -> float:
        """How far past the DRAM activity the fit saw an MPS configuration past saturation lies: its
        jobs' largest DRAM activity (``dram``) over ``mps_dram_reach`` where that is above
        ``DRAM_REACH`` and the SM activity offered (its jobs' alone, summed) is above MPS's capacity,
        at most ``DRAM_UNSEEN`` (and that where the fit saw no MPS cell past saturation); else 1 (also
        for parameters not fitted: ``mps_dram_reach`` None).
        Past saturation MPS clients lose in proportion to DRAM activity (``mps_thrash``): a fit on
        workloads with less of it cannot know how much (on one H200, resnet26 at 2.6% DRAM activity
        fitted on two models at 0.8% or less: MPS x14 predicted 29% high)."""
        if (
            self.mps_dram_reach is None
            or mode_of(mode).sharing is not Sharing.CONCURRENT
            or offered_sm <= self.mps.capacity
            or dram <= 0
        ):
            return 1.0
        if self.mps_dram_reach <= 0:  # the fit had no cell past saturation: nothing known there
            return DRAM_UNSEEN
        ratio = min(dram / self.mps_dram_reach, DRAM_UNSEEN)
        return ratio if ratio > DRAM_REACH else 1.0

    def extrapolated(self, mode: str, degree: int) -> bool:
        """Whether a configuration lies outside what the fit saw: a degree above the largest fitted
        degree of its mode, or a mode fitted on no cell of its own. Degree 1 is the profile itself."""
        seen = self.fitted_degrees(mode)
        return degree > 1 and (not seen or degree > max(seen))


# Before any fit (no measured sweep of another workload on the GPU model): round values, fitted on
# nothing. A fit starts from them and a tie between grid points goes to them.
DEFAULT_PARAMS = Params(
    ModeParams(0.9, 4.0),
    ModeParams(0.9, 4.0),
    ModeParams(0.9, 4.0),
    None,
    "defaults (no fit)",
    unfitted_modes=MODE_NAMES,
)


@dataclass(frozen=True)
class Gpu:
    """The GPU (and its node) a cell would run on."""

    name: str
    memory_mib: float
    base_mib: float = 0.0
    cores: int | None = None  # None: not known (results do not record the node's cores): no CPU limit

    @property
    def pcie_bytes_s(self) -> float:
        return next((bw for key, bw in _PCIE_BYTES_S if key in self.name), _PCIE_DEFAULT)


@dataclass(frozen=True)
class Slot:
    """Where one job runs: a share of the SMs (MIG compute instance, MPS active-thread percentage),
    of the memory bandwidth (its MIG GPU instance) and of memory (``memory_mib``; None: the GPU's);
    jobs with the same ``group`` share a MIG GPU instance's memory and bandwidth."""

    sm_fraction: float = 1.0
    mem_fraction: float = 1.0
    memory_mib: float | None = None
    group: int = 0
    name: str = ""


@dataclass(frozen=True)
class Candidate:
    """One configuration to predict: a mode and its jobs, each with its slot."""

    mode: str
    jobs: tuple[Profile, ...]
    slots: tuple[Slot, ...]
    active_thread_percentage: tuple[int, ...] | None = None
    mig_profiles: tuple[str, ...] | None = None

    @property
    def degree(self) -> int:
        return len(self.jobs)

    @property
    def uniform(self) -> bool:
        return len({(p.workload, p.settings) for p in self.jobs}) == 1

    @property
    def workloads(self) -> str:
        names = [p.workload for p in self.jobs]
        return names[0] if self.uniform else "+".join(names)

    @property
    def label(self) -> str:
        extra = (
            f" atp={'/'.join(map(str, self.active_thread_percentage))}"
            if self.active_thread_percentage
            else f" [{','.join(self.mig_profiles)}]"
            if self.mig_profiles
            else ""
        )
        size = f"x{self.degree}" if self.uniform else f"{self.degree} jobs"
        return f"{self.workloads} {self.mode} {size}{extra}"


@dataclass(frozen=True)
class JobPrediction:
    """One job of a predicted cell."""

    workload: str
    samples_per_s: float
    slowdown: float
    bound: str
    mem_mib: float


@dataclass(frozen=True)
class Prediction:
    """A predicted cell. ``gain`` = the sum of the jobs' rates relative to alone (a uniform cell's
    aggregate over its solo); ``energy_vs_alone`` = its energy per unit of work over the jobs' alone.
    ``mem_need_mib`` (safe side) must fit ``mem_capacity_mib`` (the GPU's, or under MIG the fullest GPU
    instance's); ``mem_expected_mib`` is the GPU memory expected in use (``cells.mem_used_max_mib``)."""

    label: str
    mode: str
    degree: int
    workloads: str
    fits: bool
    why_not: str | None
    mem_need_mib: float
    mem_expected_mib: float
    mem_capacity_mib: float
    gain: float
    agg_samples_per_s: float | None
    max_slowdown: float
    sm_active: float
    power_w: float | None
    energy_per_sample_j: float | None
    energy_vs_alone: float | None
    bound: str
    active_thread_percentage: tuple[int, ...] | None = None
    mig_profiles: tuple[str, ...] | None = None
    jobs: tuple[JobPrediction, ...] = field(default_factory=tuple)
    extrapolated: bool = False  # outside the degrees (or modes) the parameters were fitted on, or their DRAM reach
    # Where past the fit's DRAM reach (Params.dram_beyond): the jobs' DRAM activity over it (else 1).
    dram_beyond: float = 1.0
    # Its mode's parameters were fitted on no measured cell of that mode (Params.unfitted_modes).
    unfitted: bool = False
    # 95% intervals of ``agg_samples_per_s`` and ``max_slowdown`` (:mod:`raycolloc.advise.spread`).
    agg_interval: Interval | None = None
    slowdown_interval: Interval | None = None
    # How much of the solo rate's error the throughput carries (d log predicted / d log solo rate:
    # 1 below saturation, near 0 where a resource saturates), and the relative half-width it brings
    # (that share of the solo's 95% interval; None: the solo's interval unknown).
    baseline_share: float = 1.0
    baseline_rel: float | None = None


@dataclass(frozen=True)
class Measurement:
    """One configuration measured while confirming the advice (:mod:`raycolloc.advise.confirm`):
    at which rung, its cells' length relative to the profile's, its aggregate samples/s (None: the
    cell measured none), where its cell is, and whether that cell existed already (reused)."""

    label: str
    rung: int
    scale: int
    samples_per_s: float | None
    cell_dir: str
    reused: bool
