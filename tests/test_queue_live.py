"""The live queue (issue 33): jobs submitted while it runs (the Python API, on a clock the test moves),
a bad submission refused by name with nothing queued, cancel, drain, a restart that loses and repeats
no job; and the same through a detached Ray actor and the command line (slow)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from raycolloc.queue.service import QueueClosed, QueueService
from raycolloc.queue.settings import compose_settings
from raycolloc.queue.trace import TraceError

from .test_readme import _form, _sample

ROOT = Path(__file__).resolve().parents[1]


class Clock:
    """Wall time the test moves."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _service(tmp_path: Path, clock: Clock, *extra: str) -> QueueService:
    settings = compose_settings(["cluster=local", "cluster.num_gpus=2", "queue.sim_speed=10", *extra])
    return QueueService(settings, tmp_path / "live.sqlite", clock)


def _job(job_id: str, samples: int = 50_000, model: str = "resnet50") -> dict[str, str]:
    return {"job_id": job_id, "kind": "timm", "model": model, "dataset": "imagenet64", "samples": str(samples)}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({**_job("a"), "dataset": "mnist"}, "dataset"),
        ({**_job("a"), "samples": "-3"}, "samples"),
        ({**_job("a"), "epochs": "2"}, "epochs/samples"),
        ({**_job("a"), "colour": "red"}, "colour"),
        ({**_job("a"), "submit_s": "5"}, "submit_s"),
        ({**_job("a"), "model": "resnet9000"}, "model"),
        ({**_job("a"), "job_id": "a b"}, "job_id"),
    ],
)
def test_a_bad_submission_is_refused_by_its_field_and_nothing_is_queued(
    tmp_path: Path, fields: dict[str, str], field: str
) -> None:
    service = _service(tmp_path, Clock())
    with pytest.raises(TraceError, match=rf"^submission: {field}:"):
        service.submit(fields)
    assert sum(service.store.counts().values()) == 0
    service.submit(_job("a"))
    with pytest.raises(TraceError, match="submission: job_id: 'a' is already in the queue"):
        service.submit(_job("a"))
    assert service.store.counts()["queued"] == 1
    service.close()


def test_jobs_submitted_while_it_runs_end_and_a_cancel_frees_the_gpu(tmp_path: Path) -> None:
    clock = Clock()
    service = _service(tmp_path, clock)
    for name in ("a", "b", "c"):
        service.submit(_job(name, samples=200_000))
    service.tick()
    running = {j.job_id: j.gpu for j in service.status().jobs if j.state == "started"}
    assert set(running) == {"a", "b", "c"}  # collocated on two GPUs
    assert service.cancel("b") == "started" and service.cancel("b") is None
    assert all("b" not in g.jobs for g in service.status().gpus)
    clock.t = 1000.0
    status = service.status()
    assert status.counts["ended"] == 2 and status.counts["cancelled"] == 1
    service.drain()
    assert service.status().drained
    with pytest.raises(QueueClosed):
        service.submit(_job("d"))
    assert service.summary().ended == 2
    service.close()


def test_the_summary_says_how_long_the_queue_has_served(tmp_path: Path) -> None:
    """``serve``'s summary said ``wall 0.0 s`` after 178 s (issue 46, item 7)."""
    from raycolloc.queue.report import format_summary

    clock = Clock()
    clock.t = 50.0
    service = _service(tmp_path, clock)
    service.submit(_job("a"))
    clock.t = 228.0
    summary = service.summary()
    assert summary.wall_s == pytest.approx(178.0)
    assert "wall 178.0 s" in format_summary(summary)
    service.close()


def test_a_live_queue_started_again_resumes_and_each_job_ends_once(tmp_path: Path) -> None:
    clock = Clock()
    first = _service(tmp_path, clock)
    first.submit(_job("a", samples=200_000))
    first.submit(_job("b", samples=200_000))
    clock.t = 1.0
    first.tick()
    assert first.store.counts()["started"] == 2
    # The process dies: no close, no drain. Another starts on the same database.
    later = Clock()
    again = _service(tmp_path, later)
    counts = again.store.counts()
    assert (counts["queued"], counts["started"]) == (2, 0)  # its runners died with it: re-queued
    again.drain()
    later.t = 1000.0
    assert again.status().drained
    ended = Counter(job for _, job, _, _ in again.store.events("ended"))
    assert ended == {"a": 1, "b": 1} and len(again.store.events("requeued")) == 2
    again.close()


def _cli(args: list[str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "raycolloc.queue", *args],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class _Recorder:
    def __init__(self) -> None:
        self.values: dict[tuple[tuple[str, str], ...], float] = {}

    def set(self, value: float, tags: dict[str, str] | None = None) -> None:
        self.values[tuple(sorted((tags or {}).items()))] = value


def test_the_dashboard_gauges_show_the_jobs_per_state_and_each_gpu(tmp_path: Path) -> None:
    from raycolloc.queue.live import QueueGauges

    service = _service(tmp_path, Clock())
    for name in ("a", "b", "c"):
        service.submit(_job(name, samples=200_000))
    gauges = QueueGauges(_Recorder(), _Recorder(), _Recorder())
    gauges.publish(service.status())
    assert gauges.jobs.values[(("state", "started"),)] == 3.0 and gauges.jobs.values[(("state", "ended"),)] == 0.0
    assert sorted(gauges.gpu_jobs.values.values()) == [1.0, 2.0]  # three jobs on two GPUs
    assert all(0 < v <= 1 for v in gauges.gpu_sm_active.values.values())
    service.close()


def test_the_live_queue_moves_its_jobs_on_its_own_thread_with_no_command_called(tmp_path: Path) -> None:
    from raycolloc.queue.live import QueueGauges, Ticker

    clock = Clock()
    service = _service(tmp_path, clock)  # its database opened on this thread, ticked on the ticker's
    for name in ("a", "b"):
        service.submit(_job(name, samples=200_000))
    service.tick()  # both placed at 0 s
    lock = threading.Lock()
    gauges = QueueGauges(_Recorder(), _Recorder(), _Recorder())
    ticker = Ticker(service, lock, gauges)
    try:
        clock.t = 1000.0  # both jobs over by then: only a tick can see it, no command is called
        deadline = time.monotonic() + 60
        while gauges.jobs.values.get((("state", "ended"),)) != 2.0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gauges.jobs.values.get((("state", "ended"),)) == 2.0, gauges.jobs.values
    finally:
        ticker.stop()
    with lock:
        assert service.store.counts()["ended"] == 2
        service.close()


def test_a_new_service_on_a_drained_database_takes_jobs_again(tmp_path: Path) -> None:
    clock = Clock()
    first = _service(tmp_path, clock)
    first.submit(_job("a", samples=1_000))
    first.drain()
    clock.t = 1000.0
    assert first.status().drained
    first.close()
    again = _service(tmp_path, Clock())  # a new serve on the same database
    assert not again.status().draining
    assert again.submit(_job("b")) == "b"
    again.close()


@pytest.mark.slow
def test_a_serve_on_a_database_another_process_owns_exits_2_and_leaves_it(tmp_path: Path) -> None:
    db = tmp_path / "queue" / "live" / "queue.sqlite"
    hold = (
        "import sys; from raycolloc.queue.state import Store; Store(sys.argv[1]); print('owning', flush=True); input()"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", hold, str(db)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "owning"
        serve = _cli(["serve", f"out_dir={tmp_path}", "cluster=local", "cluster.num_gpus=2"])
        assert serve.returncode == 2 and "in use by another process" in serve.stderr, serve.stderr[-3000:]
        assert not (db.parent / "ray-address").exists()  # no live queue announced
    finally:
        owner.kill()
        owner.wait(30)


@pytest.mark.slow
def test_a_serve_on_a_queue_db_that_is_no_database_exits_2(tmp_path: Path) -> None:
    """Review item 6: the actor's constructor refuses it (not ActorDiedError), start_actor raises it by kind."""
    db = tmp_path / "text.sqlite"
    db.write_text("not a database\n" * 100)
    serve = _cli(["serve", f"out_dir={tmp_path}", "cluster=local", "cluster.num_gpus=2", f"queue.db={db}"])
    assert serve.returncode == 2 and f"queue.db={db}: not usable" in serve.stderr, serve.stderr[-3000:]
    assert "Traceback" not in serve.stderr and not (tmp_path / "ray-address").exists()


@pytest.mark.slow
def test_the_live_queue_works_in_separate_shells_under_rays_default_authentication(tmp_path: Path) -> None:
    """Issue 46, item 1: with Ray's default (no RAY_AUTH_MODE: a local instance starts with token
    authentication, its token in ~/.ray/auth_token), `submit` from a second shell exited 1 with
    InvalidAuthToken. Each command here is a process of its own, as in README; HOME is the test's,
    so the token Ray writes is too. Through the detached actor: a submission refused by its field, a
    cancel (once; again it exits 1), ``drain --wait``; the ended serve takes its address file with it,
    and one a killed serve left gets "no live queue" at once (issue 47, item 14: it waited 120 s on
    Ray's retries). (One serve for what two tests each started a Ray instance for.)"""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    env["HOME"] = str(tmp_path / "home")
    words = [f"out_dir={tmp_path / 'out'}", "cluster=local", "cluster.num_gpus=1", "queue.sim_speed=50"]

    def shell(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "raycolloc.queue", *args, *words],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    serve = subprocess.Popen(
        [sys.executable, "-m", "raycolloc.queue", "serve", *words],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        address = tmp_path / "out" / "queue" / "live" / "ray-address"
        # A user types in the second shell once serve says it serves: by then another process finds it.
        lines: list[str] = []
        serving = threading.Event()

        def read() -> None:  # every line serve prints, as it prints it
            assert serve.stdout is not None
            for line in serve.stdout:
                lines.append(line)
                if line.startswith("queue serving:"):
                    serving.set()
            serving.set()  # serve ended without saying it: the assertion below says what it printed

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        serving.wait(timeout=240)
        assert address.exists() and any(line.startswith("queue serving:") for line in lines), "".join(lines)
        served_at = address.read_text()
        assert (tmp_path / "home" / ".ray" / "auth_token").is_file()  # Ray's default: token authentication
        job = ["--job-id", "a1", "--model", "resnet18", "--dataset", "cifar10", "--samples", "2000"]
        submit = shell("submit", *job)
        assert submit.returncode == 0 and "queued a1" in submit.stdout, submit.stderr[-3000:]
        # Hours of simulated time: it cannot end before the cancel below.
        long = shell(
            "submit", "--job-id", "a", "--model", "resnet50", "--dataset", "imagenet64", "--samples", "200000000"
        )
        assert long.returncode == 0 and "queued a" in long.stdout, long.stderr[-2000:]
        bad = shell("submit", "--job-id", "b", "--model", "resnet50", "--dataset", "mnist", "--samples", "9")
        assert bad.returncode == 2 and "submission: dataset:" in bad.stderr, bad.stderr[-2000:]
        status = shell("status")
        assert status.returncode == 0 and "InvalidAuthToken" not in status.stderr, status.stderr[-3000:]
        assert "queued=" in status.stdout and " b " not in status.stdout, status.stdout
        # Each command prints its answer, not Ray's join (issue 46, item 7: two INFO lines per command).
        for said in (submit, status):
            assert "Connect" not in said.stdout + said.stderr, said.stdout + said.stderr
        cancel = shell("cancel", "a")
        assert cancel.returncode == 0 and "cancelled a" in cancel.stdout, cancel.stderr[-2000:]
        assert shell("cancel", "a").returncode == 1
        drain = shell("drain", "--wait")
        assert drain.returncode == 0 and "draining" in drain.stdout, drain.stderr[-3000:]
        serve.wait(timeout=180)
        reader.join(timeout=30)
        out = "".join(lines)
        assert serve.returncode == 0 and "1/2 jobs ended" in out, out[-3000:]
        # README's sample of serve's output has this run's form, numbers and paths aside: the line a user
        # waits for before typing in the other shell among them. (Not the summary's first line, which
        # names this run's cancel; nor a status line's "(draining)", which only a change after drain shows.)
        real = {_serve_form(line) for line in out.splitlines()}
        shown = [line for line in _sample("queue starting:") if "jobs ended" not in line]
        assert not [line for line in shown if _serve_form(line) not in real], out
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    assert not address.exists()
    address.write_text(served_at)
    start = time.monotonic()
    late = shell("submit", "--job-id", "c", "--model", "resnet50", "--dataset", "imagenet64", "--samples", "9")
    assert late.returncode == 1 and f"no live queue: nothing answers at {served_at}" in late.stderr, late.stderr
    assert time.monotonic() - start < 30


def _serve_form(line: str) -> str:
    """A line of serve's output as README's sample is compared with it: numbers as N (``_form``), the
    database's path as PATH, no "(draining)"."""
    return _form(re.sub(r"db=\S+", "db=PATH", line).replace(" (draining)", ""))
