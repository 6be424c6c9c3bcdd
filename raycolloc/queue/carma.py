"""CARMA's published numbers, and the parts of its rules that are numbers: what its jobs last, how its
jobs arrive, how its monitor summarises a window, how its memory estimator errs.

Sources (read, nothing copied): CARMA's repository itu-rad/CARMA (README's tables of its tasks, the
two 60-task Philly-derived traces ``assets/philly-based-evaluation-traces/philly_trace-t{1,2}.sh``,
``src/monitor.py``, ``src/server.py``) and issue 44's count of GPUMemNet's outputs in CARMA's task
files. Why each number is what it is: docs/queue.md, "CARMA at its scale".
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

__all__ = [
    "CARMA_GAP_S",
    "CARMA_LENGTHS_MIN",
    "GPUMEMNET_CONFUSION",
    "MONITOR_WEIGHTS",
    "gpumemnet_offset",
    "monitor_summary",
]

_LIGHT_EPOCHS = (20, 50)  # CARMA's CIFAR-100 tasks run 20 or 50 epochs (its ``*_20e_*``/``*_50e_*`` tasks)
_LIGHT_MIN_PER_EPOCH = (1.06, 1.09, 1.14, 0.49, 0.23, 0.17, 0.83, 0.44, 0.22, 0.95, 0.50, 0.31)
# A job's length alone (minutes) per size class, one entry per task row of CARMA's README (ET x epochs):
# light: its CIFAR-100 CNNs; medium: its ImageNet/VOC/COCO/Criteo tasks (one epoch; UNet 0.35 min x 90);
# heavy: its WikiText-2 transformers (xlnet_base 7.38 min x 8, xlnet_large 19.58 min x 3).
CARMA_LENGTHS_MIN: dict[str, tuple[float, ...]] = {
    "light": tuple(round(m * e, 2) for e in _LIGHT_EPOCHS for m in _LIGHT_MIN_PER_EPOCH),
    "medium": (
        *(41.96, 28.48, 27.52, 34.96, 32.58, 31.27, 29.47, 25.70, 25.44),
        *(50.77, 46.70, 44.60, 49.86, 48.82, 47.57, 58.75, 51.27, 49.80),
        *(31.50, 112.07, 25.24),
    ),
    "heavy": (59.04, 14.92, 58.74, 44.93, 65.72),
}
# The mean gap between arrivals of CARMA's two 60-task traces: 13,767 s and 18,601 s of ``sleep`` over
# 120 submissions.
CARMA_GAP_S = (13_767 + 18_601) / 120
# GPUMemNet's 8 GiB-bin classification against the memory used, in CARMA's task files (issue 44: of 11
# tasks, 4 in the right bin, 2 one bin under, 5 one bin over): bin offset -> tasks.
GPUMEMNET_CONFUSION: dict[int, int] = {-1: 2, 0: 4, 1: 5}
# CARMA's monitor (its default "risk" summary) weighs each metric's rolling window as 0.2 mean + 0.2
# median + 0.3 95th percentile + 0.1 50th percentile + 0.2 EWMA (alpha 2 / (window + 1)).
MONITOR_WEIGHTS = (0.2, 0.2, 0.3, 0.1, 0.2)


def gpumemnet_offset(workload: str, seed: int) -> int:
    """GPUMemNet's bin error on ``workload`` (-1, 0 or +1 bin), drawn with :data:`GPUMEMNET_CONFUSION`'s
    shares and fixed per workload and seed: a classifier errs the same way on the same model each time."""
    digest = hashlib.sha256(f"gpumemnet:{seed}:{workload}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64 * sum(GPUMEMNET_CONFUSION.values())
    for offset, count in GPUMEMNET_CONFUSION.items():
        if u < count:
            return offset
        u -= count
    return max(GPUMEMNET_CONFUSION)


def _quantile(ordered: Sequence[float], q: float) -> float:
    """``q``-quantile of sorted values, linear between order statistics (pandas' default, as CARMA's)."""
    k = q * (len(ordered) - 1)
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def monitor_summary(samples: Sequence[float]) -> float:
    """One metric's window (1 s samples, oldest first) as CARMA's monitor summarises it
    (:data:`MONITOR_WEIGHTS`): a short burst weighs more than in a plain mean. 0 for an empty window."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    mean = sum(samples) / len(samples)
    alpha = 2.0 / (len(samples) + 1.0)
    ema = samples[0]
    for x in samples[1:]:
        ema = alpha * x + (1 - alpha) * ema
    parts = (mean, _quantile(ordered, 0.5), _quantile(ordered, 0.95), _quantile(ordered, 0.5), ema)
    return sum(w * p for w, p in zip(MONITOR_WEIGHTS, parts, strict=True))
