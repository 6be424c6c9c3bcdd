"""The node's fork server (the warm parent whose import of torch a fresh node waits 10-20 s for) is
up before a sweep's lanes lease their GPUs, so that wait holds no GPU (issue 44: the advice's GPU time)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raycolloc.driver import engine, lane
from raycolloc.driver.engine import run_cells

from .conftest import load


def _alive(sock: Path) -> bool:
    """Whether the steward that named ``forkserver-<pid>.sock`` still runs."""
    try:
        os.kill(int(sock.stem.rsplit("-", 1)[1]), 0)
    except (ValueError, ProcessLookupError):
        return False
    return True


@pytest.mark.slow
@pytest.mark.usefixtures("ray_local")
def test_the_fork_servers_serve_before_any_gpu_is_leased(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_warm, real_acquire = engine.warm_forkservers, lane.acquire_gpu

    def warm(nodes, cluster, pipe_root, *args, **kwargs):  # noqa: ANN001, ANN202
        events.append("warm")
        waited = real_warm(nodes, cluster, pipe_root, *args, **kwargs)
        # served by a live steward's fork server (its socket is named after the steward's pid), not a stale file
        events.append(f"served:{any(_alive(sock) for sock in Path(pipe_root).glob('forkserver-*.sock'))}")
        return waited

    def acquire(*args, **kwargs):  # noqa: ANN202
        events.append("lease")
        return real_acquire(*args, **kwargs)

    monkeypatch.setattr(engine, "warm_forkservers", warm)
    monkeypatch.setattr(lane, "acquire_gpu", acquire)
    words = ["epoch_samples=64", "repeats=1", "degree=1", "mode=naive"]
    (forked,) = run_cells([(load(words, out_dir=tmp_path), tmp_path / "fork")], rerun=True)
    assert forked.status == "ok"
    assert events == ["warm", "served:True", "lease"]
    events.clear()
    # A sweep whose jobs are exec'd needs no fork server: it leases at once.
    execd = load([*words, "trainer.spawn=exec"], out_dir=tmp_path)
    (result,) = run_cells([(execd, tmp_path / "exec")], rerun=True)
    assert result.status == "ok" and events == ["lease"]
