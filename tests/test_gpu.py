"""Tests that need a real NVIDIA GPU (run on the device machine: ``pytest -m gpu``).

They never change MIG mode, clocks or compute mode; MPS daemons they start are stopped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import short_tmp

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def backend():  # noqa: ANN201
    from raycolloc.node.gpu.nvml import NvmlBackend, nvml_gpu_count

    if nvml_gpu_count() == 0:
        pytest.skip("no NVIDIA GPU visible")
    return NvmlBackend()


def _smi(query: str) -> list[str]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True, check=True
    ).stdout
    return [line.strip() for line in out.strip().splitlines()]


def test_nvml_backend_sees_the_gpus_nvidia_smi_sees(backend) -> None:  # noqa: ANN001
    gpus = backend.gpus()
    assert [g.uuid for g in gpus] == _smi("uuid")
    assert backend.gpu_for_ray_id("0").uuid == gpus[0].uuid
    sample = backend.basic_sample(gpus[0].uuid)
    assert sample["mem_total_mib"] > 1000 and sample["power_w"] > 0
    assert backend.energy_mj(gpus[0].uuid) > 0


def test_gpm_gives_sm_activity_on_hopper(backend) -> None:  # noqa: ANN001
    uuid = backend.gpus()[0].uuid
    if not backend.gpm_supported(uuid):
        pytest.skip("GPM needs Hopper or newer")
    a = backend.gpm_sample(uuid)
    time.sleep(0.2)
    b = backend.gpm_sample(uuid)
    metrics = backend.gpm_metrics(a, b)
    backend.gpm_free(a)
    backend.gpm_free(b)
    assert metrics["sm_active"] is not None and 0 <= metrics["sm_active"] <= 100
    assert metrics["pcie_rx_bytes_s"] is not None


def test_real_mps_daemon_serves_a_cuda_client_then_stops(backend) -> None:  # noqa: ANN001
    from raycolloc.node.modes.mps import MpsDaemon, find_control_daemons

    gpu = backend.gpus()[0]
    root = str(short_tmp("rcmps"))
    daemon = MpsDaemon(gpu.uuid, gpu.index, root)
    daemon.start()
    try:
        env = dict(os.environ, **daemon.binding_env(50, None))
        code = (
            "import torch, os, subprocess; torch.ones(1, device='cuda'); torch.cuda.synchronize();"
            "s=subprocess.run(['nvidia-cuda-mps-control'], input='get_server_list\\n', capture_output=True,"
            " text=True).stdout.split();"
            "c=subprocess.run(['nvidia-cuda-mps-control'], input=f'get_client_list {s[0]}\\n', capture_output=True,"
            " text=True).stdout.split(); print('CLIENT', str(os.getpid()) in c)"
        )
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert "CLIENT True" in out.stdout, out.stderr
    finally:
        daemon.stop()
    assert not [d for d in find_control_daemons() if root in d["pipe_dir"]]
    assert not (Path(root) / gpu.uuid / "daemon.json").exists()


def test_mig_refuses_when_mig_mode_is_disabled_and_changes_nothing(backend) -> None:  # noqa: ANN001
    from raycolloc.config import ClusterConfig, Config, MigConfig, ModeConfig, WorkloadConfig
    from raycolloc.driver.cell_specs import build_cell
    from raycolloc.mpsctl import CONTROL
    from raycolloc.node.modes.base import GpuSlot, ModeError
    from raycolloc.node.modes.mig import MigMode

    gpu = backend.gpus()[0]
    if backend.mig_mode(gpu.uuid)[0]:
        pytest.skip("MIG is enabled here; this test is for GPUs with MIG disabled")
    before = _smi("mig.mode.current")
    cell = build_cell(
        Config(
            workload=WorkloadConfig("tiny_cnn"),
            mode=ModeConfig("mig"),
            degree=2,
            cluster=ClusterConfig(backend="nvml"),
            mig=MigConfig(allow_reconfigure=True),
        )
    )
    with pytest.raises(ModeError, match=r"nvidia-smi -i 0 -mig 1"):
        MigMode(GpuSlot(backend, gpu, CONTROL), cell).prepare()
    assert _smi("mig.mode.current") == before
