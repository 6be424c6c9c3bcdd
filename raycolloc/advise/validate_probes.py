"""The validation's probes: each workload's MPS configuration of the largest degree measured, which
the advisor's default plan measures for an unseen model (:func:`raycolloc.advise.measure.probe_words`)
and which calibrates its course past saturation (:func:`raycolloc.advise.model.calibrate_mps`). Like
the solo, a probe is input to the grading, never graded."""

from __future__ import annotations

import statistics
from dataclasses import replace

from raycolloc.advise.model import Params, calibrate_mps
from raycolloc.advise.observe import Observation
from raycolloc.advise.profile import Profile
from raycolloc.mode_kinds import Sharing, mode_of

__all__ = ["Probes", "mps_probes", "probe_of", "with_probes"]

# (workload, its settings, GPU model) -> (degree, measured samples/s) of its MPS probe
Probes = dict[tuple[str, str, str], tuple[int, float]]


def mps_probes(configurations: list[Observation]) -> Probes:
    """Each workload's MPS probe as the advisor's default plan measures it: its uniform MPS
    configuration of the largest degree measured ok (no thread limit), the median of every sweep's
    measurement of it. (Graded with any one run of it instead, lowest or highest, the corpus's figures
    are the same to 0.01%: the probes' runs agree within 1.3%.)"""
    found: dict[tuple[str, str, str], dict[int, list[float]]] = {}
    for o in configurations:
        c = o.candidate
        if (
            o.status == "ok"
            and c.uniform
            and c.degree > 1
            and mode_of(c.mode).sharing is Sharing.CONCURRENT
            and c.active_thread_percentage is None
            and o.agg_samples_per_s
        ):
            key = (c.jobs[0].workload, c.jobs[0].settings, o.gpu.name)
            found.setdefault(key, {}).setdefault(c.degree, []).append(o.agg_samples_per_s)
    return {key: (top, statistics.median(by[top])) for key, by in found.items() for top in [max(by)]}


def probe_of(o: Observation, probes: Probes) -> bool:
    """Whether the observation is of a workload's probe configuration (in any sweep)."""
    c = o.candidate
    probe = probes.get((c.jobs[0].workload, c.jobs[0].settings, o.gpu.name)) if c.uniform else None
    return (
        probe is not None
        and c.degree == probe[0]
        and mode_of(c.mode).sharing is Sharing.CONCURRENT
        and c.active_thread_percentage is None
    )


def with_probes(
    o: Observation, probes: Probes, params: Params, cache: dict[tuple[object, ...], Profile]
) -> Observation:
    """The observation with each job's profile calibrated by its workload's probe (:func:`calibrate_mps`)
    under the parameters of this fold."""
    if not probes:
        return o
    jobs = []
    for p in o.candidate.jobs:
        probe = probes.get((p.workload, p.settings, o.gpu.name))
        if probe is None:
            jobs.append(p)
            continue
        key = (id(params), p, o.gpu)
        if key not in cache:
            cache[key] = calibrate_mps(p, probe[0], probe[1], o.gpu, params)
        jobs.append(cache[key])
    return replace(o, candidate=replace(o.candidate, jobs=tuple(jobs)))
