"""A trace run to its end on the simulated cluster, through the queue's own code (virtual time).

The trace is read and every job's profile found first: a malformed trace or a job the simulated
cluster has no profile of is refused before any state exists. Then the queue's database (under
``out_dir/queue/<trace>-<policy>-<cluster>/``, the cluster as ``<nodes>x<gpus>-<gpu model>`` or
``ray-<backend>``; or ``queue.db``) is opened: a new one takes the trace's jobs; one left by
an earlier run of the same trace, policy, cluster and queue settings (stopped or killed) is resumed —
jobs it had running are re-queued, since their runners died with it — so every job ends exactly once;
one made with other settings is refused, naming them (:func:`claim_run`). The loop
moves virtual time from one thing that happens to the next: an arrival, an end or an OOM on a GPU, or
a wake-up the policy asked for. Written beside the database: ``jobs.parquet`` (one row per job),
``gpus.parquet`` (each GPU's mode, jobs, SM activity, power and memory from each change on) and
``summary.json``, each naming the truth that played the GPUs (``queue.truth``:
:mod:`raycolloc.queue.truth`). Energy adds up over restarts (less what a killed run had not recorded: its part
since its last start); GPU rows are the last run's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from raycolloc.advise.profile import Profile
from raycolloc.config import ConfigError
from raycolloc.config_groups import QueueConfig
from raycolloc.queue.catalog import NoProfile, catalog_profile
from raycolloc.queue.core import Queue
from raycolloc.queue.corpus import corpus_dir, load_corpus
from raycolloc.queue.policies import create_policy
from raycolloc.queue.report import Summary, format_summary, job_rows, summarise, write_parquet, write_summary
from raycolloc.queue.settings import QueueSettings
from raycolloc.queue.simcluster import SimCluster, TelemetryRow
from raycolloc.queue.state import ConfigMismatch, Store
from raycolloc.queue.trace import TraceError, TraceJob, read_trace, refuse_unprofiled_kind
from raycolloc.queue.truth import create_truth

__all__ = [
    "ReplayOutcome",
    "claim_run",
    "cluster_label",
    "format_summary",
    "lengths_known",
    "replay",
    "run_dir",
    "run_settings",
    "trace_digest",
    "trace_profiles",
]

# Keys no run depends on: where the database is, and the trace generator's (the trace itself is claimed
# by its digest); and the cluster's shape, claimed as resolved (sim_nodes=null and =1 are one cluster).
# Every other ``queue.*`` key is part of what a database was made with.
_UNCLAIMED = frozenset(
    {"db", "trace_gap_s", "trace_job_s", "trace_mix", "trace_scale", "sim_nodes", "sim_gpus_per_node"}
)


@dataclass(frozen=True)
class ReplayOutcome:
    """Where a replay wrote, and its summary."""

    summary: Summary
    directory: Path
    jobs_file: Path


def cluster_label(settings: QueueSettings, legacy: bool = False) -> str:
    """The cluster a replay runs on, for its directory's name: ``<nodes>x<gpus>-<gpu model>`` simulated,
    ``ray-<backend>`` on a Ray cluster's GPUs (their count and model are what the cluster has: the
    catalogue's model, ``cluster.gpu_model``, is not theirs; ``legacy``: the name before, which carried
    it)."""
    config = settings.config
    if config.queue.runner == "ray":
        label = f"ray-{config.cluster.backend}" + (f"-{settings.gpu.name}" if legacy else "")
    else:
        label = f"{settings.nodes}x{settings.gpus_per_node}-{settings.gpu.name}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label)


def run_dir(trace: Path, settings: QueueSettings) -> Path:
    """Where a replay of ``trace`` keeps its database and results: one directory per trace, policy,
    cluster and truth (``-corpus`` ends the name of a run on measured truth), so that runs of one trace
    on other clusters or truths sit side by side in one ``out_dir``. A ray
    replay's database made under the name before (``ray-<backend>-<gpu model>``) is found there and
    resumed, not started afresh beside it."""
    queue = settings.config.queue
    if queue.db:
        return Path(queue.db).parent
    name = f"{trace.stem}-{queue.policy}-"
    truth = "-corpus" if queue.truth == "corpus" else ""  # the model's runs keep the name they had
    directory = settings.out_dir / "queue" / (name + cluster_label(settings) + truth)
    legacy = settings.out_dir / "queue" / (name + cluster_label(settings, legacy=True))
    if queue.runner == "ray" and not directory.exists() and (legacy / "queue.sqlite").is_file():
        return legacy
    return directory


# queue.* keys added after databases were claimed with their settings, and their defaults: left out of
# the claim while at their default, so a database made before a key existed is still accepted (as
# raycolloc.config's _LATER_KEYS keep config_hash). Rule: every queue key added from now on goes here.
# The value kept out is how a run behaved before the key existed (the margins: none), so a database
# made before it is resumed as it ran, or refused with the key named.
_LATER_KEYS: dict[str, object] = {
    "profiles": None,
    "slowdown_margin": 0.0,
    "min_gain": 0.0,
    "order": "arrival",
    "truth": "model",
    "corpus": None,
    "carma_estimator": "bins",
    "carma_seed": 0,
    "sim_startup_s": 0.0,
}


def run_settings(queue: QueueConfig) -> dict[str, object]:
    """The ``queue.*`` settings a run depends on (what its database is claimed with); a key added later
    is left out while at its default (``_LATER_KEYS``)."""
    return {
        f"queue.{k}": v
        for k, v in dataclasses.asdict(queue).items()
        if k not in _UNCLAIMED and not (k in _LATER_KEYS and v == _LATER_KEYS[k])
    }


def claim_run(store: Store, trace: str, shape: str, settings: QueueSettings) -> None:
    """Record what ``store`` runs (trace, policy, cluster, queue settings) or check it is that.

    Raises:
        TraceMismatch: another trace, policy or cluster; ConfigMismatch: other settings (named).
    """
    config = settings.config
    for key, value in (("trace", trace), ("policy", config.queue.policy), ("cluster", f"{shape} seed={config.seed}")):
        store.claim(key, value)
    claimed = run_settings(config.queue)
    try:
        store.claim_config(claimed)
    except ConfigMismatch as exc:
        # A later key the database never recorded ran at its _LATER_KEYS value: say which that was.
        recorded = json.loads(store.meta("config") or "{}")
        absent = [k for k in _LATER_KEYS if f"queue.{k}" in claimed and f"queue.{k}" not in recorded]
        then = [f"queue.{k}={json.dumps(_LATER_KEYS[k])}" for k in absent]
        if not then:
            raise
        raise ConfigMismatch(f"{exc} (null there: made before the key existed; it ran as {', '.join(then)})") from None


def trace_profiles(trace: Path, jobs: list[TraceJob], settings: QueueSettings) -> dict[str, Profile]:
    """Every job's profile on the simulated GPU model (``queue.truth=corpus``: its workload's naive solo
    in the corpus); refuses the trace at its first unknown job.

    Raises:
        TraceError: a job the catalogue has no profile of; CorpusError: a job whose workload the corpus lacks.
    """
    out = {}
    queue = settings.config.queue
    corpus = load_corpus(corpus_dir(queue)) if queue.truth == "corpus" else None
    for job in jobs:
        if corpus is not None:
            corpus.check(job.workload, f"{trace}: job {job.job_id}")
            out[job.job_id] = corpus.solo[job.workload]
            continue
        try:
            out[job.job_id] = catalog_profile(job.workload, settings.gpu)
        except NoProfile as exc:
            raise TraceError(f"{trace}: job {job.job_id}", "model", str(exc)) from None
    lengths_known(trace, jobs)
    return out


def lengths_known(trace: Path, jobs: list[TraceJob]) -> None:
    """Refuse the trace at its first job whose length in samples is not known."""
    for job in jobs:
        if job.length_samples is None:
            raise TraceError(f"{trace}: job {job.job_id}", "epochs", "its dataset's size is unknown; give samples")


def trace_digest(jobs: list[TraceJob]) -> str:
    return hashlib.sha256(json.dumps([j.__dict__ for j in jobs], sort_keys=True).encode()).hexdigest()[:16]


def replay(trace: Path, settings: QueueSettings, open_store: Callable[[Path], Store] = Store) -> ReplayOutcome:
    """Run ``trace`` on the simulated cluster to its end (or resume it); ``open_store`` opens the
    database (tests pass one that dies part way).

    Raises:
        TraceError: a malformed trace, or a job without a profile or length (nothing is queued).
        TraceMismatch: the database holds another trace, policy, cluster or queue settings.
        StoreBusy: another process runs it.
    """
    jobs = read_trace(trace)
    for job in jobs:
        refuse_unprofiled_kind(job, f"{trace}: job {job.job_id}")
    profiles = trace_profiles(trace, jobs, settings)
    config, gpu = settings.config, settings.gpu
    directory = run_dir(trace, settings)
    losses = sorted((float(w), int(n)) for n, _, w in (str(x).partition("@") for x in config.queue.sim_node_loss))
    for _, node in losses:
        if node >= settings.nodes:
            raise ConfigError(f"queue.sim_node_loss: node {node} is not allowed; nodes are 0..{settings.nodes - 1}")
    db = Path(config.queue.db) if config.queue.db else directory / "queue.sqlite"
    store = open_store(db)
    try:
        claim_run(store, trace_digest(jobs), f"{settings.nodes}x{settings.gpus_per_node} {gpu.name}", settings)
        predictor, truth = create_truth(config.queue, gpu, config.seed)
        now = store.clock()
        cluster = SimCluster(settings.nodes, settings.gpus_per_node, gpu, truth, config.queue, now)
        queue = Queue(
            store, create_policy(config.queue, gpu, predictor), cluster, config.queue, gpu, lambda j: profiles[j.job_id]
        )
        counts = store.counts()
        counts_before = sum(counts.values())
        over = counts_before > 0 and counts["ended"] + counts["cancelled"] == counts_before
        if sum(counts.values()):
            queue.resume(now)
        else:
            store.add(jobs, [profiles[j.job_id].job_mem_mib for j in jobs], now, config.queue.max_slowdown)
        start = time.perf_counter()
        _run(queue, cluster, store, now, losses)
        wall = time.perf_counter() - start
        # Energy of every (re)start that ran to here; a killed run's part since its last start is lost.
        energy = float(store.meta("energy_j") or 0.0) + cluster.energy_j
        store.put("energy_j", repr(energy))

        def alone(job: TraceJob) -> float | None:
            return (job.length_samples or 0) / profiles[job.job_id].samples_per_s

        # Each job's bound is the one stored with it; the default only fills a database made before that.
        rows = job_rows(config.queue.policy, store.jobs(), alone, config.queue.max_slowdown, truth=truth.name)
        # SM activity over the makespan needs every GPU row of the run: this session's where it ran it all,
        # the rows of the session that did where it was over already, none where it resumed one part way.
        gpu_rows = cluster.telemetry if not counts_before else _gpu_rows(directory / "gpus.parquet") if over else []
        summary = summarise(
            config.queue.policy,
            rows,
            energy,
            wall,
            profiles="corpus" if truth.name == "corpus" else "catalog",
            ends_lost=len(store.ends_lost()),
            truth=truth.name,
            telemetry=gpu_rows,
        )
        jobs_file = write_parquet(directory / "jobs.parquet", rows)
        if not over:  # a run found already over ran nothing: the GPU rows of the run that did stay
            write_parquet(directory / "gpus.parquet", cluster.telemetry)
        write_summary(directory / "summary.json", summary)
    finally:
        store.close()
    return ReplayOutcome(summary, directory, jobs_file)


def _gpu_rows(path: Path) -> list[TelemetryRow]:
    """The GPU rows an earlier session wrote (none where it wrote none)."""
    if not path.is_file():
        return []
    import pyarrow.parquet as pq

    return [TelemetryRow(**row) for row in pq.read_table(path).to_pylist()]


def _run(queue: Queue, cluster: SimCluster, store: Store, now: float, losses: list[tuple[float, int]]) -> None:
    """Virtual time from ``now`` until nothing is left to happen; ``losses``: (time, node) to lose."""
    pending = list(losses)  # a resumed run's fresh cluster loses the earlier ones again, at once
    while True:
        queue.handle(cluster.advance(now))
        while pending and pending[0][0] <= now:
            queue.handle(cluster.lose_node(pending.pop(0)[1], now))
        retry = queue.schedule(now)
        work_left = store.next_arrival(now) is not None or cluster.next_event() is not None or retry is not None
        lose = pending[0][0] if pending and work_left else None
        upcoming = [t for t in (store.next_arrival(now), cluster.next_event(), retry, lose) if t is not None]
        if not upcoming:
            return
        now = max(now, min(upcoming))
