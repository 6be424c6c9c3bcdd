"""The config groups of a cell that do not choose what it trains or where: ``data``, ``trainer``,
``telemetry``, ``measure`` (how many runs a configuration gets) and ``queue`` (the job queue's
policy and its simulated cluster). Part of the config contract
(:mod:`raycolloc.config` re-exports them): typed, checked in ``__post_init__``, importing nothing
that needs torch, Ray or Hydra.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from raycolloc.config_checks import (
    AMP_MODES,
    COMPILE_MODES,
    MAX_CORES,
    MAX_EPOCHS,
    MAX_GPUS,
    MAX_REPEATS,
    MAX_SLOWDOWN,
    ConfigError,
    check_seconds,
    is_number,
)
from raycolloc.config_checks import check_choice as _check_choice
from raycolloc.config_checks import check_int as _check_int
from raycolloc.config_checks import check_min as _check_min
from raycolloc.config_checks import check_range as _check_range
from raycolloc.mode_kinds import QUEUE_MODES

__all__ = [
    "COMPILE_CACHE_VAR",
    "STATISTICS",
    "WARMUPS",
    "DataConfig",
    "MeasureConfig",
    "QueueConfig",
    "TelemetryConfig",
    "TrainerConfig",
    "check_repeats",
    "compile_cache_at",
    "queue_policies",
    "register_queue_policy",
    "unregister_queue_policy",
]

ALLOCATORS = ("native", "cuda_async")
FAULTS = ("oom", "error", "exit", "hang")
CPU_AFFINITY = ("auto", "none")
SPAWN_METHODS = ("fork", "exec")
SOURCES = ("synthetic", "real")
PLACEMENTS = ("host", "device")
TELEMETRY_SOURCES = ("auto", "dcgm", "gpm", "nvml")
# The queue's placement policies' names: raycolloc.queue.policy.register_policy adds every policy it
# registers, so queue.policy is checked against the plugins' registry. The built-in ones are named up
# front because the contract imports nothing of the queue package (a test keeps them in step).
QUEUE_POLICIES = ("exclusive", "carma", "raycolloc")
_QUEUE_POLICY_NAMES: dict[str, None] = dict.fromkeys(QUEUE_POLICIES)  # a dict: ordered, unique
QUEUE_ORDERS = ("longest", "arrival")  # the raycolloc policy's order of the jobs waiting
QUEUE_RUNNERS = ("sim", "ray")
QUEUE_PROFILES = ("catalog", "measured")
QUEUE_TRUTHS = ("model", "corpus")
QUEUE_TRACE_SCALES = ("short", "carma")  # the trace generator's job lengths and gaps: ours, or CARMA's published
CARMA_ESTIMATORS = ("gpumemnet", "bins")  # the carma policy's memory estimate: GPUMemNet's errors, or exact bins
# Bounds of the numbers of these groups that no other group shares (config_checks has the shared ones).
MAX_INTERVAL_MS = 60_000  # telemetry sampled less than once a minute says nothing of a cell
MAX_BUDGET = 1000.0  # measure.budget: the added runs' GPU time, as a share of the first pass's
MAX_SIM_NODES = 10_000  # a simulated cluster's nodes (each is objects in memory, none of them free)
MAX_OOM_BACKOFF = 100.0  # an OOM multiplies a job's memory estimate by this: more is past any GPU
MAX_SIM_SPEED = 1e6  # a live queue's simulated seconds per wall second
MAX_ARRIVAL_SCALE = 100.0  # a ray replay waits submit_s times this (a trace's submit_s goes to 1e7 s)
MAX_TRACE_S = 86_400.0  # the trace generator's mean gap and job length: a day (its trace's submit_s stop at 1e7 s)
MAX_SHARE = 1_000_000  # a trace_mix weight (only their ratio counts; three of them sum without overflow)
# How a configuration's headline rate is formed from its runs (the analysis reads it from the config).
STATISTICS = ("mean", "median", "fastest")
WARMUPS = ("learned", "epoch")  # measure.warmup: a repeat's warm-up (raycolloc.driver.warmup)


def queue_policies() -> tuple[str, ...]:
    """The names ``queue.policy`` accepts: every registered policy, the built-in ones first."""
    return tuple(_QUEUE_POLICY_NAMES)


def register_queue_policy(name: str) -> None:
    """Accept ``name`` as a ``queue.policy`` (called by the policy registry)."""
    _QUEUE_POLICY_NAMES[name] = None


def unregister_queue_policy(name: str) -> None:
    """No longer accept ``name`` (a plugin unloaded, e.g. after a test)."""
    _QUEUE_POLICY_NAMES.pop(name, None)


@dataclass
class DataConfig:
    """``data``: where batches come from and where they live during training."""

    source: str = "synthetic"
    placement: str = "host"
    path: str | None = None
    num_workers: int = 2

    def __post_init__(self) -> None:
        _check_choice("data.source", self.source, SOURCES)
        _check_choice("data.placement", self.placement, PLACEMENTS)
        _check_int("data.num_workers", self.num_workers, 0, maximum=MAX_CORES)
        # data.source=real without data.path is checked per job (a radT plan's rows bring their own).


@dataclass
class TrainerConfig:
    """``trainer``: how each training process runs (allocator, fast paths, fault injection).

    ``spawn``: training processes forked from the node's warm parent (``fork``) or started afresh
    (``exec``); ``reuse_actors``: a lane lends its trainer actors to cell after cell (false: fresh
    actors per cell).
    """

    allocator: str = "native"
    compile: str = "off"
    amp: str = "off"
    channels_last: bool = False
    num_cpus: float = 1.0
    cpu_affinity: str = "auto"
    spawn: str = "fork"
    reuse_actors: bool = True
    torch_threads: int | None = None
    setup_timeout_s: float = 1800.0
    stall_timeout_s: float = 300.0  # silent this long (and 20 warm-up steps): status=hang (driver/stall.py)
    epoch_timeout_s: float | None = None  # an optional cap on one call's epochs; null = none
    compile_cache: str | None = None  # a directory; null: $RAYCOLLOC_COMPILE_CACHE, else /tmp/raycolloc-compile-cache
    fault: str | None = None
    fault_job: int = 0
    fault_epoch: int = 2

    def __post_init__(self) -> None:
        _check_choice("trainer.allocator", self.allocator, ALLOCATORS)
        _check_choice("trainer.compile", self.compile, COMPILE_MODES)
        _check_choice("trainer.amp", self.amp, AMP_MODES)
        _check_min("trainer.num_cpus", self.num_cpus, 0, maximum=MAX_CORES)
        _check_choice("trainer.cpu_affinity", self.cpu_affinity, CPU_AFFINITY)
        _check_choice("trainer.spawn", self.spawn, SPAWN_METHODS)
        _check_int("trainer.torch_threads", self.torch_threads, 1, optional=True, maximum=MAX_CORES)
        check_seconds("trainer.setup_timeout_s", self.setup_timeout_s, 1)
        check_seconds("trainer.stall_timeout_s", self.stall_timeout_s, 1)
        check_seconds("trainer.epoch_timeout_s", self.epoch_timeout_s, 1, optional=True)
        if self.fault is not None:
            _check_choice("trainer.fault", self.fault, FAULTS)
        _check_int("trainer.fault_job", self.fault_job, 0)
        _check_int("trainer.fault_epoch", self.fault_epoch, 1, maximum=MAX_EPOCHS)


COMPILE_CACHE_VAR = "RAYCOLLOC_COMPILE_CACHE"
DEFAULT_COMPILE_CACHE = "/tmp/raycolloc-compile-cache"


def compile_cache_at(configured: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """The node's compile cache (a directory) and what named it: ``trainer.compile_cache``, else
    ``$RAYCOLLOC_COMPILE_CACHE`` in the node's ``environ``, else the default."""
    if configured:
        return configured, "trainer.compile_cache"
    if COMPILE_CACHE_VAR in environ:
        return environ[COMPILE_CACHE_VAR], f"${COMPILE_CACHE_VAR}"
    return DEFAULT_COMPILE_CACHE, "the default compile cache"


@dataclass
class TelemetryConfig:
    """``telemetry``: GPU sampling during a cell (source ``auto`` tries DCGM, GPM, NVML)."""

    enabled: bool = True
    interval_ms: int = 100
    source: str = "auto"
    processes: bool = True

    def __post_init__(self) -> None:
        _check_choice("telemetry.source", self.source, TELEMETRY_SOURCES)
        _check_int("telemetry.interval_ms", self.interval_ms, 10, maximum=MAX_INTERVAL_MS)
        if self.source == "gpm" and self.interval_ms < 100:
            raise ConfigError("telemetry.interval_ms must be >= 100 with telemetry.source=gpm (NVML GPM limit)")


@dataclass
class MeasureConfig:
    """``measure/``: how sure a configuration's rate must be, for ``repeats=auto``.

    ``target_ci``: the relative half-width of the 95% interval a configuration's rate should reach
    (0.03 = ±3%); one wider is run again, interleaved, up to ``max_repeats`` runs.
    ``min_solo_repeats``: runs of every degree-1 cell (the baselines every gain divides by), spread
    over the sweep (from its start to after its first pass), never refused by the budget (4: the first
    over the whole floor, the others over ``repeat_floor`` of it). ``budget``: the GPU time the added
    runs may take, as a share of the first pass's: re-runs for intervals get what the solos' repeats
    leave of it (0.3: at most 1.3 times the first pass, where the solos' repeats take less). ``statistic``: how the
    analysis forms a configuration's headline rate from its runs (``median``, ``mean`` or
    ``fastest``). ``warmup``: how long a repeat warms up: ``learned`` (as long as its first run's
    warm-up windows took to settle, :mod:`raycolloc.driver.warmup`) or ``epoch`` (a whole epoch, as
    every first run). ``repeat_floor``: the share of the floor (``min_epoch_s``) a solo baseline's
    repeats measure (:mod:`raycolloc.driver.floor`; 0.3 by default, 1: the whole floor). None of it is
    in the config hash: a repeat it shortens says so in its own config (``floor_share``), so that run is
    hashed apart.
    """

    target_ci: float = 0.03
    max_repeats: int = 5
    min_solo_repeats: int = 4
    budget: float = 0.3
    statistic: str = "median"
    warmup: str = "learned"
    repeat_floor: float = 0.3

    def __post_init__(self) -> None:
        if not is_number(self.target_ci) or not 0 < self.target_ci < 1:
            raise ConfigError(
                f"measure.target_ci={self.target_ci!r} is not allowed; it must be a number between 0 and 1 "
                "(0.03 = a 95% interval of ±3%)"
            )
        _check_int("measure.max_repeats", self.max_repeats, 1, maximum=MAX_REPEATS)
        _check_min(
            "measure.budget",
            self.budget,
            0,
            maximum=MAX_BUDGET,
            note=" (the added runs' GPU time as a share of the first pass's: 1.0 = as much again)",
        )
        _check_int("measure.min_solo_repeats", self.min_solo_repeats, 1)
        if self.min_solo_repeats > self.max_repeats:
            raise ConfigError(
                f"measure.min_solo_repeats={self.min_solo_repeats} is not allowed; it must be an integer "
                f"1..measure.max_repeats ({self.max_repeats}): lower it with measure.min_solo_repeats="
                f"{self.max_repeats}, or raise measure.max_repeats"
            )
        _check_choice("measure.statistic", self.statistic, STATISTICS)
        _check_choice("measure.warmup", self.warmup, WARMUPS)
        _check_min(
            "measure.repeat_floor", self.repeat_floor, 0.1, maximum=1, note=" (a solo repeat's share of the floor)"
        )


def check_repeats(value: object) -> None:
    """``repeats``: an integer >= 1 (exactly that many runs) or ``auto`` (adaptive, see ``measure``)."""
    if value == "auto":
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REPEATS:
        raise ConfigError(
            f"repeats={value!r} is not allowed; it must be an integer 1..{MAX_REPEATS} (exactly that many runs) "
            "or auto (adaptive: measure.target_ci, measure.max_repeats, measure.min_solo_repeats)"
        )


@dataclass
class QueueConfig:
    """``queue/``: the collocation-aware job queue (``python -m raycolloc.queue``).

    ``policy``: how jobs are placed. ``db``: its SQLite state (null: under ``out_dir``, one per trace
    and policy; a live queue's in ``out_dir/queue/live/``). ``sim_nodes`` x ``sim_gpus_per_node``: the
    simulated cluster (null: one node of ``cluster.num_gpus``). ``max_slowdown``: the bound of a job
    that names none. ``modes``: the sharing modes the ``raycolloc`` policy chooses among per GPU;
    ``carma_mode`` the one CARMA collocates under. ``aging_s``: a job waiting this long stops others
    from overtaking it.
    ``slowdown_margin``: the ``raycolloc`` policy keeps each job's *predicted* slowdown times
    1 + this within its bound (the model's error on real GPUs: two saturating jobs time-sliced ran
    12% slower than predicted). ``min_gain``: a job joins a busy GPU only where it adds at least this
    much work per second (relative to one job alone); below it, it waits for a better place (sharing
    that the model calls a wash loses throughput on a real GPU).
    ``order``: the order in which the ``raycolloc`` policy looks at the jobs waiting: ``longest`` (the
    longest alone first: the schedule's makespan rests on its long jobs) or ``arrival`` (first come,
    first served); either way a job re-queued after an OOM comes first and an aged one is not overtaken.
    ``backfill_depth``: queued jobs a placement pass looks at. ``oom_backoff``: an OOM multiplies the
    job's memory estimate by it. ``sim_mem_error``: a simulated job's true memory is its estimate
    times a factor within +-this. ``sim_speed``: a live queue's simulated seconds per wall second.
    ``sim_node_loss``: ``NODE@SECONDS`` entries, simulated nodes lost during a replay.
    ``runner``: what runs a replay's jobs: ``sim`` (the simulated cluster, virtual time) or ``ray``
    (the Ray cluster's GPUs through the stewards and trainer actors, wall-clock time).
    ``arrival_scale``: a ``ray`` replay waits ``submit_s`` times this before a job arrives.
    ``stand_in``: a workload preset every job of a ``ray`` replay trains in place of its own model
    (measured profiles are the stand-in's; catalogue ones the job's own; e.g. ``tiny_cnn`` on simulated
    GPUs). ``inject_oom``: job ids whose first attempt runs out of memory mid-epoch
    (``trainer.fault=oom``; ``ray`` runner).
    ``profiles``: where each job's profile alone comes from: ``catalog`` (the simulated cluster's round
    numbers, its truth) or ``measured`` (each workload profiled once on the cluster by the advisor's
    machinery; ``ray`` runner only); null: ``measured`` with ``runner=ray``, else ``catalog``.
    ``trace_*``: the trace generator's mean gap between arrivals (s), median length of a job alone
    (s), and light/medium/heavy shares; ``trace_scale``: ``short`` (those gaps and lengths) or ``carma``
    (CARMA's published job lengths and arrival gap, minutes to two hours; the gap and length keys unread).
    ``carma_estimator``: the ``carma`` policy's memory estimate: ``gpumemnet`` (8 GiB bins, a bin off as
    GPUMemNet's published outputs are, drawn per workload from ``carma_seed``) or ``bins`` (the right bin).
    ``sim_startup_s``: a simulated job's process shows on its GPU (and trains) this long after it starts.
    ``truth``: what plays a ``sim`` replay's GPUs: ``model`` (the advisor's model, which the ``raycolloc``
    policy places by) or ``corpus`` (the rates measured in ``corpus``; traces drawn from its workloads;
    the ``raycolloc`` policy places by the model fitted without each job's workload). ``corpus``: the
    measured corpus's folder (null: the repository's ``corpus/``).
    """

    policy: str = "raycolloc"
    db: str | None = None
    sim_nodes: int | None = None
    sim_gpus_per_node: int | None = None
    max_slowdown: float = 2.0
    modes: list[str] = field(default_factory=lambda: list(QUEUE_MODES))
    carma_mode: str = "mps"
    aging_s: float = 300.0
    slowdown_margin: float = 0.10
    min_gain: float = 0.05
    order: str = "longest"
    backfill_depth: int = 16
    oom_backoff: float = 1.5
    sim_mem_error: float = 0.15
    sim_oom_after_s: float = 5.0
    sim_speed: float = 1.0
    sim_node_loss: list[str] = field(default_factory=list)
    runner: str = "sim"
    arrival_scale: float = 1.0
    stand_in: str | None = None
    inject_oom: list[str] = field(default_factory=list)
    profiles: str | None = None
    trace_gap_s: float = 2.0
    trace_job_s: float = 25.0
    trace_mix: list[float] = field(default_factory=lambda: [0.4, 0.35, 0.25])
    truth: str = "model"
    corpus: str | None = None
    trace_scale: str = "short"
    carma_estimator: str = "gpumemnet"
    carma_seed: int = 0
    sim_startup_s: float = 0.0

    def __post_init__(self) -> None:
        _check_choice("queue.policy", self.policy, queue_policies())
        _check_int("queue.sim_nodes", self.sim_nodes, 1, optional=True, maximum=MAX_SIM_NODES)
        _check_int("queue.sim_gpus_per_node", self.sim_gpus_per_node, 1, optional=True, maximum=MAX_GPUS)
        _check_min("queue.max_slowdown", self.max_slowdown, 1, maximum=MAX_SLOWDOWN)
        if not self.modes:
            raise ConfigError(f"queue.modes=[] is not allowed; give one or more of: {', '.join(QUEUE_MODES)}")
        for mode in self.modes:
            _check_choice("queue.modes", mode, QUEUE_MODES)
        _check_choice("queue.carma_mode", self.carma_mode, QUEUE_MODES)
        _check_choice("queue.carma_estimator", self.carma_estimator, CARMA_ESTIMATORS)
        _check_int("queue.carma_seed", self.carma_seed, 0)
        _check_choice("queue.trace_scale", self.trace_scale, QUEUE_TRACE_SCALES)
        check_seconds("queue.sim_startup_s", self.sim_startup_s, 0)
        check_seconds("queue.aging_s", self.aging_s, 0)
        _check_range("queue.slowdown_margin", self.slowdown_margin, 0.0, 1.0)
        _check_range("queue.min_gain", self.min_gain, 0.0, 1.0)
        _check_choice("queue.order", self.order, QUEUE_ORDERS)
        _check_int("queue.backfill_depth", self.backfill_depth, 1)
        _check_min("queue.oom_backoff", self.oom_backoff, 1.01, maximum=MAX_OOM_BACKOFF)
        _check_range("queue.sim_mem_error", self.sim_mem_error, 0.0, 0.9)
        check_seconds("queue.sim_oom_after_s", self.sim_oom_after_s, 0)
        _check_min("queue.sim_speed", self.sim_speed, 0.001, maximum=MAX_SIM_SPEED)
        for loss in self.sim_node_loss:
            node, at, when = str(loss).partition("@")
            if not (at and node.isdigit() and when.replace(".", "", 1).isdigit()):
                raise ConfigError(
                    f"queue.sim_node_loss entry {loss!r} is not allowed; write NODE@SECONDS (e.g. 1@120: "
                    "simulated node 1 is lost 120 s into the run)"
                )
        _check_choice("queue.runner", self.runner, QUEUE_RUNNERS)
        _check_min("queue.arrival_scale", self.arrival_scale, 0, maximum=MAX_ARRIVAL_SCALE)
        if self.profiles is not None:
            _check_choice("queue.profiles", self.profiles, QUEUE_PROFILES)
            if self.profiles == "measured" and self.runner != "ray":
                raise ConfigError(
                    "queue.profiles=measured is not allowed with queue.runner=sim: the simulated cluster's truth "
                    "is the catalogue (use queue.profiles=catalog, or queue.runner=ray)"
                )
        _check_choice("queue.truth", self.truth, QUEUE_TRUTHS)
        if self.truth == "corpus" and self.runner == "ray":
            raise ConfigError(
                "queue.truth=corpus is not allowed with queue.runner=ray: real GPUs are their own truth "
                "(use queue.runner=sim)"
            )
        _check_min(
            "queue.trace_gap_s", self.trace_gap_s, 0.001, maximum=MAX_TRACE_S, what=" of seconds", note=" (a day)"
        )
        _check_min(
            "queue.trace_job_s", self.trace_job_s, 0.001, maximum=MAX_TRACE_S, what=" of seconds", note=" (a day)"
        )
        mix = self.trace_mix
        if len(mix) != 3 or not all(is_number(w) and 0 <= w <= MAX_SHARE for w in mix) or not sum(mix):
            raise ConfigError(
                f"queue.trace_mix={mix!r} is not allowed; give three shares 0..{MAX_SHARE} (light, medium, heavy; "
                "only their ratio counts), not all 0"
            )
