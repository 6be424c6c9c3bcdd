"""The training process: a plain process beside its trainer actor, pinned whole to the job's cores,
without Ray, and gone when the actor goes, whether exec'd by the actor or forked by the node's warm
parent (``raycolloc.job.forkserver``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import short_tmp

_TRAINER = """
    import os, sys, time
    from raycolloc.spec import Binding, JobSpec
    from raycolloc.config import DataConfig, TrainerConfig
    from raycolloc.job.trainer import Trainer
    from raycolloc.job.workloads.registry import create_workload
    job = JobSpec("cell-x", 0, create_workload("tiny_cnn"), 32, 2, 64, 0, DataConfig(), TrainerConfig())
    binding = Binding(job_index=0, gpu_uuid="GPU-none", env={"CUDA_VISIBLE_DEVICES": ""}, cpus=(CORE,))
    t = Trainer()
    t.start(job, binding, forkserver=FORKSERVER)
"""
SPAWN = ["exec", "fork"]


@pytest.fixture(scope="module")
def forkserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The node's warm parent, as the steward starts it (OMP_NUM_THREADS=1)."""
    sock = str(short_tmp("rcfs") / "fs.sock")  # short: a Unix socket path
    proc = subprocess.Popen(
        [sys.executable, "-m", "raycolloc.job.forkserver", sock], env=dict(os.environ, OMP_NUM_THREADS="1")
    )
    deadline = time.monotonic() + 120
    while not Path(sock).exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert Path(sock).exists(), "the fork server did not come up"
    yield sock
    proc.kill()
    proc.wait(timeout=30)


def _python(code: str, core: int, forkserver: str | None = None) -> subprocess.Popen[str]:
    code = textwrap.dedent(code).replace("CORE", str(core)).replace("FORKSERVER", repr(forkserver))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _server(spawn: str, request: pytest.FixtureRequest) -> str | None:
    return request.getfixturevalue("forkserver") if spawn == "fork" else None


def _core() -> int:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    return cores[-1]


@pytest.mark.parametrize("spawn", SPAWN)
def test_the_job_trains_in_a_child_process_pinned_to_its_core_without_ray(
    spawn: str, request: pytest.FixtureRequest
) -> None:
    core = _core()
    proc = _python(
        _TRAINER
        + """
    state = t.setup()   # no GPU here: an error result, but from the training process
    pid = state.info.pid
    maps = open(f"/proc/{pid}/maps").read()
    threads = [int(x) for x in os.listdir(f"/proc/{pid}/task")]
    affinity = {tid: os.sched_getaffinity(tid) for tid in threads}
    print(pid, os.getpid(), os.getppid() != pid, "_raylet" in maps, "libtorch" in maps, len(threads))
    print(state.status, "|", state.error)
    print(sorted(set(map(frozenset, affinity.values())), key=len))
    print(os.sched_getaffinity(0))
    final = t.finish()
    print("gone", not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z")
    """,
        core,
        _server(spawn, request),
    )
    out, err = proc.communicate(timeout=120)
    lines = out.splitlines()
    assert proc.returncode == 0 and len(lines) == 5, err
    pid, parent, _, raylet, torch_loaded, threads = lines[0].split()
    assert pid != parent and raylet == "False" and torch_loaded == "True" and int(threads) >= 1, lines[0]
    assert lines[1].startswith("error | ") and "CUDA sees no GPU" in lines[1], lines[1]
    assert lines[2] == f"[frozenset({{{core}}})]", lines[2]  # every thread of it on the job's core
    assert str(core) not in lines[3].strip("{}").split(", "), lines[3]  # the actor's threads off it
    assert lines[4] == "gone True"


@pytest.mark.parametrize("spawn", SPAWN)
def test_the_training_process_dies_with_its_actor(spawn: str, request: pytest.FixtureRequest) -> None:
    """Ray kills a hung trainer's actor process (SIGKILL); its training process must not live on
    holding the GPU."""
    core = _core()
    proc = _python(
        _TRAINER
        + """
    t.setup()
    print(t._proc.pid, flush=True)
    time.sleep(600)
    """,
        core,
        _server(spawn, request),
    )
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    assert Path(f"/proc/{child}").exists()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists(), f"training process {child} outlived its actor"


def test_forked_jobs_bind_their_own_gpu_pipe_and_cores_and_inherit_nothing_else(forkserver: str) -> None:
    """Two jobs forked by one warm parent: each has exactly its binding's environment and cores, its
    exit code comes back through the server, and neither holds a file of the server's."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    proc = _python(
        """
    import os
    from raycolloc.spec import Binding, JobSpec
    from raycolloc.config import DataConfig, TrainerConfig
    from raycolloc.job.spawn import start_training_process
    from raycolloc.job.workloads.registry import create_workload
    job = JobSpec("cell-x", 0, create_workload("tiny_cnn"), 32, 2, 64, 0, DataConfig(), TrainerConfig())
    base = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_")}
    procs = []
    for i, core in enumerate((FIRST_CORE, LAST_CORE)):
        env = {"CUDA_VISIBLE_DEVICES": f"GPU-{i}", "CUDA_MPS_PIPE_DIRECTORY": f"/tmp/pipe-{i}"}
        binding = Binding(job_index=i, gpu_uuid=f"GPU-{i}", env=env, cpus=(core,))
        p, conn = start_training_process(job.name, {**base, **env}, FORKSERVER)
        conn.send((job, binding))
        procs.append((p, conn))
    for p, conn in procs:
        assert conn.recv()[0] == "ready"
        tasks = os.listdir(f"/proc/{p.pid}/task")
        aff = {frozenset(os.sched_getaffinity(int(t))) for t in tasks}
        fds = [os.readlink(f"/proc/{p.pid}/fd/{f}") for f in os.listdir(f"/proc/{p.pid}/fd")]
        conn.send(("setup",))  # no GPU here: an error state, with the environment the job's CUDA read
        kind, state = conn.recv()
        info = state.info
        print(p.pid, info.cuda_visible_devices, info.mps_pipe_dir, sorted(map(sorted, aff)),
              sum(f.startswith("socket:") for f in fds), flush=True)
        conn.send(("finish",))
        assert conn.recv()[0] == "state"
        print("exit", p.wait(timeout=30), flush=True)
    """.replace("FIRST_CORE", str(cores[0])).replace("LAST_CORE", str(cores[-1])),
        cores[0],
        forkserver,
    )
    out, err = proc.communicate(timeout=120)
    lines = out.splitlines()
    assert proc.returncode == 0 and len(lines) == 4, err[-3000:]
    first, second = lines[0].split(" ", 3), lines[2].split(" ", 3)
    assert first[1:3] == ["GPU-0", "/tmp/pipe-0"] and second[1:3] == ["GPU-1", "/tmp/pipe-1"]
    assert first[3].rsplit(" ", 1)[0] == f"[[{cores[0]}]]" and second[3].rsplit(" ", 1)[0] == f"[[{cores[-1]}]]"
    # One socket each: its own job connection; none of the server's (listener, other requests).
    assert first[3].rsplit(" ", 1)[1] == "1" and second[3].rsplit(" ", 1)[1] == "1"
    assert lines[1] == "exit 0" and lines[3] == "exit 0"  # reaped by the server, reported to the requester


def test_the_fork_server_removes_its_socket_and_log_when_its_steward_ends() -> None:
    """Issue 29, item 7: every run left ``forkserver-<pid>.sock`` and ``.log`` in ``mode.pipe_root``.
    The server ends with the process that started it (here a stand-in for the steward, started and
    SIGKILLed as Ray kills one), and takes both with it."""
    root = short_tmp("rcfl")  # short: a Unix socket path
    sock, log = root / "forkserver-1.sock", root / "forkserver-1.log"
    steward = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import os, subprocess, sys, time
        with open({str(log)!r}, "ab") as out:  # as raycolloc.node.steward starts it
            subprocess.Popen([sys.executable, "-m", "raycolloc.job.forkserver", {str(sock)!r}, {str(log)!r}],
                             env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=out, stderr=out)
        time.sleep(600)
    """),
        ]
    )
    try:
        deadline = time.monotonic() + 120
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sock.exists() and log.exists(), "the fork server did not come up"
    finally:
        steward.send_signal(signal.SIGKILL)
        steward.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(root.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(root.iterdir())
    root.rmdir()


@pytest.mark.parametrize(("traits", "timm"), [("NVML", True), ("SIM", False)])
def test_the_steward_has_timm_preloaded_for_real_gpus_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, traits: str, timm: bool
) -> None:
    """timm imports torchvision, whose ops import torch._dynamo: ~10 CPU-seconds per steward on a 2-core
    CI VM. A real GPU's jobs are timm models (their forks find it loaded); simulated GPUs mostly train
    tiny models, and a job that needs timm imports it at its set-up."""
    import types

    from raycolloc.job.forkserver import PRELOAD, TIMM
    from raycolloc.node import steward
    from raycolloc.node.gpu import kinds

    started: list[list[str]] = []
    monkeypatch.setattr(steward.subprocess, "Popen", lambda cmd, **kw: started.append(cmd))
    fake = types.SimpleNamespace(
        pipe_root=tmp_path,
        backend=types.SimpleNamespace(traits=getattr(kinds, traits)),
        _forkserver_path=str(tmp_path / "fs.sock"),
        _forkserver_log=tmp_path / "fs.log",
    )
    steward.Steward._start_forkserver(fake)  # type: ignore[arg-type]
    (cmd,) = started
    assert cmd[1:5] == ["-m", "raycolloc.job.forkserver", str(tmp_path / "fs.sock"), str(tmp_path / "fs.log")]
    assert ("--timm" in cmd) is timm and TIMM not in PRELOAD


@pytest.mark.slow  # a fresh interpreter imports torch: seconds
def test_a_forked_jobs_set_up_imports_no_package_its_fork_server_did_not() -> None:
    """What a training process forked from the fork server imports at its set-up, every job pays again: its
    optimiser imported torch._dynamo (with sympy: 1.5-2 CPU-s a job). After the fork server's preload, a
    study job's model, step and first steps import no package of that weight."""
    import subprocess
    import sys

    code = """
import sys
from raycolloc.job.forkserver import PRELOAD
for module in PRELOAD:
    __import__(module)
import torch
from raycolloc.job.step import build_step
from tests.conftest import load
job = load(["workload=tiny_cnn"]).jobs[0]
before = set(sys.modules)
model = job.workload.build_model()
step = build_step(job.workload, model, torch.device("cpu"), job.trainer)
x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
step((x,), y)
step((x,), y)
print(sorted({".".join(m.split(".")[:2]) for m in set(sys.modules) - before}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    new = done.stdout.strip().splitlines()[-1]
    assert "torch._dynamo" not in new and "sympy" not in new, new
