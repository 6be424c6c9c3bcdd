"""``--validate SWEEP_DIR``: the advisor's predictions against a measured sweep, cell by cell.

Each workload with a solo cell in the sweep is profiled from it; every other cell whose jobs all have
a profile is predicted with parameters fitted on the cells of the *other* workloads only (the
sweep's and those of ``--fit`` sweeps on the same GPU model: leave-one-out), and compared with what
it measured: aggregate throughput (uniform cells), each job's slowdown (its profile's samples/s over
its epoch-2 samples/s), the GPU memory used, and whether a cell predicted to fit ran out of memory.
The profile cells themselves are not scored (they are the input). A corpus folder (``corpus/``,
:mod:`raycolloc.advise.corpus`) is read as sweeps, one per entry. The throughput targets judge the
configurations measured within ``TIGHT_REL``; the others are listed apart with their intervals.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from raycolloc.advise.corpus import is_corpus, load_corpus
from raycolloc.advise.fit import fit
from raycolloc.advise.model import ASSUMPTIONS, Params, Prediction, predict
from raycolloc.advise.observe import Observation, by_configuration, observations_in
from raycolloc.advise.profile import Profile, gpu_costs_in, profiles_in
from raycolloc.advise.validate_probes import mps_probes, probe_of, with_probes
from raycolloc.mode_kinds import mode_of
from raycolloc.node.gpu.kinds import recorded_traits

__all__ = ["BOTH", "CellCheck", "Metric", "Targets", "Validation", "format_validation", "validate"]


# A configuration whose measured 95% interval is within +-5% grades the model; a wider one is listed
# apart with its interval (its own noise would be counted as the model's error).
TIGHT_REL = 0.05
# The second grading (a documented choice, docs/advise.md): the configurations measured within
# TIGHT_REL whose prediction the solo's own interval moves by no more than TIGHT_REL either. Below
# saturation a prediction is about degree x the solo's rate, and the corpus's solo runs of the small
# models spread by 16-23% (CV) between runs: that error is the baseline's, which no model of
# contention can take out. Its verdicts are printed beside the issue's; a FAIL of either sets exit status 1.
BOTH = f"throughput, measured and solo ±{TIGHT_REL:.0%}"


@dataclass(frozen=True)
class Targets:
    """Acceptance bounds on the absolute relative errors (0.05 = 5%); the throughput's apply to the
    configurations measured within ``TIGHT_REL`` (issue 44: median 5%, max 12%; Parallax's MPS
    MAPE 6.12%, ISACPP's max 8.72%)."""

    throughput_median: float = 0.05
    throughput_max: float = 0.12
    slowdown_median: float = 0.10


@dataclass(frozen=True)
class CellCheck:
    """One measured cell against its prediction. Errors are predicted / measured - 1."""

    sweep: str
    cell_id: str
    label: str
    status: str
    profile_cell: bool
    params: str
    predicted: Prediction
    measured_agg_samples_per_s: float | None
    throughput_error: float | None
    measured_slowdowns: tuple[float | None, ...]
    slowdown_errors: tuple[float, ...]
    mem_used_mib: float | None
    mem_error: float | None
    mem_safe: bool | None
    unsafe_fit: bool
    energy_per_sample_j: float | None
    energy_error: float | None
    measured_rel_hw: float | None = None  # the measured aggregate's 95% relative half-width
    # The 95% relative half-width the solo's own interval brings to the prediction (the share of the
    # solo's error the prediction carries times the solo's interval; None: not known).
    solo_rel_hw: float | None = None

    @property
    def tight(self) -> bool:
        """Measured within ``TIGHT_REL``: what the throughput targets judge."""
        return self.measured_rel_hw is not None and self.measured_rel_hw <= TIGHT_REL

    @property
    def tight_both(self) -> bool:
        """Measured within ``TIGHT_REL``, and predicted from a solo whose interval moves the prediction
        by no more than ``TIGHT_REL``: both sides of the comparison known to +-5% (the second grading)."""
        return self.tight and (self.solo_rel_hw is None or self.solo_rel_hw <= TIGHT_REL)


@dataclass(frozen=True)
class Metric:
    """One error over the validated cells: count, median and maximum of the absolute error."""

    name: str
    n: int
    median_abs: float | None
    max_abs: float | None
    target: str
    passed: bool | None


@dataclass(frozen=True)
class Validation:
    """The whole comparison: per cell, per metric, and the parameters each workload was predicted with."""

    sweeps: tuple[str, ...]
    checks: tuple[CellCheck, ...]
    metrics: tuple[Metric, ...]
    params: dict[str, Params]
    profiles: dict[str, Profile]
    unsafe_fits: tuple[str, ...]
    assumptions: tuple[str, ...] = field(default=ASSUMPTIONS)
    # One check per configuration (its runs' median): what the targets judge.
    configurations: tuple[CellCheck, ...] = ()
    # Per workload (uniform configurations), the throughput error over those measured within TIGHT_REL.
    per_workload: tuple[Metric, ...] = ()
    # Of the configurations with a measured and a predicted throughput, how many the predicted 95%
    # interval holds, and how many there are.
    interval_coverage: tuple[int, int] = (0, 0)


def _rel(pred: float | None, meas: float | None) -> float | None:
    return pred / meas - 1.0 if pred is not None and meas else None


def _check(o: Observation, params: Params) -> CellCheck:
    """One cell (or configuration) against its prediction; each job's slowdown against its profile's rate."""
    pred = predict(o.candidate, o.gpu, params)
    alone = [p.samples_per_s for p in o.candidate.jobs]
    measured_slow = tuple(a / m if m else None for a, m in zip(alone, o.job_samples_per_s, strict=True))
    slow_err = (
        ()
        if o.profile_cell
        else tuple(j.slowdown / m - 1.0 for j, m in zip(pred.jobs, measured_slow, strict=True) if m)
    )
    ok = o.status == "ok"
    tput = _rel(pred.agg_samples_per_s, o.agg_samples_per_s) if ok and not o.profile_cell else None
    return CellCheck(
        sweep=o.sweep,
        cell_id=o.cell_id,
        label=o.label,
        status=o.status,
        profile_cell=o.profile_cell,
        params=params.source,
        predicted=pred,
        measured_agg_samples_per_s=o.agg_samples_per_s,
        throughput_error=tput,
        measured_slowdowns=measured_slow,
        slowdown_errors=slow_err,
        mem_used_mib=o.mem_used_mib,
        mem_error=_rel(pred.mem_expected_mib, o.mem_used_mib) if ok and not o.profile_cell else None,
        # The GPU's memory in use against the safe-side need (under MIG the need is per GPU instance).
        mem_safe=pred.mem_need_mib >= o.mem_used_mib
        if o.mem_used_mib is not None and ok and mode_of(pred.mode).shares_memory
        else None,
        # The promise: a configuration predicted to fit does not run out of memory.
        unsafe_fit=pred.fits and o.status in ("oom", "unfit"),
        energy_per_sample_j=o.energy_per_sample_j,
        energy_error=_rel(pred.energy_per_sample_j, o.energy_per_sample_j) if ok and not o.profile_cell else None,
        measured_rel_hw=o.agg_rel_hw,
        solo_rel_hw=pred.baseline_rel,
    )


def _metric(name: str, values: list[float], target: float | None = None, of: str = "median") -> Metric:
    absolute = [abs(v) for v in values]
    med = statistics.median(absolute) if absolute else None
    top = max(absolute) if absolute else None
    if target is None:
        return Metric(name, len(values), med, top, "-", None)
    value = med if of == "median" else top
    return Metric(name, len(values), med, top, f"{of} < {target:.0%}", None if value is None else value < target)


def validate(
    paths: Sequence[str | Path],
    fit_paths: Sequence[str | Path] = (),
    cores: int | None = None,
    targets: Targets = Targets(),
) -> Validation:
    """Predict every describable cell of the sweeps at ``paths`` and compare (see the module docstring).

    Raises:
        SweepDirError: a path holds no readable sweep (as ``analysis.load`` says).
    """
    from analysis.load import load_sweeps

    # A corpus with its later passes: each configuration graded by the median of all its runs, its
    # interval over them (the day-to-day spread of the host is part of what was measured).
    data = load_corpus(paths[0], passes=True) if len(paths) == 1 and is_corpus(paths[0]) else load_sweeps(list(paths))
    extra = load_sweeps(list(fit_paths)) if fit_paths else None
    costs = gpu_costs_in(data.cells, data.jobs)
    profiles = profiles_in(data.cells, data.jobs, data.epochs, data.telemetry, costs)
    # Simulated GPUs run on this machine's cores; a real node's count is not in the results (None: no CPU limit).
    backends = set(data.cells["backend"].dropna())
    if cores is None and backends and all(recorded_traits(b).trains_on_cpu for b in backends):
        cores = len(os.sched_getaffinity(0))
    measured = observations_in(data.cells, data.jobs, profiles, costs, cores)
    fit_on = list(measured)
    # As the advisor measures by default: each workload's solo and one MPS probe at its largest degree
    # measured, which calibrates its course past saturation and, like the solo, is input, not graded.
    probes = mps_probes(by_configuration(measured))
    checked = [replace(o, profile_cell=True) if probe_of(o, probes) else o for o in measured]
    if extra is not None:
        extra_costs = gpu_costs_in(extra.cells, extra.jobs)
        extra_profiles = profiles_in(extra.cells, extra.jobs, extra.epochs, extra.telemetry, extra_costs)
        fit_on += observations_in(extra.cells, extra.jobs, extra_profiles, extra_costs, cores)
    by_workloads: dict[tuple[frozenset[str], str], Params] = {}
    calibrated: dict[tuple[object, ...], Profile] = {}

    def check(o: Observation) -> CellCheck:
        key = (o.workloads, o.gpu.name)
        if key not in by_workloads:
            by_workloads[key] = fit(fit_on, exclude=o.workloads, gpu_name=o.gpu.name)
        return _check(with_probes(o, probes, by_workloads[key], calibrated), by_workloads[key])

    checks = [check(o) for o in checked]
    scored = [c for c in checks if not c.profile_cell]
    # The targets judge each configuration by the median of its runs (the sweep's default headline
    # statistic); run by run, the same errors are listed too (a run's own noise is in them).
    graded = [o for o in by_configuration(checked) if not o.profile_cell]
    configs = [check(o) for o in graded]
    throughput = [c.throughput_error for c in configs if c.throughput_error is not None]
    tight = [c.throughput_error for c in configs if c.throughput_error is not None and c.tight]
    both = [c.throughput_error for c in configs if c.throughput_error is not None and c.tight_both]
    slowdown = [e for c in configs for e in c.slowdown_errors]
    memory = [c.mem_error for c in scored if c.mem_error is not None]
    energy = [c.energy_error for c in configs if c.energy_error is not None]
    per_run = [c.throughput_error for c in scored if c.throughput_error is not None]
    # Listed apart (no target): where the fit had evidence, and where the advice marks its rows `*`.
    inside = [c.throughput_error for c in configs if c.throughput_error is not None and not c.predicted.extrapolated]
    beyond = [c.throughput_error for c in configs if c.throughput_error is not None and c.predicted.extrapolated]
    metrics: tuple[Metric, ...] = (
        _metric(f"throughput, measured ±{TIGHT_REL:.0%}", tight, targets.throughput_median),
        _metric(f"throughput, measured ±{TIGHT_REL:.0%}", tight, targets.throughput_max, of="max"),
        _metric(f"{BOTH}", both, targets.throughput_median),
        _metric(f"{BOTH}", both, targets.throughput_max, of="max"),
        _metric("aggregate throughput", throughput),
        _metric("per-job slowdown", slowdown, targets.slowdown_median),
        _metric("aggregate throughput, within reach", inside),
        _metric("aggregate throughput, extrapolated", beyond),
        _metric("aggregate throughput, run by run", per_run),
        _metric("memory (expected vs used)", memory),
        _metric("energy per sample", energy),
    )
    if probes:
        # The same configurations from the solo alone (no probe: the fitted model's course past
        # saturation), for comparison; no target.
        solo_only = [
            c.throughput_error
            for o in graded
            for c in [_check(o, by_workloads[(o.workloads, o.gpu.name)])]
            if c.throughput_error is not None and c.tight
        ]
        metrics += (_metric(f"throughput, measured ±{TIGHT_REL:.0%}, no probe", solo_only),)
    unsafe = tuple(c.label for c in checks if c.unsafe_fit)
    return Validation(
        sweeps=data.sweeps,
        checks=tuple(checks),
        metrics=metrics,
        params={"+".join(sorted(w)) + f" on {g}": p for (w, g), p in by_workloads.items()},
        profiles={f"{p.workload} on {p.gpu_name}": p for p in profiles.values()},
        unsafe_fits=unsafe,
        configurations=tuple(configs),
        per_workload=_per_workload(configs),
        interval_coverage=_coverage(configs),
    )


def _coverage(configs: list[CellCheck]) -> tuple[int, int]:
    """How many measured aggregates their predicted 95% interval holds, of how many."""
    pairs = [
        (c.predicted.agg_interval, c.measured_agg_samples_per_s)
        for c in configs
        if c.throughput_error is not None and c.predicted.agg_interval is not None
    ]
    return sum(iv.low <= m <= iv.high for iv, m in pairs if m is not None), len(pairs)


def _per_workload(configs: list[CellCheck]) -> tuple[Metric, ...]:
    """The throughput error of each workload's configurations measured within ``TIGHT_REL``."""
    names = sorted({c.predicted.workloads for c in configs if c.throughput_error is not None})
    return tuple(
        _metric(
            name,
            [e for c in configs if c.predicted.workloads == name and c.tight and (e := c.throughput_error) is not None],
        )
        for name in names
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}%"


def _interval(c: CellCheck) -> str:
    return "-" if c.measured_rel_hw is None else f"±{100 * c.measured_rel_hw:.1f}%"


def _config_line(c: CellCheck) -> str:
    """One configuration (or cell) against its prediction, as printed."""
    p = c.predicted
    meas_slow = [s for s in c.measured_slowdowns if s is not None]
    slow = f"{p.max_slowdown:.2f}/{max(meas_slow):.2f}" if meas_slow else f"{p.max_slowdown:.2f}/-"
    mem = f"{p.mem_need_mib / 1024:.1f}/{c.mem_used_mib / 1024:.1f}" if c.mem_used_mib else "-"
    band = p.agg_interval
    pred_rate = f"{p.agg_samples_per_s:,.0f}" if p.agg_samples_per_s else "-"
    pred_band = f"[{band.low:,.0f}, {band.high:,.0f}]" if band is not None and band.known else "-"
    meas_rate = f"{c.measured_agg_samples_per_s:,.0f}" if c.measured_agg_samples_per_s else "-"
    mark = " (profile)" if c.profile_cell else (" UNSAFE: predicted to fit" if c.unsafe_fit else "")
    mark += " (extrapolated)" if p.extrapolated and not c.profile_cell else ""
    mark += " (unfitted mode)" if p.unfitted else ""
    return (
        f"{c.label[:42]:<42} {c.status:<6} {'yes' if p.fits else 'no':<4} {pred_rate:>8} {pred_band:>19} "
        f"{meas_rate:>8} {_interval(c):>7} {_pct(c.throughput_error):>7} {slow:>11} {mem:>11}  {p.bound}{mark}"
    )


def _metric_line(m: Metric, width: int = 34) -> str:
    verdict = "" if m.passed is None else ("  PASS" if m.passed else "  FAIL")
    med = "-" if m.median_abs is None else f"{100 * m.median_abs:.1f}%"
    top = "-" if m.max_abs is None else f"{100 * m.max_abs:.1f}%"
    return f"{m.name[:width]:<{width}} {m.n:>4} {med:>8} {top:>8}  {m.target}{verdict}"


def format_validation(v: Validation) -> str:
    """The per-configuration comparison and the error summary, as printed."""
    lines = [
        f"validation of {', '.join(v.sweeps)}: {len(v.checks)} cells described, "
        f"{sum(not c.profile_cell for c in v.checks)} predicted (profile cells are the input), "
        f"{len(v.configurations)} configurations (each the median of its runs)"
    ]
    head = (
        f"{'configuration':<42} {'status':<6} {'fits':<4} {'pred/s':>8} {'predicted 95%':>19} {'meas/s':>8} "
        f"{'meas 95%':>7} {'err':>7} {'slow p/m':>11} {'GiB need/used':>11}  bound"
    )
    order = sorted(v.configurations, key=lambda c: (c.predicted.workloads, c.predicted.mode, c.predicted.degree))
    lines += [head, "-" * len(head), *(_config_line(c) for c in order)]
    apart = [c for c in order if c.throughput_error is not None and not c.tight]
    lines += ["", f"measured wider than ±{TIGHT_REL:.0%} (listed apart, not graded by the targets): {len(apart)}"]
    lines += [f"  {c.label}: measured {_interval(c)}, error {_pct(c.throughput_error)}" for c in apart]
    noisy = [c for c in order if c.throughput_error is not None and c.tight and not c.tight_both]
    lines += [
        "",
        f"measured within ±{TIGHT_REL:.0%} but predicted from a solo whose interval moves the prediction by more "
        f"(graded by the issue's targets, left out of the second grading): {len(noisy)}",
    ]
    lines += [
        f"  {c.label}: measured {_interval(c)}, solo {_pct(c.solo_rel_hw).replace('+', '±')} "
        f"(share {c.predicted.baseline_share:.2f}), error {_pct(c.throughput_error)}"
        for c in noisy
    ]
    lines.append("")
    lines.append(f"{'error (|predicted/measured - 1|)':<34} {'n':>4} {'median':>8} {'max':>8}  target")
    lines += [_metric_line(m) for m in v.metrics]
    held, of = v.interval_coverage
    lines.append(f"predicted 95% intervals holding the measured throughput: {held}/{of}")
    lines.append(f"per workload, throughput measured within ±{TIGHT_REL:.0%}:")
    lines += ["  " + _metric_line(m, 32) for m in v.per_workload]
    safe = [c.mem_safe for c in v.checks if c.mem_safe is not None]
    lines.append(
        f"memory: {sum(safe)}/{len(safe)} ok cells used no more than the safe-side prediction "
        f"(under-predicted: {len(safe) - sum(safe)}); "
        f"cells predicted to fit that ran out of memory: {len(v.unsafe_fits)}"
        + (f" ({', '.join(v.unsafe_fits)})" if v.unsafe_fits else "")
    )
    lines.append("parameters (leave-one-out):")
    for name, fitted in v.params.items():
        modes = ", ".join(fitted.unfitted_modes)
        unfitted = f" unfitted (no cell of their own): {modes};" if modes else ""
        lines.append(
            f"  {name}: naive capacity={fitted.naive.capacity:.2f} k={fitted.naive.sharpness:g}; mps "
            f"capacity={fitted.mps.capacity:.2f} k={fitted.mps.sharpness:g};{unfitted} power slope="
            f"{'-' if fitted.power_slope_w is None else f'{fitted.power_slope_w:.0f} W'}; {fitted.source}"
        )
    return "\n".join(lines)
