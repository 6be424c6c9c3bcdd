"""Philly-like traces: Poisson arrivals of light, medium and heavy training jobs.

Like CARMA's traces derived from Microsoft's Philly trace (which names no concrete jobs): each job is a
workload of the catalogue drawn by size class (``queue.trace_mix``: CIFAR CNNs, ImageNet64 CNNs,
224 px CNNs and transformers), arriving after an exponential gap (mean ``queue.trace_gap_s``), and
as long as ``queue.trace_job_s`` alone at the median, log-normally spread as Philly's run times are
(heavier classes run longer). Lengths are written in samples, computed from the job's rate alone on
the cluster's GPU model, so that a trace's length in time holds on that GPU. Half the jobs name a
slowdown bound.
"""

from __future__ import annotations

import math
import random

from raycolloc.advise.model import Gpu
from raycolloc.config_groups import QueueConfig
from raycolloc.queue.catalog import CATALOG, CLASSES, catalog_profile
from raycolloc.queue.trace import TraceJob

__all__ = ["generate"]

_CLASS_LENGTH = {"light": 0.6, "medium": 1.0, "heavy": 1.6}  # times the median: big jobs run longer
_SPREAD = 0.6  # sigma of the log-normal length; Philly's run times span orders of magnitude, clipped here
_BOUNDS = (1.5, 2.0, 3.0)


def generate(n: int, seed: int, queue: QueueConfig, gpu: Gpu) -> list[TraceJob]:
    """``n`` jobs, the same for the same seed, settings and GPU model."""
    rng = random.Random(seed)
    weights = [float(w) for w in queue.trace_mix]
    by_class = {c: sorted(k for k, e in CATALOG.items() if e.size == c) for c in CLASSES}
    jobs, t = [], 0.0
    for i in range(n):
        size = rng.choices(CLASSES, weights=weights)[0]
        entry = CATALOG[rng.choice(by_class[size])]
        median = queue.trace_job_s * _CLASS_LENGTH[size]
        seconds = min(4 * median, max(median / 4, median * math.exp(rng.gauss(0.0, _SPREAD))))
        rate = catalog_profile(entry.key, gpu).samples_per_s
        bound = rng.choice(_BOUNDS) if rng.random() < 0.5 else None
        jobs.append(
            TraceJob(
                job_id=f"j{i:04d}",
                submit_s=round(t, 3),
                kind="timm",
                model=entry.model,
                dataset=entry.dataset,
                entry=None,
                epochs=None,
                samples=max(1, round(seconds * rate)),
                max_slowdown=bound,
            )
        )
        t += rng.expovariate(1.0 / queue.trace_gap_s)
    return jobs
