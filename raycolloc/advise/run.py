"""What the user asked the advisor, and the solo profiles it measures for it through the engine.

The command line is ``workload=... [workload.KEY=...] [workload=... for a mix] [overrides] [advisor
keys]``: each ``workload=`` starts a job, the ``workload.*`` words after it belong to it, the other
overrides (``cluster=``, ``epoch_samples=``, ``data.placement=``, ``trainer.*`` ...) apply to every
profile and to the sweep the advice writes. Every profile config is composed from the real
``conf/`` tree and validated before any cell runs (a config error exits 2 before any GPU state
changes). Each profile is one degree-1 naive cell run through :func:`raycolloc.driver.plan.run`, as a sweep,
which reuses an existing result of the same config hash anywhere under ``out_dir``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from raycolloc.advise.confirm import DEFAULT_BUDGET_S, DEFAULT_K
from raycolloc.advise.profile import (
    GpuCosts,
    Profile,
    finite,
    gpu_costs_in,
    load_costs,
    profile_of,
    save_costs,
)
from raycolloc.config import ConfigError
from raycolloc.config_checks import (
    MAX_CORES,
    MAX_DEGREE,
    MAX_SECONDS,
    MAX_SLOWDOWN,
    bound_text,
    check_int,
    check_min,
    check_seconds,
)
from raycolloc.node.gpu.kinds import recorded_traits
from raycolloc.spec import CellSpec
from raycolloc.workload_config import workload_hash_view

if TYPE_CHECKING:
    from raycolloc.driver.resume import CellResult

__all__ = [
    "ADVISE_EPOCH_S",
    "ADVISOR_KEYS",
    "ADVISOR_RANGES",
    "CellRun",
    "Profiled",
    "Request",
    "compose_profile",
    "node_cores",
    "parse_number",
    "parse_request",
    "profile_in",
    "run_cells",
    "run_profiles",
]

ADVISOR_KEYS = ("max_slowdown", "degrees", "cores", "probe_degrees", "confirm_budget_s", "confirm_k")
MAX_CONFIRM_K = 100  # candidates the confirmation measures (each a cell or more)
# Each advisor key's range (a number: refused by name outside it, NaN and infinities too).
ADVISOR_RANGES: dict[str, tuple[float, float]] = {
    "max_slowdown": (1, MAX_SLOWDOWN),  # as queue.max_slowdown: a job is never faster shared than alone
    "degrees": (1, MAX_DEGREE),
    "cores": (1, MAX_CORES),
    "probe_degrees": (1, MAX_DEGREE),
    "confirm_budget_s": (1, MAX_SECONDS),
    "confirm_k": (1, MAX_CONFIRM_K),
}
ADVISOR_NOTES = {"max_slowdown": " (a job's slowdown against running alone, as queue.max_slowdown)"}
# Keys the advisor sets for each configuration it weighs: a user's value would be silently replaced.
_OWN_KEYS = ("mode", "degree", "mix", "mig", "repeats", "repeat", "floor_share")
# Keys of those groups that choose no configuration: where the node keeps its MPS pipes, whether an MPS
# daemon outlives its cell, whether a MIG layout may be made; they go to every cell the advisor runs.
_PASSED_ON = ("mig.allow_reconfigure", "mode.pipe_root", "mode.keep_daemon")
# Without an epoch length, a profile is a short window: epochs end after this many seconds.
PROFILE_EPOCH_S = 10.0  # the queue's profiles (raycolloc/queue/profiles.py)
# The advisor's cells (solo, probes, confirmation): 3 s epochs, as the corpus was measured and graded
# (corpus/README.md: every epoch 3 s, the rate the second's) -- a third of the GPU time of 10 s ones.
ADVISE_EPOCH_S = 3.0


@dataclass(frozen=True)
class Request:
    """The advisor's command line: each workload's words, the words for every cell, its own keys."""

    workloads: tuple[tuple[str, ...], ...]
    common: tuple[str, ...]
    max_slowdown: float | None
    degrees: tuple[int, ...]
    cores: int | None
    rerun: bool
    # Degrees the fit probes the requested workloads at (None: 8 and the largest ranked; (): none).
    probe_degrees: tuple[int, ...] | None = None
    confirm: bool = True  # --no-confirm: advise from the predictions alone
    confirm_budget_s: float = DEFAULT_BUDGET_S
    confirm_k: int = DEFAULT_K


@dataclass(frozen=True)
class Profiled:
    """One requested workload: its words, its composed workload (as the config hash sees it), its
    profile cell and profile (None with the reason where the solo did not run to the end)."""

    words: tuple[str, ...]
    workload: dict[str, Any]
    epochs: int
    spec: CellSpec
    cell_dir: Path
    profile: Profile | None
    reason: str | None
    reused: bool


def parse_number(key: str, value: str, kind: type[int] | type[float]) -> Any:
    """An advisor key's value as ``kind``, within its range (:data:`ADVISOR_RANGES`), as every config
    number is: NaN, infinities and values past the range are refused by name."""
    low, high = ADVISOR_RANGES[key]
    try:
        out = kind(value)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ConfigError(
            f"{key}={value!r} is not allowed; it must be {what} {bound_text(low)}..{bound_text(high)}"
        ) from None
    if kind is int:
        check_int(key, out, int(low), maximum=int(high))
    elif key.endswith("_s"):
        check_seconds(key, out, low)
    else:
        check_min(key, out, low, maximum=high, note=ADVISOR_NOTES.get(key, ""))
    return out


def parse_request(words: list[str], degrees: tuple[int, ...]) -> Request:
    """Split the command line's words (see the module docstring).

    Raises:
        ConfigError: a word that is not ``key=value``, a key the advisor sets itself, a bad value of
            an advisor key, or no workload.
    """
    workloads: list[list[str]] = []
    common: list[str] = []
    own: dict[str, str] = {}
    rerun = False
    for word in words:
        key, eq, value = word.partition("=")
        if not eq:
            raise ConfigError(f"{word!r} is not key=value (e.g. workload=resnet26_cifar10 cluster=local)")
        if word == "+rerun=true":
            rerun = True
        elif key == "workload":
            workloads.append([word])
        elif key.startswith("workload."):
            if not workloads:
                raise ConfigError(f"{key} comes before any workload=; write workload=NAME first, then its keys")
            workloads[-1].append(word)
        elif key in ADVISOR_KEYS:
            own[key] = value
        elif (key.lstrip("+~").split(".")[0] in _OWN_KEYS and key not in _PASSED_ON) or key.startswith(
            ("+plan", "+dry_run")
        ):
            raise ConfigError(
                f"{key}={value} is not allowed: the advisor weighs every mode, degree and MIG layout "
                f"itself (allowed: workload=..., overrides such as cluster=, epoch_samples=, "
                f"data.placement=, trainer.*, and {', '.join(ADVISOR_KEYS)})"
            )
        else:
            common.append(word)
    if not workloads:
        raise ConfigError("no workload: give workload=NAME (one per job; several for a mix)")
    if not any(w.split("=")[0] in ("epoch_samples", "epoch_time_s") for w in common):
        common.append(f"epoch_time_s={ADVISE_EPOCH_S:g}")  # a short window; the advised sweep keeps it
    if "degrees" in own:
        degrees = _ints("degrees", own["degrees"])
    probes = own.get("probe_degrees")
    return Request(
        workloads=tuple(tuple(w) for w in workloads),
        common=tuple(common),
        max_slowdown=parse_number("max_slowdown", own["max_slowdown"], float) if "max_slowdown" in own else None,
        degrees=degrees,
        cores=parse_number("cores", own["cores"], int) if "cores" in own else None,
        rerun=rerun,
        probe_degrees=None if probes is None else () if probes.lower() == "none" else _ints("probe_degrees", probes),
        confirm_budget_s=parse_number("confirm_budget_s", own.get("confirm_budget_s", str(DEFAULT_BUDGET_S)), float),
        confirm_k=parse_number("confirm_k", own.get("confirm_k", str(DEFAULT_K)), int),
    )


def _ints(key: str, value: str) -> tuple[int, ...]:
    """``1,2,3`` or ``[1,2,3]`` as sorted distinct positive integers."""
    text = value.strip("[]() ")
    return tuple(sorted({parse_number(key, d.strip(), int) for d in text.split(",") if d.strip()}))


def compose_profile(
    words: tuple[str, ...], common: tuple[str, ...], cell: tuple[str, ...] = ("mode=naive", "degree=1")
) -> DictConfig:
    """The composed config of one workload's solo profile cell (degree 1, naive), or of another
    cell of it (``cell``: its mode, degree and limits: a probe, a confirming cell).

    Raises:
        ConfigError: Hydra cannot compose the words (unknown group option, bad override).
    """
    from hydra.errors import HydraException

    from raycolloc.config_compose import compose_config
    from raycolloc.driver.hydra_errors import as_config_error

    try:
        return compose_config([*words, *common, *cell])
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        if isinstance(exc, ValueError) and (group_error := as_config_error(exc)) is not None:
            raise group_error from None  # workload=null: Hydra's message names no group
        lines = str(exc).splitlines()
        # Hydra lists a group's options on tab-indented lines after the first: the allowed values.
        options = [
            x.strip() for x in lines[1:] if x.startswith("\t") and "=" not in x and not x.strip().startswith("base_")
        ]
        allowed = f"; allowed: {', '.join(options)}" if options else ""
        raise ConfigError(f"{' '.join(words)}: {lines[0]}{allowed}") from None


def node_cores(requested: int | None, backend: str) -> int:
    """Cores of the GPU node: ``cores=N`` if given; simulated GPUs train on this machine's cores;
    else the CPUs of the Ray node with a GPU that ran the profiles (this machine where none did)."""
    if requested is not None:
        return requested
    if recorded_traits(backend).trains_on_cpu:
        return len(os.sched_getaffinity(0))
    import ray

    if ray.is_initialized():
        cpus = [int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n.get("Alive") and n["Resources"].get("GPU")]
        if cpus:
            return max(cpus)
    return os.cpu_count() or 1


def run_profiles(request: Request, run_dir: Path | None = None) -> tuple[list[Profiled], Path]:
    """Validate every profile cell, then run (or reuse) them; returns them and the advice directory
    (``run_dir`` where given: the queue profiles its trace's workloads into its own run's directory).

    Raises:
        ConfigError: a profile's config is invalid (nothing has run).
    """
    from raycolloc.driver.cell_specs import validate_cell

    specs = [validate_cell(compose_profile(words, request.common)) for words in request.workloads]
    out_root = Path(specs[0].config.out_dir).absolute()
    advice_dir = run_dir or out_root / "advise" / time.strftime("%Y-%m-%d") / time.strftime("%H-%M-%S")
    results = _run_once(specs, advice_dir, request.rerun)
    out = []
    for words, spec in zip(request.workloads, specs, strict=True):
        result = results[spec.config_hash]
        where = result.reused_from or result.cell_dir
        profile, reason = None, None
        if result.status == "ok":
            profile, reason = profile_in(Path(where), out_root)
        else:
            reason = f"its solo cell ended {result.status}: {result.summary.splitlines()[0]}"
        out.append(
            Profiled(
                words=words,
                workload=workload_hash_view(spec.config.workload),
                epochs=spec.config.epochs,
                spec=spec,
                cell_dir=Path(where),
                profile=profile,
                reason=reason,
                reused=result.reused_from is not None,
            )
        )
    return out, advice_dir


def profile_in(where: Path, out_root: Path) -> tuple[Profile | None, str | None]:
    """The profile of the solo cell at ``where`` (the GPU model's costs cached under ``out_root``),
    or None and why it cannot be profiled."""
    from analysis.load import load_sweeps

    data = load_sweeps([where])
    try:
        return profile_of(
            data.cells.iloc[0], data.jobs, data.epochs, data.telemetry, _costs(out_root, data.cells, data.jobs)
        ), None
    except ValueError as exc:  # e.g. a script that reports no samples, telemetry off
        return None, f"its solo cell {where} cannot be profiled: {exc}"


@dataclass(frozen=True)
class CellRun:
    """A cell the advisor ran (or found) beyond the profiles: a probe, a confirming cell."""

    key: str
    status: str
    cell_dir: str
    reused: bool
    samples_per_s: float | None


def run_cells(run_dir: Path, cells: list[tuple[str, tuple[str, ...]]], request: Request) -> list[CellRun]:
    """Validate, then run (or reuse: the same config hash anywhere under ``out_dir``) cells given as
    ``(key, words)``, the words composed as a profile's are, as one sweep under ``run_dir``.

    Raises:
        ConfigError: a cell's config is invalid (nothing has run).
    """
    from analysis.load import load_sweeps
    from raycolloc.driver.cell_specs import validate_cell

    if not cells:
        return []
    specs = [validate_cell(compose_profile((), request.common, words)) for _, words in cells]
    results = _run_once(specs, run_dir, request.rerun)
    out = []
    for (key, _), spec in zip(cells, specs, strict=True):
        result = results[spec.config_hash]
        where, rate = str(Path(result.reused_from or result.cell_dir).resolve()), None
        if result.status == "ok":
            row = load_sweeps([where]).cells.iloc[0]
            # The directory as the loaded tables name it (the fit keeps a probe by it).
            where, rate = str(row.get("cell_dir", where)), finite(row.get("agg_samples_per_s"))
        out.append(CellRun(key, result.status, where, result.reused_from is not None, rate))
    return out


def _run_once(specs: list[CellSpec], run_dir: Path, rerun: bool) -> dict[str, CellResult]:
    """Run (or reuse) each distinct config hash of ``specs`` once, as one sweep under ``run_dir``;
    the results by config hash (a mix of one workload twice profiles it once)."""
    from raycolloc.driver.plan import PlannedCell, Step, SweepPlan, run

    unique = list({s.config_hash: s for s in specs}.values())
    # The same path as every sweep (the output lock, resume); the advice prints its own closing lines.
    plan = SweepPlan(
        run_dir,
        specs[0].config.out_dir,
        (Step(tuple(PlannedCell(s, run_dir / s.label) for s in unique)),),
        rerun=rerun,
        closing=False,
    )
    return {r.cell.config_hash: r for r in run(plan).results}


def _costs(out_dir: Path, cells: Any, jobs: Any) -> GpuCosts | None:
    """The GPU model's costs: cached under ``out_dir``, else measured from this solo cell and cached."""
    gpu = str(cells.iloc[0]["gpu_name"])
    cached = load_costs(out_dir, gpu)
    if cached is not None:
        return cached
    measured = gpu_costs_in(cells, jobs).get(gpu)
    # A CPU stand-in has no CUDA context to measure: its costs are whole without one.
    cpu_stand_in = recorded_traits(cells.iloc[0]["backend"]).trains_on_cpu
    if measured is not None and (measured.context_mib is not None or cpu_stand_in):
        save_costs(out_dir, measured)
    return measured
