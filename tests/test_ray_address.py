"""A Ray address where no cluster answers (issue 47, item 14): a sweep with ``RAY_ADDRESS=127.0.0.1:1``
retried for over 400 s and did not take SIGTERM; ``queue submit`` after its ``serve`` had ended (a
stale ``ray-address`` file) hung for 120 s. Now the address is probed first, in seconds and with SIGTERM
taken: the sweep exits 2 naming the address, ``submit`` exits 1 with "no live queue". No Ray starts here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raycolloc.driver.rayprobe import RayUnreachable, _dialled, probe

from .conftest import ROOT, run_cli, sweep_command

SWEEP = ["workload=tiny_cnn", "cluster=local", "epoch_samples=256", "batch_size=32"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent() -> Iterator[socket.socket]:
    """A port that accepts connections and never says a word (on every address: Ray dials the node's)."""
    with socket.create_server(("0.0.0.0", 0)) as server:
        yield server


def test_a_sweep_given_a_dead_ray_address_exits_2_naming_it_in_seconds(tmp_path: Path) -> None:
    start = time.monotonic()
    proc = run_cli(
        [*SWEEP, f"out_dir={tmp_path / 'out'}"], ROOT, timeout=60, env={"RAY_ADDRESS": "127.0.0.1:1"}, own_ray=True
    )
    took = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "RAY_ADDRESS=127.0.0.1:1: no Ray cluster answers at" in out and "Traceback" not in out
    assert took < 45, took
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.parquet"))


def test_a_sweep_waiting_on_an_address_that_does_not_answer_takes_sigterm(
    tmp_path: Path, silent: socket.socket
) -> None:
    port = silent.getsockname()[1]
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}"}
    with open(tmp_path / "log", "w") as log:
        proc = subprocess.Popen(
            sweep_command([*SWEEP, f"out_dir={tmp_path / 'out'}"], own_ray=True),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        silent.settimeout(60)
        conn, _ = silent.accept()  # the sweep is waiting on the address now, for an answer that never comes
        with conn:
            proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            assert proc.wait(timeout=15) == 143, (tmp_path / "log").read_text()[-3000:]
            assert time.monotonic() - sent < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_address_that_answers_but_not_as_ray_is_refused_after_the_probe(silent: socket.socket) -> None:
    port = silent.getsockname()[1]
    _dialled(f"127.0.0.1:{port}")  # imports Ray's address resolution: seconds on a loaded box, not the probe's
    start = time.monotonic()
    with pytest.raises(RayUnreachable, match=rf"RAY_ADDRESS=127.0.0.1:{port}: .* answers, but not as a Ray"):
        probe(f"127.0.0.1:{port}", "RAY_ADDRESS", timeout_s=1.0)
    assert time.monotonic() - start < 5
    with pytest.raises(RayUnreachable, match=r"cluster.address=127.0.0.1:\d+: no Ray cluster answers at"):
        probe(f"127.0.0.1:{_closed_port()}", "cluster.address")


def test_queue_submit_with_a_stale_ray_address_file_says_no_live_queue_at_once(tmp_path: Path) -> None:
    live = tmp_path / "queue" / "live"
    live.mkdir(parents=True)
    stale = f"127.0.0.1:{_closed_port()}"  # where the serve that wrote it had its Ray instance
    (live / "ray-address").write_text(stale)
    submit = ["submit", "--job-id", "a", "--model", "resnet18", "--dataset", "cifar10", "--samples", "1000"]
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "raycolloc.queue", *submit, f"out_dir={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"error: no live queue: nothing answers at {stale}" in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - start < 30


def test_the_probe_dials_where_ray_would_and_leaves_auto_to_ray() -> None:

    assert _dialled("auto") is None and _dialled("local") is None  # Ray looks these up itself
    assert _dialled("ray://[::1]:10001") == ("::1", 10001)  # Ray Client, IPv6 in brackets
    host, port = _dialled("127.0.0.1:6379") or ("", 0)
    assert port == 6379 and host  # loopback: the node's own address, as ray.init dials it


@pytest.mark.parametrize("has_token", [True, False])
def test_a_command_joining_an_address_sends_this_users_token_where_the_mode_is_unset(
    tmp_path: Path, has_token: bool
) -> None:
    """Issue 46, item 1: Ray turns token authentication on for an instance it finds (``auto``), never for
    an address it is given; ``queue submit`` joining ``serve``'s instance (token on, Ray's default) was
    refused. In a process of its own: the choice is Ray's configuration for the process."""
    home = tmp_path / "home"
    if has_token:
        (home / ".ray").mkdir(parents=True)
        (home / ".ray" / "auth_token").write_text("0123456789abcdef0123456789abcdef\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {"HOME": str(home)}
    code = (
        "import os; from raycolloc.driver.cluster import join_with_token_if_available as j; "
        "print(j(), os.environ.get('RAY_AUTH_MODE'))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == (["True", "token"] if has_token else ["False", "None"])
    assert "Token authentication is enabled" not in out.stderr  # Ray's notice, on every command: not shown
    set_off = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "RAY_AUTH_MODE": "disabled"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert set_off.stdout.split() == ["False", "disabled"]  # a mode set is the user's: kept


@pytest.mark.slow  # starts a local Ray instance (~20 s)
def test_a_local_start_under_rays_default_authentication_prints_no_token_notice(tmp_path: Path) -> None:
    """Issue 46, item 7: ``serve`` (and every sweep starting its own instance) printed Ray's
    "Token authentication is enabled ..." WARNING; the dashboard's line says the token instead."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {"HOME": str(tmp_path)}
    code = (
        "import ray; from raycolloc.driver.cluster import start_local_ray as s; "
        "s(num_cpus=1, include_dashboard=False); print('mode', __import__('os').environ.get('RAY_AUTH_MODE')); "
        "ray.shutdown()"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Token authentication is enabled" not in out.stderr, out.stderr[-2000:]


def test_a_failed_start_ups_processes_are_stopped_and_older_children_kept() -> None:
    """A failed ``ray.init`` leaves its GCS server and raylet running (three GCS servers of failed
    attempts were found under one test driver): the retry stops what the attempt started, only that."""
    from raycolloc.driver.cluster import _children, _stop_new_children

    older = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        before = _children()
        started = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # the attempt's
        _stop_new_children(before)
        assert started.wait(timeout=10) is not None  # stopped
        assert older.poll() is None  # there before the attempt: left alone
    finally:
        older.kill()
        older.wait()
