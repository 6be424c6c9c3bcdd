"""Shared fixtures: the real conf/ tree composed with CPU overrides, one local Ray instance with
fake GPUs for the whole session, and a runner for the real command line."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from raycolloc import conf_dir
from raycolloc.localdirs import PIPE_ROOT_ENV

from .session_dirs import leave_nothing, temp_suspects

ROOT = Path(__file__).resolve().parents[1]
CONF = conf_dir()  # the tree the code composes from (the checkout's conf/: test_packaging checks)
SESSION_ENV = "RAYCOLLOC_TEST_SESSION_DIR"
# Nothing of the tests' Ray instances goes to ~/.ray (Ray >= 2.60 writes an auth token there).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Compiled kernels outlive the session (compiling again costs minutes): kept with the user's caches, not
# in /tmp, which the suite leaves as it found it (issue 46, item 5).
os.environ.setdefault("RAYCOLLOC_COMPILE_CACHE", str(Path.home() / ".cache" / "raycolloc" / "test-compile-cache"))
# And the kernels of what the tests compile in their own process (tests/test_fastpaths.py): inductor's
# default is /tmp/torchinductor_<user>, which every `make test` wrote (2026-12-05).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(os.environ["RAYCOLLOC_COMPILE_CACHE"]) / "inductor"))
# Everything the session makes outside pytest's tmp_path lies in one short directory of its own (Unix
# socket paths under it must stay under ~100 characters), removed when the session ends, with a check
# that it is (issue 46, item 5: each run left /tmp/raycolloc-test-* and MPS pipe directories behind,
# so that `raycolloc doctor` exited 1 after `make test`). Its simulated GPUs (MIG layouts and memory
# persist in state files, as on a GPU), the memory estimates of its processes (driver, CLI sweeps,
# simulated jobs), and the MPS pipes of every run that names no mode.pipe_root.
# (A pytest run inside a test makes a directory of its own: only its maker removes the whole of one.)
if os.environ.get("PYTEST_XDIST_WORKER") is None or SESSION_ENV not in os.environ:
    os.environ[SESSION_ENV] = tempfile.mkdtemp(prefix="rc", dir="/tmp")
# Under pytest-xdist each worker is a session of its own (its Ray instance, steward and simulated GPUs):
# the workers inherit the controller's environment, so without their own directory they would share one
# simulated machine, and one worker's MPS cell would find the other's daemon on "its" GPU.
SHORT_TMP = Path(os.environ[SESSION_ENV], os.environ.get("PYTEST_XDIST_WORKER", "main"))
SHORT_TMP.mkdir(exist_ok=True)
os.environ["RAYCOLLOC_SIM_ROOT"] = str(SHORT_TMP / "sim")
# The temporary files of every process the session starts (a benchmark script's work directory and its
# rawsync* pipes, multiprocessing's pymp-*, a sweep's) go under the session's directory too, and are
# removed with it: /tmp kept bench*, overhead*, fanout*, rawsync* and pymp-* after each `make test`.
# Ray's own stay where a user's would (Ray reads TMPDIR too, and its socket paths must stay short), and so
# do this process's (pytest's tmp_path). A worker reads the machine's directory from its controller.
SYSTEM_TMP = os.environ.setdefault("RAYCOLLOC_TEST_SYSTEM_TMP", tempfile.gettempdir())
tempfile.tempdir = SYSTEM_TMP
os.environ.setdefault("RAY_TMPDIR", SYSTEM_TMP)
_TMP_BEFORE = temp_suspects(Path(SYSTEM_TMP)) if os.environ.get("PYTEST_XDIST_WORKER") is None else set()
os.environ["TMPDIR"] = str(SHORT_TMP / "tmp")
Path(os.environ["TMPDIR"]).mkdir(exist_ok=True)
os.environ["RAYCOLLOC_CACHE_DIR"] = str(SHORT_TMP / "cache")
os.environ[PIPE_ROOT_ENV] = str(SHORT_TMP / "mps")


def short_tmp(prefix: str) -> Path:
    """A new directory of this session's with a short path (an MPS pipe's socket lies under it)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=SHORT_TMP))


# A suite started in the background of a non-interactive shell inherits SIGINT ignored, and so would
# every sweep it starts: the Ctrl-C tests would wait for an interrupt that never lands. Sweeps start
# with the default (a handler set here resets to it in a child).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

CPU_OVERRIDES = ["cluster=local", "workload=tiny_cnn", "telemetry.interval_ms=50"]

# --- the order of test modules ------------------------------------------------------------------------
# `make test` hands whole modules to its two workers (`--dist loadfile`), longest first, so that the
# workers end together: in file order (`--dist worksteal`) the fault suite's longest tests came last,
# and one worker ran the final ~70 s alone. The seconds per module are a past run's (`--store-durations`
# rewrites them); a module not listed goes first. A stale file costs balance, never a test.
DURATIONS = Path(__file__).with_name("durations.json")
_seconds: dict[str, float] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-durations",
        action="store_true",
        help=f"write each test module's seconds (setup, call, teardown) to {DURATIONS.name}",
    )


# --- the two tiers ----------------------------------------------------------------------------------
# `slow` marks a test that runs the real thing end to end (it trains, starts or joins a Ray instance,
# or runs a sweep that does) or takes more than a few seconds for another reason (figures, a compiler).
# `make test` (CI) runs every test; `make test-fast` and a plain `pytest` leave the slow ones out and
# start no Ray. Marked here: the modules that are end to end throughout, and every test that uses the
# session's instance (`ray_local`); the others carry the marker themselves, and `session_ray` fails an
# unmarked test that reaches for Ray.
END_TO_END = {
    "test_faults.py",
    "test_benchmarks.py",
    "test_dashboard.py",
    "test_report_e2e.py",
    "test_noise_sim.py",
    "test_advise_cells.py",
    "test_mig_cells.py",
    "test_job_process.py",
}
_running: pytest.Item | None = None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in END_TO_END or "ray_local" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    items.sort(key=lambda item: -known.get(item.nodeid.split("::")[0], float("inf")))  # stable within a module


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    global _running
    _running = item
    # Torch in the test process itself (a step built and trained in-process, a model built for its
    # estimate) on one thread: with its default of one per core, two workers on 2 cores spin OpenMP threads
    # at each other. 12 steps of tiny_cnn: 2.3 -> 0.15 CPU-seconds, 15 -> 2 s under a load of 20. What the
    # tests start (trainers, sweeps, scripts) sets its own threads.
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::")[0]
    _seconds[module] = _seconds.get(module, 0.0) + report.duration


_left_by_workers: list[str] = []  # the controller's: what each xdist worker's session left


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """An xdist worker ended: what its session left (its own exit status never reached the run's: CI
    2026-12-03 passed beside "the test session left behind: process ... nvidia-cuda-mps-server")."""
    _left_by_workers.extend(getattr(node, "workeroutput", {}).get("left", []))


def pytest_sessionfinish(session: pytest.Session) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    # A worker's own directory, or the session's; the doctor looks at the pipe root of every run here that
    # named none (as `raycolloc doctor` does at the user's after `make test`).
    left = leave_nothing(SHORT_TMP if worker else SHORT_TMP.parent, pipe_roots=[SHORT_TMP / "mps"], stop_ray=True)
    if worker and left:  # the controller fails the run: a worker's own status is not the run's
        session.config.workeroutput["left"] = left
    left += _left_by_workers
    if not worker:  # and what the run's processes left in the machine's temporary directory
        left += [f"{SYSTEM_TMP}/{name}" for name in sorted(temp_suspects(Path(SYSTEM_TMP)) - _TMP_BEFORE)]
    if left:  # the run fails: a test left what its cleanup does not reach
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        sys.stderr.write(f"\nthe test session left behind: {'; '.join(left)}\n")
    # The controller of an xdist run sees every worker's reports; each worker writes nothing.
    if session.config.getoption("--store-durations") and not worker:
        known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
        ranked = sorted({**known, **_seconds}.items(), key=lambda kv: -kv[1])  # modules that did not run keep theirs
        DURATIONS.write_text(json.dumps({module: round(s, 1) for module, s in ranked}, indent=1) + "\n")


def compose(overrides: list[str] | None = None):  # noqa: ANN201 - returns a DictConfig
    """Compose the real config tree with ``overrides`` (no Hydra run, no output dir), as the queue and the
    advisor do (``raycolloc.config_compose``: Hydra's composition, once per list of group choices)."""
    from raycolloc.config_compose import compose_config

    return compose_config(overrides or [])


def load(overrides: list[str] | None = None, out_dir: Path | None = None):  # noqa: ANN201
    """Compose and validate into a raycolloc CellSpec (CPU overrides first)."""
    from raycolloc.driver.cell_specs import validate_cell

    extra = [f"out_dir={out_dir}"] if out_dir else []
    return validate_cell(compose(CPU_OVERRIDES + extra + (overrides or [])))


def table_rows(name: str, dicts: list[dict]) -> list:
    """Fixture rows for ``write_cell``: each dict as the table's row dataclass, unset columns None."""
    import dataclasses

    from raycolloc.results.rows import ROWS

    fields = {f.name for f in dataclasses.fields(ROWS[name])}
    for d in dicts:
        unknown = set(d) - fields
        assert not unknown, f"{name}: no such columns {sorted(unknown)}"
    return [ROWS[name](**{f: d.get(f) for f in fields}) for d in dicts]


def write_fixture_cell(cell_dir: Path, tables: dict[str, list[dict]]) -> None:
    """Write a fixture cell through the real writer (rows given as dicts)."""
    from raycolloc.results.store import write_cell

    write_cell(cell_dir, {name: table_rows(name, rows) for name, rows in tables.items()})


def run_one(spec, cell_dir: Path):  # noqa: ANN001, ANN201
    """Run one cell in this process through the engine (the session's Ray instance); returns its
    result and its four tables as DataFrames."""
    import pandas as pd

    from raycolloc.driver.engine import run_cells
    from raycolloc.results.schema import TABLES

    (result,) = run_cells([(spec, cell_dir)], rerun=True)
    return result, {name: pd.read_parquet(cell_dir / f"{name}.parquet") for name in TABLES}


def sim_backend(spec):  # noqa: ANN001, ANN201
    """The simulated GPUs the session's steward for ``spec``'s cluster uses, opened from this
    process: what an administrator sees (and changes) with nvidia-smi."""
    import ray

    from raycolloc.node.gpu.sim import SimBackend
    from raycolloc.node.steward import node_key

    c = spec.config.cluster
    node = ray.get_runtime_context().get_node_id()
    gpus = next(int(n["Resources"]["GPU"]) for n in ray.nodes() if n["NodeID"] == node)
    return SimBackend(c.sim_root, node_key(node), gpus, c.gpu_model, c.sim_mig_mode)


@pytest.fixture(autouse=True)
def _own_log_handlers() -> Iterator[None]:
    """Each test leaves the root logger as it found it. An entry point run in-process (Hydra's run, the
    report's ``logging.basicConfig``) points the root logger's handlers at the streams of that moment,
    the test's captured ones, closed after it: a later test's log lines went nowhere (a plan test that
    asserts on them failed only after such a test, in the same worker)."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


_session_address: str | None = None


def session_ray() -> str:
    """The session's local Ray instance (2 fake GPUs), started on first use; its address. In-process
    cells run on it, and command-line sweeps join it (``run_cli``) unless a test needs Ray's own
    start or death: a sweep that joins finds the node's steward and its warm fork server already up,
    where one that starts Ray pays ~13 CPU-seconds for Ray, the steward and torch's import."""
    global _session_address
    if _running is not None and _running.get_closest_marker("slow") is None:
        pytest.fail(f"{_running.nodeid} uses Ray: mark it `slow` (the quick tier starts no Ray)", pytrace=False)
    if _session_address is None:
        import ray

        from raycolloc.driver.cluster import start_local_ray

        # Ray's log monitor (it streams workers' output to drivers) globs the session's log directory
        # for new files every 0.1 s, until it holds 1000 files: 3% of a core through a 15-minute suite,
        # for each of the two session instances. Past the threshold it globs every 0.5 s; here, for this
        # instance's monitor only, past the first file, once a second (1.9% -> 0.4% of a core with ~60
        # files; a new worker's output reaches drivers up to a second later).
        knobs = {"RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "1", "LOG_NAME_UPDATE_INTERVAL_S": "1"}
        saved = {k: os.environ.get(k) for k in knobs}
        os.environ.update({k: os.environ.get(k, v) for k, v in knobs.items()})
        try:
            start_local_ray(
                num_cpus=16,
                num_gpus=2,
                namespace="raycolloc",
                include_dashboard=False,
                log_to_driver=False,
                _system_config={"worker_niceness": 0},
            )
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
        _session_address = ray.get_runtime_context().gcs_address
    return _session_address


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """The session's Ray instance (see ``session_ray``), for the in-process cell tests."""
    session_ray()
    yield


@pytest.fixture(scope="session", autouse=True)
def _stop_session_ray() -> Iterator[None]:
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


def used_ray(proc: subprocess.CompletedProcess[str]) -> bool:
    """Whether a command-line run started a Ray instance or joined one (a run that trains nothing need not):
    the driver's own line on it (``driver/cluster.py``: ``ray=local ...`` or ``ray=joined ...``)."""
    out = proc.stdout + proc.stderr
    return re.search(r"\bray=(local|joined) ", out) is not None


def run_cli(
    args: list[str], cwd: Path, timeout: float = 600, env: dict[str, str] | None = None, own_ray: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m raycolloc.sweep ARGS`` as a user would. It joins the session's Ray instance
    (``cluster.address``, as on a cluster someone started), unless ``own_ray`` or ARGS name a cluster:
    then it starts and stops a local instance of its own, as a user's first command does. A test of an
    input refused before Ray loads passes ``own_ray`` too: it has no instance to join, and starts none."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        sweep_command(args, own_ray),
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def sweep_command(args: list[str], own_ray: bool = False) -> list[str]:
    """``python -m raycolloc.sweep ARGS``, joining the session's Ray instance unless ``own_ray`` or
    ARGS name a cluster."""
    joins = not own_ray and not any(a.startswith("cluster.address=") for a in args)
    return [sys.executable, "-m", "raycolloc.sweep", *args, *([f"cluster.address={session_ray()}"] if joins else [])]
