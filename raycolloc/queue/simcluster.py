"""The simulated cluster of a replay: GPUs played by a truth (``queue.truth``), in virtual time.

Each GPU runs its jobs at the rates its :class:`~raycolloc.queue.truth.Truth` gives them together under
the GPU's mode — the advisor's model (``model``) or the measured corpus (``corpus``) — draws that
truth's power (idle when empty), and reports what a monitor would: memory in use and SM activity,
occupancy and DRAM activity as means over a rolling window. Nothing sleeps: :meth:`SimCluster.advance`
moves the clock to the next thing that happens. A job's true memory is the truth's (the model's: its
profile's times a factor within ``1 +- queue.sim_mem_error``, fixed per workload and seed; the
corpus's: the peak measured), and the monitor sees it per process once the job runs. A job that lands
where the true memory no longer fits runs out of memory ``queue.sim_oom_after_s`` after it starts, as
a training job does in its first steps. A job's process shows on its GPU ``queue.sim_startup_s`` after
it starts (its set-up: nothing runs on the GPU before, and the monitor sees neither its memory nor its
activity); the views say when the last placed job's process showed, and give the monitor's window as
1 s samples besides its means.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from raycolloc.advise.memory import MPS_SERVER_MIB
from raycolloc.advise.model import Gpu
from raycolloc.advise.profile import Profile
from raycolloc.config_groups import QueueConfig
from raycolloc.mode_kinds import mode_of
from raycolloc.queue.catalog import idle_power_w
from raycolloc.queue.core import JobStart, Report
from raycolloc.queue.policy import GpuView, Resident
from raycolloc.queue.truth import Truth

__all__ = ["MONITOR_WINDOW_S", "SimCluster", "TelemetryRow"]

MONITOR_WINDOW_S = 30.0  # the rolling window of the simulated monitor's activities
_DONE = 1e-6  # a job with this share of its samples left has ended (floating point of rate x time)


@dataclass(frozen=True)
class TelemetryRow:
    """One GPU from ``t`` on (until its next row)."""

    t: float
    gpu: str
    mode: str
    jobs: int
    sm_active: float
    power_w: float
    mem_used_mib: float


@dataclass
class _Run:
    job_id: str
    attempt: int
    profile: Profile
    estimate_mib: float
    true_mib: float
    max_slowdown: float
    samples: float
    left: float
    oom_at: float | None
    shows_at: float
    co: set[str] = field(default_factory=set)


@dataclass
class _Gpu:
    gpu_id: str
    idle_w: float
    mode: str | None = None
    runs: list[_Run] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    power_w: float = 0.0
    activity: tuple[float, float, float] = (0.0, 0.0, 0.0)
    history: deque[tuple[float, tuple[float, float, float]]] = field(default_factory=deque)
    last_t: float = 0.0
    last_placed_s: float | None = None
    last_shows_at: float | None = None
    node: int = 0
    down: bool = False


class SimCluster:
    """``nodes`` x ``gpus_per_node`` simulated GPUs of one model, from virtual time ``now``."""

    def __init__(self, nodes: int, gpus_per_node: int, gpu: Gpu, truth: Truth, queue: QueueConfig, now: float) -> None:
        self.gpu = gpu
        self.truth = truth
        self.oom_after_s = queue.sim_oom_after_s
        self.startup_s = queue.sim_startup_s
        self.energy_j = 0.0
        self.telemetry: list[TelemetryRow] = []
        self._gpus = [
            _Gpu(f"n{n}-g{g}", idle_power_w(gpu), last_t=now, node=n)
            for n in range(nodes)
            for g in range(gpus_per_node)
        ]
        self._by_id = {g.gpu_id: g for g in self._gpus}
        for g in self._gpus:
            self._refresh(g, now)

    # --- what the queue asks -----------------------------------------------------------------------
    def views(self, now: float) -> list[GpuView]:
        """Every GPU as a policy sees it at ``now``."""
        out = []
        for g in self._gpus:
            if g.down:
                continue
            sm, occ, dram = self._window(g, now)
            residents = tuple(
                Resident(r.job_id, r.profile, r.estimate_mib, r.max_slowdown, r.true_mib if r.shows_at <= now else None)
                for r in g.runs
            )
            shown = g.last_shows_at
            pending = shown is not None and shown > now
            out.append(
                GpuView(
                    g.gpu_id,
                    self.gpu.memory_mib,
                    g.mode,
                    residents,
                    self._mem_used(g, now),
                    sm,
                    occ,
                    dram,
                    g.last_placed_s,
                    shown_s=None if pending else shown,
                    pending=pending,
                    window=self._samples(g, now),
                )
            )
        return out

    def start(self, job: JobStart) -> None:
        """Start an attempt of a job on a GPU (the GPU's clock is at ``job.now``: the queue advanced it)."""
        g, profile, now = self._by_id[job.gpu_id], job.profile, job.now
        run = _Run(
            job.job_id,
            job.attempt,
            profile,
            job.estimate_mib,
            self.truth.true_mib(profile),  # the job's own memory, not the queue's estimate
            job.max_slowdown,
            job.samples,
            job.samples,
            None,
            now + self.startup_s,
        )
        g.mode = job.mode
        g.runs.append(run)
        if self._mem_used(g) > self.gpu.memory_mib - self.gpu.base_mib:
            run.oom_at = run.shows_at + self.oom_after_s  # it allocates past what is left: an OOM in its first steps
        for other in g.runs:
            if other is not run:
                other.co.add(job.job_id)
                run.co.add(other.job_id)
        g.last_placed_s, g.last_shows_at = now, run.shows_at
        self._refresh(g, now)

    def next_event(self) -> float | None:
        """The time of the next end or OOM on any GPU (None: nothing runs)."""
        times = [t for g in self._gpus for t in self._events(g)]
        return min(times) if times else None

    def advance(self, to: float) -> list[Report]:
        """Move every GPU's clock to ``to``; the ends and OOMs due by then, in time order."""
        reports: list[Report] = []
        for g in self._gpus:
            while True:
                due = [t for t in self._events(g) if t <= to + 1e-9]
                t = min(due) if due else to
                self._run_until(g, t)
                if not due:
                    break
                reports += self._settle(g, t)
        return sorted(reports, key=lambda r: (r.t, r.job_id))

    def lose_node(self, node: int, now: float) -> list[Report]:
        """Node ``node`` is gone at ``now``: its jobs are ``lost`` and its GPUs leave the cluster."""
        reports = []
        for g in self._gpus:
            if g.node == node and not g.down:
                self._run_until(g, now)
                reports += [Report(r.job_id, r.attempt, "lost", now, tuple(sorted(r.co))) for r in g.runs]
                g.runs, g.mode, g.down = [], None, True
                self._refresh(g, now)
                g.power_w = 0.0  # a lost node draws nothing the run can count
        return reports

    def stop(self, job_id: str, now: float) -> None:
        """Stop a job where it runs (a cancel): its GPU's others go on without it from ``now``."""
        for g in self._gpus:
            if any(r.job_id == job_id for r in g.runs):
                self._run_until(g, now)
                g.runs = [r for r in g.runs if r.job_id != job_id]
                g.mode = g.mode if g.runs else None
                self._refresh(g, now)

    def close(self) -> None:
        """Nothing to give back: the simulated GPUs are this object's."""

    def running(self) -> frozenset[tuple[str, int]]:
        return frozenset((r.job_id, r.attempt) for g in self._gpus for r in g.runs)

    # --- the truth ---------------------------------------------------------------------------------
    def _events(self, g: _Gpu) -> list[float]:
        out = []
        for run, rate in zip(g.runs, g.rates, strict=True):
            out.append(g.last_t + max(0.0, run.left) / rate if rate > 0 else float("inf"))
            if run.shows_at > g.last_t:
                out.append(run.shows_at)  # its process shows: it starts to train
            if run.oom_at is not None:
                out.append(run.oom_at)
        return out

    def _run_until(self, g: _Gpu, t: float) -> None:
        dt = t - g.last_t
        if dt > 0:
            for run, rate in zip(g.runs, g.rates, strict=True):
                run.left -= rate * dt
            self.energy_j += g.power_w * dt
        g.last_t = max(g.last_t, t)

    def _settle(self, g: _Gpu, t: float) -> list[Report]:
        """Take off ``g`` the jobs that ended or ran out of memory by ``t``."""
        out, kept = [], []
        for run in g.runs:
            if run.oom_at is not None and run.oom_at <= t + 1e-9:
                out.append(Report(run.job_id, run.attempt, "oom", t, tuple(sorted(run.co))))
            elif run.left <= _DONE * run.samples:
                out.append(Report(run.job_id, run.attempt, "ended", t, tuple(sorted(run.co))))
            else:
                kept.append(run)
        g.runs = kept
        if not kept:
            g.mode = None
        self._refresh(g, t)
        return out

    def _refresh(self, g: _Gpu, t: float) -> None:
        """The GPU's rates, power and activity after its jobs changed or showed (the truth's, over the
        jobs whose process shows)."""
        shown = [r for r in g.runs if r.shows_at <= t + 1e-9]
        if shown:
            play = self.truth.play(str(g.mode), [r.profile for r in shown])
            rate = {id(r): x for r, x in zip(shown, play.rates, strict=True)}
            g.rates = [rate.get(id(r), 0.0) for r in g.runs]
            g.power_w = play.power_w if play.power_w is not None else g.idle_w
            g.activity = (play.sm_active, play.sm_occupancy, play.dram_active)
        else:
            g.rates, g.power_w, g.activity = [0.0] * len(g.runs), g.idle_w, (0.0, 0.0, 0.0)
        g.history.append((t, g.activity))
        while len(g.history) > 1 and g.history[1][0] <= t - MONITOR_WINDOW_S:
            g.history.popleft()
        mode = g.mode or "-"
        row = TelemetryRow(t, g.gpu_id, mode, len(g.runs), g.activity[0], g.power_w, self._mem_used(g, t))
        self.telemetry.append(row)

    def _mem_used(self, g: _Gpu, now: float | None = None) -> float:
        """Memory in use: every job's (None) or, as the monitor sees it at ``now``, the jobs' that show."""
        daemon = g.mode is not None and mode_of(g.mode).needs_daemon
        server = MPS_SERVER_MIB / 2 if daemon and g.runs else 0.0  # the model's expected MPS server
        runs = g.runs if now is None else [r for r in g.runs if r.shows_at <= now + 1e-9]
        return self.gpu.base_mib + server + sum(r.true_mib for r in runs)

    @staticmethod
    def _samples(g: _Gpu, now: float) -> tuple[tuple[float, float, float], ...]:
        """The monitor's window as its 1 s samples, oldest first (each the activity in force then)."""
        points, out, k = list(g.history), [], 0
        for i in range(int(MONITOR_WINDOW_S)):
            at = now - MONITOR_WINDOW_S + i + 1
            while k + 1 < len(points) and points[k + 1][0] <= at:
                k += 1
            out.append(points[k][1] if points else (0.0, 0.0, 0.0))
        return tuple(out)

    @staticmethod
    def _window(g: _Gpu, now: float) -> tuple[float, float, float]:
        """Mean activities over the last ``MONITOR_WINDOW_S`` (piecewise constant between changes)."""
        start = now - MONITOR_WINDOW_S
        total = [0.0, 0.0, 0.0]
        points = list(g.history)
        span = 0.0
        for k, (t, act) in enumerate(points):
            end = points[k + 1][0] if k + 1 < len(points) else now
            lo = max(t, start)
            if end > lo:
                span += end - lo
                total = [a + v * (end - lo) for a, v in zip(total, act, strict=True)]
        if span <= 0:
            return points[-1][1] if points else (0.0, 0.0, 0.0)
        return (total[0] / span, total[1] / span, total[2] / span)
