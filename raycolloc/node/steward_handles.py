"""The driver's side of the stewards: a node's steward found by name, or started (detached, on its
node) before a sweep's first cells. The actor itself is :mod:`raycolloc.node.steward`."""

from __future__ import annotations

import logging
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raycolloc.config import ClusterConfig
from raycolloc.node.gpu.kinds import backend_traits
from raycolloc.node.steward import NAMESPACE, RemoteSteward
from raycolloc.spec import NodeInfo

__all__ = ["NAMESPACE", "get_steward", "start_stewards", "steward_name", "warm_forkservers"]

log = logging.getLogger(__name__)


def steward_name(node_id: str, cluster: ClusterConfig) -> str:
    """The steward's actor name: one per node and set of GPUs there (the backend's ``steward_keys``)."""
    keys = backend_traits(cluster.backend).steward_keys
    kind = "-".join([cluster.backend, *(str(getattr(cluster, key)) for key in keys)])
    return f"raycolloc:steward:{node_id[:12]}:{kind}"


def _steward_actor(node_id: str, cluster: ClusterConfig, num_gpus: int, pipe_root: str) -> Any:
    """The steward actor of ``node_id``, created unless one runs (detached: it outlives any one
    sweep); not waited for."""
    return RemoteSteward.options(
        name=steward_name(node_id, cluster),
        namespace=NAMESPACE,
        get_if_exists=True,
        lifetime="detached",
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote(node_id, cluster, num_gpus, pipe_root)


def get_steward(node_id: str, cluster: ClusterConfig, pipe_root: str, timeout: float = 60.0) -> Any:
    """The steward of ``node_id``, created on first use, once it answers."""
    gpus = next((int(n["Resources"].get("GPU", 0)) for n in ray.nodes() if n["NodeID"] == node_id), 0)
    handle = _steward_actor(node_id, cluster, gpus, pipe_root)
    ray.get(handle.held.remote(), timeout=timeout)  # wait until it is up
    return handle


def start_stewards(
    nodes: dict[str, int], cluster: ClusterConfig, pipe_root: str, timeout: float = 60.0
) -> list[NodeInfo]:
    """Start the steward of every GPU node (node id -> GPU count) at once, before a sweep's first
    cells, so they do not each wait for it inside their set-up (2.6-2.8 s on 4 x H200,
    docs/measurements.md, fourth session). Returns the ``info()`` of those that answered; one that
    does not is left to its first cell, which records the error."""
    handles = [_steward_actor(node, cluster, count, pipe_root) for node, count in nodes.items()]
    refs = [h.info.remote(cluster.reserved_cpus) for h in handles]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    if len(ready) < len(refs):
        log.warning("%d of %d stewards did not start within %gs", len(refs) - len(ready), len(refs), timeout)
    return ray.get(ready, timeout=timeout)


def warm_forkservers(nodes: dict[str, int], cluster: ClusterConfig, pipe_root: str, timeout: float = 180.0) -> str:
    """Wait until the fork server of every GPU node (node id -> GPU count) serves, before a sweep's
    lanes lease their GPUs: its import of torch (and timm), 10-20 s on a fresh node, then holds no
    GPU (a lane waited for it inside its lease). The sweep passes the nodes whose steward answered
    (:func:`start_stewards`): one that did not is its lanes' to find out. Returns what it waited for,
    as logged. A node whose fork server does not come up within ``timeout`` (or cannot start) is left
    to its lanes: each asks again as it opens, and execs its jobs' processes if it still has none."""
    t0 = time.monotonic()
    handles = [_steward_actor(node, cluster, count, pipe_root) for node, count in nodes.items()]
    refs = [h.forkserver.remote() for h in handles]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    up = 0
    for ref in ready:
        try:
            up += ray.get(ref, timeout=0) is not None
        except Exception:  # noqa: BLE001 - a dead steward: its lanes find out and record it
            continue
    return f"{up} of {len(refs)} fork server(s) up in {time.monotonic() - t0:.1f} s"
