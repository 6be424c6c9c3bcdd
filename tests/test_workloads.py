"""Workloads as compositions: any timm model on any dataset, the user's function, the user's script;
the presets as named compositions whose config hash did not change; estimates instead of tables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raycolloc.config import ConfigError, config_hash, load_config
from raycolloc.job.workloads.estimate import estimate_memory, job_estimate_mib, size_class
from raycolloc.job.workloads.registry import create_workload

from .conftest import ROOT, compose, load, run_cli, write_fixture_cell


@pytest.mark.parametrize(
    ("overrides", "digest"),
    [
        (["workload=resnet26_cifar10", "degree=2", "cluster=local"], "ec7a500003b81221"),
        (["workload=tiny_cnn", "degree=3", "cluster=local", "mode=mps"], "f75681333eb87cce"),
        (["mix=s_m_m", "cluster=local"], "8d3454cda2516eb9"),
        (["workload=dlrm_criteo", "cluster=local"], "0f11b8e7662ab5b2"),
    ],
)
def test_preset_cells_keep_their_config_hash(overrides: list[str], digest: str) -> None:
    # Computed at main 4cb1411 (before workloads were compositions), with exactly these overrides:
    # a preset cell is the same work, so its results are found again (resume) after the change.
    assert config_hash(load_config(compose(overrides))) == digest


@pytest.mark.slow  # builds timm models: ~3.5 s
def test_timm_composition_takes_shape_and_classes_from_the_dataset() -> None:
    cell = load(["workload=timm", "workload.model=convnext_atto", "workload.dataset=cifar10", "degree=2"])
    job = cell.jobs[0]
    assert cell.label == "convnext_atto_cifar10-naive-x2" and job.name == "0-convnext_atto_cifar10"
    w = job.workload
    assert (w.model, w.dataset, w.sample_shape, w.num_classes, w.dataset_size) == (
        "convnext_atto",
        "cifar10",
        (3, 32, 32),
        10,
        50_000,
    )
    assert job.batch_size == 128 and job.epoch_samples == 50_000
    assert job.mem_estimate_mib is not None and job.mem_estimate_mib > 0
    other = load(
        [
            "workload=timm",
            "workload.model=convnext_atto",
            "workload.dataset=imagenet64",
            "workload.resolution=48",
            "workload.num_classes=100",
            "workload.batch_size=32",
        ]
    )
    w = other.jobs[0].workload
    assert (w.name, w.sample_shape, w.num_classes, other.jobs[0].batch_size) == (
        "convnext_atto_imagenet64_48px",
        (3, 48, 48),
        100,
        32,
    )
    assert config_hash(cell.config) != config_hash(other.config)


def test_presets_are_named_compositions() -> None:
    for name in ("resnet26_cifar10", "resnet50_imagenet64", "resnet152_imagenet", "cait_xxs24_imagenet"):
        preset = create_workload(name)
        from raycolloc.job.workloads.compose import compose

        same = compose(preset.model, preset.dataset)
        assert (same.sample_shape, same.num_classes, same.dataset_size, same.batch_size) == (
            preset.sample_shape,
            preset.num_classes,
            preset.dataset_size,
            preset.batch_size,
        )
    # Settings that keep the model apply to a preset; its shape does not change under its name.
    assert load(["workload=resnet26_cifar10", "workload.batch_size=64"]).jobs[0].batch_size == 64
    with pytest.raises(ConfigError, match="compose it instead: workload=timm workload.model=resnet26"):
        load(["workload=resnet26_cifar10", "workload.resolution=64"])


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["workload.model=resnet10"], "timm knows no model 'resnet10'; closest: resnet10t"),
        (["workload.model=convnxt_atto"], "closest: convnext_atto"),
        (["workload.model=resnet10t", "workload.dataset=mnist"], "choose one of: cifar10, imagenet64, imagenet"),
        (
            ["workload.model=resnet10t", "workload.dataset=synthetic", "workload.resolution=32"],
            "workload.num_classes=N workload.dataset_size=N",
        ),
        (["workload.model=resnet10t", "workload.dataset=criteo"], "workload=dlrm_criteo"),
        (["workload.model=resnet10t"], "workload=timm needs workload.dataset"),
        (
            ["workload.model=resnet10t", "workload.dataset=cifar10", "workload.entry=a.b:c"],
            "workload.entry does not apply to workload=timm",
        ),
        (["workload.model=resnet10t", "workload.dataset=imagefolder"], "counts its classes and images"),
        (
            [
                "workload.model=vit_tiny_patch16_224",
                "workload.dataset=synthetic",
                "workload.resolution=8",
                "workload.num_classes=10",
                "workload.dataset_size=64",
            ],
            "cannot train on synthetic at 8 px",
        ),
    ],
)
def test_timm_composition_errors_name_the_key(overrides: list[str], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(["workload=timm", *overrides])
    assert needle in str(err.value)


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["workload=python"], "workload.entry=None is not allowed"),
        (["workload=python", "workload.entry=jobs.examples.tiny_regression"], "package.module:function"),
        (["workload=python", "workload.entry=jobs.examples.nothing_here:build"], "cannot import"),
        (["workload=python", "workload.entry=jobs.examples.tiny_regression:nope"], "has no function 'nope'"),
        (["workload=script"], "workload=script needs a non-empty list"),
        (
            ["workload=script", "workload.command=[python,x.py]", "workload.epoch_regex='[unclosed'"],
            "is not a regular expression",
        ),
        (
            ["workload=script", "workload.command=[python,x.py]", "workload.batch_size=8"],
            "workload.batch_size does not apply to workload=script",
        ),
        (["workload=script", "workload.command=[python,x.py]", "epoch_samples=64"], "epoch_samples do(es) not apply"),
        (["workload=script", "workload.command=[python,x.py]", "trainer.compile=default"], "trainer.compile"),
        (["workload=script", "workload.command=[python,x.py]", "workload.cwd=/nonexistent/dir"], "not a directory"),
        (
            ["workload=tiny_cnn", "workload.command=[python,x.py]"],
            "workload.command does not apply to workload=tiny_cnn",
        ),
    ],
)
def test_python_and_script_errors_name_the_key(overrides: list[str], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(overrides)
    assert needle in str(err.value)


def test_python_and_script_jobs_are_named_by_what_they_run() -> None:
    py = load(["workload=python", "workload.entry=jobs.examples.tiny_regression:build", "workload.args={hidden: 8}"])
    assert py.jobs[0].workload.name == "tiny_regression.build" and py.jobs[0].kind == "python"
    assert py.jobs[0].workload.args == {"hidden": 8} and py.jobs[0].batch_size == 32
    # A script that exists: a missing one is refused (issue 29, item 6; tests/test_malformed_inputs.py).
    named = load(
        [
            "workload=script",
            "workload.command=[python,jobs/examples/plain_train.py]",
            "workload.model=mlp",
            "workload.dataset=mine",
        ]
    )
    assert named.jobs[0].workload.name == "mlp_mine" and named.jobs[0].kind == "script"
    plain = load(["workload=script", "workload.command=[python,jobs/examples/plain_train.py,--epochs,2]", "degree=2"])
    assert plain.label == "script-plain_train-naive-x2" and plain.scripted


def test_memory_and_size_class_come_from_the_model() -> None:
    est = {
        n: estimate_memory(create_workload(n), create_workload(n).batch_size).total_mib
        for n in ("resnet26_cifar10", "resnet50_imagenet64", "resnet152_imagenet")
    }
    assert est["resnet26_cifar10"] < est["resnet50_imagenet64"] < est["resnet152_imagenet"]
    spec = create_workload("resnet26_cifar10")
    one, two, three = (estimate_memory(spec, k * spec.batch_size) for k in (1, 2, 3))
    # Activations grow by the same amount per batch (what autograd saves besides weights); weights,
    # gradients and momentum do not grow at all.
    assert two.activations_mib - one.activations_mib == pytest.approx(three.activations_mib - two.activations_mib)
    assert two.activations_mib > one.activations_mib and two.weights_mib == one.weights_mib
    assert one.params == 13_966_666 and one.optimizer_mib == pytest.approx(one.weights_mib)
    from raycolloc.job.workloads.compose import compose

    big = compose("resnet152", "imagenet")
    assert size_class(big, estimate_memory(big, 64)) == "L" and size_class(spec, None) == "S"


def test_a_jobs_estimate_is_the_carried_one_else_its_models_and_none_for_the_users_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One function answers for the driver's pre-flight and a simulated GPU's accounting."""
    import dataclasses

    import raycolloc.job.workloads.estimate as estimate
    from raycolloc.driver.preflight import job_gpu_memory_mib
    from raycolloc.node.gpu.simdevice import CONTEXT_MIB

    (preset,) = load(["workload=resnet26_cifar10"]).jobs
    expected = estimate_memory(preset.workload, preset.batch_size).total_mib
    assert preset.mem_estimate_mib is None and job_estimate_mib(preset) == expected
    assert job_gpu_memory_mib(preset) == expected + CONTEXT_MIB
    carried = dataclasses.replace(preset, mem_estimate_mib=123.0)
    assert job_estimate_mib(carried) == 123.0 and job_gpu_memory_mib(carried) == 123.0 + CONTEXT_MIB
    (user,) = load(["workload=python", "workload.entry=tests.sleepy_workload:build"]).jobs
    assert job_estimate_mib(user) is None and job_gpu_memory_mib(user) is None

    def cannot(spec, batch):  # noqa: ANN001, ANN202 - an operator without a meta kernel
        raise NotImplementedError("no meta kernel")

    monkeypatch.setattr(estimate, "estimate_memory", cannot)
    assert job_estimate_mib(preset) is None and job_gpu_memory_mib(preset) is None


def test_a_model_the_meta_device_cannot_run_is_tried_once_and_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An advice composed one such model for each of 16 jobs and printed the same warning 32 times
    (one H200, regnetx_004): the failure is kept, and each workload's missing estimate said once."""
    import logging

    import raycolloc.job.workloads.estimate as estimate

    monkeypatch.setenv("RAYCOLLOC_CACHE_DIR", str(tmp_path))
    for name, empty in (("_CACHE", {}), ("_FAILED", {}), ("_WARNED", set())):
        monkeypatch.setattr(estimate, name, empty)
    tries = []

    def cannot(spec, batch):  # noqa: ANN001, ANN202 - an operator without a meta kernel
        tries.append(batch)
        raise NotImplementedError("aten::_unique2: no meta kernel")

    monkeypatch.setattr(estimate, "_estimate", cannot)
    (preset,) = load(["workload=resnet26_cifar10"]).jobs
    with caplog.at_level(logging.WARNING):
        assert [job_estimate_mib(preset) for _ in range(16)] == [None] * 16
    assert tries == [preset.batch_size]
    said = [r.getMessage() for r in caplog.records if "no memory estimate" in r.getMessage()]
    why = "NotImplementedError: aten::_unique2: no meta kernel"
    assert said == [f"no memory estimate for {preset.workload.name} ({why})"]


def test_an_estimate_is_made_once_per_composition_across_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk cache: a new process reads the estimate instead of running the model on the meta
    device again; a torn cache file is estimated over, never trusted."""
    import json
    import subprocess
    import sys

    import raycolloc.job.workloads.estimate as estimate

    monkeypatch.setenv("RAYCOLLOC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(estimate, "_CACHE", {})
    spec = create_workload("tiny_cnn")
    made = estimate_memory(spec, 32)
    (stored,) = json.loads(estimate.cache_file().read_text()).values()
    assert stored["activations_mib"] == made.activations_mib > 0
    # Another process, the model's forward forbidden: the estimate comes from the file.
    probe = (
        "import raycolloc.job.workloads.estimate as e; from raycolloc.job.workloads.registry import create_workload;"
        "e._estimate = None; print(e.estimate_memory(create_workload('tiny_cnn'), 32).total_mib)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "RAYCOLLOC_CACHE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    )
    assert float(out.stdout) == pytest.approx(made.total_mib)
    # Another batch is another estimate; a torn file is replaced by a whole one.
    estimate.cache_file().write_text('{"torn')
    monkeypatch.setattr(estimate, "_CACHE", {})
    assert estimate_memory(spec, 64).activations_mib > made.activations_mib
    assert len(json.loads(estimate.cache_file().read_text())) == 1


def test_a_driver_checks_a_timm_model_name_without_importing_timm_once_the_names_are_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """timm's names are cached per install: a new process checks ``workload.model`` (and names the
    closest for a typo) from the file; a torn file is listed again, never trusted."""
    import json
    import subprocess
    import sys

    from raycolloc.config_checks import closest
    from raycolloc.job.workloads import compose

    monkeypatch.setenv("RAYCOLLOC_CACHE_DIR", str(tmp_path))
    listed = compose.timm_model_names.__wrapped__()  # uncached in this process: lists timm and writes the file
    (cached,) = tmp_path.glob("timm-models-*.json")
    assert json.loads(cached.read_text()) == list(listed) and "resnet10t" in listed
    probe = (
        "import sys; from raycolloc.job.workloads.compose import check_model, UnknownModel\n"
        "check_model('resnet10t')\n"
        "try: check_model('resnt10t')\nexcept UnknownModel as e: print(e)\nprint('timm' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "RAYCOLLOC_CACHE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    )
    near = ", ".join(closest("resnt10t", listed))  # the same hint as a process that imported timm
    assert out.stdout.splitlines() == [f"timm knows no model 'resnt10t'; closest: {near}", "False"], out.stdout
    cached.write_text('["resn')
    assert compose.timm_model_names.__wrapped__() == listed
    assert json.loads(cached.read_text()) == list(listed)


@pytest.mark.slow  # imports timm in a process of its own (~4 CPU-seconds each)
@pytest.mark.parametrize(
    ("entry", "name", "call", "said"),
    [
        ("raycolloc.job.workloads.compose", "check_model", "check_model('resnet10t')", "None"),  # a cold name cache
        ("raycolloc.driver.radt_data", "synthetic_shape", "synthetic_shape('resnet10t')['resolution']", "176"),
        ("raycolloc.job.workloads.models", "timm_model", "type(timm_model('resnet10t', 10)).__name__", "ResNet"),
    ],
)
def test_a_drivers_timm_imports_leave_nothing_in_the_temporary_directory(
    tmp_path: Path, entry: str, name: str, call: str, said: str
) -> None:
    import subprocess
    import sys

    # Importing timm imports torch._dynamo, which makes inductor's cache directory: a user's first sweep of a
    # timm model (a cold name cache) left an empty $TMPDIR/torchinductor_<user> (2026-12-05). Each way in,
    # in a process of its own: after one, timm is imported and the variables set for the others.
    user_tmp, cache = tmp_path / "tmp", tmp_path / "compile-cache"
    user_tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    env.update(TMPDIR=str(user_tmp), RAYCOLLOC_CACHE_DIR=str(tmp_path / "names"), RAYCOLLOC_COMPILE_CACHE=str(cache))
    probe = f"import sys\nfrom {entry} import {name}\nassert 'timm' not in sys.modules\nprint({call})"
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert run.returncode == 0 and run.stdout.split() == [said], run.stdout + run.stderr
    assert not list(user_tmp.iterdir()) and (cache / "inductor").is_dir()


def test_dry_run_lists_cells_to_run_reuse_and_refuse_and_runs_nothing(tmp_path: Path) -> None:
    out = tmp_path / "results"
    base = [
        "cluster=local",
        "workload=timm",
        "workload.dataset=synthetic",
        "workload.resolution=32",
        "workload.num_classes=10",
        "workload.dataset_size=64",
        "batch_size=16",
        f"out_dir={out}",
    ]
    # A result of one of the cells exists already (same config hash): the dry run would reuse it.
    from raycolloc.driver.cell_specs import validate_cell

    done = validate_cell(compose([*base, "workload.model=resnet10t", "degree=1"]))
    write_fixture_cell(
        out / "earlier" / "0",
        {
            "cells": [{"cell_id": done.cell_id, "config_hash": done.config_hash, "status": "ok", "finished_at": 1.0}],
            "jobs": [{"cell_id": done.cell_id, "job_index": 0, "status": "ok"}],
        },
    )
    proc = run_cli(
        ["-m", *base, "workload.model=resnet10t,resnt10t", "degree=1,2", "+dry_run=true"],
        cwd=ROOT,
        timeout=300,
        own_ray=True,
    )  # a dry run starts no Ray
    assert proc.returncode == 2, proc.stderr[-2000:]  # a refused cell: the exit status says so
    text = proc.stdout
    assert f"reuse  {done.label}: result in {out / 'earlier' / '0'}" in text
    assert "run    resnet10t_synthetic_32px-naive-x2  mode=naive  jobs=2" in text
    assert "0-resnet10t_synthetic_32px: resnet10t on synthetic (3x32x32, 10 classes), batch 16, 64 samples x 2" in text
    assert text.count("refuse #") == 2 and "timm knows no model 'resnt10t'; closest: resnet10t" in text
    assert "1 cell(s) to run, 1 to reuse, 2 refused" in text and "not checked against the cluster" in text
    assert {p.parent for p in out.rglob("*.parquet")} == {out / "earlier" / "0"}  # the fixture only
    assert not (out / "multirun").exists() or not any((out / "multirun").rglob(".hydra"))


def test_an_image_folder_counts_its_classes_and_images_and_real_data_keeps_its_resolution(tmp_path: Path) -> None:
    import numpy as np

    from raycolloc.job.data.writers import write_cifar10, write_imagefolder

    rng = np.random.default_rng(0)
    write_imagefolder(
        tmp_path / "tree", rng.integers(0, 255, (7, 3, 40, 40), dtype=np.uint8), np.array([0, 1, 2] * 2 + [3])
    )
    cell = load(
        [
            "workload=timm",
            "workload.model=resnet10t",
            "workload.dataset=imagefolder",
            "workload.resolution=64",
            "data.source=real",
            f"data.path={tmp_path / 'tree'}",
            "batch_size=2",
        ]
    )
    w = cell.jobs[0].workload
    assert (w.num_classes, w.dataset_size, w.sample_shape) == (4, 7, (3, 64, 64))  # counted; resized by the loader
    write_cifar10(tmp_path / "c10", rng.integers(0, 255, (10, 3, 32, 32), dtype=np.uint8), np.arange(10))
    with pytest.raises(ConfigError, match="cifar10 holds 32 px images, read as they are"):
        load(
            [
                "workload=timm",
                "workload.model=resnet10t",
                "workload.dataset=cifar10",
                "workload.resolution=64",
                "data.source=real",
                f"data.path={tmp_path / 'c10'}",
            ]
        )
