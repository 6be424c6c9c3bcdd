"""A live queue's profiles on Ray's GPUs: learned from each workload's first run alone, kept in its database.

A submitted job (a timm model, a ``python`` entry, an unmodified ``script``) is placed by its workload's
profile alone (its rate, memory, SM activity), which the queue has only once a job of that workload has
run. So the first job of a workload the queue has not seen runs *as its profile*: it is queued with a
stand-in profile (:func:`probe_profile`) whose memory estimate is the most a job can hold alone
(:func:`~raycolloc.queue.core.largest_estimate`), so the ``raycolloc`` and ``exclusive`` policies give
it an empty GPU and put nothing beside it; its rate is unknown (1 sample/s: it counts as the longest job
and is looked at first). When that run ends alone, what it measured becomes the workload's profile
(:meth:`LearnedProfiles.learn`): its rate end to end (its length in samples over its run, set-up
included: the time a job of it takes alone, against which the queue judges every later job's slowdown; a
script's length is what was submitted), its memory peak (PyTorch's reserved peak or the driver's count;
on simulated GPUs, which have neither, the most memory the steward saw in use on its GPU, else
``NO_MEMORY_MIB``), and its GPU's SM activity while it ran. The profile is stored in the database
(``meta`` key ``profile:<workload>``), so the next job of that workload, in this ``serve`` or the next,
is packed with others from the start. A first run that shared its GPU after all (a policy that put a job
beside it) teaches nothing: the next job of the workload runs alone in its turn. With
``queue.profiles=catalog``, a catalogued timm model takes the catalogue's round numbers instead.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from typing import Any

from raycolloc.advise.model import Gpu
from raycolloc.advise.profile import Profile
from raycolloc.mode_kinds import BASELINE_MODE
from raycolloc.queue.catalog import NoProfile, catalog_profile
from raycolloc.queue.core import Report, largest_estimate
from raycolloc.queue.simcluster import TelemetryRow
from raycolloc.queue.state import Store
from raycolloc.queue.trace import TraceJob

__all__ = ["NO_MEMORY_MIB", "PROBE_SETTINGS", "LearnedProfiles", "probe_profile"]

log = logging.getLogger(__name__)

PROBE_SETTINGS = "not yet profiled: its first run alone measures it"
LEARNED_SETTINGS = "learned from its first run alone (live queue)"
NO_MEMORY_MIB = 1024.0  # a simulated GPU measures no memory: a stated allowance, not a measurement
_KEY = "profile:"


def _profile(workload: str, gpu: Gpu, settings: str, rate: float, sm: float, mem: float, mem_source: str) -> Profile:
    return Profile(
        workload=workload,
        settings=settings,
        gpu_name=gpu.name,
        gpu_memory_mib=gpu.memory_mib,
        backend="queue-live",
        mode=BASELINE_MODE,
        cell_dirs=(),
        config_hash="",
        batch_size=0,
        samples_per_s=rate,
        cpu_s_per_step=None,
        cpu_busy=0.0,
        sm_active=sm,
        busy=sm,
        busy_source="telemetry" if settings == LEARNED_SETTINGS else "unknown",
        sm_occupancy=None,
        dram_active=None,
        pcie_rx_bytes_s=None,
        power_w=None,
        energy_per_sample_j=None,
        peak_reserved_mib=None,
        peak_device_mib=mem,
        gpu_mem_used_mib=None,
        job_mem_mib=mem,
        mem_source=mem_source,
    )


def probe_profile(workload: str, gpu: Gpu) -> Profile:
    """The stand-in of a workload not yet profiled: as large as a job alone may be, fully busy, 1 sample/s."""
    return _profile(workload, gpu, PROBE_SETTINGS, 1.0, 1.0, largest_estimate(gpu), "probe: the whole GPU")


class LearnedProfiles:
    """Each workload's profile for a live queue on Ray (module docstring), kept in ``store``."""

    def __init__(self, store: Store, gpu: Gpu, catalog: bool) -> None:
        self.store, self.gpu, self.catalog = store, gpu, catalog
        self._known: dict[str, Profile] = {}

    def known(self, job: TraceJob) -> Profile | None:
        """The workload's profile: learned (this session or an earlier one), or the catalogue's; None: not yet."""
        workload = job.workload
        if workload in self._known:
            return self._known[workload]
        text = self.store.meta(_KEY + workload)
        if text is not None:
            self._known[workload] = Profile(**_tuples(json.loads(text)))
            return self._known[workload]
        if self.catalog and job.kind == "timm":
            try:
                return catalog_profile(workload, self.gpu)
            except NoProfile:
                return None
        return None

    def of(self, job: TraceJob) -> Profile:
        """The profile the queue places ``job`` by: its workload's, else the probe's."""
        return self.known(job) or probe_profile(job.workload, self.gpu)

    def learn(
        self, job: TraceJob, report: Report, start_s: float, telemetry: Sequence[TelemetryRow], gpu_id: str
    ) -> Profile | None:
        """Keep what ``job``'s attempt that ended (``report``, started at ``start_s``) measured as its
        workload's profile, where the workload had none and the attempt ran alone; returns it (else None)."""
        if report.kind != "ended" or report.co_residents or self.known(job) is not None:
            return None
        seconds = max(report.t - start_s, 1e-3)
        rate = (job.length_samples or 0) / seconds  # end to end, as the queue judges a job's slowdown
        if not rate > 0:
            log.warning("job=%s: no rate measured; workload %s stays unprofiled", job.job_id, job.workload)
            return None
        during = [r for r in telemetry if r.gpu == gpu_id and start_s <= r.t <= report.t]
        sm = sum(r.sm_active for r in during) / len(during) if during else 1.0
        seen = max((r.mem_used_mib for r in during if r.mem_used_mib), default=0.0)
        if report.mem_peak_mib:
            mem, source = report.mem_peak_mib, "its first run's peak"
        elif seen > 0:
            mem, source = seen, "its GPU's memory in use during its first run"
        else:
            mem, source = NO_MEMORY_MIB, "none measured: an allowance"
        profile = _profile(job.workload, self.gpu, LEARNED_SETTINGS, rate, min(max(sm, 0.0), 1.0), mem, source)
        self.store.put(_KEY + job.workload, json.dumps(dataclasses.asdict(profile)))
        self._known[job.workload] = profile
        log.info(
            "queue profile %s: %.1f samples/s alone end to end (its epochs: %s), SM activity %.0f%%, %.0f MiB "
            "(%s; learned from job %s)",
            job.workload,
            rate,
            f"{report.samples_per_s:.1f} samples/s" if report.samples_per_s else "not measured",
            100 * sm,
            mem,
            source,
            job.job_id,
        )
        return profile


def _tuples(values: dict[str, Any]) -> dict[str, Any]:
    """JSON's lists back as the profile's tuples."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
