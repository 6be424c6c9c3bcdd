"""Connecting to Ray: an existing cluster (``cluster.address``) or a local instance.

With ``cluster.dashboard=true`` the local instance's dashboard URL is printed. Ray 2.60 turns on
token authentication for every new local cluster unless ``RAY_AUTH_MODE`` says otherwise, and the
dashboard then answers 401 to anyone without the token: so the token is printed with the URL (the
dashboard's page asks for it once). The token stays on: anyone else on the machine reaches
127.0.0.1 too, and the dashboard runs code.

A local instance that fails to start (Ray gives a raylet 30 s to register with its GCS, which a
loaded 2-core machine has missed) is shut down and started again, up to three times, each failure
logged with Ray's reason.

An address (``cluster.address``, else ``RAY_ADDRESS``) is probed before ``ray.init`` joins it
(:mod:`raycolloc.driver.rayprobe`: seconds, SIGTERM taken): ``ray.init`` itself retries an address where
no cluster answers for minutes, with SIGTERM held back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import ray
from ray._private import ray_constants
from ray._private import worker as ray_worker
from ray.util.debug import log_once

from raycolloc.config import ClusterConfig
from raycolloc.driver import signals
from raycolloc.driver.rayprobe import probe
from raycolloc.node.gpu.kinds import backend_traits

__all__ = [
    "PlainStream",
    "auth_token",
    "connect",
    "dashboard_line",
    "join_with_token_if_available",
    "plain_worker_lines",
    "quiet_token_notice",
    "start_local_ray",
]

log = logging.getLogger(__name__)
NAMESPACE = "raycolloc"
DEDUP_NOTICE = "log_dedup_warning"  # the key of Ray's "Ray deduplicates logs by default" notice
ANSI_SGR = re.compile(r"\x1b\[[0-9;]*m")  # a colour or style code: ESC [ ... m


class PlainStream:
    """A text stream that writes what it is given less its ANSI colour codes; all else is the stream's.

    Ray colours the ``[repeated 3x across cluster]`` it appends to a folded worker line whatever
    ``RAY_COLOR_PREFIX`` says (``ray/_private/ray_logging``, ``DedupState.formatted``), and writes it to
    ``sys.stdout``/``sys.stderr`` as they are when it prints: so the driver's own streams drop them.
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(ANSI_SGR.sub("", text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


START_ATTEMPTS = 3


def connect(cluster: ClusterConfig, max_jobs_per_cell: int = 1, quiet: bool = False) -> dict[str, Any]:
    """Connect to Ray once per process (no-op inside a Ray worker or when already connected).

    Ray's own INFO lines on the driver ("Started a local Ray instance", "Connecting to existing Ray
    cluster at address ...") are said only where this module logs at DEBUG (``hydra.verbose=true``):
    a sweep, an advice and a queue print their own lines (issue 46, item 7). Ray's warnings stay.
    ``quiet``: a client that only talks to an actor (``queue submit``, ``status``...) does not say its
    own ``ray=joined`` line either (at DEBUG).
    """
    if ray.is_initialized():
        return ray.cluster_resources()
    plain_worker_lines()
    kwargs: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": True}
    if not log.isEnabledFor(logging.DEBUG):
        kwargs["logging_level"] = logging.WARNING
    address = cluster.address or os.environ.get("RAY_ADDRESS")  # `ray job submit` sets RAY_ADDRESS
    if address:
        probe(address, "cluster.address" if cluster.address else "RAY_ADDRESS")
        join_with_token_if_available()
        with signals.shielded():  # a SIGTERM during ray.init waits for our handler
            ray.init(address=address, **kwargs)
            signals.reinstall()  # ray.init took SIGTERM (its native handler aborts the driver)
        resources = ray.cluster_resources()
        log.log(
            logging.DEBUG if quiet else logging.INFO, "ray=joined address=%s gpus=%s", address, resources.get("GPU")
        )
        return resources
    cpus = cluster.num_cpus or os.cpu_count() or 1
    if backend_traits(cluster.backend).declared_gpus:
        # Simulated GPUs: logical CPUs for a degree-7 cell on every fake GPU (the jobs are tiny).
        cpus = cluster.num_cpus or max(cpus, (max(7, max_jobs_per_cell) + 1) * cluster.num_gpus)
        kwargs["num_gpus"] = cluster.num_gpus
    kwargs["include_dashboard"] = cluster.dashboard
    if cluster.dashboard:
        kwargs.update(dashboard_host=cluster.dashboard_host, dashboard_port=cluster.dashboard_port)
    if cluster.metrics_export_port:
        kwargs["_metrics_export_port"] = cluster.metrics_export_port
    # Workers at normal priority (Ray's default niceness 15 slows CPU-bound kernel launching).
    # address="local": a new instance even where `ray start` left one (ray.init() would join that
    # one, and refuse num_cpus/num_gpus for it).
    # SIGTERM shielded: `timeout` signals the whole process group, the instance's processes too.
    with signals.shielded():
        context = start_local_ray(num_cpus=cpus, _system_config={"worker_niceness": 0}, **kwargs)
        signals.reinstall()  # ray.init took SIGTERM (its native handler aborts the driver)
    log.info("ray=local cpus=%s gpus=%s backend=%s", cpus, ray.cluster_resources().get("GPU"), cluster.backend)
    if cluster.dashboard and context.dashboard_url:
        # print, not log: the token must not land in the run's log files.
        print(dashboard_line(f"http://{context.dashboard_url}"), flush=True)
    return ray.cluster_resources()


def plain_worker_lines() -> None:
    """Workers' lines on this driver's console without Ray's decorations a reader cannot use.

    - Colour: Ray wraps each worker line's ``(Steward pid=...)`` prefix in ANSI colour codes whether or
      not its output is a terminal; into a log file or a pipe they land as ``ESC[36m``. Ray reads
      ``RAY_COLOR_PREFIX`` at each line it prints (``ray/_private/worker.py``, ``print_worker_logs``):
      ``0`` drops them. Set unless the console is a terminal, and unless the user set it. Ray
      colours the ``[repeated ...]`` of a folded line whatever that says: the driver's stdout and
      stderr that are not a terminal go through :class:`PlainStream`, which drops colour codes.
    - Deduplication: Ray folds a line repeated by several workers into one ``[repeated 3x across
      cluster]``, and the first such line carries a notice on how to turn that off
      (``RAY_DEDUP_LOGS=0``), often after the sweep's summary. The folding stays; the notice, a note to
      Ray's own users, is marked as said (``ray.util.debug.log_once``, the key
      ``ray/_private/ray_logging`` says it under).
    """
    if not (sys.stdout.isatty() and sys.stderr.isatty()):
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    if os.environ.get("RAY_COLOR_PREFIX") == "0":  # not where the user asked Ray for colour
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is not None and not isinstance(stream, PlainStream) and not stream.isatty():
                setattr(sys, name, PlainStream(stream))
    log_once(DEDUP_NOTICE)


def join_with_token_if_available() -> bool:
    """Before joining an address: turn token authentication on where ``RAY_AUTH_MODE`` is unset and this
    user has a token; True if it is on. Ray does so itself only for an instance it finds (``auto``),
    never for an address it is given, so the clients of a local instance that started with Ray's
    default (token authentication on, the token in ``~/.ray/auth_token``) were refused:
    ``queue submit`` in a second shell failed with ``InvalidAuthToken`` (issue 46, item 1). A cluster
    without authentication takes a client that sends a token."""
    if "RAY_AUTH_MODE" in os.environ:
        return os.environ["RAY_AUTH_MODE"].lower() == "token"
    try:
        from ray._private.authentication import authentication_token_setup as token_setup
    except ImportError:  # an older Ray, without token authentication
        return False
    with quiet_token_notice():
        return token_setup.maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


@contextlib.contextmanager
def quiet_token_notice() -> Iterator[None]:
    """Ray's notice that token authentication is on (a WARNING on every command that starts or joins an
    instance: noise, issue 46 item 7) kept quiet; the dashboard's line says the token where it is on."""
    quiet = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        yield
    finally:
        quiet.setLevel(level)


def start_local_ray(**kwargs: Any) -> Any:
    """``ray.init`` of a new local instance, started again where start-up itself failed."""
    for attempt in range(1, START_ATTEMPTS):
        before = _children()
        try:
            with quiet_token_notice():
                return stopped_at_once(ray.init(address="local", **kwargs))
        except (TypeError, ValueError):  # the arguments: another try cannot help
            raise
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception when a raylet is late
            log.warning(
                "Ray's local start-up failed (attempt %d of %d): %s: %s; stopping what started and trying again",
                attempt,
                START_ATTEMPTS,
                type(exc).__name__,
                str(exc).splitlines()[0][:300],
            )
            ray.shutdown()
            _stop_new_children(before)  # a failed ray.init leaves its GCS and raylet running: shutdown misses them
            time.sleep(2.0 * attempt)
    with quiet_token_notice():
        return stopped_at_once(ray.init(address="local", **kwargs))  # the last try: its error is the caller's


RAYLET = ray_constants.PROCESS_TYPE_RAYLET
RAYLET_CHILDREN_S = 5.0


def stopped_at_once(context: Any) -> Any:
    """The instance just started stops without Ray's grace where its processes cannot take it.

    Started inside :func:`signals.shielded`, Ray's processes inherit a blocked SIGTERM. Ray's shutdown
    (``ray.shutdown``, or its exit hook) sends each of its process kinds SIGTERM and waits a second
    before SIGKILL: raylet, GCS, monitor, dashboard, log monitor, one after the other, 5 s spent
    waiting for a signal that never arrives (measured: a one-cell sweep's ``ray.shutdown`` took 5.4 s).
    Such an instance is killed at once, the raylet first; its agents and workers, which end when they
    see it gone but report that to the GCS first (with the GCS gone, the agents waited 15 s), are given
    :data:`RAYLET_CHILDREN_S` before the rest goes. One started with SIGTERM free keeps Ray's grace."""
    node = getattr(ray_worker, "_global_node", None)
    if node is None or signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, []):
        return context
    kill = node.kill_all_processes

    def kill_at_once(check_alive: bool = True, allow_graceful: bool = False, wait: bool = False) -> None:
        raylets = node.all_processes.get(RAYLET, [])
        try:
            children = [c for info in raylets for c in psutil.Process(info.process.pid).children(recursive=True)]
        except psutil.Error:
            children = []
        if raylets:
            node._kill_process_type(RAYLET, check_alive=False, allow_graceful=False, wait=wait)
        psutil.wait_procs(children, timeout=RAYLET_CHILDREN_S)
        kill(check_alive=False, allow_graceful=False, wait=wait)

    node.kill_all_processes = kill_at_once
    return context


def _children() -> set[int]:
    try:
        return {p.pid for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()


def _stop_new_children(before: set[int]) -> None:
    """Stop the processes a failed start-up attempt left (every child of this driver that was not
    there before it: its GCS server, raylet, dashboard, monitors), so the next attempt starts alone
    (found in the test session: three GCS servers of failed attempts under one driver, one of them
    read as the session's own)."""
    try:
        left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    except psutil.Error:
        return
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(left, timeout=5)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def auth_token() -> str | None:
    """The Ray token of this user when token authentication is on (where Ray itself reads it:
    ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``), else None."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":  # ray.init sets it when it turns auth on
        return None
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        return path.read_text().strip()
    except OSError:
        return None


def dashboard_line(url: str) -> str:
    """The dashboard's URL, with the token it asks for when token authentication is on."""
    token = auth_token()
    if token is None:
        return f"Ray dashboard: {url}"
    return (
        f"Ray dashboard: {url}  token: {token}  (token authentication is on: the page asks for it once; "
        f"`ray get-auth-token` prints it again; API calls send 'Authorization: Bearer <token>')"
    )
