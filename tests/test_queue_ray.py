"""The queue on a Ray cluster's GPUs (``queue.runner=ray``, issue 33): a trace replayed in wall-clock
time through the sweeps' lease, steward and trainer code on the session's simulated GPUs. Every job
ends exactly once, the raycolloc policy co-locates, an injected OOM is re-queued and counted, and
nothing is left (MPS daemons, leases); bad keys are refused by name before Ray is touched."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from raycolloc.queue.__main__ import main
from raycolloc.queue.core import JobStart, Report
from raycolloc.queue.policy import GpuView
from raycolloc.queue.rayrunners import measured
from raycolloc.queue.settings import compose_settings
from raycolloc.results.rows import EpochRow
from raycolloc.spec import JobInfo, JobState

from .conftest import short_tmp

LIGHT = ("resnet18", "resnet26", "mobilenetv3_large_100")


@pytest.fixture
def pipe_root() -> Path:
    """A short ``mode.pipe_root`` (an MPS pipe path has ~100 characters). Kept after the test: the
    session's steward, started by the first test that uses one, keeps its fork server's socket there."""
    return short_tmp("rcq")


def _trace(path: Path, jobs: int = 6, samples: int = 256) -> Path:
    lines = ["job_id,submit_s,kind,model,dataset,samples"]
    lines += [f"j{i},{0.3 * i:.1f},timm,{LIGHT[i % 3]},cifar10,{samples}" for i in range(1, jobs + 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _epoch(peak: float | None, rate: float | None) -> EpochRow:
    none: dict[str, object] = dict.fromkeys(("windows", "rate_low", "rate_high", "rate_cv", "rate_median", "steps"))
    none.update(dict.fromkeys(("loss", "thread_cpu_s")), window_steps=[], window_s=[])
    none.update(dict.fromkeys(("thread_sys_s", "minor_faults", "involuntary_switches", "voluntary_switches")))
    return EpochRow(
        "c", 0, 1, False, 0.0, 1.0, 1.0, 64, rate, **none, peak_mem_allocated_mib=None, peak_mem_reserved_mib=peak
    )


def test_an_attempt_reports_its_largest_memory_peak_and_its_last_rate() -> None:
    a = JobState(epochs=[_epoch(300.0, 90.0), _epoch(350.0, 100.0)])
    b = JobState(info=JobInfo(nvml_mem_mib=420.0))
    assert measured([a, b]) == (420.0, 100.0)
    assert measured([JobState()]) == (None, None)


def test_a_bad_runner_or_oom_job_is_refused_by_name_before_ray(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trace = _trace(tmp_path / "t.csv")
    assert main(["replay", str(trace), "queue.runner=gpu", f"out_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "queue.runner" in err and "sim" in err and "ray" in err
    words = ["queue.runner=ray", "queue.inject_oom=[nope]", "cluster=local", f"out_dir={tmp_path}"]
    assert main(["replay", str(trace), *words]) == 2
    assert "queue.inject_oom: 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "queue").exists()  # nothing queued, no database


def test_each_attempt_is_a_cell_of_one_job_of_its_length_and_only_a_first_attempt_is_made_to_oom(
    tmp_path: Path,
) -> None:
    from raycolloc.config import ConfigError
    from raycolloc.queue.rayjobs import check_ray_config
    from raycolloc.queue.trace import read_trace

    words = ["cluster=local", "queue.runner=ray", "queue.stand_in=tiny_cnn", "queue.inject_oom=[j2]"]
    jobs = read_trace(_trace(tmp_path / "t.csv", jobs=2))
    maker = check_ray_config(compose_settings(words).config, jobs)
    a, b = maker.cell(jobs[0], 1, "mps", 256), maker.cell(jobs[1], 1, "naive", 1000)
    assert (a.cell_id, a.degree, a.mode, a.jobs[0].cell_id) == ("queue-j1-1", 1, "mps", "queue-j1-1")
    assert not a.config.mode.keep_daemon  # the mode stops the daemon when the GPU's last job leaves
    assert not a.config.cluster.isolate_measurement  # a queued job measures beside the others
    assert (a.jobs[0].epochs, a.jobs[0].epoch_samples, b.jobs[0].epoch_samples) == (2, 128, 500)
    assert a.jobs[0].trainer.fault is None and b.jobs[0].trainer.fault == "oom"
    assert maker.cell(jobs[1], 2, "naive", 1000).jobs[0].trainer.fault is None  # the re-queued attempt runs
    with pytest.raises(ConfigError, match="fewer than two batches"):
        maker.cell(jobs[0], 1, "mps", 40)


def test_the_runner_key_defaults_to_the_simulated_cluster() -> None:
    assert compose_settings([]).config.queue.runner == "sim"


class _FailingRunners:
    """Runners on which every attempt fails (not out of memory), as a job that cannot build would."""

    def __init__(self) -> None:
        self.failures: Counter[str] = Counter()
        self.reports: list[Report] = []
        self.attempts: list[tuple[str, int]] = []

    def views(self, now: float) -> list[GpuView]:
        return [GpuView("g0", 81_559.0, None, (), 0.0, 0.0, 0.0, 0.0, None)]

    def start(self, job: JobStart) -> None:
        self.attempts.append((job.job_id, job.attempt))
        self.failures[job.job_id] += 1
        self.reports.append(Report(job.job_id, job.attempt, "lost", 0.0, ()))

    def running(self) -> frozenset[tuple[str, int]]:
        return frozenset()

    def poll(self, now: float) -> list[Report]:
        out, self.reports = self.reports, []
        return out


def _failing_queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, _FailingRunners, Any]:
    """One job whose every attempt is lost, queued under ``exclusive``, and the loop's tick at 0 s."""
    from raycolloc.queue import rayreplay
    from raycolloc.queue.catalog import catalog_profile, sim_params
    from raycolloc.queue.core import Queue
    from raycolloc.queue.policies import create_policy
    from raycolloc.queue.policy import Predictor
    from raycolloc.queue.state import Store
    from raycolloc.queue.trace import read_trace

    monkeypatch.setattr(rayreplay, "TICK_S", 0.0)
    settings = compose_settings(["queue.policy=exclusive"])
    gpu, jobs = settings.gpu, read_trace(_trace(tmp_path / "one.csv", jobs=1))
    profile = catalog_profile(jobs[0].workload, gpu)
    store = Store(tmp_path / "q.sqlite")
    store.add(jobs, [profile.job_mem_mib], 0.0)
    runners = _FailingRunners()
    policy = create_policy(settings.config.queue, gpu, Predictor(gpu, sim_params(gpu)))
    return Queue(store, policy, runners, settings.config.queue, gpu, lambda j: profile), runners, store


def test_a_job_that_keeps_failing_is_cancelled_after_max_failures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from raycolloc.queue import rayreplay

    queue, runners, store = _failing_queue(tmp_path, monkeypatch)
    clock = iter(float(t) for t in range(1000))
    rayreplay._loop(queue, runners, store, lambda: next(clock))
    try:
        assert store.counts()["cancelled"] == 1
        assert runners.attempts == [("j1", a) for a in range(1, rayreplay.MAX_FAILURES + 1)]
    finally:
        store.close()


def test_the_loop_saves_what_it_must_keep_every_save_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from raycolloc.queue import rayreplay

    queue, runners, store = _failing_queue(tmp_path, monkeypatch)
    clock = iter(2.0 * t for t in range(1000))  # 2 s per look
    times: list[float] = []
    now = {"t": 0.0}

    def tick() -> float:
        now["t"] = next(clock)
        return now["t"]

    try:
        rayreplay._loop(queue, runners, store, tick, lambda: times.append(now["t"]))
    finally:
        store.close()
    assert times and all(b - a >= rayreplay.SAVE_S for a, b in zip([0.0, *times], times, strict=False))
    assert times[0] == 6.0  # the first look at or past 5 s after the start


@pytest.mark.slow
def test_a_trace_on_simulated_gpus_through_ray_ends_every_job_once_and_leaves_nothing(
    tmp_path: Path, ray_local: None, pipe_root: Path
) -> None:
    import ray
    from ray.util.placement_group import placement_group_table

    from raycolloc.node.modes.mps import find_control_daemons
    from raycolloc.queue.rayreplay import replay_ray

    words = [
        "cluster=local",
        "cluster.num_gpus=2",
        f"mode.pipe_root={pipe_root}",
        "queue.runner=ray",
        "queue.policy=raycolloc",
        "queue.stand_in=tiny_cnn",
        "queue.inject_oom=[j2]",
        f"out_dir={tmp_path}",
    ]
    outcome = replay_ray(_trace(tmp_path / "six.csv"), compose_settings(words))
    import pandas as pd

    jobs = pd.read_parquet(outcome.jobs_file)
    assert sorted(jobs.job_id) == [f"j{i}" for i in range(1, 7)] and set(jobs.state) == {"ended"}
    from raycolloc.queue.state import Store

    store = Store(outcome.directory / "queue.sqlite")
    try:
        ends = Counter(job for _, job, kind, _ in store.events() if kind == "ended")
        ooms = [(job, attempt) for _, job, kind, attempt in store.events("oom")]
    finally:
        store.close()
    assert ends == Counter({f"j{i}": 1 for i in range(1, 7)})  # every job ended exactly once
    assert ooms == [("j2", 1)]  # the injected OOM, on the first attempt only
    j2 = jobs.set_index("job_id").loc["j2"]
    assert j2.ooms == 1 and j2.requeues == 1
    assert (jobs.co_residents.fillna("") != "").any()  # the raycolloc policy put jobs together
    summary = json.loads((outcome.directory / "summary.json").read_text())
    assert summary["ooms"] == 1 and summary["complete"] and summary["makespan_s"] > 0 and summary["energy_j"] > 0
    assert (outcome.directory / "gpus.parquet").exists()
    attempts = pd.read_parquet(outcome.directory / "attempts.parquet")
    assert len(attempts) == 7 and Counter(attempts.outcome) == Counter({"ended": 6, "oom": 1})
    ended = attempts[attempts.outcome == "ended"]
    assert (ended.samples_per_s > 0).all()  # measured by the trainers
    assert "mem_peak_mib" in attempts  # PyTorch's or NVML's peak: None on simulated GPUs (no CUDA, no NVML)
    # Nothing left: no MPS daemon of ours, no GPU directory, every queue lease removed.
    assert not [d for d in find_control_daemons() if str(d["pipe_dir"]).startswith(str(pipe_root))]
    assert not [p for p in pipe_root.glob("GPU-*")]
    groups = [g for g in placement_group_table().values() if str(g.get("name", "")).startswith("raycolloc:queue")]
    assert groups and all(g["state"] == "REMOVED" for g in groups)
    # Ray frees a removed group's resources a moment later (its resource view is eventually consistent).
    deadline = time.monotonic() + 30
    while ray.available_resources().get("GPU", 0) != ray.cluster_resources().get("GPU") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("GPU", 0) == ray.cluster_resources().get("GPU")


@pytest.mark.slow
def test_an_interrupted_ray_replay_releases_everything_and_resumes_with_no_job_lost_or_repeated(
    tmp_path: Path, ray_local: None, monkeypatch: pytest.MonkeyPatch, pipe_root: Path
) -> None:
    from ray.util.placement_group import placement_group_table

    from raycolloc.node.modes.mps import find_control_daemons
    from raycolloc.queue import rayrunners
    from raycolloc.queue.rayreplay import replay_ray
    from raycolloc.queue.report import format_summary
    from raycolloc.queue.state import Store

    words = ["cluster=local", "cluster.num_gpus=2", f"mode.pipe_root={pipe_root}", "queue.runner=ray"]
    words += ["queue.stand_in=tiny_cnn", f"out_dir={tmp_path}"]
    trace = _trace(tmp_path / "four.csv", jobs=4)
    poll = rayrunners.RayRunners.poll

    def interrupted(self: rayrunners.RayRunners, now: float) -> list:
        if len(self.running()) >= 2 and self.energy_j > 0:  # once the GPUs have drawn something
            raise KeyboardInterrupt  # Ctrl-C while jobs train (under MPS: a daemon is up)
        return poll(self, now)

    monkeypatch.setattr(rayrunners.RayRunners, "poll", interrupted)
    with pytest.raises(KeyboardInterrupt):
        replay_ray(trace, compose_settings(words))
    assert not [d for d in find_control_daemons() if str(d["pipe_dir"]).startswith(str(pipe_root))]
    assert not list(pipe_root.glob("GPU-*"))
    assert all(g["state"] == "REMOVED" for g in placement_group_table().values())
    (db,) = tmp_path.glob("queue/*/queue.sqlite")
    store = Store(db)
    try:  # the interrupted session kept what the GPUs drew, for the resume to add to
        first_energy = store.meta("energy_j")
        assert first_energy is not None and float(first_energy) > 0 and store.meta("sessions") == "1"
    finally:
        store.close()
    monkeypatch.setattr(rayrunners.RayRunners, "poll", poll)
    outcome = replay_ray(trace, compose_settings(words))  # the same command again: resumed
    assert outcome.summary.complete and outcome.summary.ended == 4
    assert outcome.summary.sessions == 2 and (outcome.summary.energy_j or 0.0) > float(first_energy)
    assert "resumed: 2 sessions" in format_summary(outcome.summary)
    store = Store(outcome.directory / "queue.sqlite")
    try:
        ends = Counter(job for _, job, kind, _ in store.events() if kind == "ended")
        requeued = {job for _, job, kind, _ in store.events("requeued")}
    finally:
        store.close()
    assert ends == Counter({f"j{i}": 1 for i in range(1, 5)}) and len(requeued) >= 2


@pytest.mark.slow
def test_sigterm_on_the_command_releases_every_gpu_and_exits_143(tmp_path: Path, pipe_root: Path) -> None:
    import signal
    import subprocess
    import sys

    from ray.util.placement_group import placement_group_table

    from raycolloc.node.modes.mps import find_control_daemons

    from .conftest import ROOT, load, session_ray, sim_backend

    trace = _trace(tmp_path / "long.csv", jobs=4, samples=200_000)  # still training when the signal lands
    words = ["cluster=local", f"cluster.address={session_ray()}", "cluster.num_gpus=2", f"mode.pipe_root={pipe_root}"]
    words += ["queue.runner=ray", "queue.stand_in=tiny_cnn", f"out_dir={tmp_path}"]
    gpus = sim_backend(load(["cluster.num_gpus=2"]))  # the session's simulated GPUs, where the replay trains
    proc = subprocess.Popen(
        [sys.executable, "-m", "raycolloc.queue", "replay", str(trace), *words],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "mps=started" in line or "queue leased" in line:
                break
        # Jobs placed and training: a process on a simulated GPU (not a fixed pause, which a loaded
        # machine can outlast before the first job starts). Its output read meanwhile (a full pipe would
        # stop it).
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
        reader.start()
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if any(gpus.processes(g.uuid) for g in gpus.gpus()):
                break
            time.sleep(0.2)
        assert any(gpus.processes(g.uuid) for g in gpus.gpus()), "no job trained before the signal"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        reader.join(timeout=30)
        out = "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, out[-3000:]
    assert "GPUs released" in out
    assert not [d for d in find_control_daemons() if str(d["pipe_dir"]).startswith(str(pipe_root))]
    groups = [g for g in placement_group_table().values() if str(g.get("name", "")).startswith("raycolloc:queue")]
    assert groups and all(g["state"] == "REMOVED" for g in groups)


def test_a_gpu_with_a_full_pool_shows_itself_full_and_sends_a_job_placed_past_it_back(tmp_path: Path) -> None:
    import threading

    from raycolloc.devices import GpuInfo
    from raycolloc.driver.lane import Lane
    from raycolloc.driver.side_by_side import MeasureWindows
    from raycolloc.queue.catalog import catalog_profile, sim_params
    from raycolloc.queue.policy import Predictor
    from raycolloc.queue.raylanes import POOL_SIZE, QueueLane
    from raycolloc.queue.rayrunners import RayRunners, _Run

    settings = compose_settings(["cluster=local"])
    gpu = settings.gpu
    profile = catalog_profile("resnet18/cifar10", gpu)
    info = GpuInfo(0, "GPU-x", gpu.name, int(gpu.memory_mib), None, False, False, "0", "sim", "")
    held = Lane(None, "n", None, info, None, threading.Event(), None, None, MeasureWindows())  # no Ray: never asked
    lane = QueueLane("n-g0", held, mode="mps", sampled_at=0.0)
    runners = RayRunners([lane], None, {}, Predictor(gpu, sim_params(gpu)))
    full = [_Run(f"r{i}", 1, None, profile, 1000.0, 2.0, "mps", 0.0) for i in range(POOL_SIZE)]
    runners._runs["n-g0"] = full
    (view,) = runners.views(0.5)
    assert view.mem_used_mib == view.memory_mib  # no policy places more there
    runners.start(JobStart("late", 1, profile, 1000.0, 2.0, 256.0, "n-g0", "mps", 0.5))
    assert ("late", 1) not in runners.running() and not runners.failures  # back to the queue, not a failure
    assert [(r.job_id, r.kind) for r in runners._pending] == [("late", "lost")]


def test_a_queued_job_on_a_real_gpu_trains_its_length_with_no_floor(tmp_path: Path) -> None:
    import dataclasses

    from raycolloc.queue.rayjobs import CellMaker
    from raycolloc.queue.trace import read_trace

    config = compose_settings(["cluster=local", "queue.runner=ray"]).config
    assert config.min_epoch_s == "auto"  # a sweep's cell on a real GPU would have a 5 s floor
    real = dataclasses.replace(config, cluster=dataclasses.replace(config.cluster, backend="nvml"))
    (job,) = read_trace(_trace(tmp_path / "t.csv", jobs=1))
    spec = CellMaker(real).cell(job, 1, "naive", 2560).jobs[0]
    assert spec.min_epoch_s is None and spec.epoch_floor_s(2) == 0.0


@pytest.mark.slow
def test_a_queued_job_that_hangs_is_ended_by_the_stall_watch_and_its_gpu_mate_ends(
    tmp_path: Path, ray_local: None, pipe_root: Path
) -> None:
    """A queued job lives the sweeps' life of a job on a GPU: silent past ``trainer.stall_timeout_s`` it is
    ``hang``, its attempt lost (not waited on for ever), while the job beside it on the GPU ends and the
    GPU's MPS daemon goes with the last of them."""
    import dataclasses

    from raycolloc.node.modes.mps import find_control_daemons
    from raycolloc.queue.catalog import catalog_profile, sim_params
    from raycolloc.queue.policy import Predictor
    from raycolloc.queue.rayjobs import CellMaker, check_ray_config
    from raycolloc.queue.raylanes import open_lanes
    from raycolloc.queue.rayrunners import RayRunners
    from raycolloc.queue.trace import TraceJob, read_trace
    from raycolloc.spec import CellSpec

    class Hanging(CellMaker):
        """The real cells, with job j1's training process hanging half-way through its measured epoch."""

        def cell(self, job: TraceJob, attempt: int, mode: str, samples: int) -> CellSpec:
            cell = super().cell(job, attempt, mode, samples)
            if job.job_id != "j1":
                return cell
            trainer = dataclasses.replace(cell.config.trainer, fault="hang", fault_job=0, fault_epoch=2)
            jobs = tuple(dataclasses.replace(j, trainer=trainer) for j in cell.jobs)
            return dataclasses.replace(cell, config=dataclasses.replace(cell.config, trainer=trainer), jobs=jobs)

    words = ["cluster=local", "cluster.num_gpus=2", f"mode.pipe_root={pipe_root}", "queue.runner=ray"]
    words += ["queue.stand_in=tiny_cnn", "trainer.stall_timeout_s=5", f"out_dir={tmp_path}"]
    settings = compose_settings(words)
    jobs = read_trace(_trace(tmp_path / "two.csv", jobs=2, samples=2048))
    maker = Hanging(check_ray_config(settings.config, jobs).config)
    predictor = Predictor(settings.gpu, sim_params(settings.gpu))
    profile = catalog_profile(jobs[0].workload, settings.gpu)
    runners = RayRunners(open_lanes(maker.config), maker, {j.job_id: j for j in jobs}, predictor)
    reports: list[Report] = []
    t0 = time.monotonic()
    try:
        gpu_id = next(iter(runners.lanes))
        for job in jobs:  # both on one GPU, under MPS
            runners.start(JobStart(job.job_id, 1, profile, 500.0, 2.0, 2048.0, gpu_id, "mps", 0.0))
        assert runners.running() == {("j1", 1), ("j2", 1)}  # start returned at once: both live on
        while len(reports) < 2 and time.monotonic() - t0 < 150:
            reports += runners.poll(time.monotonic() - t0)
            time.sleep(0.5)
    finally:
        runners.close()
    assert {r.job_id: r.kind for r in reports} == {"j1": "lost", "j2": "ended"}
    assert runners.failures == Counter({"j1": 1})  # a failure the loop counts toward cancelling the job
    rows = {row.job_id: row for row in runners.attempts}
    assert rows["j1"].error is not None and "hang: no progress for" in rows["j1"].error, rows["j1"].error
    assert rows["j2"].error is None and (rows["j2"].samples_per_s or 0) > 0 and rows["j2"].co_residents == "j1"
    assert not [d for d in find_control_daemons() if str(d["pipe_dir"]).startswith(str(pipe_root))]
    assert not list(pipe_root.glob("GPU-*"))
