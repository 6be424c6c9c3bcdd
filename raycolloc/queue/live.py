"""The live queue on Ray: one detached actor holding a :class:`~raycolloc.queue.service.QueueService`.

With ``queue.runner=ray`` the actor's service leases every GPU of the cluster once (the simulated ones
with ``cluster=local`` where there is no GPU, the node's real ones, or a cluster's at ``cluster.address``)
and runs the jobs there (:mod:`raycolloc.queue.liveray`); the local instance ``serve`` starts is sized
for its trainer pools. When ``serve`` ends — drained, Ctrl-C or SIGTERM — it asks the actor to stop its
jobs and give every GPU back (trainers and their processes killed, MPS daemons stopped, leases
removed; :data:`SHUTDOWN_S`), then kills it. Killed at once (SIGKILL), it asks nothing: on the local
instance it started, Ray's processes die with it (the actor, its trainers and their training processes:
each dies with its parent), and an MPS daemon left behind is stopped by the next ``serve``'s steward
as it starts (``node/leftovers``); on a cluster at ``cluster.address`` the detached actor lives on and
its jobs keep running, and the next ``serve`` finds it by name and waits on it. Either way the
database (every change a transaction; its lock the kernel's, dropped with its owner) holds each job
in one state: a second ``serve`` whose actor is new re-queues what the first had running, so every
job ends exactly once.

``serve`` connects to Ray (``cluster.address``, or a new local instance), starts the actor by name
(or finds it: ``get_if_exists``) and writes the cluster's address beside the queue's database, where
``submit``, ``status``, ``cancel`` and ``drain`` find it; it removes the file as it ends. A file left by
a ``serve`` that was killed names an address where nothing answers: the connection is probed first
(:mod:`raycolloc.driver.rayprobe`, seconds), so those commands say "no live queue" at once
instead of waiting on Ray's retries. The actor ticks its service on a thread of
its own every ``TICK_S`` (:class:`Ticker`: jobs start and end with no command called) and answers calls
between ticks (one lock). A database another process owns, made with other settings, not kept in WAL
mode, or no database at all is refused before the actor is left running (``StoreBusy``,
``TraceMismatch``, ``ConfigMismatch``, ``JournalModeError``, ``StoreUnusable``: raised again by kind).
In Ray's dashboard it is the actor
``raycolloc:queue``, and every ``GAUGE_S`` it sets ``raycolloc_queue_jobs{state}`` (jobs per state),
``raycolloc_queue_gpu_jobs{gpu}`` and ``raycolloc_queue_gpu_sm_active{gpu}`` (each GPU's jobs and
SM activity). Answers cross the actor boundary
as dataclasses; a refused submission comes back as its message, never as a Ray error to unwrap.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import ray

from raycolloc.driver.lease import LeaseError
from raycolloc.gauges import make_gauge
from raycolloc.queue.dbcheck import ForeignDatabase, StoreDamaged
from raycolloc.queue.report import Summary
from raycolloc.queue.service import QueueClosed, QueueService, QueueStatus
from raycolloc.queue.settings import QueueSettings
from raycolloc.queue.state import ConfigMismatch, JournalModeError, StoreBusy, StoreUnusable, TraceMismatch
from raycolloc.queue.trace import TraceError

if TYPE_CHECKING:
    from ray.actor import ActorClass

__all__ = [
    "ACTOR_NAME",
    "NAMESPACE",
    "TICK_S",
    "GAUGE_S",
    "NoLiveQueue",
    "QueueActor",
    "QueueGauges",
    "Submitted",
    "Ticker",
    "address_file",
    "find_actor",
    "live_db",
    "serve",
    "start_actor",
    "wait_drained",
]

log = logging.getLogger(__name__)

NAMESPACE = "raycolloc"
ACTOR_NAME = "raycolloc:queue"
TICK_S = 0.1  # how often the actor catches its runners up (a simulated job's end is seen this late at most)
GAUGE_S = 1.0  # how often it sets its dashboard gauges (a status of every job and GPU is not free)
# How long serve waits for the actor to stop its jobs and give its GPUs back: each cell's release and each
# MPS daemon's stop is bounded at 120 s (rayrunners); on simulated GPUs it takes a few seconds.
SHUTDOWN_S = 300.0


@dataclass(frozen=True)
class QueueGauges:
    """The live queue's dashboard gauges (``raycolloc.gauges``: no-ops where Ray exports no metrics)."""

    jobs: Any
    gpu_jobs: Any
    gpu_sm_active: Any

    @classmethod
    def create(cls) -> QueueGauges:
        return cls(
            make_gauge("raycolloc_queue_jobs", "the live queue's jobs in each state", ["state"]),
            make_gauge("raycolloc_queue_gpu_jobs", "jobs on each GPU of the live queue", ["gpu"]),
            make_gauge("raycolloc_queue_gpu_sm_active", "SM activity (0..1) of each GPU of the live queue", ["gpu"]),
        )

    def publish(self, status: QueueStatus) -> None:
        """Set every gauge from one status."""
        for state, count in status.counts.items():
            self.jobs.set(float(count), tags={"state": state})
        for gpu in status.gpus:
            self.gpu_jobs.set(float(len(gpu.jobs)), tags={"gpu": gpu.gpu_id})
            self.gpu_sm_active.set(gpu.sm_active, tags={"gpu": gpu.gpu_id})


class NoLiveQueue(RuntimeError):
    """No live queue answers where the command looked (no ``serve`` running for this ``out_dir``)."""


@dataclass(frozen=True)
class Submitted:
    """A submission's answer: the job's id, or why it was refused (nothing queued)."""

    job_id: str | None
    error: str | None


def live_db(settings: QueueSettings) -> Path:
    """The live queue's database: ``queue.db``, else ``out_dir/queue/live/queue.sqlite``."""
    db = settings.config.queue.db
    return Path(db) if db else settings.out_dir / "queue" / "live" / "queue.sqlite"


def address_file(settings: QueueSettings) -> Path:
    """Where ``serve`` writes the Ray cluster's address for the other commands."""
    return live_db(settings).with_name("ray-address")


class Ticker:
    """A service ticked every ``TICK_S`` on a thread of its own (and its gauges set every ``GAUGE_S``),
    each tick under ``lock``, which every other use of the service takes too."""

    def __init__(self, service: QueueService, lock: threading.Lock, gauges: QueueGauges) -> None:
        self._service, self._lock, self._gauges = service, lock, gauges
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="queue-tick", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        published, failed = 0.0, ""
        while not self._stop.wait(TICK_S):
            with self._lock:
                try:
                    self._service.tick()
                    if time.monotonic() - published >= GAUGE_S:
                        self._gauges.publish(self._service.status())
                        published = time.monotonic()
                    failed = ""
                except Exception as exc:
                    # Logged (once per kind of failure: it may repeat every tick), and ticked again: a
                    # thread that died here would leave jobs moving only when a command is called.
                    if repr(exc) != failed:
                        log.exception("queue tick failed")
                    failed = repr(exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# What a database the actor may not open raises; it says which (by name) and start_actor raises it again,
# so a command maps it to exit 2 as it would without Ray (an exception escaping the constructor would
# reach start_actor as ActorDiedError: a traceback, exit 1).
_REFUSALS: dict[str, type[Exception]] = {
    c.__name__: c
    for c in (
        StoreBusy,
        TraceMismatch,
        ConfigMismatch,
        JournalModeError,
        StoreUnusable,
        ForeignDatabase,
        StoreDamaged,
        LeaseError,  # queue.runner=ray: no GPU on the cluster, or one not granted in time
    )
}


@ray.remote(num_cpus=0)
class QueueActor:
    """The live queue: its service, ticked on a thread; every call under one lock. A database it may
    not open leaves it without a service, and :meth:`refused` says why."""

    def __init__(self, settings: QueueSettings, db: str) -> None:
        self._lock = threading.Lock()
        self._refused: str | None = None
        self._ticker: Ticker | None = None
        self._final: QueueStatus | None = None  # the last status, once shut down
        try:
            self._service = QueueService(settings, Path(db))
        except tuple(_REFUSALS.values()) as exc:
            self._refused = f"{type(exc).__name__}: {exc}"
            return
        self._ticker = Ticker(self._service, self._lock, QueueGauges.create())

    def refused(self) -> str | None:
        """Why the actor holds no queue (its database), or None."""
        return self._refused

    # Once shut down (``serve`` ended) the service is closed: a command that reaches the actor before it is
    # killed (a second ``drain --wait`` polling beside ``serve``) gets the last status, and nothing changes.
    def submit(self, fields: dict[str, str]) -> Submitted:
        with self._lock:
            if self._final is not None:
                return Submitted(None, "the queue has stopped (serve ended): it takes no new job")
            try:
                return Submitted(self._service.submit(fields), None)
            except (TraceError, QueueClosed) as exc:
                return Submitted(None, str(exc))

    def status(self) -> QueueStatus:
        with self._lock:
            return self._final or self._service.status()

    def cancel(self, job_id: str) -> str | None:
        with self._lock:
            return None if self._final is not None else self._service.cancel(job_id)

    def drain(self) -> None:
        with self._lock:
            if self._final is None:
                self._service.drain()

    def summary(self) -> Summary:
        with self._lock:
            return self._service.summary()

    def shutdown(self) -> None:
        """Stop ticking, stop the jobs (``queue.runner=ray``: GPUs given back) and close the database,
        keeping the last status (the actor is killed after)."""
        if self._ticker is None:
            return
        self._ticker.stop()
        with self._lock:
            if self._final is None:
                self._final = replace(self._service.status(), draining=True)
                self._service.close()


def start_actor(settings: QueueSettings) -> Any:
    """The live queue's actor on the connected cluster: started, or the running one found.

    Raises:
        StoreBusy: another process owns the database (the actor is killed, nothing written).
        TraceMismatch: the database is another queue's, or made with other settings (likewise).
        JournalModeError, StoreUnusable: SQLite would not keep it in WAL mode; it is no database.
    """
    db = live_db(settings)
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreUnusable(f"queue.db={db}: not usable as the queue's database ({exc})") from None
    options = {"name": ACTOR_NAME, "namespace": NAMESPACE, "lifetime": "detached", "get_if_exists": True}
    # cast: what @ray.remote made of the class (mypy sees the class itself through the decorator's stub).
    actor_class = cast("ActorClass[QueueActor]", QueueActor)
    actor: Any = actor_class.options(**options).remote(settings, str(db))
    # Up, its database open and (queue.runner=ray) every GPU leased, or why not.
    refused = ray.get(actor.refused.remote(), timeout=120 + settings.config.cluster.lease_timeout_s)
    if refused is not None:
        ray.kill(actor)  # detached: it would keep the name, and the next serve would find it empty
        kind, _, message = refused.partition(": ")
        raise _REFUSALS.get(kind, TraceMismatch)(message)
    address_file(settings).write_text(ray.get_runtime_context().gcs_address)
    return actor


def wait_drained(actor: Any, poll_s: float = 1.0, report: Callable[[QueueStatus], None] | None = None) -> QueueStatus:
    """Poll until the queue is drained; ``report`` sees each status whose counts changed."""
    last: dict[str, int] | None = None
    status: QueueStatus | None = None
    while True:
        try:
            status = ray.get(actor.status.remote(), timeout=60)
        except ray.exceptions.RayActorError:  # serve ended and killed it between two polls: drained
            if status is None:
                raise
            return replace(status, draining=True)
        assert status is not None
        if report is not None and status.counts != last:
            report(status)
            last = status.counts
        if status.drained:
            return status
        time.sleep(poll_s)


def find_actor(settings: QueueSettings) -> Any:
    """The running live queue's actor, through the address ``serve`` wrote (or ``cluster.address``).

    Raises:
        NoLiveQueue: no address written and none given, or no queue actor on that cluster.
    """
    from raycolloc.driver.cluster import connect
    from raycolloc.driver.rayprobe import RayUnreachable

    path = address_file(settings)
    address = settings.config.cluster.address or (path.read_text().strip() if path.is_file() else None)
    if not address:
        raise NoLiveQueue(f"no live queue: {path} does not exist (start one with `serve`, same out_dir)")
    try:
        # Probed first: a dead address fails at once. Quiet: the command prints its answer, not Ray's join.
        connect(replace(settings.config.cluster, address=address), quiet=True)
        return ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
    except RayUnreachable:
        given = "cluster.address" if settings.config.cluster.address else f"the address in {path}"
        raise NoLiveQueue(
            f"no live queue: nothing answers at {address} ({given}; the `serve` that wrote it has ended). "
            "Start one with `serve`, same out_dir"
        ) from None
    except (ConnectionError, ValueError) as exc:
        raise NoLiveQueue(f"no live queue at {address}: {type(exc).__name__}: {exc}") from None


def serve(
    settings: QueueSettings,
    report: Callable[[QueueStatus], None],
    poll_s: float = 1.0,
    ready: Callable[[], None] | None = None,
) -> Summary:
    """Start the live queue on a Ray cluster and run it until it is drained (``drain``); returns its
    summary. ``ready`` is called once other processes can reach it (its address written). Ctrl-C stops
    it with its database kept: ``serve`` again resumes it."""
    from raycolloc.driver.cell_specs import resolve_backend
    from raycolloc.driver.cluster import connect
    from raycolloc.queue.raylanes import POOL_SIZE

    ray_runner = settings.config.queue.runner == "ray"
    # cluster.backend=auto resolved once, here (nvml with a GPU or an address, else sim): the actor's
    # stewards and cells are told which (on an H200, serve failed with "no GPU backend 'auto'").
    settings = replace(settings, config=resolve_backend(settings.config))
    connect(settings.config.cluster, POOL_SIZE if ray_runner else 1)  # a local instance sized for the pools
    actor = start_actor(settings)
    try:
        if ready is not None:  # inside: a print that fails (a closed pipe, Ctrl-C) still shuts the actor down
            ready()
        wait_drained(actor, poll_s, report=report)
        summary: Summary = ray.get(actor.summary.remote(), timeout=60)
        return summary
    finally:
        address_file(settings).unlink(missing_ok=True)  # no queue answers there any more
        try:  # queue.runner=ray: its jobs stopped, MPS daemons stopped, leases removed (bounded waits)
            ray.get(actor.shutdown.remote(), timeout=SHUTDOWN_S)
        finally:
            ray.kill(actor)
