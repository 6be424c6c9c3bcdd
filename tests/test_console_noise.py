"""A sweep's console says its own lines, once (issue 46, item 7): no dataclass repr per released cell,
"not pinned" once per sweep rather than per cell, no ANSI colour codes from Ray's worker-line
prefixes when the output is not a terminal, and no notice of Ray's on how to turn its log
deduplication off.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from pathlib import Path

import pytest
from ray._private.ray_logging import DedupState, _warn_once
from ray.util.debug import reset_log_once

from raycolloc.config import ClusterConfig
from raycolloc.driver import cell_run
from raycolloc.driver.cluster import DEDUP_NOTICE, plain_worker_lines
from raycolloc.node import steward_log
from raycolloc.node.steward_log import steward_logging
from raycolloc.procs import quiet_exit_in_finalizers
from raycolloc.spec import Binding, Release

from .conftest import ROOT, load, run_cli

TINY = ["workload=tiny_cnn", "cluster=local", "epoch_samples=128"]


def test_a_release_logs_as_key_value_pairs() -> None:
    assert str(Release(released=True, mps_daemon_kept=True)) == "released=true mps_daemon_kept=true"
    assert str(Release()) == "released=false"
    failed = str(Release(released=True, errors=("mps: daemon gone",)))
    assert failed == "released=true errors='mps: daemon gone'"
    assert "Release(" not in failed


def test_ray_worker_lines_come_without_colour_codes_or_the_dedup_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_COLOR_PREFIX", raising=False)
    reset_log_once(DEDUP_NOTICE)
    plain_worker_lines()  # under pytest stdout and stderr are captured: not a terminal
    assert os.environ["RAY_COLOR_PREFIX"] == "0"
    assert _warn_once() == ""  # the notice Ray appends to its first "[repeated Nx across cluster]"
    monkeypatch.setenv("RAY_COLOR_PREFIX", "1")
    plain_worker_lines()
    assert os.environ["RAY_COLOR_PREFIX"] == "1"  # the user's own setting stays


def test_rays_coloured_repeat_marks_reach_a_pipe_plain(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RAY_COLOR_PREFIX", raising=False)
    monkeypatch.setattr(sys, "stdout", sys.stdout)  # put back after the test
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    reset_log_once(DEDUP_NOTICE)  # whichever test ran before in this process: connect marks the notice said
    plain_worker_lines()
    plain_worker_lines()  # a second connect wraps nothing twice
    # Ray colours "[repeated 2x across cluster]" whatever RAY_COLOR_PREFIX says (CI's log, 2026-12-02); the
    # line is formed after connect, as Ray's log monitor forms it
    folded = DedupState(timestamp=0, count=2, line="(Trainer pid=1) a line", metadata={}, sources=set()).formatted()
    assert "\x1b[" in folded
    print(folded)
    print(folded, file=sys.stderr)
    out, err = capsys.readouterr()
    assert out == err == "(Trainer pid=1) a line [repeated 2x across cluster]\n"
    assert type(sys.stdout.stream).__name__ != "PlainStream"


def test_not_pinned_is_said_once_per_sweep(caplog: pytest.LogCaptureFixture) -> None:
    spec = load(["degree=3", "trainer.cpu_affinity=auto"])
    loose = [Binding(job_index=j.index, gpu_uuid="GPU-x", env={}) for j in spec.jobs]
    pinned = [dataclasses.replace(b, cpus=(b.job_index,)) for b in loose]
    with caplog.at_level(logging.DEBUG, logger=cell_run.__name__):
        cell_run._say_not_pinned(spec, pinned, "sweep-a")
        for _ in range(3):
            cell_run._say_not_pinned(spec, loose, "sweep-a")
        cell_run._say_not_pinned(spec, loose, "sweep-b")
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2 and "jobs_not_pinned=3: not pinned" in warned[0].getMessage()
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 2  # the other cells, below INFO


@pytest.mark.slow  # a sweep of two degree-3 cells, joining the session's Ray instance as a user's cluster
def test_a_sweep_prints_no_repr_no_colour_codes_and_not_pinned_once(tmp_path: Path) -> None:
    if len(os.sched_getaffinity(0)) >= 6:
        pytest.skip("a degree-3 cell is pinned on this machine: nothing to say once")
    proc = run_cli(
        ["-m", *TINY, "degree=3", "mode=naive,mps", "trainer.cpu_affinity=auto", f"out_dir={tmp_path / 'out'}"],
        cwd=ROOT,
        env={"RAY_DEDUP_LOGS": "1"},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "\x1b" not in out, [line for line in out.splitlines() if "\x1b" in line][:5]
    assert "Release(" not in out
    assert out.count("not pinned") == 1, [line for line in out.splitlines() if "not pinned" in line]
    assert "RAY_DEDUP_LOGS" not in out
    assert "Connecting to existing Ray cluster" not in out  # Ray's own INFO line: hydra.verbose=true shows it
    assert " INFO steward " not in out, [line for line in out.splitlines() if "steward" in line][:5]


def test_the_stewards_info_lines_go_to_its_file_and_its_warnings_to_the_console_too(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    root = logging.getLogger()
    kept_level, kept = root.level, list(root.handlers)
    try:
        path = steward_logging(tmp_path)
        assert path is not None and path.parent == tmp_path and str(os.getpid()) in path.name
        steward_logging(tmp_path)  # a second call replaces its handlers: each line once
        logging.getLogger("raycolloc.node.modes.mps").info("mps=started gpu=GPU-x pid=1")
        logging.getLogger("raycolloc.node.modes.mps").warning("mps=stale gpu=GPU-x pid=2: stopping it")
        for handler in root.handlers:
            handler.flush()
        err = capfd.readouterr().err
        assert "mps=started" not in err and err.count("WARNING steward mps=stale") == 1
        lines = path.read_text().splitlines()
        assert [line.split(" steward ")[1] for line in lines] == [
            "mps=started gpu=GPU-x pid=1",
            "mps=stale gpu=GPU-x pid=2: stopping it",
        ]
    finally:
        for handler in root.handlers:
            if handler not in kept:
                handler.close()
        root.handlers[:] = kept
        root.setLevel(kept_level)


def test_without_a_log_directory_the_steward_says_its_info_lines_on_the_console(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    root = logging.getLogger()
    kept_level, kept = root.level, list(root.handlers)
    monkeypatch.setattr(steward_log, "log_dir", lambda: None)  # outside a Ray worker
    try:
        assert steward_log.steward_logging() is None
        logging.getLogger("raycolloc.node.modes.mps").info("mps=started gpu=GPU-x pid=1")
        assert "INFO steward mps=started" in capfd.readouterr().err
    finally:
        root.handlers[:] = kept
        root.setLevel(kept_level)


@pytest.mark.slow  # a Ray actor on the session's instance
@pytest.mark.usefixtures("ray_local")
def test_inside_a_ray_worker_the_stewards_file_lies_in_rays_log_directory() -> None:
    import ray

    @ray.remote(num_cpus=0)
    def where() -> tuple[str | None, str | None, str]:
        root = logging.getLogger()
        kept_level, kept = root.level, list(root.handlers)
        try:
            found = steward_log.log_dir()
            path = steward_logging()
            logging.getLogger("raycolloc.node.modes.mps").info("mps=started gpu=GPU-x pid=1")
        finally:  # the worker serves later tasks: its logging as it was
            for handler in root.handlers:
                if handler not in kept:
                    handler.close()
            root.handlers[:] = kept
            root.setLevel(kept_level)
        return (None if found is None else str(found), None if path is None else str(path), str(os.getpid()))

    found, path, pid = ray.get(where.remote(), timeout=120)
    assert found is not None and Path(found).name == "logs" and Path(found, "..", "..").resolve().exists()
    assert path == str(Path(found) / f"raycolloc-steward-{pid}.log")
    assert "INFO steward mps=started gpu=GPU-x pid=1" in Path(path).read_text()


def test_rays_info_lines_are_said_only_at_debug(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``ray.init``'s "Started a local Ray instance" on every sweep: said only under ``hydra.verbose``."""
    from raycolloc.driver import cluster as cluster_mod

    seen: list[object] = []

    def fake_start(**kwargs: object) -> None:
        seen.append(kwargs.get("logging_level"))
        raise RuntimeError("stop here")

    monkeypatch.setattr(cluster_mod, "start_local_ray", fake_start)
    monkeypatch.setattr(cluster_mod.ray, "is_initialized", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config = ClusterConfig(backend="sim")
    for level, expected in ((logging.INFO, logging.WARNING), (logging.DEBUG, None)):
        caplog.set_level(level, logger=cluster_mod.__name__)
        with pytest.raises(RuntimeError, match="stop here"):
            cluster_mod.connect(config)
        assert seen.pop() == expected


def test_an_exit_inside_a_finalizer_is_not_printed_other_errors_are(monkeypatch: pytest.MonkeyPatch) -> None:
    # an idle Trainer ended during an ActorHandle.__del__ printed Ray's traceback (CI's log, 2026-12-02)
    seen: list[type] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(type(u.exc_value)))
    quiet_exit_in_finalizers()

    class Ends:
        def __init__(self, exc: BaseException) -> None:
            self.exc = exc

        def __del__(self) -> None:
            raise self.exc

    Ends(SystemExit(1))
    Ends(ValueError("a real fault"))
    assert seen == [ValueError]
