"""Each job's profile alone as a ``queue.runner=ray`` replay uses it: the catalogue's, or measured.

``queue.profiles=measured`` (the default with ``queue.runner=ray``) profiles each distinct workload of
the trace once on the cluster, before the replay's clock starts, with the advisor's own machinery
(:func:`raycolloc.advise.run.run_profiles`): one degree-1 naive cell composed as
``python -m raycolloc.advise workload=...`` composes it, from the queue's own overrides (``cluster=``,
``trainer.*``, ``mode.pipe_root`` ...; ``queue.*`` set nothing a cell measures), its window
``epoch_time_s``/``epoch_samples`` from them or the advisor's 10 s. It runs through the sweeps' engine
into ``<run dir>/profile/``, or is reused where a cell of the same config hash is anywhere under
``out_dir`` (the advisor's, an earlier replay's): a re-run measures nothing again. With
``queue.stand_in`` the stand-in is what every job trains, so the stand-in is what is profiled, and
the jobs' slowdowns are against it. A profile holds what its cell measured; what the cell could not
measure (SM occupancy and DRAM activity without GPM, SM activity where only utilisation was sampled)
is left as :func:`raycolloc.advise.profile.profile_of` leaves it, and the advisor's model does
without it as it does for the advisor. The GPU is the one profiled, as the advisor has it: its memory
as the cells saw it, its base memory the advisor's cached one for the GPU model where there is one.
A workload whose cell did not end ok (out of memory, an error) has no profile: its jobs are cancelled
with the reason (:func:`cancel_unprofiled`), the others run.
``queue.profiles=catalog`` takes :mod:`raycolloc.queue.catalog`'s round numbers. Either way the
profiles used are written to ``profiles.json`` in the run's directory.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raycolloc.advise.model import Gpu, Params
from raycolloc.advise.profile import Profile, load_costs
from raycolloc.advise.run import PROFILE_EPOCH_S, Request, run_profiles
from raycolloc.queue.settings import QueueSettings
from raycolloc.queue.state import Store
from raycolloc.queue.trace import TraceJob

__all__ = [
    "PROFILES_FILE",
    "PROFILE_DIR",
    "TraceProfiles",
    "WorkloadProfile",
    "cancel_unprofiled",
    "fitted_params",
    "from_catalog",
    "measure_profiles",
    "profile_common",
    "read_profiles",
    "workload_words",
    "write_profiles",
]

log = logging.getLogger(__name__)

PROFILE_DIR = "profile"
PROFILES_FILE = "profiles.json"
# Overrides of the queue's command line a profile cell does not take: the queue's own keys, and what
# the advisor sets for a profile itself (its workload, naive, degree 1, no mix); ``mode.*`` keys (the
# pipe root ...) stay.
_GROUPS_NOT_FOR_PROFILES = ("queue", "workload", "mix")
_KEYS_NOT_FOR_PROFILES = ("mode", "degree", "repeat", "repeats")


@dataclass(frozen=True)
class WorkloadProfile:
    """One workload of the trace (its ``model/dataset``, or the stand-in) and the jobs that run it:
    its profile (None with the reason where it has none), where it came from (``catalog``,
    ``measured``, ``reused``) and its cell."""

    workload: str
    jobs: tuple[str, ...]
    profile: Profile | None
    reason: str | None
    source: str
    cell_dir: str | None = None


@dataclass(frozen=True)
class TraceProfiles:
    """The profiles of a trace's workloads: ``catalog`` or ``measured``; the GPU's base memory (MiB)
    the advisor measured for the GPU model (0: none known) and, measured, the GPU's memory (MiB) as
    the profiles' cells saw it (None: the GPU model's table is kept)."""

    source: str
    workloads: tuple[WorkloadProfile, ...]
    base_mib: float = 0.0
    memory_mib: float | None = None

    def gpu(self, gpu: Gpu) -> Gpu:
        """``gpu`` as the advisor sees the one profiled: its measured memory and base, as the
        advisor's :func:`~raycolloc.advise.advice.gpu_of` has them."""
        return dataclasses.replace(gpu, memory_mib=self.memory_mib or gpu.memory_mib, base_mib=self.base_mib)

    @property
    def by_job(self) -> dict[str, Profile]:
        """Each profiled job's profile."""
        return {j: w.profile for w in self.workloads if w.profile is not None for j in w.jobs}

    @property
    def failed(self) -> dict[str, str]:
        """Each job whose workload has no profile, and why."""
        return {j: str(w.reason) for w in self.workloads if w.profile is None for j in w.jobs}


def workload_words(job: TraceJob, stand_in: str | None) -> tuple[str, ...]:
    """The advisor's words for what ``job`` trains (the stand-in where there is one)."""
    if stand_in is not None:
        return (f"workload={stand_in}",)
    return ("workload=timm", f"workload.model={job.model}", f"workload.dataset={job.dataset}")


def profile_common(words: tuple[str, ...]) -> tuple[str, ...]:
    """The queue's overrides that apply to a profile cell, with the advisor's window where none is given."""
    keys = [w.partition("=")[0].lstrip("+~") for w in words]
    out = [
        w
        for w, k in zip(words, keys, strict=True)
        if k.split(".")[0] not in _GROUPS_NOT_FOR_PROFILES and k not in _KEYS_NOT_FOR_PROFILES
    ]
    if not any(w.partition("=")[0] in ("epoch_samples", "epoch_time_s") for w in out):
        out.append(f"epoch_time_s={PROFILE_EPOCH_S:g}")
    return tuple(out)


def _groups(jobs: list[TraceJob], stand_in: str | None) -> dict[tuple[str, ...], list[TraceJob]]:
    groups: dict[tuple[str, ...], list[TraceJob]] = {}
    for job in jobs:
        groups.setdefault(workload_words(job, stand_in), []).append(job)
    return groups


def from_catalog(jobs: list[TraceJob], profiles: dict[str, Profile]) -> TraceProfiles:
    """The catalogue's profiles of ``jobs`` (every job has one: the trace was refused otherwise)."""
    groups: dict[str, list[str]] = {}
    for job in jobs:
        groups.setdefault(job.workload, []).append(job.job_id)
    entries = (WorkloadProfile(w, tuple(ids), profiles[ids[0]], None, "catalog") for w, ids in groups.items())
    return TraceProfiles("catalog", tuple(entries))


def measure_profiles(jobs: list[TraceJob], settings: QueueSettings, run_dir: Path) -> TraceProfiles:
    """Profile each distinct workload of ``jobs`` once on the cluster (or reuse its cell), one
    progress line per workload.

    Raises:
        ConfigError: a profile cell's config is invalid (nothing has run).
    """
    config = settings.config
    groups = _groups(jobs, config.queue.stand_in)
    names = [config.queue.stand_in or g[0].workload for g in groups.values()]
    print(f"queue profiles: {len(groups)} workload(s) alone on the cluster: {', '.join(names)}", flush=True)
    request = Request(tuple(groups), profile_common(settings.words), None, (1,), None, False)
    profiled, _ = run_profiles(request, run_dir / PROFILE_DIR)
    out = []
    for i, (name, group, p) in enumerate(zip(names, groups.values(), profiled, strict=True), start=1):
        ids = tuple(j.job_id for j in group)
        source = "reused" if p.reused else "measured"
        out.append(WorkloadProfile(name, ids, p.profile, p.reason, source, str(p.cell_dir)))
        if p.profile is None:
            print(
                f"queue profile {i}/{len(groups)} {name}: none ({p.reason}); its {len(ids)} job(s) are cancelled",
                flush=True,
            )
            continue
        q = p.profile
        print(
            f"queue profile {i}/{len(groups)} {name}: {q.samples_per_s:,.0f} samples/s alone, SM activity "
            f"{q.sm_active:.0%}, {q.job_mem_mib:,.0f} MiB ({source}: {p.cell_dir})",
            flush=True,
        )
    first = next((w.profile for w in out if w.profile is not None), None)
    costs = load_costs(config.out_dir, first.gpu_name) if first is not None else None
    memory = first.gpu_memory_mib if first is not None else None
    return TraceProfiles("measured", tuple(out), costs.base_mib if costs is not None else 0.0, memory)


def write_profiles(path: Path, profiles: TraceProfiles) -> Path:
    """The profiles as JSON (atomically); returns the path."""
    tmp = path.with_name(f".{path.name}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(json.dumps(dataclasses.asdict(profiles), indent=1, default=str))
    tmp.replace(path)
    return path


def read_profiles(path: Path) -> TraceProfiles:
    """The profiles :func:`write_profiles` wrote to ``path`` (a run's ``profiles.json``)."""
    data = json.loads(path.read_text())
    names = {f.name for f in dataclasses.fields(Profile)}

    def profile(found: dict[str, Any] | None) -> Profile | None:
        if found is None:
            return None
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in found.items() if k in names}
        return Profile(**values)

    workloads = tuple(
        WorkloadProfile(**{**w, "jobs": tuple(w["jobs"]), "profile": profile(w["profile"])}) for w in data["workloads"]
    )
    return TraceProfiles(data["source"], workloads, float(data.get("base_mib") or 0.0), data.get("memory_mib"))


def cancel_unprofiled(store: Store, profiles: TraceProfiles, now: float) -> list[str]:
    """Cancel every job not over whose workload has no profile (it cannot be placed), the reason
    kept with its event; returns the ids cancelled now."""
    out = []
    for job_id, reason in profiles.failed.items():
        if store.cancel(job_id, now, f"no profile: {reason}") is not None:
            log.error("job=%s cancelled: its workload has no profile (%s)", job_id, reason)
            out.append(job_id)
    return out


def fitted_params(out_dir: Path, gpu_name: str, fallback: Params) -> Params:
    """The model's parameters for a replay on real GPUs: fitted as the advisor fits them on every
    measured sweep under ``out_dir`` on the GPU model the profiles ran on (``gpu_name``, as NVML
    names it: the queue's own ``Gpu`` carries the catalogue's name; ``python -m raycolloc.advise --fit``'s rule,
    no workload left out: the queue predicts no workload of those sweeps' own), ``fallback`` (the
    advisor's round defaults) where none holds a collocated cell. A fitted power slope absent, the
    fallback's is kept."""
    from raycolloc.advise.advice import measured

    if not out_dir.is_dir():
        return fallback
    # No core count: the queue's predictor applies no CPU term, so the fit must not either.
    found = measured([out_dir], frozenset(), gpu_name, None).params
    if not found.degrees:  # nothing collocated was fitted on: the defaults
        return fallback
    log.info("queue: the model's parameters %s", found.source)
    return (
        found if found.power_slope_w is not None else dataclasses.replace(found, power_slope_w=fallback.power_slope_w)
    )
