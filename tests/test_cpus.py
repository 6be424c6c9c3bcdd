"""Core assignment for trainers: one free core per job, near the GPU, never two cells on one core."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from raycolloc.node.cpus import CpuPool
from raycolloc.procs import format_cpus


def test_jobs_get_distinct_free_cores_near_the_gpu_core_0_last() -> None:
    pool = CpuPool(set(range(8)))
    cores = pool.allocate("a", [1, 1, 1], near=[0, 1, 2, 3])
    assert cores == [(1,), (2,), (3,)]
    # The next cell takes what is left: the GPU's last local core (0), then the far ones.
    assert pool.allocate("b", [1, 2], near=[0, 1, 2, 3]) == [(0,), (4, 5)]
    assert pool.held() == {"a": [(1,), (2,), (3,)], "b": [(0,), (4, 5)]}


def test_too_few_free_cores_pins_nothing_and_release_frees_them() -> None:
    pool = CpuPool({0, 1, 2})
    assert pool.allocate("a", [1, 1]) == [(1,), (2,)]
    assert pool.allocate("b", [1, 1]) is None  # only core 0 is free: the cell is not pinned
    assert "b" not in pool.held()
    pool.release("a")
    assert pool.allocate("b", [1, 1]) == [(1,), (2,)]
    assert pool.allocate("b", [0.5]) == [(1,)]  # re-allocating a cell replaces its cores; fractions round up


def test_unknown_near_cores_fall_back_to_the_node() -> None:
    assert CpuPool({4, 5}).allocate("a", [1], near=[0, 1]) == [(4,)]


@pytest.mark.parametrize(("cpus", "text"), [((3, 4, 5, 9), "3-5,9"), ((7,), "7"), ((1, 0, 2), "0-2"), (None, None)])
def test_format_cpus(cpus, text) -> None:  # noqa: ANN001
    assert format_cpus(cpus) == text


def _run_with_a_spare_core(code: str) -> None:
    """Run ``code`` in a fresh interpreter (its threads are its own), ``CORE`` standing for a core
    other than the first; the code prints ``ok`` when its assertions hold."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    code = textwrap.dedent(code).replace("CORE", str(cores[-1]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stderr


def test_move_threads_off_moves_every_thread_of_the_process_off_the_jobs_cores() -> None:
    """The trainer actor's threads (Ray's, and the caller) leave the cores of its training process."""
    _run_with_a_spare_core("""
        import os, threading
        from pathlib import Path
        from raycolloc.procs import move_threads_off
        stop = threading.Event()
        early = threading.Thread(target=stop.wait); early.start()   # e.g. one of Ray's threads
        others = move_threads_off((CORE,))
        seen = {int(t.name): os.sched_getaffinity(int(t.name)) for t in Path("/proc/self/task").iterdir()}
        stop.set()
        assert CORE not in others and len(seen) >= 2, (others, seen)
        assert all(s == others for s in seen.values()), seen
        print("ok")
    """)
