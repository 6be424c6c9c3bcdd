"""The training process: a plain child of its trainer actor, pinned whole to the job's cores,
without Ray, and gone when the actor goes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

_TRAINER = """
    import os, sys, time
    from raycolloc.cellspec import Binding, JobSpec
    from raycolloc.config import DataConfig, TrainerConfig
    from raycolloc.trainer import Trainer
    job = JobSpec(0, "tiny_cnn", 32, 2, 64, 0, DataConfig(), TrainerConfig())
    binding = Binding(job_index=0, gpu_uuid="GPU-none", env={"CUDA_VISIBLE_DEVICES": ""}, cpus=(CORE,))
    t = Trainer(job, binding, "cell-x", "nvml", None)
"""


def _python(code: str, core: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code).replace("CORE", str(core))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _core() -> int:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    return cores[-1]


def test_the_job_trains_in_a_child_process_pinned_to_its_core_without_ray() -> None:
    core = _core()
    proc = _python(_TRAINER + """
    state = t.setup()   # no GPU here: an error result, but from the training process
    pid = state["info"]["pid"]
    maps = open(f"/proc/{pid}/maps").read()
    threads = [int(x) for x in os.listdir(f"/proc/{pid}/task")]
    affinity = {tid: os.sched_getaffinity(tid) for tid in threads}
    print(pid, os.getpid(), os.getppid() != pid, "_raylet" in maps, "libtorch" in maps, len(threads))
    print(state["status"], "|", state["error"])
    print(sorted(set(map(frozenset, affinity.values())), key=len))
    print(os.sched_getaffinity(0))
    final = t.finish()
    print("gone", not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z")
    """, core)
    out, err = proc.communicate(timeout=120)
    lines = out.splitlines()
    assert proc.returncode == 0 and len(lines) == 5, err
    pid, parent, _, raylet, torch_loaded, threads = lines[0].split()
    assert pid != parent and raylet == "False" and torch_loaded == "True" and int(threads) >= 1, lines[0]
    assert lines[1].startswith("error | ") and "CUDA sees no GPU" in lines[1], lines[1]
    assert lines[2] == f"[frozenset({{{core}}})]", lines[2]          # every thread of it on the job's core
    assert str(core) not in lines[3].strip("{}").split(", "), lines[3]  # the actor's threads off it
    assert lines[4] == "gone True"


def test_the_training_process_dies_with_its_actor() -> None:
    """Ray kills a hung trainer's actor process (SIGKILL); its training process must not live on
    holding the GPU."""
    core = _core()
    proc = _python(_TRAINER + """
    t.setup()
    print(t._proc.pid, flush=True)
    time.sleep(600)
    """, core)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    assert Path(f"/proc/{child}").exists()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists(), f"training process {child} outlived its actor"
