"""A ``queue.runner=ray`` trace and replay name the GPU the cluster reports, not ``cluster.gpu_model``'s
default (issue 46, item 10: an H200's runs were filed as H100-80GB)."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from raycolloc.queue.__main__ import main
from raycolloc.queue.settings import compose_settings
from raycolloc.queue.trace import read_trace


@pytest.fixture
def nvml_names(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """NVML on this machine sees the GPUs named in the returned list (filled by the test)."""
    names: list[str] = []
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: len(names))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetName", lambda h: names[h].encode())
    return names


def test_a_ray_runs_gpu_model_is_nvmls_name_in_the_trace_and_its_message(
    tmp_path: Path, nvml_names: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    nvml_names.append("NVIDIA H200")
    ray_trace, h200, h100 = (tmp_path / n for n in ("ray.csv", "h200.csv", "h100.csv"))
    assert main(["trace", "--jobs", "5", "--out", str(ray_trace), "queue.runner=ray"]) == 0
    said = capsys.readouterr().out
    assert "(GPU model H200-141GB)" in said and "H100" not in said
    assert main(["trace", "--jobs", "5", "--out", str(h200), "cluster=local", "cluster.gpu_model=H200-141GB"]) == 0
    assert main(["trace", "--jobs", "5", "--out", str(h100), "cluster=local", "cluster.gpu_model=H100-80GB"]) == 0
    assert ray_trace.read_text() == h200.read_text() != h100.read_text()  # lengths sized for the H200
    settings = compose_settings(["queue.runner=ray"])
    assert (settings.gpu.name, settings.gpu_note, settings.config.cluster.gpu_model) == ("H200-141GB", "", "H100-80GB")


def test_a_gpu_the_catalogue_lacks_keeps_its_name_and_names_its_stand_in(
    tmp_path: Path, nvml_names: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    nvml_names.extend(["NVIDIA L4", "NVIDIA L4"])
    out = tmp_path / "l4.csv"
    assert main(["trace", "--jobs", "3", "--out", str(out), "queue.runner=ray"]) == 0
    said = capsys.readouterr().out
    assert "(GPU model NVIDIA L4 (no catalogue entry for NVIDIA L4: H100-80GB's (cluster.gpu_model) stands in))" in said
    assert len(read_trace(out)) == 3


def test_simulated_gpus_are_named_as_declared_and_a_simulated_replay_keeps_cluster_gpu_model(
    nvml_names: list[str],
) -> None:
    nvml_names.append("NVIDIA H200")  # the machine's GPU is not the simulated cluster's
    local = compose_settings(["queue.runner=ray", "cluster=local", "cluster.gpu_model=A100-80GB"])
    assert (local.gpu.name, local.gpu_label) == ("A100-80GB", "A100-80GB")
    simulated = compose_settings(["cluster.gpu_model=A100-80GB"])  # queue.runner=sim: the GPUs it declares
    assert simulated.gpu.name == "A100-80GB"


def test_gpus_not_seen_from_here_are_said_to_be_a_stand_in(nvml_names: list[str]) -> None:
    far = compose_settings(["queue.runner=ray", "cluster.address=10.0.0.1:6379"])
    assert far.gpu.name == "H100-80GB" and "not seen from here (cluster.address=10.0.0.1:6379)" in far.gpu_label
