"""Nodes a ``ray`` replay loses while it runs: found, and their GPUs let go, as the simulated cluster
loses one (:meth:`raycolloc.queue.simcluster.SimCluster.lose_node`).

A node is lost when Ray's GCS no longer counts it alive, or when its steward is gone (an actor error,
not a slow answer): a raylet killed outright takes the node's workers with it at once, while the GCS
declares the node dead only after its health checks miss (seconds to a minute, by Ray's
``health_check_*`` settings). The jobs that trained there did not fail, so they are re-queued as they
were and not counted against their job (``lost`` reports; ``node lost`` attempt rows); the node's GPUs
leave the runner, so no policy sees them again; their leases are removed (a bundle Ray would otherwise
re-place on a surviving node the queue already holds) and their trainer actors killed. Nothing is asked
of the lost node's steward: what it kept (an MPS daemon) went with the node, or is found through its
pid file by the next steward there. Every wait is bounded (``PING_S``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import ray

from raycolloc.queue.raylanes import QueueLane

__all__ = ["NODE_CHECK_S", "PING_S", "NodeWatch", "leave"]

log = logging.getLogger(__name__)
NODE_CHECK_S = 1.0  # how often the nodes are looked at while nothing ends (one GCS read, one call per steward)
PING_S = 5.0  # the longest a steward's answer is waited for; a slower one is taken as alive


class NodeWatch:
    """Which of the lanes' nodes are lost (see the module docstring); looked at every ``NODE_CHECK_S``,
    or at once when asked (an attempt ended: its actor may have died with its node)."""

    def __init__(self) -> None:
        self.checked_at: float | None = None

    def lost(self, lanes: Iterable[QueueLane], now: float, force: bool = False) -> set[str]:
        """The ids of the lanes' nodes that are lost (empty between looks)."""
        if not force and self.checked_at is not None and now - self.checked_at < NODE_CHECK_S:
            return set()
        self.checked_at = now
        stewards = {lane.node_id: lane.steward for lane in lanes}
        if not stewards:
            return set()
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        gone = {node for node in stewards if node not in alive}
        pings = {node: steward.held.remote() for node, steward in stewards.items() if node not in gone}
        ready, _ = ray.wait(list(pings.values()), num_returns=len(pings), timeout=PING_S)
        for node, ref in pings.items():
            if ref not in ready:
                continue  # slow, not gone: a loaded node answers late
            try:
                ray.get(ref, timeout=PING_S)
            except ray.exceptions.RayActorError as exc:  # died or unreachable: its raylet is gone
                log.warning("node=%s steward gone: %s", node[:8], (str(exc).splitlines() or [""])[0][:200])
                gone.add(node)
            except ray.exceptions.RayError:
                continue
        return gone


def leave(lane: QueueLane) -> None:
    """Let go of a lost node's GPU: its idle trainer actors killed, its lease removed (each whatever the
    other did); its steward, gone with the node, is not asked."""
    try:
        lane.lane.trainers.close()
    finally:
        lane.lane.lease.release()
