"""The live queue on Ray's GPUs (issue 45, ``serve queue.runner=ray``), run as README shows it: ``serve``
in one process (its own local Ray instance, two simulated GPUs), then ``submit``, ``status``, ``logs``,
``cancel`` and ``drain --wait`` each a process of its own, with jobs of the three kinds (a timm model, a
``python`` entry, an unmodified script printing its own epoch lines). Every job ends or is cancelled
exactly once, each workload's first run teaches its profile (kept in the database), a job's output is
kept and read after it ended, and nothing is left (``raycolloc doctor`` clean). ``serve`` stopped by
SIGTERM, started again, killed by SIGKILL, started again, resumes each time: the job it ran re-queued,
every job ends once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from .conftest import ROOT, short_tmp
from .sleepy_workload import HOLD_ENV

SCRIPT = f"{sys.executable} {ROOT / 'jobs' / 'examples' / 'plain_train.py'} --epochs 3 --steps 2 --batch-size 8"
SLEEPY = "tests.sleepy_workload:build"
HELD = "tests.sleepy_workload:build_held"


def _cli(args: list[str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "raycolloc.queue", *args],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _serve(words: list[str], out: Path) -> subprocess.Popen[str]:
    """``serve`` in the background, its output to ``out``; returns once it answers (its address written)."""
    address = Path(next(w for w in words if w.startswith("out_dir=")).split("=", 1)[1]) / "queue/live/ray-address"
    address.unlink(missing_ok=True)  # one a killed serve left: wait for the new one's
    log = out.open("a")
    proc = subprocess.Popen(
        [sys.executable, "-m", "raycolloc.queue", "serve", *words],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 400  # a loaded 2-core machine starts Ray slowly
    while not address.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert address.exists(), out.read_text()[-3000:]
    return proc


def _submit(job_id: str, words: list[str], *fields: str) -> None:
    done = _cli(["submit", "--job-id", job_id, *fields, *words])
    assert done.returncode == 0 and f"queued {job_id}" in done.stdout, done.stderr[-2000:]


def _wait_state(words: list[str], job_id: str, state: str, timeout: float = 600) -> None:
    """Wait until ``job_id`` is in ``state``, read from the queue's database beside its owner (a
    ``status`` command takes 5-20 s on a loaded machine: a job may end between two of them)."""
    from raycolloc.queue.state import Store

    out_dir = Path(next(w for w in words if w.startswith("out_dir=")).split("=", 1)[1])
    deadline = time.monotonic() + timeout
    found = None
    while time.monotonic() < deadline:
        store = Store(out_dir / "queue/live/queue.sqlite", read_only=True)
        try:
            record = store.job(job_id)
        finally:
            store.close()
        found = record.state if record else None
        if found == state:
            return
        time.sleep(0.5)
    raise AssertionError(f"{job_id} never {state} (last {found})")


def _wait_file(path: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


def _events(db: Path) -> tuple[Counter[str], Counter[str], Counter[str]]:
    """Each job's ``ended``, ``cancelled`` and ``requeued`` events (read beside no owner)."""
    from raycolloc.queue.state import Store

    store = Store(db, read_only=True)
    try:
        events = store.events()
    finally:
        store.close()
    ended, cancelled, requeued = (Counter(j for _, j, k, _ in events if k == kind) for kind in _KINDS)
    return ended, cancelled, requeued


_KINDS = ("ended", "cancelled", "requeued")


def _doctor_clean(pipe_root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "raycolloc.doctor", f"--pipe-root={pipe_root}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and "nothing left behind" in done.stdout, done.stdout + done.stderr


def _no_process_of(pipe_root: Path, out_dir: Path) -> None:
    """No process of this test's queue left: no trainer, training process, fork server or MPS daemon."""
    deadline = time.monotonic() + 30  # Ray's processes take a moment to go after their GCS
    left: list[str] = []
    while time.monotonic() < deadline:
        ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
        left = [line for line in ps.splitlines() if str(pipe_root) in line or str(out_dir) in line]
        if not left:
            return
        time.sleep(1)
    raise AssertionError("\n".join(left))


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a loaded 2-core machine: Ray starts in 30-130 s, each command takes 5-20 s
def test_serve_on_ray_runs_jobs_of_three_kinds_submitted_from_other_processes(tmp_path: Path) -> None:
    pipe_root = short_tmp("rcl")
    words = [f"out_dir={tmp_path}", "queue.runner=ray", "cluster=local", "cluster.num_gpus=2"]
    words += [f"mode.pipe_root={pipe_root}"]
    serve = _serve(words, tmp_path / "serve.log")
    try:
        _submit("t1", words, "--model", "resnet10t", "--dataset", "cifar10", "--samples", "256")
        _submit("p1", words, "--kind", "python", "--entry", SLEEPY, "--samples", "640")
        _submit("s1", words, "--kind", "script", "--entry", SCRIPT, "--samples", "48")
        _submit("long", words, "--kind", "python", "--entry", SLEEPY, "--samples", "50000000")
        bad = _cli(["submit", "--job-id", "b1", "--kind", "script", "--entry", "'open quote", "--samples", "9", *words])
        assert bad.returncode == 2 and "submission: entry:" in bad.stderr, bad.stderr[-2000:]
        _wait_state(words, "long", "started")
        status = _cli(["status", *words])
        assert status.returncode == 0 and "  long  python:tests.sleepy_workload:build  started  " in status.stdout
        cancel = _cli(["cancel", "long", *words])
        assert cancel.returncode == 0 and "cancelled long (was started)" in cancel.stdout, cancel.stderr[-2000:]
        _wait_state(words, "s1", "ended")
        _submit("p2", words, "--kind", "python", "--entry", SLEEPY, "--samples", "640")  # its workload profiled
        drain = _cli(["drain", "--wait", *words], timeout=600)
        assert drain.returncode == 0 and "(draining)" in drain.stdout, drain.stderr[-2000:]
        serve.wait(timeout=300)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    out = (tmp_path / "serve.log").read_text()
    assert serve.returncode == 0 and "queue policy=raycolloc: 4/5 jobs ended" in out, out[-3000:]
    live = tmp_path / "queue" / "live"
    ended, cancelled, _ = _events(live / "queue.sqlite")
    assert ended == Counter({"t1": 1, "p1": 1, "s1": 1, "p2": 1}) and cancelled == Counter({"long": 1})
    # After serve ended: the script's own epoch lines, a python job's epochs, an unknown id refused.
    script = _cli(["logs", "s1", *words])
    assert script.returncode == 0 and "epoch 3 done samples=16" in script.stdout, script.stdout + script.stderr
    sleepy = _cli(["logs", "p1", *words])
    assert sleepy.returncode == 0 and "raycolloc: epoch 2 " in sleepy.stdout, sleepy.stdout + sleepy.stderr
    assert "cancelled" in _cli(["logs", "long", *words]).stdout
    unknown = _cli(["logs", "nope", *words])
    assert unknown.returncode == 2 and "'nope' is not a job of the queue" in unknown.stderr, unknown.stderr
    # Each workload's first run taught its profile; p2 ran by p1's (its workload was not probed again).
    from raycolloc.queue.state import Store

    store = Store(live / "queue.sqlite", read_only=True)
    try:
        learned = {k: json.loads(v) for k in ("t", "p", "s") for v in [store.meta(_key(k))] if v}
    finally:
        store.close()
    assert set(learned) == {"t", "p", "s"} and all(p["samples_per_s"] > 0 for p in learned.values())
    assert {"jobs.parquet", "attempts.parquet", "gpus.parquet", "summary.json"} <= {p.name for p in live.iterdir()}
    _doctor_clean(pipe_root)
    _no_process_of(pipe_root, tmp_path)


def _key(kind: str) -> str:
    return {
        "t": "profile:resnet10t/cifar10",
        "p": f"profile:python:{SLEEPY}",
        "s": f"profile:script:{SCRIPT}",
    }[kind]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a loaded 2-core machine: Ray starts in 30-130 s, each command takes 5-20 s
def test_serve_stopped_while_jobs_run_and_started_again_resumes_every_job_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve`` stopped by SIGTERM while a job trains, started again, then killed by SIGKILL while that job
    trains again, then started a third time: each start re-queues the job it finds started, and every job
    ends exactly once. (One chain of three serves: the two stops were two tests that each paid for the
    same set-up, ~70 CPU-seconds apiece on 2 cores.)"""
    pipe_root = short_tmp("rck")
    words = [f"out_dir={tmp_path}", "queue.runner=ray", "cluster=local", "cluster.num_gpus=2"]
    words += [f"mode.pipe_root={pipe_root}"]
    log = tmp_path / "serve.log"
    for round_, sig in enumerate((signal.SIGTERM, signal.SIGKILL)):
        # Job a's first step waits for this round's file: it is surely training when serve is stopped,
        # however long its set-up took, and ends in moments once let go (the environment reaches the
        # job from the serve that started the Ray instance).
        gate = tmp_path / f"let-a-go-{round_}"
        monkeypatch.setenv(HOLD_ENV, str(gate))
        serve = _serve(words, log)
        try:
            if round_ == 0:
                _submit("a", words, "--kind", "python", "--entry", HELD, "--samples", "640")
                _submit("b", words, "--kind", "script", "--entry", SCRIPT, "--samples", "48")
            _wait_state(words, "a", "started")
            _wait_file(gate.with_name(gate.name + ".reached"))  # a trains: set up, at its first step
            serve.send_signal(sig)
            serve.wait(timeout=300)
        finally:
            if serve.poll() is None:
                serve.kill()
                serve.wait()
        if sig == signal.SIGTERM:
            out = log.read_text()
            assert serve.returncode == 143 and "GPUs released" in out, out[-3000:]
        # Nothing of that serve runs on: its trainers and processes went with it (SIGKILL: with its Ray).
        _no_process_of(pipe_root, tmp_path)
        gate.touch()
    monkeypatch.delenv(HOLD_ENV)
    again = _serve(words, log)
    try:
        status = _cli(["status", *words])
        assert status.returncode == 0, status.stderr[-2000:]
        _submit("c", words, "--kind", "python", "--entry", SLEEPY, "--samples", "640")
        drain = _cli(["drain", "--wait", *words], timeout=600)
        assert drain.returncode == 0, drain.stderr[-2000:]
        again.wait(timeout=300)
    finally:
        if again.poll() is None:
            again.kill()
            again.wait()
    ended, cancelled, requeued = _events(tmp_path / "queue" / "live" / "queue.sqlite")
    assert ended == Counter({"a": 1, "b": 1, "c": 1}) and not cancelled  # each job ended exactly once
    assert requeued["a"] == 2  # it was running when each serve stopped: re-queued by the next serve
    _doctor_clean(pipe_root)
    _no_process_of(pipe_root, tmp_path)


def test_logs_of_an_unknown_job_or_queue_exits_2_and_a_known_one_says_why_it_has_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from raycolloc.queue.__main__ import main
    from raycolloc.queue.service import QueueService
    from raycolloc.queue.settings import compose_settings

    words = [f"out_dir={tmp_path}", "cluster=local"]
    assert main(["logs", "a", *words]) == 2
    assert "no live queue's database at" in capsys.readouterr().err
    settings = compose_settings(words)
    service = QueueService(settings, tmp_path / "queue" / "live" / "queue.sqlite")
    job = {"job_id": "a", "kind": "timm", "model": "resnet50", "dataset": "imagenet64", "samples": "1000"}
    service.submit(job)
    try:  # read beside the service that owns the database, as beside a running serve
        assert main(["logs", "nope", *words]) == 2
        assert "logs: job_id: 'nope' is not a job of the queue" in capsys.readouterr().err
        assert main(["logs", "a", *words]) == 0
        assert "a: no output (queued; the simulated cluster runs no process)" in capsys.readouterr().out
    finally:
        service.close()


@pytest.mark.slow
def test_a_command_that_reaches_the_queue_after_serve_ended_gets_its_last_status(
    tmp_path: Path, ray_local: None
) -> None:
    """``drain --wait`` polling beside ``serve``: serve shuts the actor down as it sees the queue drained,
    and a poll that lands after got a traceback (a closed database) instead of the last status."""
    import ray

    from raycolloc.queue import live
    from raycolloc.queue.settings import compose_settings

    settings = compose_settings([f"out_dir={tmp_path}", "cluster=local", "queue.sim_speed=50"])
    actor = live.start_actor(settings)
    try:
        job = {"job_id": "a", "kind": "timm", "model": "resnet50", "dataset": "imagenet64", "samples": "1000"}
        assert ray.get(actor.submit.remote(job), timeout=60).job_id == "a"
        ray.get(actor.shutdown.remote(), timeout=120)  # serve's end
        final = ray.get(actor.status.remote(), timeout=60)
        assert final.draining and sum(final.counts.values()) == 1
        assert "the queue has stopped" in str(ray.get(actor.submit.remote({**job, "job_id": "b"}), timeout=60).error)
        assert ray.get(actor.cancel.remote("a"), timeout=60) is None
        # serve kills the actor next: a poll after that ends the wait with the last status it saw.
        killer = threading.Timer(3.0, ray.kill, args=(actor,))
        killer.start()
        assert live.wait_drained(actor, poll_s=0.2).counts == final.counts
        killer.join()
    finally:
        ray.kill(actor)
