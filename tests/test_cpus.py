"""Core assignment for trainers: one free core per job, near the GPU, never two cells on one core."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from raycolloc.cpus import CpuPool, format_cpus


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


def test_pin_thread_gives_the_caller_its_core_and_moves_the_others_off_it() -> None:
    _run_with_a_spare_core("""
        import os, threading
        from pathlib import Path
        from raycolloc.cpus import pin_thread
        stop = threading.Event()
        early = threading.Thread(target=stop.wait); early.start()   # e.g. one of Ray's threads
        assert pin_thread((CORE,)) == {CORE}
        late = threading.Thread(target=stop.wait); late.start()     # e.g. one CUDA starts later
        me = threading.get_native_id()
        seen = {int(t.name): os.sched_getaffinity(int(t.name)) for t in Path("/proc/self/task").iterdir()}
        stop.set()
        assert seen.pop(me) == {CORE} and seen.pop(late.native_id) == {CORE}, seen
        assert seen and all(CORE not in s for s in seen.values()), seen
        print("ok")
    """)


def test_a_later_pin_moves_only_the_caller_so_threads_born_after_setup_keep_the_core() -> None:
    """The trainer's second pin (run_epochs, maybe on another thread of Ray's pool) must leave the
    threads CUDA started during setup on the job's core; moving them off cost a quarter of the
    H100 trainer's degree-1 throughput."""
    _run_with_a_spare_core("""
        import os, threading
        from raycolloc.cellspec import Binding
        from raycolloc.trainer import Trainer
        stop = threading.Event()
        early = threading.Thread(target=stop.wait); early.start()       # one of Ray's threads
        t = Trainer.__new__(Trainer)
        t.binding = Binding(job_index=0, gpu_uuid="GPU-x", env={}, cpus=(CORE,)); t.info = {}
        t._pin(first=True)                                               # setup
        cuda = threading.Thread(target=stop.wait); cuda.start()          # one CUDA starts in setup
        seen = {}
        def run_epochs():
            t._pin(first=False)
            seen["caller"] = os.sched_getaffinity(0)
        other = threading.Thread(target=run_epochs); other.start(); other.join()
        seen["cuda"] = os.sched_getaffinity(cuda.native_id)
        seen["early"] = os.sched_getaffinity(early.native_id)
        stop.set()
        assert seen["caller"] == {CORE} and seen["cuda"] == {CORE}, seen
        assert CORE not in seen["early"], seen
        assert t.info["cpus"] == "CORE", t.info
        print("ok")
    """)
