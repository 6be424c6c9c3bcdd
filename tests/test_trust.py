"""Issue 15's numbered failures, each as the test that failed before the fix. Items whose test lives
elsewhere: 2, 4, 5, 9 in ``test_faults.py`` (corrupt table, two sweeps on one output, SIGKILLed
driver, full disk), 6 and 7 in ``test_malformed_inputs.py`` (6: ``degree=64`` on this machine; an
``unfit`` cell: ``test_cell_local.py``), 8 in ``test_faults.py`` (hang)."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from analysis.load import load_sweeps
from raycolloc.config import config_hash
from raycolloc.driver.outlock import LOCK_NAME, OutputLocked, hold_output
from raycolloc.node.gpu.kinds import backend_traits
from raycolloc.node.gpu.sim import SimBackend
from raycolloc.node.gpu.simdevice import SimOutOfMemory
from raycolloc.node.leftovers import OWNER_FILE
from raycolloc.node.mig.profiles import get_gpu_model
from raycolloc.node.modes.mig import MIG_RECORD, apply_instances, read_instances
from raycolloc.results.index import REFERENCE
from raycolloc.spec import NodeInfo

from .conftest import CPU_OVERRIDES, ROOT, SHORT_TMP, load, run_cli, short_tmp, used_ray

TINY = ["workload=tiny_cnn", "cluster=local", "epoch_samples=128", "repeats=1"]


def _sweeps(out: Path) -> list[Path]:
    return sorted(p for p in (out / "multirun").glob("*/*") if p.is_dir())


@pytest.mark.slow  # four sweeps
def test_items_1_and_3_a_rerun_trains_nothing_and_references_instead_of_copying(tmp_path: Path) -> None:
    """Also the command line's first multirun (four tables per cell, each cell's jobs on one GPU, the
    summary) and ``+rerun=true``, which runs a cell again."""
    out = tmp_path / "out"
    sweep = out / "multirun" / "fixed"
    args = ["-m", *TINY, "degree=1,2", "mode=naive", "cluster.num_gpus=2", f"out_dir={out}"]
    first = run_cli([*args, f"hydra.sweep.dir={sweep}"], cwd=ROOT)
    assert first.returncode == 0 and used_ray(first), first.stderr[-3000:]
    assert "throughput gain" in first.stdout
    written = {p: p.stat().st_mtime_ns for p in sweep.rglob("*.parquet")}
    assert len(written) == 8  # cells, jobs, epochs, telemetry of each cell
    before = load_sweeps([sweep]).table("cells")
    jobs = load_sweeps([sweep]).table("jobs")
    assert sorted(before["degree"]) == [1, 2] and set(jobs["status"]) == {"ok"}
    assert (jobs.groupby("cell_id")["gpu_uuid"].nunique() == 1).all()
    # 1. The same command into the same sweep directory finds each cell's own result there.
    t0 = time.monotonic()
    same = run_cli([*args, f"hydra.sweep.dir={sweep}"], cwd=ROOT)
    assert time.monotonic() - t0 < 60  # seconds on an idle laptop; generous for a loaded CI machine
    assert same.returncode == 0, same.stderr[-3000:]
    assert same.stdout.count("reused; +rerun=true runs it again") == 2, same.stdout[-3000:]
    assert not used_ray(same)  # nothing trained
    assert {p: p.stat().st_mtime_ns for p in sweep.rglob("*.parquet")} == written  # nothing overwritten
    assert not list(sweep.rglob(REFERENCE))
    # 3. Into a new sweep directory: references to the results, no copies; a report counts each once.
    new = run_cli(args, cwd=ROOT)
    assert new.returncode == 0 and not used_ray(new), new.stderr[-3000:]
    assert len(list(out.rglob("cells.parquet"))) == 2
    (newest,) = [d for d in _sweeps(out) if not d.is_relative_to(sweep)]
    assert len(list(newest.rglob(REFERENCE))) == 2 and not list(newest.rglob("*.parquet"))
    after = load_sweeps([newest], all_results=True).cells
    assert after["resumed_from"].notna().all()
    assert sorted(after["agg_samples_per_s"]) == sorted(before["agg_samples_per_s"])
    assert sorted(load_sweeps([out]).cells["degree"]) == [1, 2]
    assert sorted(load_sweeps([out], all_results=True).cells["degree"]) == [1, 2]
    # +rerun=true runs the cell again, result or not.
    forced = run_cli([*args, "+rerun=true", "degree=1"], cwd=ROOT)
    assert forced.returncode == 0 and used_ray(forced) and "reused" not in forced.stdout, forced.stderr[-3000:]


@pytest.mark.slow  # two sweeps
def test_item_10_mig_cells_a_cluster_cannot_run_are_skipped_rows_and_the_others_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    pipe_root = short_tmp("rc10")
    args = [
        "-m",
        *TINY,
        "degree=1,2",
        "mode=naive,mps,mig",
        "cluster.num_gpus=2",
        f"out_dir={out}",
        f"mode.pipe_root={pipe_root}",
    ]
    # A GPU with MIG disabled (as on the H200 of the issue): the mig cells are skipped, with the reason.
    first = run_cli([*args, "cluster.sim_mig_mode=disabled"], cwd=ROOT)
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-3000:]
    cells = load_sweeps([out]).cells
    assert sorted(cells.loc[cells["status"] == "ok", "mode"]) == ["mps", "mps", "naive", "naive"]
    skipped = cells[cells["status"] == "skipped"]
    assert sorted(skipped["mode"]) == ["mig", "mig"]
    assert skipped["reason"].str.contains("MIG mode is disabled on GPU").all()
    last = first.stdout.strip().splitlines()[-4:]
    assert last[0] == "4 of 6 cells have a result (exit 1)", last
    skipped = r"  no result: tiny_cnn-mig-x\d .* status=skipped: mode=mig cannot run"
    assert all(re.match(skipped, line) for line in last[1:3])
    # Simulated GPUs reconfigure MIG by default, and neither that switch nor MIG mode changes a
    # cell's config hash: the same command on MIG-capable GPUs runs only the two mig cells.
    second = run_cli([*args, "mig.allow_reconfigure=true"], cwd=ROOT)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert second.stdout.count("reused; +rerun=true runs it again") == 4
    assert "6 of 6 cells have a result (exit 0)" in second.stdout
    assert set(load_sweeps([out]).cells["status"]) == {"ok"}
    shutil.rmtree(pipe_root, ignore_errors=True)


def test_item_10_keys_that_do_not_change_the_work_do_not_change_the_hash() -> None:
    base = config_hash(load(["degree=2", "mode=mig"]).config)
    for override in (
        "mig.allow_reconfigure=true",
        "mig.allow_reconfigure=false",
        "cluster.num_gpus=4",
        "cluster.num_cpus=8",
        "cluster.sim_mig_mode=enabled",
        "trainer.stall_timeout_s=60",
        "trainer.epoch_timeout_s=600",
        "trainer.setup_timeout_s=60",
    ):
        assert config_hash(load(["degree=2", "mode=mig", override]).config) == base, override
    assert config_hash(load(["degree=2", "mode=mig", "mig.layout=[1g,1g]"]).config) != base


def test_item_4_a_dead_sweeps_lock_is_taken_over(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from raycolloc.driver.outlock import hold_output\n"
            f"with hold_output({str(out)!r}):\n print('held', flush=True); time.sleep(600)",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(OutputLocked, match=f"pid {holder.pid}"), hold_output(out):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert json.loads((out / LOCK_NAME).read_text())["pid"] == holder.pid  # what a SIGKILL leaves
    with caplog.at_level(logging.WARNING, logger="raycolloc"), hold_output(out) as held:
        assert json.loads((held / LOCK_NAME).read_text())["pid"] == os.getpid()
        with hold_output(out):  # re-entrant in one process (launcher, plan, engine)
            pass
    assert (
        f"taking over the lock of a sweep that ended without releasing it (host {os.uname().nodename}, "
        f"pid {holder.pid}" in caplog.text
    )


@pytest.mark.slow
def test_item_4_two_sweeps_on_one_ray_cluster_never_share_a_gpu(tmp_path: Path) -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 8, "num_gpus": 1, "include_dashboard": False})
    procs = []
    try:
        for name in ("a", "b"):
            args = [
                "-m",
                *TINY,
                "degree=1",
                "mode=naive,mps",
                f"cluster.address={cluster.address}",
                f"out_dir={tmp_path / name}",
                f"mode.pipe_root={SHORT_TMP}/rc1c{os.getpid()}{name}",
                "epoch_samples=1024",
            ]
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "raycolloc.sweep", *args],
                    cwd=ROOT,
                    text=True,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
            )
        outputs = [p.communicate(timeout=850)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        cluster.shutdown()
        for name in ("a", "b"):
            shutil.rmtree(f"{SHORT_TMP}/rc1c{os.getpid()}{name}", ignore_errors=True)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    cells = pd.concat([load_sweeps([tmp_path / n]).cells for n in ("a", "b")], ignore_index=True)
    assert len(cells) == 4 and cells["gpu_uuid"].nunique() == 1
    held = sorted(zip(cells["started_at"] + cells["lease_wait_s"].fillna(0), cells["finished_at"], strict=True))
    for (_, end), (start, _) in zip(held, held[1:], strict=False):
        assert start >= end - 0.5, held  # one cell at a time on the one GPU, whichever sweep it is from


def _dead_pid() -> tuple[int, float]:
    """The pid and start time of a process that has ended."""
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    started = psutil.Process(proc.pid).create_time()
    proc.wait(timeout=30)
    return proc.pid, started


def test_item_5_the_doctor_restores_a_mig_layout_a_dead_steward_left(tmp_path: Path) -> None:
    """MIG records survive SIGKILL: the layout found is put back, without Ray."""
    from raycolloc.doctor import main as doctor

    backend = SimBackend(tmp_path / "sim", "node-x", 1, "A100-SXM4-40GB", "enabled")
    uuid = backend.gpus()[0].uuid
    model = get_gpu_model("A100-SXM4-40GB")
    found = [(model.profile("4g.20gb").profile_id, 0, [(model.profile("4g.20gb").ci_profile("4c").nvml_index, 0)])]
    apply_instances(backend, uuid, found)
    before = read_instances(backend, uuid)
    # What a steward killed mid-cell leaves: its record of the layout it found, and the layout it made.
    root = short_tmp("rc5")
    gpu_dir = root / uuid
    gpu_dir.mkdir()
    (gpu_dir / MIG_RECORD).write_text(json.dumps({"gpu": uuid, "instances": before, "env": backend.job_env(uuid)}))
    pid, started = _dead_pid()
    (gpu_dir / OWNER_FILE).write_text(json.dumps({"host": os.uname().nodename, "pid": pid, "started": started}))
    seven = model.profile("1g.5gb")
    apply_instances(backend, uuid, [(seven.profile_id, s, [(seven.ci_profile("1c").nvml_index, 0)]) for s in range(7)])
    assert doctor(["--pipe-root", str(root)]) == 1  # reported
    assert read_instances(backend, uuid) != before
    assert doctor(["--pipe-root", str(root), "--fix"]) == 0
    assert read_instances(SimBackend.from_state(backend.devices.path), uuid) == before
    assert not gpu_dir.exists()
    assert doctor(["--pipe-root", str(root)]) == 0
    shutil.rmtree(root, ignore_errors=True)


def test_the_simulated_gpu_refuses_memory_it_does_not_have(tmp_path: Path) -> None:
    backend = SimBackend(tmp_path / "sim", "node-x", 1, "A100-SXM4-40GB")
    uuid = backend.gpus()[0].uuid
    with pytest.raises(SimOutOfMemory, match="simulated CUDA out of memory .* GiB free of 40.00 GiB"):
        backend.devices.attach(uuid, os.getpid(), 41 << 30)


def _dashboard_env(home: Path) -> dict[str, str]:
    env = dict(os.environ, HOME=str(home), RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_AUTH_MODE", None)  # as a user runs the README's command: Ray's own default
    env.pop("RAY_ADDRESS", None)
    return env


def _quiet_port() -> int:
    """A free port that no other process is handed meanwhile: Ray's default 8265 may be another
    instance's, and a port the kernel picked (bind to 0) is in the ephemeral range, where Ray's own
    processes and every outgoing connection of the other test worker take ports too (a CI run lost
    one that way between the test's bind and Ray's). So: below the ephemeral range and above Ray's
    worker ports (10002-19999), a random one that binds now."""
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(100):
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-31999")


@pytest.mark.slow
def test_item_11_the_dashboard_url_comes_with_the_token_it_asks_for(tmp_path: Path) -> None:
    out = tmp_path / "out"
    ray_tmp = str(short_tmp("rcd"))
    port = _quiet_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "raycolloc.sweep",
            *CPU_OVERRIDES,
            "degree=1",
            "epoch_samples=20000",
            "cluster.dashboard=true",
            f"cluster.dashboard_port={port}",
            f"out_dir={out}",
            f"mode.pipe_root={SHORT_TMP}/rc11{os.getpid()}",
        ],
        cwd=ROOT,
        env={**_dashboard_env(tmp_path), "RAY_TMPDIR": ray_tmp},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 240
        line = ""
        while time.monotonic() < deadline and "Ray dashboard:" not in line:
            line = proc.stdout.readline()
            seen.append(line)
            if not line and proc.poll() is not None:
                break
        found = re.search(r"Ray dashboard: (http://\S+)\s+token: (\S+)", line)
        assert found, "".join(seen)[-3000:]
        url, token = found.groups()
        api = f"{url}/api/v0/actors?limit=10"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(api, timeout=10)  # noqa: S310 - 127.0.0.1
        assert refused.value.code == 401
        request = urllib.request.Request(api, headers={"Authorization": f"Bearer {token}"})  # noqa: S310 - 127.0.0.1
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310
            assert reply.status == 200 and json.loads(reply.read())["result"]
        assert token == (tmp_path / ".ray" / "auth_token").read_text().strip()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # the sweep cancels its cell and stops its Ray instance
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of its Ray instance is left
        except ProcessLookupError:
            pass
        shutil.rmtree(f"{SHORT_TMP}/rc11{os.getpid()}", ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _node(backend: str, cpus: int, free_mib: float, gpus: list) -> NodeInfo:
    """A steward's ``info()`` of a node, as the pre-flight reads it."""
    return NodeInfo(
        node_id="node-x",
        pid=0,
        gpus=tuple(gpus),
        driver="",
        cpus=cpus,
        mem_total_mib=free_mib,
        mem_available_mib=free_mib,
        leftovers=(),
        traits=backend_traits(backend),
    )


@pytest.mark.slow  # estimates ResNet152's memory (timm on the meta device): ~4 s
def test_item_6_a_cell_is_checked_against_the_nodes_cores_memory_and_gpus(tmp_path: Path) -> None:
    from raycolloc.config import ConfigError
    from raycolloc.driver.preflight import check_nodes, unfit_cells

    gpu = SimBackend(tmp_path / "sim", "node-x", 1, "A100-SXM4-40GB").gpus()[0]
    cell = load(["degree=3"])
    check_nodes([cell], [_node("nvml", 16, 64 * 1024, [gpu])])
    with pytest.raises(ConfigError, match=r"needs 3 cores for its training processes; the largest GPU node allows 2"):
        check_nodes([cell], [_node("nvml", 2, 64 * 1024, [gpu])])
    with pytest.raises(ConfigError, match=r"degree=3 needs about 9.0 GiB of host memory .* has 4.0 GiB available"):
        check_nodes([cell], [_node("nvml", 16, 4 * 1024, [gpu]), _node("nvml", 16, 1024, [gpu])])
    # GPU memory: the sum of the jobs' estimates against the GPU; under MIG, each instance's share.
    big = load(["workload=resnet152_imagenet", "degree=3", "epoch_samples=64"])
    mig = load(
        ["workload=resnet152_imagenet", "degree=7", "mode=mig", "epoch_samples=64", "cluster.gpu_model=A100-SXM4-40GB"]
    )
    small = load(["degree=7", "mode=mig", "cluster.gpu_model=A100-SXM4-40GB"])
    unfit = unfit_cells([big, mig, small], [_node("sim", 2, 1024, [gpu])], {})
    # (ResNet152 at 224 px and batch 64: about 17 GiB a job, the model's estimate with a CUDA context.)
    assert re.fullmatch(
        r"unfit: 3 jobs x about 17\.\d GiB \(estimated peak per job\) need 5\d\.\d GiB; "
        r"Simulated A100-SXM4-40GB has 40\.0 GiB",
        unfit[big.cell_id],
    ), unfit[big.cell_id]
    assert re.match(r"unfit: MIG instance 1g\.5gb holds 4\.8 GiB; its jobs need about 17\.\d GiB", unfit[mig.cell_id])
    assert small.cell_id not in unfit
