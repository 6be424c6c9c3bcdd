"""What a simulated GPU runs its jobs at (``queue.truth``): the advisor's model, or the measured corpus.

``model``: each job at the rate the advisor's model predicts beside its co-residents (its rate alone
over its slowdown), the model's power and activities; true memory the profile's times a factor within
``1 +- queue.sim_mem_error``. This is the model the ``raycolloc`` policy places by: a policy graded by
its own forecasts.

``corpus``: each job at the rate measured for its workload in the GPU's mode
(:mod:`raycolloc.queue.corpus`), never a model's forecast:

* **one workload** (``n`` jobs of it): the measured per-job rate at degree ``n``, the median aggregate
  over repeats divided by ``n`` (exact at a measured degree). Between measured degrees the aggregate is
  linear in the degree; past the largest measured degree the aggregate is held at its value there (no
  gain is assumed that was not measured: the conservative reading; each job gets its ``1/n``).
* **different workloads**: each job sees its co-residents as jobs of its own workload, each weighing
  its load alone over the job's own load alone in the mode's shared resource (naive: the share of time
  the GPU was busy, NVML utilisation of the degree-1 cell; mps: its SM activity), and runs at its own
  workload's per-job rate at that effective degree ``1 + sum(u_other / u_self)`` (interpolated as
  above). Same-workload jobs weigh 1 each, so the rule is the measured curve for a uniform GPU.
  Checked against the corpus's three measured mixes (tests/test_queue_corpus_truth.py), per job: naive
  resnet26+resnet50 -4%, +3%; naive resnet26+efficientnetv2_s +20%, -43%; MPS resnet26+resnet50 +47%,
  +9% (docs/queue.md).
* **power and SM activity**: each job adds its share (``1/d``) of what its workload's cell measured
  at its effective degree ``d`` above idle (uniform: the measured cell's); SM occupancy and DRAM
  activity were not measured in the corpus's first cut and are reported as 0.
* **memory**: the largest per-process peak NVML saw of any job of the workload (no error factor).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from raycolloc.advise.model import Gpu
from raycolloc.advise.profile import Profile
from raycolloc.config_groups import QueueConfig
from raycolloc.mode_kinds import Sharing, mode_of
from raycolloc.queue.catalog import idle_power_w, sim_params
from raycolloc.queue.corpus import Corpus, Curve, corpus_dir, load_corpus
from raycolloc.queue.lowo import LeaveOutPredictor
from raycolloc.queue.policy import Predictor

__all__ = ["CorpusTruth", "GpuPlay", "ModelTruth", "Truth", "create_truth", "interpolate", "true_memory_factor"]


# What the jobs of a GPU share in each mode the queue opens, as the advisor's model has it (its module
# docstring): time-slicing shares the GPU's time, MPS its SMs; the Curve field that measures it alone.
SHARED = {Sharing.TIME_SLICED: "busy", Sharing.CONCURRENT: "sm_active"}


@dataclass(frozen=True)
class GpuPlay:
    """What a GPU's jobs do together: each job's samples/s (in the order given), the GPU's power (None:
    unknown) and its SM activity, SM occupancy and DRAM activity (0..1)."""

    rates: tuple[float, ...]
    power_w: float | None
    sm_active: float
    sm_occupancy: float
    dram_active: float


class Truth(Protocol):
    """What plays a simulated GPU."""

    name: str

    def play(self, mode: str, profiles: Sequence[Profile]) -> GpuPlay: ...

    def true_mib(self, profile: Profile) -> float: ...


def true_memory_factor(workload: str, seed: int, error: float) -> float:
    """A workload's true memory over its profile's: fixed per workload and seed, within ``1 +- error``."""
    digest = hashlib.sha256(f"{seed}:{workload}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    return 1.0 + error * (2.0 * u - 1.0)


class ModelTruth:
    """The advisor's model plays the GPUs (module docstring)."""

    name = "model"

    def __init__(self, predictor: Predictor, seed: int, mem_error: float) -> None:
        self.predictor = predictor
        self.seed = seed
        self.mem_error = mem_error

    def play(self, mode: str, profiles: Sequence[Profile]) -> GpuPlay:
        outlook = self.predictor.outlook(mode, profiles)
        rates = tuple(p.samples_per_s / s for p, s in zip(profiles, outlook.slowdowns, strict=True))
        return GpuPlay(rates, outlook.power_w, outlook.sm_active, outlook.sm_occupancy, outlook.dram_active)

    def true_mib(self, profile: Profile) -> float:
        return profile.job_mem_mib * true_memory_factor(profile.workload, self.seed, self.mem_error)


def interpolate(degrees: Sequence[int], values: Sequence[float], d: float) -> float:
    """``values`` (at ascending ``degrees``) at degree ``d``: linear between measured degrees, the last
    value past the largest (and the first below the smallest)."""
    if d <= degrees[0]:
        return values[0]
    for k in range(1, len(degrees)):
        if d <= degrees[k]:
            lo, hi = degrees[k - 1], degrees[k]
            return values[k - 1] + (values[k] - values[k - 1]) * (d - lo) / (hi - lo)
    return values[-1]


class CorpusTruth:
    """The measured corpus plays the GPUs (module docstring)."""

    name = "corpus"

    def __init__(self, corpus: Corpus, idle_w: float) -> None:
        self.corpus = corpus
        self.idle_w = idle_w
        self._cache: dict[tuple[str, tuple[str, ...]], GpuPlay] = {}

    def load(self, workload: str, mode: str) -> float:
        """The workload's load alone in ``mode``'s shared resource (module docstring)."""
        return getattr(self.corpus.curve(workload, mode), SHARED[mode_of(mode).sharing])[0]

    def effective_degrees(self, mode: str, workloads: Sequence[str]) -> list[float]:
        """Each job's degree in jobs of its own workload (module docstring)."""
        loads = [self.load(w, mode) for w in workloads]
        return [1.0 + sum(o / mine for k, o in enumerate(loads) if k != i) for i, mine in enumerate(loads)]

    @staticmethod
    def per_job_rate(curve: Curve, degree: float) -> float:
        """One job's samples/s among ``degree`` of its workload (aggregate interpolated, over the degree)."""
        return interpolate(curve.degrees, curve.agg_samples_per_s, degree) / degree

    def play(self, mode: str, profiles: Sequence[Profile]) -> GpuPlay:
        workloads = tuple(p.workload for p in profiles)
        key = (mode, workloads)
        if key not in self._cache:
            degrees = self.effective_degrees(mode, workloads)
            curves = [self.corpus.curve(w, mode) for w in workloads]
            rates = tuple(self.per_job_rate(c, d) for c, d in zip(curves, degrees, strict=True))
            sm = sum(interpolate(c.degrees, c.sm_active, d) / d for c, d in zip(curves, degrees, strict=True))
            above = sum(
                (interpolate(c.degrees, c.power_w, d) - self.idle_w) / d for c, d in zip(curves, degrees, strict=True)
            )
            self._cache[key] = GpuPlay(rates, self.idle_w + above, min(1.0, sm), 0.0, 0.0)
        return self._cache[key]

    def true_mib(self, profile: Profile) -> float:
        return self.corpus.job_mib[profile.workload]


def create_truth(queue: QueueConfig, gpu: Gpu, seed: int) -> tuple[Predictor, Truth]:
    """The predictor the policies place by and the truth that plays the GPUs, as ``queue.truth`` says:
    ``model``: the advisor's model with the simulated GPU's parameters, both; ``corpus``: the model
    fitted without each job's workload (:mod:`raycolloc.queue.lowo`), and the corpus."""
    if queue.truth == "corpus":
        corpus = load_corpus(corpus_dir(queue))
        return LeaveOutPredictor(gpu, corpus, sim_params(gpu)), CorpusTruth(corpus, idle_power_w(gpu))
    predictor = Predictor(gpu, sim_params(gpu))
    return predictor, ModelTruth(predictor, seed, queue.sim_mem_error)
