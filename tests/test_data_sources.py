"""Batch sources: synthetic data shaped like the real sets, and real formats read through the
same path a trainer uses (generated files; placement host and device on the CPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from raycolloc.job.data import real, writers
from raycolloc.job.data.sources import build_source
from raycolloc.job.workloads.registry import create_workload

CPU = torch.device("cpu")


@pytest.mark.parametrize("name", ["resnet26_cifar10", "resnet50_imagenet64", "resnet152_imagenet", "tiny_dlrm"])
def test_synthetic_batches_have_the_real_sets_shapes(name: str) -> None:
    spec = create_workload(name)
    source = build_source(spec, 4, CPU, "synthetic", "host", None, 0, seed=1)
    inputs, target = source.next()
    if spec.family == "dlrm":
        dense, sparse = inputs
        assert dense.shape == (4, 13) and sparse.shape == (4, 26) and target.dtype == torch.float32
        assert (sparse < torch.tensor(spec.table_sizes)).all()
    else:
        assert inputs[0].shape == (4, *spec.sample_shape)
        assert int(target.max()) < spec.num_classes
    assert source.bytes_per_batch == sum(t.numel() * t.element_size() for t in (*inputs, target))


def test_synthetic_pool_cycles_distinct_batches() -> None:
    source = build_source(create_workload("tiny_cnn"), 8, CPU, "synthetic", "device", None, 0, seed=0)
    first = [source.next()[0][0].clone() for _ in range(4)]
    again = source.next()[0][0]
    assert not torch.equal(first[0], first[1])
    assert torch.equal(first[0], again)  # a pool of four batches, cycled


@pytest.mark.parametrize("placement", ["host", "device"])
def test_cifar10_files_feed_normalised_images(tmp_path: Path, placement: str) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (50, 3, 32, 32), dtype=np.uint8)
    labels = rng.integers(0, 10, 50)
    writers.write_cifar10(tmp_path, images, labels)
    source = build_source(create_workload("tiny_cnn"), 10, CPU, "real", placement, str(tmp_path), 0, seed=0)
    seen = set()
    for _ in range(5):  # one pass of a shuffled epoch covers every sample once
        (x,), y = source.next()
        assert x.dtype == torch.float32 and x.shape == (10, 3, 32, 32)
        assert abs(float(x.mean())) < 1.0  # normalised, not raw bytes
        seen.update(y.tolist())
    assert seen <= set(range(10))


def test_imagenet64_and_imagefolder_and_criteo_through_build_source(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    imgs = rng.integers(0, 256, (20, 3, 64, 64), dtype=np.uint8)
    writers.write_imagenet64(tmp_path / "i64", imgs, rng.integers(0, 1000, 20), per_file=8)
    (x,), y = build_source(
        create_workload("resnet50_imagenet64"), 4, CPU, "real", "host", str(tmp_path / "i64"), 0, seed=0
    ).next()
    assert x.shape == (4, 3, 64, 64) and int(y.max()) < 1000
    writers.write_imagefolder(
        tmp_path / "folder", rng.integers(0, 256, (6, 3, 40, 40), dtype=np.uint8), np.array([0, 1, 2, 0, 1, 2])
    )
    (x,), y = build_source(
        create_workload("resnet152_imagenet"), 2, CPU, "real", "host", str(tmp_path / "folder"), 0, seed=0
    ).next()
    assert x.shape == (2, 3, 224, 224)
    dense = rng.integers(0, 100, (16, 13))
    cats = [[f"{rng.integers(0, 2**32):08x}" for _ in range(26)] for _ in range(16)]
    writers.write_criteo_tsv(tmp_path / "criteo.tsv", dense, cats, rng.integers(0, 2, 16))
    spec = create_workload("tiny_dlrm")
    (d, s), y = build_source(spec, 8, CPU, "real", "device", str(tmp_path / "criteo.tsv"), 0, seed=0).next()
    assert d.shape == (8, 13) and s.shape == (8, 26) and int(s.max()) < 100 and set(y.tolist()) <= {0.0, 1.0}


def test_image_folder_cannot_live_on_the_device(tmp_path: Path) -> None:
    writers.write_imagefolder(tmp_path, np.zeros((2, 3, 8, 8), dtype=np.uint8), np.array([0, 1]))
    with pytest.raises(ValueError, match="data.placement=device needs an in-memory dataset"):
        build_source(create_workload("resnet152_imagenet"), 1, CPU, "real", "device", str(tmp_path), 0, seed=0)


def test_missing_dataset_names_the_path_and_layout(tmp_path: Path) -> None:
    with pytest.raises(real.DatasetError) as err:
        build_source(create_workload("tiny_cnn"), 4, CPU, "real", "host", str(tmp_path / "nope"), 0, seed=0)
    assert "nope" in str(err.value) and "data_batch_1" in str(err.value)
