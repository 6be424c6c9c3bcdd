"""A queue's results: one row per job (written as Parquet), and the summary printed at the end.

Per job: when it arrived, first started, started its last attempt and ended; its JCT (end - submit),
queueing delay (the JCT less its last attempt's run: waiting, and attempts lost to OOMs or restarts),
slowdown against running alone (its last run over its length at its rate alone), the GPU, mode and
co-residents of its last attempt, its OOMs and re-queues. The summary: jobs ended and cancelled
(a run is ``complete`` only when every job ended: a cancelled one did not), makespan (first arrival to
last end), mean and 95th-percentile JCT, GPU energy (every GPU, idle ones included, over the run),
OOMs, the slowest job's slowdown and how many jobs passed their bound; where the GPUs' telemetry is at
hand (a simulated replay), their SM activity over the makespan (CARMA's headline metric): its mean over
GPUs and time, the 10th/50th/90th percentiles over time of the GPUs' mean, and that mean over each tenth
of the makespan.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from raycolloc.queue.state import JobRecord
from raycolloc.queue.trace import TraceJob

__all__ = [
    "JobRow",
    "SmActivity",
    "SmRow",
    "Summary",
    "format_policies",
    "format_summary",
    "job_rows",
    "sm_activity",
    "summarise",
    "write_parquet",
    "write_summary",
]


@dataclass(frozen=True)
class JobRow:
    """One job of a queue run (the columns of ``jobs.parquet``)."""

    policy: str
    job_id: str
    workload: str
    state: str
    submit_s: float
    first_start_s: float | None
    start_s: float | None
    end_s: float | None
    jct_s: float | None
    queue_delay_s: float | None
    run_s: float | None
    alone_s: float | None
    slowdown: float | None
    max_slowdown: float
    gpu: str | None
    mode: str | None
    co_residents: str
    ooms: int
    requeues: int
    # Real GPUs: the job's rate alone over its measured training rate (its last epoch's), start-up left
    # out on both sides; None where no rate was measured (simulated cluster, a resumed run's earlier
    # attempt). Where set, a job's bound is judged on it: the advisor predicts rates, not start-ups.
    speed_slowdown: float | None = None
    truth: str = "model"  # what played the GPUs (queue.truth); real GPUs: "model" names no model here

    @property
    def judged_slowdown(self) -> float | None:
        return self.speed_slowdown if self.speed_slowdown is not None else self.slowdown


@dataclass(frozen=True)
class Summary:
    """A queue run in a few numbers (``summary.json``)."""

    policy: str
    jobs: int
    ended: int
    complete: bool
    makespan_s: float | None
    jct_mean_s: float | None
    jct_p95_s: float | None
    energy_j: float | None
    ooms: int
    requeues: int
    max_slowdown: float | None
    over_bound: int
    wall_s: float
    cancelled: int = 0  # last, with a default: a summary.json written before it still loads
    profiles: str = "catalog"  # the jobs' profiles alone: the catalogue's, or measured on the cluster
    sessions: int = 1  # processes that ran it: more than 1 where it was interrupted and resumed
    gpus: str = ""  # the GPUs it ran on, their UUIDs sorted (the last session's); "" simulated, or unknown
    ends_lost: int = 0  # jobs that had ended and ran again: the database lost their end with its WAL (ledger)
    truth: str = "model"  # what played the simulated GPUs (queue.truth): the advisor's model, or the corpus
    # SM activity (0..1) over the makespan, every GPU counted (SmActivity); None where no telemetry was at hand.
    sm_active_mean: float | None = None
    sm_active_p10: float | None = None
    sm_active_p50: float | None = None
    sm_active_p90: float | None = None
    sm_series: tuple[float, ...] = ()


class SmRow(Protocol):
    """A GPU's SM activity from ``t`` on (until its next row): what :func:`sm_activity` reads."""

    @property
    def t(self) -> float: ...

    @property
    def gpu(self) -> str: ...

    @property
    def sm_active(self) -> float: ...


@dataclass(frozen=True)
class SmActivity:
    """The GPUs' SM activity over a span: the mean over GPUs and time; percentiles over time of the mean
    over GPUs (time-weighted); and that mean over each of ``len(series)`` equal parts of the span."""

    mean: float
    p10: float
    p50: float
    p90: float
    series: tuple[float, ...]


def sm_activity(rows: Sequence[SmRow], start: float, end: float, parts: int = 10) -> SmActivity | None:
    """The SM activity of every GPU in ``rows`` (piecewise constant, 0 before a GPU's first row) from
    ``start`` to ``end``; None where the span is empty or there are no rows."""
    if end <= start or not rows:
        return None
    current = {r.gpu: 0.0 for r in rows}
    segments: list[tuple[float, float, float]] = []  # (from, to, mean over GPUs)
    at = start
    for r in sorted(rows, key=lambda r: r.t):  # stable: rows of one instant keep their order, the last holds
        upto = min(max(r.t, start), end)
        if upto > at:
            segments.append((at, upto, sum(current.values()) / len(current)))
            at = upto
        current[r.gpu] = r.sm_active
    if end > at:
        segments.append((at, end, sum(current.values()) / len(current)))
    span = end - start
    width = span / parts
    series = tuple(
        sum(v * max(0.0, min(b, lo + width) - max(a, lo)) for a, b, v in segments) / width
        for lo in (start + k * width for k in range(parts))
    )
    return SmActivity(
        mean=sum(v * (b - a) for a, b, v in segments) / span,
        p10=_time_quantile(segments, 0.10),
        p50=_time_quantile(segments, 0.50),
        p90=_time_quantile(segments, 0.90),
        series=series,
    )


def _time_quantile(segments: Sequence[tuple[float, float, float]], q: float) -> float:
    """The value the GPUs' mean is at or below for ``q`` of the time."""
    ordered = sorted(segments, key=lambda s: s[2])
    total = sum(b - a for a, b, _ in ordered)
    seen = 0.0
    for a, b, v in ordered:
        seen += b - a
        if seen >= q * total - 1e-12:
            return v
    return ordered[-1][2]


def job_rows(
    policy: str,
    records: Sequence[JobRecord],
    alone_s: Callable[[TraceJob], float | None],
    default_bound: float,
    speed: Callable[[TraceJob], float | None] | None = None,
    truth: str = "model",
) -> list[JobRow]:
    """The rows of ``records``; ``alone_s`` gives a job's length in seconds alone on its GPU model,
    ``speed`` (real GPUs) its rate alone over its measured rate (``JobRow.speed_slowdown``)."""
    rows = []
    for r in records:
        ended = r.state == "ended" and r.end_s is not None and r.start_s is not None
        jct = r.end_s - r.job.submit_s if ended and r.end_s is not None else None
        run = r.end_s - r.start_s if ended and r.end_s is not None and r.start_s is not None else None
        alone = alone_s(r.job)
        rows.append(
            JobRow(
                policy=policy,
                job_id=r.job.job_id,
                workload=r.job.workload,
                state=r.state,
                submit_s=r.job.submit_s,
                first_start_s=r.first_start_s,
                start_s=r.start_s,
                end_s=r.end_s,
                jct_s=jct,
                queue_delay_s=jct - run if jct is not None and run is not None else None,
                run_s=run,
                alone_s=alone,
                slowdown=run / alone if run is not None and alone else None,
                max_slowdown=r.job.max_slowdown or default_bound,
                gpu=r.gpu,
                mode=r.mode,
                co_residents=",".join(r.co_residents),
                ooms=r.ooms,
                requeues=r.requeues,
                speed_slowdown=speed(r.job) if speed is not None and ended else None,
                truth=truth,
            )
        )
    return rows


def _p95(values: Sequence[float]) -> float | None:
    """The 95th percentile, linear between order statistics (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    k = 0.95 * (len(ordered) - 1)
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarise(
    policy: str,
    rows: Sequence[JobRow],
    energy_j: float | None,
    wall_s: float,
    profiles: str = "catalog",
    sessions: int = 1,
    gpus: str = "",
    ends_lost: int = 0,
    truth: str = "model",
    telemetry: Sequence[SmRow] = (),
) -> Summary:
    """The summary of a run's rows; ``profiles``: where the jobs' profiles alone came from;
    ``sessions``: the processes that ran it (a resumed run: wall time is the last one's); ``gpus``:
    the GPUs' UUIDs, sorted and comma-separated (what a comparison matches runs by); ``ends_lost``: jobs
    that ran again because the database lost their end (:meth:`~raycolloc.queue.state.Store.ends_lost`);
    ``telemetry``: the GPUs' SM activity rows, summarised over the makespan (:func:`sm_activity`)."""
    done = [r for r in rows if r.jct_s is not None]
    jcts = [r.jct_s for r in done if r.jct_s is not None]
    slow = [s for r in done if (s := r.judged_slowdown) is not None]
    ends = [r.end_s for r in done if r.end_s is not None]
    first = min((r.submit_s for r in rows), default=0.0)
    sm = sm_activity(telemetry, first, max(ends)) if ends else None
    return Summary(
        policy=policy,
        jobs=len(rows),
        ended=len(done),
        complete=bool(rows) and len(done) == len(rows),
        makespan_s=max(ends) - first if ends else None,
        jct_mean_s=sum(jcts) / len(jcts) if jcts else None,
        jct_p95_s=_p95(jcts),
        energy_j=energy_j,
        ooms=sum(r.ooms for r in rows),
        requeues=sum(r.requeues for r in rows),
        max_slowdown=max(slow) if slow else None,
        # A tolerance for floating point: a job exactly at its bound is within it.
        over_bound=sum(1 for r in done if (s := r.judged_slowdown) is not None and s > r.max_slowdown * (1 + 1e-6)),
        wall_s=wall_s,
        cancelled=sum(1 for r in rows if r.state == "cancelled"),
        profiles=profiles,
        sessions=sessions,
        gpus=gpus,
        ends_lost=ends_lost,
        truth=truth,
        sm_active_mean=sm.mean if sm else None,
        sm_active_p10=sm.p10 if sm else None,
        sm_active_p50=sm.p50 if sm else None,
        sm_active_p90=sm.p90 if sm else None,
        sm_series=sm.series if sm else (),
    )


def format_summary(s: Summary) -> str:
    """The summary as printed."""

    def num(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    energy = "-" if s.energy_j is None else f"{s.energy_j / 3.6e6:.3f} kWh"
    cancelled = f", {s.cancelled} cancelled" if s.cancelled else ""
    resumed = (
        f"\n  resumed: {s.sessions} sessions (makespan and energy over all of them; "
        "wall time and attempts the last one's)"
        if s.sessions > 1
        else ""
    )
    if s.ends_lost:
        resumed += (
            f"\n  WARNING: {s.ends_lost} job{'s' if s.ends_lost > 1 else ''} ran again: the database lost "
            "their end with its -wal file (the log names them): these numbers are not those of each job run once"
        )
    return "\n".join(
        [
            f"queue policy={s.policy}: {s.ended}/{s.jobs} jobs ended{cancelled}"
            f"{'' if s.complete else ' (NOT all: see jobs)'}   profiles: {s.profiles}   truth: {s.truth}",
            f"  makespan {num(s.makespan_s, ',.1f')} s   JCT mean {num(s.jct_mean_s, ',.1f')} s, "
            f"p95 {num(s.jct_p95_s, ',.1f')} s   energy {energy}",
            f"  OOMs {s.ooms} (re-queues {s.requeues})   slowest job {num(s.max_slowdown, '.2f')}x alone, "
            f"{s.over_bound} over their bound   wall {s.wall_s:.1f} s{resumed}",
            *_sm_line(s),
        ]
    )


def _sm_line(s: Summary) -> list[str]:
    if s.sm_active_mean is None:
        return []
    series = " ".join(f"{v:.2f}" for v in s.sm_series)
    return [
        f"  SM activity over the makespan: mean {s.sm_active_mean:.2f}, p10/p50/p90 {s.sm_active_p10:.2f}/"
        f"{s.sm_active_p50:.2f}/{s.sm_active_p90:.2f}; by tenths: {series}"
    ]


def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value is not None and base else "-"


def format_policies(summaries: Sequence[Summary], labels: Sequence[str] | None = None) -> str:
    """Runs side by side (e.g. one per policy on one trace): makespan, JCT, energy (each against the
    ``exclusive`` run where there is one), OOMs, the slowest job, jobs over their bound. Each row is
    named by its ``labels`` entry where given (two runs of one policy: ``raycolloc``, ``raycolloc#2``),
    else by its policy."""

    def num(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    head = (
        f"{'policy':<10} {'makespan s':>10} {'vs excl':>7} {'JCT mean s':>10} {'JCT p95 s':>9} {'energy kWh':>10} "
        f"{'vs excl':>7} {'OOMs':>5} {'max slowdown':>12} {'over bound':>10} {'ended':>9} {'SM mean':>7}"
    )
    lines = [head, "-" * len(head)]
    elsewhere = False
    for s, name in zip(summaries, labels or [s.policy for s in summaries], strict=True):
        energy = None if s.energy_j is None else s.energy_j / 3.6e6
        base = baseline(s, summaries)
        mark = "*" if base is not None and not same_gpus(s, base) else ""
        elsewhere = elsewhere or bool(mark)
        makespan = _ratio(s.makespan_s, base.makespan_s if base else None) + mark
        energy_vs = _ratio(s.energy_j, base.energy_j if base else None) + mark
        lines.append(
            f"{name:<10} {num(s.makespan_s, ',.1f'):>10} {makespan:>7} "
            f"{num(s.jct_mean_s, ',.1f'):>10} {num(s.jct_p95_s, ',.1f'):>9} {num(energy, '.3f'):>10} "
            f"{energy_vs:>7} {s.ooms:>5} {num(s.max_slowdown, '.2f'):>12} "
            f"{s.over_bound:>10} {f'{s.ended}/{s.jobs}':>9} {num(s.sm_active_mean, '.2f'):>7}"
        )
    if elsewhere:
        lines.append("* against an exclusive run on other GPUs (another machine): speed moves between machines")
    return "\n".join(lines)


def same_gpus(a: Summary, b: Summary) -> bool:
    """Whether two runs ran on the same GPUs (either unknown, e.g. simulated: taken as the same)."""
    return not a.gpus or not b.gpus or a.gpus == b.gpus


def baseline(run: Summary, summaries: Sequence[Summary]) -> Summary | None:
    """The ``exclusive`` run ``run`` is measured against: the one on the same GPUs where there is one
    (solo speed moves between machines), else the first (None: there is no exclusive run)."""
    exclusive = [s for s in summaries if s.policy == "exclusive"]
    return next((s for s in exclusive if run.gpus and s.gpus == run.gpus), exclusive[0] if exclusive else None)


def write_parquet(path: Path, rows: Sequence[Any]) -> Path:
    """Rows of one dataclass as a Parquet file (atomically: a temp file renamed); returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([dataclasses.asdict(r) for r in rows])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path


def write_summary(path: Path, summary: Summary) -> Path:
    """The summary as JSON (atomically)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(summary), indent=1))
    tmp.replace(path)
    return path
