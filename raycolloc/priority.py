"""Process priority of trainers and the steward.

Ray starts its worker processes at niceness 15 (``worker_niceness``). A trainer whose step rate is
bound by the CPU launching kernels, and an MPS server started by the steward (it inherits the
steward's niceness), then lose CPU time to any process at normal priority: on an H100 that cost
raycolloc up to 10% against raw processes (H100, benchB). Local Ray instances start with niceness 0; on other
clusters each trainer and the steward move themselves back to 0 where they may (root), else they
log it.
"""

from __future__ import annotations

import logging
import os

__all__ = ["normal_priority"]

log = logging.getLogger(__name__)


def normal_priority() -> int:
    """Set this process's niceness to 0 if it is higher and we may; returns the niceness in effect."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current > 0:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
        except PermissionError:
            log.warning("niceness=%d: cannot lower it without root; start Ray with RAY_worker_niceness=0", current)
    return os.getpriority(os.PRIO_PROCESS, 0)
