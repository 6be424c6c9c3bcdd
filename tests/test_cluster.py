"""Ray's local start-up under load: a start that fails is logged with Ray's reason and tried again;
one that fails every time, or on its arguments, raises (issue 14)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import raycolloc.driver.cluster as cluster
from raycolloc.config import ClusterConfig

LATE = "The current node timed out during startup. This could happen because some of the raylet failed to startup"


class FakeRay:
    """``ray.init`` failing its first ``fails`` calls as a late raylet makes it fail."""

    def __init__(self, fails: int, error: Exception | None = None) -> None:
        self.fails, self.error = fails, error or Exception(LATE)
        self.inits: list[dict[str, Any]] = []
        self.shutdowns = 0

    def init(self, **kwargs: Any) -> Any:
        self.inits.append(kwargs)
        if len(self.inits) <= self.fails:
            raise self.error
        return type("Context", (), {"dashboard_url": None})()

    def shutdown(self) -> None:
        self.shutdowns += 1

    def is_initialized(self) -> bool:
        return False

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 8.0, "GPU": 1.0}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    def install(fails: int, error: Exception | None = None) -> FakeRay:
        ray = FakeRay(fails, error)
        monkeypatch.setattr(cluster, "ray", ray)
        monkeypatch.setattr(cluster.time, "sleep", lambda s: None)
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        return ray

    return install


def test_a_late_raylet_is_logged_and_the_start_tried_again(
    fake,  # noqa: ANN001
    caplog: pytest.LogCaptureFixture,
) -> None:
    ray = fake(fails=2)
    with caplog.at_level(logging.WARNING, logger=cluster.__name__):
        assert cluster.connect(ClusterConfig(backend="sim", num_gpus=1)) == {"CPU": 8.0, "GPU": 1.0}
    assert len(ray.inits) == 3 and ray.shutdowns == 2
    assert all(kw["address"] == "local" and kw["num_gpus"] == 1 for kw in ray.inits)  # the same start each time
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and "attempt 1 of 3" in warnings[0] and "timed out during startup" in warnings[0]


def test_a_start_that_always_fails_raises_rays_error(fake) -> None:  # noqa: ANN001
    ray = fake(fails=3)
    with pytest.raises(Exception, match="timed out during startup"):
        cluster.connect(ClusterConfig(backend="sim", num_gpus=1))
    assert len(ray.inits) == 3


def test_bad_arguments_are_not_tried_again(fake) -> None:  # noqa: ANN001
    ray = fake(fails=1, error=ValueError("num_gpus must be a number"))
    with pytest.raises(ValueError, match="num_gpus"):
        cluster.connect(ClusterConfig(backend="sim", num_gpus=1))
    assert len(ray.inits) == 1 and ray.shutdowns == 0


class FakeNode:
    """Ray's node of a local instance: its process kinds, and the kills asked of it, in order."""

    def __init__(self, raylet_pid: int) -> None:
        proc = type("Popen", (), {"pid": raylet_pid})()
        self.all_processes = {cluster.RAYLET: [type("Info", (), {"process": proc})()], "gcs_server": []}
        self.kills: list[tuple[str, bool]] = []

    def _kill_process_type(self, kind: str, check_alive: bool, allow_graceful: bool, wait: bool) -> None:
        self.kills.append((kind, allow_graceful))

    def kill_all_processes(self, check_alive: bool = True, allow_graceful: bool = False, wait: bool = False) -> None:
        self.kills.append(("all", allow_graceful))


@pytest.mark.parametrize("blocked", [True, False])
def test_an_instance_started_with_sigterm_blocked_is_stopped_without_rays_grace(
    blocked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's processes started inside ``signals.shielded()`` cannot take SIGTERM: Ray's shutdown would wait
    a second on each of its kinds for nothing. Such an instance is killed at once, the raylet first; one
    started with SIGTERM free keeps Ray's grace."""
    import os
    import signal

    from raycolloc.driver import signals

    node = FakeNode(os.getpid())  # a live pid with no children: nothing to wait for
    monkeypatch.setattr(cluster.ray_worker, "_global_node", node, raising=False)
    context = object()
    if blocked:
        with signals.shielded():
            assert cluster.stopped_at_once(context) is context
    else:
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        assert cluster.stopped_at_once(context) is context
    node.kill_all_processes(check_alive=False, allow_graceful=True, wait=False)  # as ray.shutdown() asks
    if blocked:
        assert node.kills == [(cluster.RAYLET, False), ("all", False)]
    else:
        assert node.kills == [("all", True)]
