"""Measured cells as the model sees them: an :class:`Observation` is one measured cell, the
:class:`~raycolloc.advise.model.Candidate` it was (its mode, its jobs' profiles, their MIG devices or
MPS limits) and what it measured; :func:`observations_in` reads them from a sweep's tables and
:func:`by_configuration` folds a configuration's runs into one (:mod:`raycolloc.advise.fit` fits on them).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from raycolloc.advise.model import Candidate, Gpu, Slot
from raycolloc.advise.profile import GpuCosts, Profile, finite, profile_key, settings_of
from raycolloc.advise.slots import mig_slots, mps_slots
from raycolloc.config_checks import parse_cpu_list
from raycolloc.mode_kinds import MODE_KINDS, Sharing
from raycolloc.results.stats import mean_interval

if TYPE_CHECKING:  # tables only in annotations: the queue's commands import this module, and pandas costs 0.4 s
    import pandas as pd

__all__ = ["Observation", "by_configuration", "given_cores", "observations_in"]


@dataclass(frozen=True)
class Observation:
    """A measured cell: the candidate it was and what it measured (None where it did not)."""

    sweep: str
    cell_id: str
    label: str
    status: str
    candidate: Candidate
    gpu: Gpu
    job_samples_per_s: tuple[float | None, ...]
    agg_samples_per_s: float | None
    mem_used_mib: float | None
    power_w: float | None
    sm_active: float | None
    energy_per_sample_j: float | None
    profile_cell: bool
    cell_dir: str = ""
    group: str = ""  # the configuration's repeats share it (``cells.repeat_group``); "" = its own
    # The measured aggregate's 95% relative half-width: the run's own (``agg_rate_low/high``), or over a
    # configuration's runs the t-interval of their mean; None: not known.
    agg_rel_hw: float | None = None

    @property
    def workloads(self) -> frozenset[str]:
        return frozenset(p.workload for p in self.candidate.jobs)


def _per_job(value: Any, n: int) -> list[int | None]:
    """A column of a cell's row (a number, a list of one per job, or None) as one value per job."""
    if isinstance(value, list):
        return [None if v is None else int(v) for v in value]
    return [None if value is None else int(value)] * n


def _gpu_name(cell: pd.Series, profiles: dict[tuple[str, str, str], Profile]) -> str | None:
    """The cell's GPU model; for a cell that never leased a GPU (refused before it started: ``unfit``,
    ``skipped``), the one GPU model the profiles were measured on, if there is only one."""
    if isinstance(cell.get("gpu_name"), str):
        return str(cell["gpu_name"])
    models = {p.gpu_name for p in profiles.values()}
    return models.pop() if len(models) == 1 else None


def _candidate(
    cell: pd.Series, jobs: pd.DataFrame, profiles: dict[tuple[str, str, str], Profile], gpu_name: str
) -> Candidate | None:
    """The candidate a measured cell was; None if one of its jobs has no profile or it is not a
    mode the model predicts."""
    mode = str(cell["mode"])
    found = [
        profiles.get(profile_key(gpu_name, str(j["workload"]), settings_of(j)))
        for _, j in jobs.sort_values("job_index").iterrows()
    ]
    if not found or any(p is None for p in found) or mode not in MODE_KINDS:
        return None
    chosen: tuple[Profile, ...] = tuple(p for p in found if p is not None)
    cfg = json.loads(cell["config_json"]) if isinstance(cell.get("config_json"), str) else {}
    mix_jobs = (cfg.get("mix") or {}).get("jobs") or []
    sharing = MODE_KINDS[mode].sharing
    if sharing is Sharing.CONCURRENT:
        atp = _per_job((cfg.get("mode") or {}).get("active_thread_percentage"), len(chosen))
        atp = [
            (mix_jobs[i].get("active_thread_percentage") if i < len(mix_jobs) else None) or a for i, a in enumerate(atp)
        ]
        limited = tuple(int(a) for a in atp if a is not None)
        return Candidate(mode, chosen, mps_slots(atp), limited if len(limited) == len(chosen) else None)
    if sharing is Sharing.PARTITIONED:
        per_job = [j.get("mig_profile") for j in mix_jobs] if mix_jobs else [None] * len(chosen)
        placed = mig_slots(
            gpu_name, (cfg.get("mig") or {}).get("layout", "auto"), (cfg.get("mix") or {}).get("mig_layout"), per_job
        )
        if placed is None:
            return None
        return Candidate(mode, chosen, placed[0], mig_profiles=placed[1])
    return Candidate(mode, chosen, (Slot(),) * len(chosen))


def observations_in(
    cells: pd.DataFrame,
    jobs: pd.DataFrame,
    profiles: dict[tuple[str, str, str], Profile],
    costs: dict[str, GpuCosts],
    cores: int | None,
) -> list[Observation]:
    """Every cell of the loaded sweeps that the model can describe (all its jobs have a profile)."""
    profile_cells = {(p.gpu_name, d) for p in profiles.values() for d in p.cell_dirs}
    out = []
    empty = jobs.iloc[:0]
    by_cell = {key: rows for key, rows in jobs.groupby(["sweep", "cell_id"], sort=False)}
    for _, cell in cells.iterrows():
        rows = by_cell.get((cell["sweep"], cell["cell_id"]), empty)
        gpu_name = _gpu_name(cell, profiles)
        candidate = _candidate(cell, rows, profiles, gpu_name) if not rows.empty and gpu_name else None
        if candidate is None or gpu_name is None:
            continue
        cost = costs.get(gpu_name)
        memory = finite(cell.get("gpu_memory_mib")) or candidate.jobs[0].gpu_memory_mib
        gpu = Gpu(gpu_name, memory, cost.base_mib if cost else 0.0, given_cores(cores, cell.get("reserved_cpus")))
        ordered = rows.sort_values("job_index")
        rates = tuple(finite(r["epoch2_samples_per_s"]) if r["status"] == "ok" else None for _, r in ordered.iterrows())
        sm = finite(cell.get("sm_active_mean"))
        out.append(
            Observation(
                sweep=str(cell["sweep"]),
                cell_id=str(cell["cell_id"]),
                label=str(cell["label"]),
                status=str(cell["status"]),
                candidate=candidate,
                gpu=gpu,
                job_samples_per_s=rates,
                agg_samples_per_s=finite(cell.get("agg_samples_per_s")),
                mem_used_mib=finite(cell.get("mem_used_max_mib")),
                power_w=finite(cell.get("power_mean_w")),
                sm_active=None if sm is None else sm / 100.0,
                energy_per_sample_j=finite(cell.get("energy_per_sample_j")),
                profile_cell=(gpu_name, str(cell.get("cell_dir", ""))) in profile_cells,
                cell_dir=str(cell.get("cell_dir", "")),
                group=str(cell.get("repeat_group") or ""),
                agg_rel_hw=_rel_hw(cell),
            )
        )
    return out


def _rel_hw(cell: pd.Series) -> float | None:
    """A cell's measured aggregate 95% relative half-width (None where not recorded)."""
    rate, low, high = (finite(cell.get(c)) for c in ("agg_samples_per_s", "agg_rate_low", "agg_rate_high"))
    return (high - low) / 2 / rate if rate and low is not None and high is not None else None


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def by_configuration(observations: list[Observation]) -> list[Observation]:
    """One observation per configuration: the repeats of a cell (one sweep, one GPU model, one
    ``repeat_group``) as one, each measured number the median of its ok runs (the sweep's default
    headline statistic), a profile cell if any run is one,
    memory the largest. A configuration none of whose runs ended ok keeps its first run. A run of
    a degree-1 cell spreads by up to +-50% on these hosts while the median of three moves a few
    percent (docs/measurements.md): fitted or scored run by run, one slow run is an error of the model."""
    groups: dict[tuple[str, str, str], list[Observation]] = {}
    for o in observations:
        groups.setdefault((o.sweep, o.gpu.name, o.group or o.cell_id), []).append(o)
    out = []
    for runs in groups.values():
        n = len(runs[0].job_samples_per_s)
        ok = [o for o in runs if o.status == "ok" and len(o.job_samples_per_s) == n]
        if len(ok) < 2:
            out.append(ok[0] if ok else runs[0])
            continue
        out.append(
            replace(
                ok[0],
                profile_cell=any(o.profile_cell for o in runs),
                job_samples_per_s=tuple(_median(o.job_samples_per_s[i] for o in ok) for i in range(n)),
                agg_samples_per_s=_median(o.agg_samples_per_s for o in ok),
                mem_used_mib=max((o.mem_used_mib for o in ok if o.mem_used_mib is not None), default=None),
                power_w=_median(o.power_w for o in ok),
                sm_active=_median(o.sm_active for o in ok),
                energy_per_sample_j=_median(o.energy_per_sample_j for o in ok),
                agg_rel_hw=_runs_rel_hw([o.agg_samples_per_s for o in ok]),
            )
        )
    return out


def _runs_rel_hw(rates: list[float | None]) -> float | None:
    """The t-interval's relative half-width of the mean of several runs' rates (None: fewer than two)."""
    known = [r for r in rates if r is not None]
    return mean_interval(known).rel_half_width if len(known) >= 2 else None


def given_cores(cores: int | None, reserved: Any) -> int | None:
    """The cores the node gives a cell: its cores less those it keeps for its own processes
    (``cells.reserved_cpus``, a cpu list such as ``"0-1"``)."""
    if cores is None or not isinstance(reserved, str) or not reserved.strip():
        return cores
    try:
        return max(1, cores - len(parse_cpu_list(reserved)))
    except ValueError:
        return cores
