"""Philly-like traces: Poisson arrivals of light, medium and heavy training jobs.

Like CARMA's traces derived from Microsoft's Philly trace (which names no concrete jobs): each job is a
workload of the catalogue drawn by size class (``queue.trace_mix``: CIFAR CNNs, ImageNet64 CNNs,
224 px CNNs and transformers), arriving after an exponential gap (mean ``queue.trace_gap_s``), and
as long as ``queue.trace_job_s`` alone at the median, log-normally spread as Philly's run times are
(heavier classes run longer). Lengths are written in samples, computed from the job's rate alone on
the cluster's GPU model, so that a trace's length in time holds on that GPU. Half the jobs name a
slowdown bound. With ``queue.truth=corpus`` the workloads are the measured corpus's (light: CIFAR-10,
medium: ImageNet64, heavy: ImageNet at 224 px; :data:`raycolloc.queue.corpus.CLASS_OF_DATASET`) and a
job's rate alone is its measured naive solo; a share given to a class the corpus has no workload of
is refused. ``queue.trace_scale=carma`` keeps the classes but takes CARMA's time scale instead: a
job's length alone is one of CARMA's published task lengths of its class (3.4 min to 112 min), drawn
uniformly, and arrivals are apart by CARMA's traces' mean gap (:mod:`raycolloc.queue.carma`).
A trace is at most ``MAX_JOBS`` jobs, and one whose arrivals or lengths would pass
what a trace may hold (:mod:`raycolloc.queue.trace`'s bounds) is refused naming the key that took it
there, before anything is written.
"""

from __future__ import annotations

import math
import random

from raycolloc.advise.model import Gpu
from raycolloc.config_checks import MAX_SAMPLES, ConfigError
from raycolloc.config_groups import QueueConfig
from raycolloc.queue.carma import CARMA_GAP_S, CARMA_LENGTHS_MIN
from raycolloc.queue.catalog import CATALOG, CLASSES, catalog_profile
from raycolloc.queue.corpus import CLASS_OF_DATASET, corpus_dir, load_corpus
from raycolloc.queue.trace import MAX_SUBMIT_S, TraceJob

__all__ = ["MAX_JOBS", "check_count", "generate"]

# A trace's size: 100,000 jobs are generated in about 5 s on one core (the 1,000-job benchmark's in 0.05 s)
# and replay in minutes; a billion took no visible time to refuse but hours to generate (issue 47, item 14).
MAX_JOBS = 100_000

_CLASS_LENGTH = {"light": 0.6, "medium": 1.0, "heavy": 1.6}  # times the median: big jobs run longer
_SPREAD = 0.6  # sigma of the log-normal length; Philly's run times span orders of magnitude, clipped here
_BOUNDS = (1.5, 2.0, 3.0)


def check_count(n: int) -> None:
    """Refuse a trace of ``n`` jobs unless 1 <= n <= ``MAX_JOBS``.

    Raises:
        ConfigError: naming ``--jobs`` and the limit.
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_JOBS:
        raise ConfigError(f"--jobs={n} is not allowed; it must be an integer from 1 to {MAX_JOBS:,} (a trace's limit)")


def generate(n: int, seed: int, queue: QueueConfig, gpu: Gpu) -> list[TraceJob]:
    """``n`` jobs, the same for the same seed, settings and GPU model.

    Raises:
        ConfigError: ``n`` out of range (:func:`check_count`); ``queue.trace_gap_s`` or ``queue.trace_job_s``
            so large that a job would arrive after, or last longer than, a trace may say.
    """
    check_count(n)
    rng = random.Random(seed)
    weights = [float(w) for w in queue.trace_mix]
    by_class, rate_of = _menu(queue, gpu)
    carma = queue.trace_scale == "carma"
    gap = CARMA_GAP_S if carma else queue.trace_gap_s
    jobs, t = [], 0.0
    for i in range(n):
        size = rng.choices(CLASSES, weights=weights)[0]
        key = rng.choice(by_class[size])
        model, _, dataset = key.partition("/")
        seconds = 60.0 * rng.choice(CARMA_LENGTHS_MIN[size]) if carma else _short_length(rng, queue, size)
        rate = rate_of[key]
        _check_fits(queue, t, seconds * rate)
        bound = rng.choice(_BOUNDS) if rng.random() < 0.5 else None
        jobs.append(
            TraceJob(
                job_id=f"j{i:04d}",
                submit_s=round(t, 3),
                kind="timm",
                model=model,
                dataset=dataset,
                entry=None,
                epochs=None,
                samples=max(1, round(seconds * rate)),
                max_slowdown=bound,
            )
        )
        t += rng.expovariate(1.0 / gap)
    return jobs


def _menu(queue: QueueConfig, gpu: Gpu) -> tuple[dict[str, list[str]], dict[str, float]]:
    """The workloads (``model/dataset``) of each size class, sorted, and each one's rate alone on ``gpu``:
    the catalogue's, or the measured corpus's under ``queue.truth=corpus``.

    Raises:
        ConfigError: a class with a share in ``queue.trace_mix`` has no workload in the corpus.
    """
    if queue.truth != "corpus":
        by_class = {c: sorted(k for k, e in CATALOG.items() if e.size == c) for c in CLASSES}
        return by_class, {k: catalog_profile(k, gpu).samples_per_s for k in CATALOG}
    corpus = load_corpus(corpus_dir(queue))
    rates = {k: p.samples_per_s for k, p in corpus.solo.items()}
    by_class = {c: sorted(k for k in rates if CLASS_OF_DATASET.get(k.partition("/")[2]) == c) for c in CLASSES}
    for c, w in zip(CLASSES, queue.trace_mix, strict=True):
        if w and not by_class[c]:
            raise ConfigError(
                f"queue.trace_mix={list(queue.trace_mix)!r} is not allowed with queue.truth=corpus: the corpus "
                f"{corpus.path} holds no {c} workload (it holds: {', '.join(corpus.workloads)}); give {c} a share of 0"
            )
    return by_class, rates


def _short_length(rng: random.Random, queue: QueueConfig, size: str) -> float:
    """A job's length alone at our scale: log-normal around ``queue.trace_job_s`` times its class's factor."""
    median = queue.trace_job_s * _CLASS_LENGTH[size]
    return min(4 * median, max(median / 4, median * math.exp(rng.gauss(0.0, _SPREAD))))


def _check_fits(queue: QueueConfig, submit_s: float, samples: float) -> None:
    """A job the trace reader would take (``replay`` refuses a trace past its bounds)."""
    if not submit_s <= MAX_SUBMIT_S:
        raise ConfigError(
            f"queue.trace_gap_s={queue.trace_gap_s:g} is not allowed here: a job would arrive at {submit_s:.3g} s, "
            f"after the {MAX_SUBMIT_S:g} s a trace may span; give a shorter gap or fewer --jobs"
        )
    if not samples <= MAX_SAMPLES:
        raise ConfigError(
            f"queue.trace_job_s={queue.trace_job_s:g} is not allowed here: a job would train {samples:.3g} samples, "
            f"more than the {MAX_SAMPLES:g} a trace may give; give a shorter median length"
        )
