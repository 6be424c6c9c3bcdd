"""The sweep summary's tables, from the rows the sweep wrote: no pandas, no ``analysis`` package
(the runtime keeps to its edges, issue 31), every number with its 95% interval (issue 30).

The rows are read back from each cell's directory with pyarrow (a reused cell's result lives in another sweep's
directory; a job's settings and a mix's epochs are only on disk). The rules are the report's, in one place
(:mod:`raycolloc.results.ratios`): a configuration's runs summarised by its ``measure.statistic`` with the runs'
t-interval; one run with its within-run interval; each run against the solo run of the same repeat where there
is one, else against the solo configuration; a gain of one run propagates both intervals. :func:`gain_rows` and
:func:`mix_rows` are the numbers (held equal to the report's by a test), the ``*_lines`` their text.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raycolloc.mode_kinds import mode_rank
from raycolloc.results import ratios
from raycolloc.results.index import read_reference
from raycolloc.results.ratios import as_change, best, configuration, over_sequential, paired_value, run_ratio
from raycolloc.results.stats import CV_UNSTABLE, Interval, bounds, cv, fmt_pm, point, scaled

__all__ = ["GainRow", "MixRow", "Run", "gain_lines", "gain_rows", "mix_lines", "mix_rows", "read_runs", "text_table"]

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Run:
    """One cell's rows: its ``cells`` row, its jobs' rows and its epochs' rows (as read back)."""

    cell: Row
    jobs: tuple[Row, ...]
    epochs: tuple[Row, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.cell.get("status") == "ok"

    @property
    def statistic(self) -> str:
        """The config's ``measure.statistic`` (the median for results written before it)."""
        try:
            measure = json.loads(self.cell.get("config_json") or "{}").get("measure") or {}
        except (json.JSONDecodeError, AttributeError):
            return "median"
        return str(measure.get("statistic") or "median")

    @property
    def settings(self) -> str:
        """The trainer settings of its jobs (one configuration of a workload, as the report groups)."""
        parts = {
            f"compile={j.get('compile') or 'off'} amp={j.get('amp') or 'off'} "
            f"channels_last={bool(j.get('channels_last'))}"
            for j in self.jobs
        }
        return " | ".join(sorted(parts))

    @property
    def agg(self) -> Interval | None:
        """The aggregate rate with its within-run interval (a point where the row has none)."""
        value = self.cell.get("agg_samples_per_s")
        if value is None:
            return None
        return bounds(value, self.cell.get("agg_rate_low"), self.cell.get("agg_rate_high"))


def read_runs(cell_dirs: Iterable[Path]) -> list[Run]:
    """The rows of every cell directory that holds (or references) a complete result."""
    # Only here: a refused sweep never loads pyarrow. ``read_parquet``, not ``pq.read_table``: the
    # latter goes through pyarrow.dataset, which loads pandas (the summary must not, issue 31).
    import pyarrow as pa

    from raycolloc.results.store import read_parquet

    runs = []
    for cell_dir in cell_dirs:
        try:
            where = read_reference(cell_dir) or cell_dir
            if not (where / "cells.parquet").is_file():
                continue  # interrupted: no result
            tables = {n: read_parquet(where / f"{n}.parquet").to_pylist() for n in ("cells", "jobs", "epochs")}
        except (OSError, ValueError, KeyError, pa.ArrowException):
            continue  # corrupt: raycolloc.ls and the report name it; a summary leaves it out
        runs.append(Run(tables["cells"][0], tuple(tables["jobs"]), tuple(tables["epochs"])))
    return runs


def _config(run: Run) -> tuple[Any, ...]:
    c = run.cell
    group = c.get("repeat_group") or c.get("config_hash") or c["cell_id"]  # as the report: else its own
    return (group, c["workload"], c.get("gpu_name"), c["mode"], c["degree"])


def _solo_key(run: Run) -> tuple[Any, ...]:
    return run.cell["workload"], run.cell.get("gpu_name"), run.cell["mode"], run.settings


def _summary(values: Sequence[Interval], statistic: str) -> Interval | None:
    """Runs' values as one interval (one run keeps its own interval)."""
    return configuration(values, statistic)


def _gain(runs: Sequence[Run], solos: Sequence[Run]) -> Interval | None:
    """The configuration's gain over its solo configuration: each ok run against its paired solo
    (:func:`~raycolloc.results.ratios.run_ratio`), then the runs summarised."""
    whole = _summary([a for s in solos if (a := s.agg) is not None], solos[0].statistic)
    if whole is None:
        return None
    paired = [(s.cell.get("repeat"), s.agg.value) for s in solos if s.agg is not None]
    per_run = [
        gain
        for run in runs
        if run.ok
        and (agg := run.agg) is not None
        and (gain := run_ratio(agg, paired_value(run.cell.get("repeat"), paired, whole), whole)) is not None
    ]
    return _summary(per_run, runs[0].statistic)


def _slowdown(run: Run, solo_s: Mapping[tuple[Any, ...], float]) -> float | None:
    """The mean over the run's ok jobs of their seconds per sample (:func:`ratios.sample_time`) against the solo's."""
    slow = [
        t / ref
        for j in run.jobs
        if j.get("status") == "ok" and (t := ratios.sample_time(j)) and (ref := solo_s.get(_solo_key(run)))
    ]
    return sum(slow) / len(slow) if slow else None


def _cell_text(value: Interval | None, spec: str, unit: str = "") -> str:
    return "-" if value is None or math.isnan(value.value) else fmt_pm(value, spec, unit)


def _status(runs: Sequence[Run]) -> str:
    statuses = [str(r.cell.get("status")) for r in runs]
    if all(s == "ok" for s in statuses):
        return "ok"
    n_ok = statuses.count("ok")
    bad = "/".join(sorted({s for s in statuses if s != "ok"}))
    return f"ok {n_ok}/{len(statuses)}, {bad}" if n_ok else bad


@dataclass(frozen=True)
class GainRow:
    """One uniform configuration of the summary's gain table: its aggregate rate, gains against its
    solo (degree 1, same mode and settings) and the workload's best solo, slowdown and energy per
    sample (each None where it has none)."""

    workload: str
    gpu_name: str | None
    mode: str
    degree: int
    settings: str
    runs: int
    status: str
    agg: Interval | None
    gain: Interval | None
    vs_best: Interval | None
    slowdown: Interval | None
    energy: Interval | None
    notes: tuple[str, ...]


def gain_rows(runs: Sequence[Run]) -> list[GainRow]:
    """The uniform cells' configurations in reading order (workload, GPU, degree, mode, settings)."""
    uniform = [r for r in runs if r.cell.get("mix") is None]
    solos: dict[tuple[Any, ...], list[Run]] = defaultdict(list)
    for r in uniform:
        if r.cell["degree"] == 1 and r.ok and r.agg is not None:
            solos[_solo_key(r)].append(r)
    solo_s = {
        key: sum(per) / len(per)
        for key, group in solos.items()
        if (per := [t for r in group for j in r.jobs if j.get("status") == "ok" and (t := ratios.sample_time(j))])
    }
    top = _best_solos(solos)
    configs: dict[tuple[Any, ...], list[Run]] = defaultdict(list)
    for r in uniform:
        configs[(*_config(r), r.settings)].append(r)
    order = sorted(configs.items(), key=lambda kv: (kv[0][1], kv[0][2] or "", _order(kv[0])))
    return [_gain_row(key, group, solos, top, solo_s) for key, group in order]


def gain_lines(runs: Sequence[Run]) -> list[str]:
    """The throughput-gain table of the uniform cells (:func:`gain_rows`), each number ``value
    ±half-width%`` (95%); a note for unstable ones and gains within the noise."""
    rows = [
        [
            r.workload,
            r.mode,
            str(r.degree),
            str(r.runs),
            r.status,
            _cell_text(r.agg, ",.0f"),
            _cell_text(r.gain, ".2f", "x"),
            _cell_text(r.vs_best, ".2f", "x"),
            _cell_text(r.slowdown, ".2f"),
            _cell_text(r.energy, ".3g"),
            ", ".join(r.notes),
        ]
        for r in gain_rows(runs)
    ]
    if not rows:
        return []
    headers = ["workload", "mode", "degree", "runs", "status", "samples/s", "gain_vs_solo", "gain_vs_best_solo"]
    headers += ["slowdown", "J/sample", "note"]
    return text_table(headers, rows)


def _order(key: tuple[Any, ...]) -> tuple[int, int, str]:
    return int(key[4]), mode_rank(key[3]), str(key[5])


def _best_solos(solos: Mapping[tuple[Any, ...], list[Run]]) -> dict[tuple[Any, Any], list[Run]]:
    """Per workload and GPU model, the runs of its fastest solo configuration."""
    per: dict[tuple[Any, Any], dict[tuple[Any, ...], Interval]] = defaultdict(dict)
    for key, group in solos.items():
        rate = _summary([r.agg for r in group if r.agg is not None], group[0].statistic)
        if rate is not None:
            per[key[:2]][key] = rate
    return {where: solos[found] for where, rates in per.items() if (found := best(rates)) is not None}


def _gain_row(
    key: tuple[Any, ...],
    group: Sequence[Run],
    solos: Mapping[tuple[Any, ...], list[Run]],
    top: Mapping[tuple[Any, Any], list[Run]],
    solo_s: Mapping[tuple[Any, ...], float],
) -> GainRow:
    statistic = group[0].statistic
    agg = _summary([a for r in group if (a := r.agg) is not None], statistic)
    own = solos.get(_solo_key(group[0]), [])
    gain = _gain(group, own) if own else None
    best_runs = top.get((key[1], key[2]), [])
    vs_best = _gain(group, best_runs) if best_runs else None
    slow = [point(s) for r in group if r.ok and (s := _slowdown(r, solo_s)) is not None]
    energy = [point(e) for r in group if (e := _energy_per_sample(r)) is not None]
    notes = []
    rates = [a.value for r in group if (a := r.agg) is not None]
    if any(r.cell.get("unstable") for r in group) or (agg is not None and cv(rates) >= CV_UNSTABLE):
        notes.append("unstable")
    if gain is not None and key[4] > 1 and gain.known and gain.low <= 1.0 <= gain.high:
        notes.append("gain within noise")
    return GainRow(
        workload=str(key[1]),
        gpu_name=key[2],
        mode=str(key[3]),
        degree=int(key[4]),
        settings=str(key[5]),
        runs=len(group),
        status=_status(group),
        agg=agg,
        gain=gain,
        vs_best=vs_best,
        slowdown=_summary(slow, statistic),
        energy=_summary(energy, statistic),
        notes=tuple(notes),
    )


def _energy_per_sample(run: Run) -> float | None:
    """J/sample as the row has it, else its energy over its measured samples (older rows)."""
    c = run.cell
    if c.get("energy_per_sample_j") is not None:
        return float(c["energy_per_sample_j"])
    samples = c.get("measured_samples") or sum(e.get("samples") or 0 for e in run.epochs if not e.get("warmup"))
    return float(c["energy_j"]) / samples if c.get("energy_j") is not None and samples else None


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Fixed-width lines: text left-aligned, the rest right-aligned, two spaces apart."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    left = {"workload", "mode", "status", "note", "mix"}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if h in left else c.rjust(w) for c, w, h in zip(cells, widths, headers, strict=True)
        )

    return [line(headers).rstrip(), *(line(r).rstrip() for r in rows)]


_MATCH = (*ratios.SOLO_MATCH, "compile", "amp", "channels_last")


def _job_key(run: Run, job: Row) -> tuple[Any, ...]:
    return (run.cell["mode"], run.cell.get("gpu_name"), *(job.get(k) for k in _MATCH))


def _samples(job: Row, run: Run) -> float:
    if job.get("samples") is not None:
        return float(job["samples"])
    return float(sum(e.get("samples") or 0 for e in run.epochs if e.get("job_index") == job.get("job_index")))


def _span(run: Run) -> float | None:
    """First epoch start to last epoch end (warm-up included); the cell's total where no epochs."""
    starts = [e["start_ts"] for e in run.epochs if e.get("start_ts") is not None]
    ends = [e["end_ts"] for e in run.epochs if e.get("end_ts") is not None]
    return max(ends) - min(starts) if starts and ends else run.cell.get("total_s")


def _alone(runs: Sequence[Run]) -> dict[tuple[Any, ...], Interval]:
    """Per solo job configuration: its time per sample over every epoch (``ratios.solo_time_per_sample``)."""
    per: dict[tuple[Any, ...], list[Interval]] = defaultdict(list)
    for run in runs:
        if run.cell.get("mix") is None and run.cell["degree"] == 1 and run.ok:
            for job in run.jobs:
                mine = [e for e in run.epochs if e.get("job_index") == job["job_index"]]
                found = ratios.solo_time_per_sample({**job, "samples": _samples(job, run)}, mine)
                if job.get("status") == "ok" and found is not None:
                    per[_job_key(run, job)].append(point(found))
    return {k: s for k, v in per.items() if (s := _summary(v, "median")) is not None}


def _mix_run(run: Run, alone: Mapping[tuple[Any, ...], Interval]) -> tuple[Interval, list[str]] | None:
    """One mixed run's change against one job after the other (%), and its jobs' times."""
    total = _span(run)
    parts, serial_parts = [], []
    for job in sorted(run.jobs, key=lambda j: j.get("job_index") or 0):
        ref = alone.get(_job_key(run, job))
        own = ref.value * _samples(job, run) if ref is not None else None
        if ref is not None and own is not None:
            serial_parts.append(scaled(ref, own))
        parts.append(f"{job.get('job_name')} {_num(job.get('total_s'))}/{_num(own)}")
    if total is None or not run.ok or len(serial_parts) != len(run.jobs):
        return None
    ratio = over_sequential(point(total), serial_parts)
    return (as_change(ratio), parts) if ratio is not None else None


def _num(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) else "-"


@dataclass(frozen=True)
class MixRow:
    """One mix configuration of the summary: its total time and its change against its jobs run one
    after the other (%; negative is faster collocated), each None where it has none; its first run's
    jobs as ``name collocated/alone`` (s)."""

    mix: str
    mode: str
    runs: int
    status: str
    total: Interval | None
    change: Interval | None
    jobs: str


def mix_rows(runs: Sequence[Run]) -> list[MixRow]:
    """The mixed cells' configurations, by mix and mode."""
    alone = _alone(runs)
    configs: dict[tuple[Any, ...], list[Run]] = defaultdict(list)
    for r in runs:
        if r.cell.get("mix") is not None:
            configs[(r.cell["mix"], r.cell["mode"], r.cell.get("repeat_group"))].append(r)
    rows = []
    for (mix, mode, _), group in sorted(configs.items(), key=lambda kv: (kv[0][0], mode_rank(kv[0][1]))):
        measured = [m for r in group if (m := _mix_run(r, alone)) is not None]
        change = _summary([m[0] for m in measured], group[0].statistic)
        totals = [point(t) for r in group if (t := _span(r)) is not None]
        total = _summary(totals, group[0].statistic)
        jobs = ", ".join(measured[0][1]) if measured else "-"
        rows.append(MixRow(str(mix), str(mode), len(group), _status(group), total, change, jobs))
    return rows


def mix_lines(runs: Sequence[Run]) -> list[str]:
    """The mixed cells against their jobs run one after the other (:func:`mix_rows`): per mix
    configuration its runs' change in total time (``-12% ±3pt``) and each job's time collocated /
    alone (s, first run)."""
    rows = [
        [
            r.mix,
            r.mode,
            str(r.runs),
            r.status,
            _cell_text(r.total, ".2f"),
            "-"
            if r.change is None
            else f"{r.change.value:+.0f}%" + (f" ±{r.change.half_width:.0f}pt" if r.change.known else ""),
            r.jobs,
        ]
        for r in mix_rows(runs)
    ]
    if not rows:
        return []
    return text_table(["mix", "mode", "runs", "status", "total_s", "vs sequential", "note"], rows)
