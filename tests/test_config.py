"""Composition of the real conf/ tree and every validation error (key named, allowed values listed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.errors import HydraException, MissingConfigException
from omegaconf.errors import OmegaConfBaseException

from raycolloc.config import Config, ConfigError, config_hash
from raycolloc.job.workloads.registry import list_workloads
from raycolloc.workload_config import KINDS

from .conftest import CONF, ROOT, compose, load, run_cli

# What each kind of workload needs beside its name, to compose on its own.
KIND_KEYS = {
    ("workload", "timm"): ["workload.model=resnet10t", "workload.dataset=cifar10"],
    ("workload", "python"): ["workload.entry=jobs.examples.tiny_regression:build"],
    ("workload", "script"): ["workload.command=[python,jobs/examples/plain_train.py]"],
}


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.slow  # every option of every group composed: ~7 s
def test_every_config_group_option_composes() -> None:
    seen = 0
    for group in ("workload", "mode", "cluster", "mig", "mix", "measure"):
        for option in _options(group):
            overrides = [f"{group}={option}", *KIND_KEYS.get((group, option), [])]
            if group == "mix" and option != "none":
                overrides.append("mode=naive")
            job = load(overrides)
            assert isinstance(job.config, Config)
            seen += 1
    for option in _options("experiment"):
        assert isinstance(load([f"+experiment={option}"]).config, Config)
        seen += 1
    assert seen >= 20


def test_workload_yaml_files_are_the_presets_and_the_kinds() -> None:
    assert _options("workload") == sorted([*list_workloads(), *KINDS])


def test_uniform_cell_resolves_degree_jobs_with_defaults() -> None:
    job = load(["degree=3", "epoch_samples=640", "batch_size=64", "seed=5"])
    assert [j.index for j in job.jobs] == [0, 1, 2]
    assert {j.batch_size for j in job.jobs} == {64}
    assert [j.seed for j in job.jobs] == [5, 6, 7]
    assert job.jobs[0].steps_per_epoch == 10
    assert job.config.cluster.backend == "sim"  # cluster=local


def test_full_dataset_is_the_default_epoch() -> None:
    job = load(["workload=resnet26_cifar10"])
    assert job.jobs[0].epoch_samples == 50_000
    assert job.jobs[0].batch_size == 128


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("degree=0", "degree=0"),
        ("epochs=1", "epochs=1"),
        ("epoch_samples=-5", "epoch_samples=-5"),
        ("batch_size=0", "batch_size=0"),
        ("seed=-1", "seed=-1"),
        (
            "trainer.allocator=jemalloc",
            "trainer.allocator='jemalloc' is not allowed; choose one of: native, cuda_async",
        ),
        ("trainer.compile=fast", "choose one of: off, default, reduce-overhead, max-autotune"),
        ("trainer.cpu_affinity=numa", "trainer.cpu_affinity='numa' is not allowed; choose one of: auto, none"),
        ("trainer.amp=int8", "trainer.amp='int8'"),
        ("data.source=disk", "choose one of: synthetic, real"),
        ("data.placement=gpu", "choose one of: host, device"),
        ("data.source=real", "data.path"),
        ("cluster.backend=cuda", "choose one of: auto, sim, nvml"),
        ("telemetry.source=prometheus", "choose one of: auto, dcgm, gpm, nvml"),
        ("telemetry.interval_ms=5", "telemetry.interval_ms=5"),
        ("mode.active_thread_percentage=50", "applies to mode=mps only"),
        ("+foo=1", "unknown key foo"),
        ("+trainer.speed=2", "unknown key trainer.speed"),
    ],
)
def test_validation_errors_name_the_key(override: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load([override])
    assert needle in str(err.value)


def test_mps_options_are_checked_per_job() -> None:
    with pytest.raises(ConfigError, match="integer 1..100"):
        load(["mode=mps", "mode.active_thread_percentage=150"])
    with pytest.raises(ConfigError, match="one per job"):
        load(["mode=mps", "degree=3", "mode.active_thread_percentage=[10,20]"])
    job = load(["mode=mps", "degree=2", "mode.active_thread_percentage=[30,70]", "mode.pinned_mem_limit=8G"])
    assert [j.active_thread_percentage for j in job.jobs] == [30, 70]
    assert {j.pinned_mem_limit for j in job.jobs} == {"8G"}


@pytest.mark.parametrize("override", ["degree=abc", "degree=1.5", "epochs=two"])
def test_type_errors_fail_at_composition_naming_the_key(override: str) -> None:
    with pytest.raises((OmegaConfBaseException, HydraException)) as err:
        load([override])
    assert override.split("=")[0] in str(err.value)


@pytest.mark.parametrize(("group", "bad"), [("workload", "resnet9000"), ("mode", "timeslice"), ("cluster", "cloud")])
def test_unknown_group_option_lists_the_allowed_ones(group: str, bad: str) -> None:
    with pytest.raises(MissingConfigException) as err:
        compose([f"{group}={bad}"])
    text = str(err.value)
    assert bad in text
    for option in _options(group)[:3]:
        assert option in text


def test_config_hash_ignores_where_results_go_but_not_what_runs(tmp_path: Path) -> None:
    a = load(["degree=2"], out_dir=tmp_path / "a").config
    b = load(["degree=2"], out_dir=tmp_path / "b").config
    c = load(["degree=3"], out_dir=tmp_path / "a").config
    assert config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash(c)


def test_cli_config_error_exits_nonzero_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = run_cli(
        ["workload=tiny_cnn", "cluster=local", f"out_dir={out}", "degree=0"], cwd=ROOT, timeout=120, own_ray=True
    )  # refused before Ray
    assert proc.returncode != 0
    assert "degree=0 is not allowed" in proc.stderr + proc.stdout
    assert not any(p.is_file() for p in out.rglob("*")) if out.exists() else True


def test_cli_multirun_refuses_every_cell_before_running_any(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = run_cli(
        ["-m", "workload=tiny_cnn", "cluster=local", f"out_dir={out}", "degree=1,0"],
        cwd=ROOT,
        timeout=120,
        own_ray=True,
    )  # refused before Ray
    assert proc.returncode != 0
    assert "degree=0 is not allowed" in proc.stderr + proc.stdout
    assert not list(out.rglob("*.parquet")) if out.exists() else True


def test_missing_dataset_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"data.path: CIFAR-10 directory .* lacks data_batch_1"):
        load(["data.source=real", f"data.path={tmp_path}"])
    with pytest.raises(ConfigError, match="no train_data_batch_"):
        load(["data.source=real", f"data.path={tmp_path}", "workload=resnet50_imagenet64"])
    with pytest.raises(ConfigError, match="Criteo path .*nothing.tsv does not exist"):
        load(["data.source=real", f"data.path={tmp_path / 'nothing.tsv'}", "workload=tiny_dlrm"])
