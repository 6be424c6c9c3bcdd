"""From measured profiles to the advice: parameters fitted on other workloads, every configuration
predicted and ranked, printed and written as JSON (and, with ``--emit-sweep``, as a sweep)."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raycolloc.advise.corpus import load_measured
from raycolloc.advise.emit import Emitted
from raycolloc.advise.fit import fit
from raycolloc.advise.model import ASSUMPTIONS, DEFAULT_PARAMS, Gpu, Params, calibrate_mps
from raycolloc.advise.observe import observations_in
from raycolloc.advise.profile import Profile, combine, gpu_costs_in, load_costs, profile_key, profiles_in
from raycolloc.advise.rank import Ranking, format_ranking, mix_candidates, rank, uniform_candidates
from raycolloc.advise.run import Profiled, Request
from raycolloc.results.index import REFERENCE, read_reference

__all__ = [
    "Advice",
    "Measured",
    "NothingProfiled",
    "advise",
    "format_advice",
    "gpu_time",
    "measured",
    "with_history",
    "write_json",
]

log = logging.getLogger("raycolloc")


class NothingProfiled(RuntimeError):
    """No workload of the request could be profiled (the message names each one and why)."""


@dataclass(frozen=True)
class Advice:
    """Everything the advisor concluded, and what it concluded it from."""

    gpu: Gpu
    params: Params
    profiles: tuple[Profile, ...]
    not_profiled: dict[str, str]
    rankings: tuple[Ranking, ...]
    fit_sweeps: tuple[str, ...]
    assumptions: tuple[str, ...] = ASSUMPTIONS
    emitted: Emitted | None = None
    # The GPU time the advisor's own cells took (profile, its repeats, probes, confirmation: each cell's
    # wall time, cells reused from earlier runs not counted), and how many cells: :func:`gpu_time`.
    gpu_time_s: float | None = None
    gpu_cells: int = 0


@dataclass(frozen=True)
class Measured:
    """What the measured sweeps under the fit directories hold for the advice: the parameters fitted
    on other workloads, and every solo profile found there (to combine with the new one)."""

    params: Params
    profiles: dict[tuple[str, str, str], Profile]
    dirs: tuple[str, ...]


def measured(
    fit_dirs: Sequence[Path],
    exclude: frozenset[str],
    gpu_name: str,
    cores: int | None,
    keep: frozenset[str] = frozenset(),
) -> Measured:
    """Parameters fitted on the measured sweeps under ``fit_dirs`` (cells of ``gpu_name`` whose
    workloads are not in ``exclude``, and the cells in ``keep``: the probes; the defaults where there
    are none) and the profiles there.

    Kept for the process while the tables under ``fit_dirs`` are unchanged: the advice asks twice
    with the same cells (before its probes, then to rank), and on one H200 each fit on the corpus took
    2.3 s while the advice's lane, kept for its confirmation, held the GPU idle."""
    dirs = [Path(d) for d in fit_dirs if Path(d).is_dir()]
    key = (tuple(str(d.resolve()) for d in dirs), _tables(dirs), exclude, gpu_name, cores, keep)
    if key not in _MEASURED:
        _MEASURED.clear()  # one advice at a time: the last fit is the one asked again
        _MEASURED[key] = _measured(dirs, exclude, gpu_name, cores, keep)
    return _MEASURED[key]


_MEASURED: dict[tuple[object, ...], Measured] = {}


def _tables(dirs: list[Path]) -> tuple[tuple[str, int, int], ...]:
    """Every table file under ``dirs``, and every reference to a cell elsewhere with the tables of
    the cell it names, with their modification times and sizes: what a fit reads."""
    paths = [path for d in dirs for name in ("*.parquet", REFERENCE) for path in d.rglob(name)]
    for ref in [p for p in paths if p.name == REFERENCE]:
        try:
            target = read_reference(ref.parent)
        except (OSError, ValueError, KeyError):  # unreadable: the loader says so, a fit reads nothing there
            continue
        if target is not None:
            paths.extend(target.glob("*.parquet"))
    found = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:  # gone between the listing and the look: not read either
            continue
        found.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(sorted(found))


def _measured(
    dirs: list[Path], exclude: frozenset[str], gpu_name: str, cores: int | None, keep: frozenset[str]
) -> Measured:
    from analysis.load import SweepDirError

    try:
        data = load_measured(dirs) if dirs else None
    except SweepDirError as exc:  # no readable cell there: nothing to fit on
        log.info("advise: nothing to fit on under %s (%s)", ", ".join(map(str, dirs)), exc)
        data = None
    if data is None:
        return Measured(DEFAULT_PARAMS, {}, ())
    costs = gpu_costs_in(data.cells, data.jobs)
    profiles = profiles_in(data.cells, data.jobs, data.epochs, data.telemetry, costs)
    observations = observations_in(data.cells, data.jobs, profiles, costs, cores)
    params = fit(observations, exclude=exclude, gpu_name=gpu_name, keep=keep)
    return Measured(params, profiles, tuple(map(str, dirs)))


def with_history(p: Profile, found: dict[tuple[str, str, str], Profile]) -> Profile:
    """The profile combined with every other solo run of the same workload and settings on this GPU
    model found among the measured sweeps (the median of several runs is steadier than one)."""
    known = found.get(profile_key(p.gpu_name, p.workload, p.settings))
    if known is None:
        return p
    return known if set(p.cell_dirs) <= set(known.cell_dirs) else combine([p, known])


def gpu_of(profiled: list[Profiled], out_dir: Path, cores: int) -> Gpu:
    """The GPU the profiles ran on (its base memory from the GPU model's cached costs).

    Raises:
        NothingProfiled: no workload could be profiled.
    """
    new = [p.profile for p in profiled if p.profile is not None]
    if not new:
        reasons = "; ".join(f"{p.spec.jobs[0].workload.name}: {p.reason}" for p in profiled)
        raise NothingProfiled(f"advise: no workload could be profiled: {reasons}")
    costs = load_costs(out_dir, new[0].gpu_name)
    return Gpu(new[0].gpu_name, new[0].gpu_memory_mib, costs.base_mib if costs else 0.0, cores)


def advise(
    profiled: list[Profiled],
    request: Request,
    fit_dirs: Sequence[Path],
    out_dir: Path,
    cores: int,
    keep: frozenset[str] = frozenset(),
    calibration: Mapping[str, tuple[int, float]] | None = None,
) -> Advice:
    """Fit (on other workloads' cells, and the probe cells in ``keep``), predict and rank for the
    profiled workloads (and their mix, when there are several); a workload in ``calibration`` (its
    MPS probe's degree and measured samples/s) has its course past MPS saturation calibrated by it.

    Raises:
        NothingProfiled: no workload could be profiled.
    """
    gpu = gpu_of(profiled, out_dir, cores)
    new = [p.profile for p in profiled if p.profile is not None]
    missing = {p.spec.jobs[0].workload.name: str(p.reason) for p in profiled if p.profile is None}
    history = measured(fit_dirs, frozenset(p.workload for p in new), gpu.name, cores, keep)
    params = history.params
    profiles = [_calibrated(with_history(p, history.profiles), calibration or {}, gpu, params) for p in new]
    rankings = [
        rank(p.workload, uniform_candidates(p, gpu, request.degrees), gpu, params, request.max_slowdown)
        for p in dict.fromkeys(profiles)
    ]
    if len(profiled) > 1 and not missing:
        label = "mix " + "+".join(p.workload for p in profiles)
        rankings.append(rank(label, mix_candidates(profiles, gpu), gpu, params, request.max_slowdown, mix=True))
    elif len(profiled) > 1:
        missing["mix"] = "not predicted: a job of it has no profile (see above)"
    return Advice(
        gpu=gpu,
        params=params,
        profiles=tuple(dict.fromkeys(profiles)),
        not_profiled=missing,
        rankings=tuple(rankings),
        fit_sweeps=history.dirs,
    )


def _calibrated(p: Profile, calibration: Mapping[str, tuple[int, float]], gpu: Gpu, params: Params) -> Profile:
    probe = calibration.get(p.workload)
    return p if probe is None else calibrate_mps(p, probe[0], probe[1], gpu, params)


def _past_line(p: Profile) -> str:
    """The calibration past MPS saturation, where a probe made one."""
    if p.mps_probe is None or p.mps_past is None:
        return ""
    degree, rate = p.mps_probe
    return (
        f"; past MPS saturation as its mps x{degree} probe measured ({rate:,.0f} samples/s): exponent {p.mps_past:+.2f}"
    )


def format_advice(a: Advice) -> str:
    """The advice as printed: profiles, parameters, one ranked table per group, the picks, the assumptions."""
    lines = [
        f"GPU: {a.gpu.name} ({a.gpu.memory_mib / 1024:.0f} GiB, base {a.gpu.base_mib:.0f} MiB used by no job; "
        f"{a.gpu.cores} cores on its node)"
    ]
    for p in a.profiles:
        lines.append(
            f"profile {p.workload} ({p.mode} solo, {', '.join(p.cell_dirs)}): "
            f"{p.samples_per_s:,.0f} samples/s, "
            f"SM activity {100 * p.sm_active:.1f}%, busy {100 * p.busy:.1f}% ({p.busy_source}), "
            f"DRAM {_pct(p.dram_active)}, occupancy {_pct(p.sm_occupancy)}, launching thread "
            f"{100 * p.cpu_busy:.0f}% of a core, memory {p.job_mem_mib:,.0f} MiB/job ({p.mem_source})" + _past_line(p)
        )
    for name, why in a.not_profiled.items():
        lines.append(f"no profile for {name}: {why}")
    fit = a.params
    unfitted = f" (unfitted: {', '.join(fit.unfitted_modes)})" if fit.unfitted_modes else ""
    lines.append(
        f"parameters: naive capacity={fit.naive.capacity:.2f} k={fit.naive.sharpness:g}; mps capacity="
        f"{fit.mps.capacity:.2f} k={fit.mps.sharpness:g}; mig capacity={fit.mig.capacity:.2f} "
        f"k={fit.mig.sharpness:g}; power slope="
        f"{'-' if fit.power_slope_w is None else f'{fit.power_slope_w:.0f} W per unit SM activity'}; "
        f"cpu capacity={fit.cpu_capacity:g} per core{unfitted}; "
        f"{fit.source}"
    )
    for r in a.rankings:
        lines += ["", format_ranking(r)]
        for tag, best in (
            ("best throughput", r.best_throughput),
            ("best energy per sample", r.best_energy),
            (
                f"best throughput with every job's slowdown <= {r.max_slowdown:g}"
                if r.max_slowdown is not None
                else "best throughput (no max_slowdown given)",
                r.best_within_cap,
            ),
        ):
            lines.append(f"  {tag}: {best or 'none fits'}")
        lines += _confirmed(r)
    if a.gpu_time_s is not None:
        lines += ["", f"GPU time of this advice: {a.gpu_time_s:.1f} s in {a.gpu_cells} cell(s) it ran"]
    lines += ["", "the model assumes:"] + [f"  - {text}" for text in a.assumptions]
    if a.emitted is not None:
        lines += [
            "",
            f"recommended cells as a sweep ({a.emitted.sweep_txt}):",
            *(f"  {x}" for x in a.emitted.lines),
            f"and as a radT plan: {a.emitted.plan_command}",
        ]
        if a.emitted.not_in_plan:
            lines.append(f"  (not in the plan: {'; '.join(a.emitted.not_in_plan)})")
    return "\n".join(lines)


def _confirmed(r: Ranking) -> list[str]:
    """The confirmed pick's lines: its measured number beside its prediction, and how the halving went."""
    if r.confirm_note is None:
        return []
    seen = r.latest(r.confirmed) if r.confirmed else None
    if seen is None or seen.samples_per_s is None:
        return [f"  confirmed pick: none measured ({r.confirm_note}); the picks above are predictions"]
    pred = next(p for p in r.rows if p.label == r.confirmed)
    interval = pred.agg_interval
    band = f" [{interval.low:,.0f}, {interval.high:,.0f}]" if interval is not None and interval.known else ""
    return [
        f"  confirmed pick (best measured): {r.confirmed}: measured {seen.samples_per_s:,.0f} samples/s at rung "
        f"{seen.rung} ({'reused' if seen.reused else 'ran'} {seen.cell_dir}); predicted "
        f"{pred.agg_samples_per_s or 0:,.0f}{band}",
        f"  confirming: {r.confirm_note}",
    ]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def write_json(path: Path, obj: Any, extra: dict[str, Any] | None = None) -> Path:
    """Write a dataclass (the advice or a validation) as JSON, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({**_plain(obj), **(extra or {})}, indent=1, default=str))
    tmp.replace(path)
    return path


def gpu_time(advice_dir: Path) -> tuple[float, int]:
    """The GPU time of the cells run under ``advice_dir`` (each cell's wall time, from its start to its
    end, summed over distinct cells; a cell reused from an earlier run is not written there) and
    their number: what advising cost (``jobs/advise_cheap.sh`` sets it beside measuring everything)."""
    from analysis.load import load_sweeps

    dirs = sorted({p.parent for p in Path(advice_dir).rglob("cells.parquet")})
    if not dirs:
        return 0.0, 0
    cells = load_sweeps(dirs).cells.drop_duplicates("cell_id")
    return float((cells["finished_at"] - cells["started_at"]).clip(lower=0).sum()), len(cells)
