"""GPU leases: a cell holds one whole GPU for its life through a Ray placement group.

One bundle ``{"GPU": 1, "CPU": k}`` (STRICT_PACK): every job of the cell is scheduled into it with
``num_gpus=1/degree``, so all of them land on the same physical GPU, which a fractional
``num_gpus`` without a placement group does not guarantee. Which node and which GPU Ray granted,
the lane asks its first trainer actor (:meth:`raycolloc.driver.trainers.TrainerPool.locate`): a
probe task of its own would cost a worker process more per lane and sweep (~1.3 CPU-seconds; a new
driver's tasks never reuse another driver's workers).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

__all__ = ["GpuLease", "LeaseError", "acquire_gpu"]

log = logging.getLogger(__name__)


class LeaseError(RuntimeError):
    """No GPU could be leased (none in the cluster, too few CPUs beside one, or a timeout)."""


@dataclass
class GpuLease:
    """A granted GPU: the placement group, and how long the lease waited for it."""

    pg: PlacementGroup
    waited_s: float

    def strategy(self) -> PlacementGroupSchedulingStrategy:
        """Scheduling strategy that places a task or actor inside this lease."""
        return PlacementGroupSchedulingStrategy(
            self.pg, placement_group_bundle_index=0, placement_group_capture_child_tasks=False
        )

    def release(self) -> None:
        try:
            remove_placement_group(self.pg)
        except Exception as exc:  # noqa: BLE001 - already gone with its job is fine
            log.debug("lease=release-failed error=%s", exc)


def _check_feasible(cpus: float) -> None:
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    gpus = [n for n in nodes if n["Resources"].get("GPU", 0) >= 1]
    if not gpus:
        raise LeaseError(
            "the Ray cluster has no GPU: start Ray on GPU nodes, or run cluster=local for the simulated GPUs"
        )
    if not any(n["Resources"].get("CPU", 0) >= cpus for n in gpus):
        most = max(n["Resources"].get("CPU", 0) for n in gpus)
        raise LeaseError(
            f"a cell needs {cpus:g} CPUs beside its GPU (one per job, trainer.num_cpus); the largest "
            f"GPU node has {most:g}; lower trainer.num_cpus or the degree"
        )


def acquire_gpu(name: str, cpus: float, timeout_s: float, on_wait: Callable[[float], None] | None = None) -> GpuLease:
    """Lease one whole GPU and ``cpus`` CPUs on its node, waiting up to ``timeout_s``.

    Raises:
        LeaseError: the lease can never be granted or was not granted in time.
    """
    _check_feasible(cpus)
    t0 = time.monotonic()
    pg = placement_group([{"GPU": 1, "CPU": cpus}], strategy="STRICT_PACK", name=name)
    ready = pg.ready()
    try:
        while True:
            done, _ = ray.wait([ready], timeout=2.0)
            if done:
                ray.get(ready, timeout=30)
                break
            waited = time.monotonic() - t0
            if on_wait is not None:
                on_wait(waited)
            if waited > timeout_s:
                raise LeaseError(f"no GPU was free within cluster.lease_timeout_s={timeout_s:g}s")
    except BaseException:
        remove_placement_group(pg)
        raise
    return GpuLease(pg=pg, waited_s=time.monotonic() - t0)
