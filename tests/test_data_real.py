"""Round-trip and error-path tests for raycolloc.job.data.real (small files in tmp_path)."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from raycolloc.job.data import real
from raycolloc.job.data.real import (
    DatasetError,
    load_cifar10,
    load_criteo_tsv,
    load_imagenet64,
    open_imagefolder,
)
from raycolloc.job.data.writers import write_cifar10, write_criteo_tsv, write_imagefolder, write_imagenet64

SIZES = [1000, 7, 1, 10**7, *range(2, 24)]  # 26 table sizes


def _images(rng: np.random.Generator, n: int, side: int) -> np.ndarray:
    return rng.integers(0, 256, size=(n, 3, side, side), dtype=np.uint8)


def _marker_row(side: int) -> np.ndarray:
    """One flat R,G,B-planar row: plane c is filled with 10*(c+1); pixel (c, y=1, x=2) is 200 + c."""
    planes = np.stack([np.full((side, side), 10 * (c + 1), np.uint8) for c in range(3)])
    planes[:, 1, 2] = [200, 201, 202]
    return planes.reshape(-1)  # C-order: plane, row, column


# ---------------------------------------------------------------- CIFAR-10


def test_cifar10_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    images, labels = _images(rng, 50, 32), rng.integers(0, 10, 50)
    write_cifar10(tmp_path, images, labels)
    ds = load_cifar10(tmp_path)
    assert len(ds) == 50 and ds.num_classes == 10
    assert ds.images.dtype == np.uint8 and ds.images.shape == (50, 3, 32, 32)
    assert ds.labels.dtype == np.int64
    np.testing.assert_array_equal(ds.images, images)
    np.testing.assert_array_equal(ds.labels, labels)
    with (tmp_path / "data_batch_1").open("rb") as f:  # the writer really produced the documented layout
        raw = pickle.load(f, encoding="bytes")
    assert raw[b"data"].shape == (10, 3072) and raw[b"labels"] == labels[:10].tolist()
    n, c, y, x = 3, 2, 5, 7
    assert raw[b"data"][n, c * 1024 + y * 32 + x] == images[n, c, y, x]


def _write_cifar_batches(folder: Path, rows: np.ndarray, labels: list[int]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in real.CIFAR10_FILES:
        with (folder / name).open("wb") as f:
            pickle.dump({b"data": rows, b"labels": labels}, f, protocol=2)


def test_cifar10_plane_order_from_handmade_file(tmp_path: Path) -> None:
    _write_cifar_batches(tmp_path, _marker_row(32)[None], [7])
    ds = load_cifar10(tmp_path)
    assert ds.images.shape == (5, 3, 32, 32)
    assert [ds.images[0, c, 0, 0] for c in range(3)] == [10, 20, 30]
    assert [ds.images[0, c, 1, 2] for c in range(3)] == [200, 201, 202]
    assert ds.images[0, 0, 2, 1] == 10  # not transposed
    assert ds.labels.tolist() == [7] * 5


def test_cifar10_accepts_parent_folder(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    images, labels = _images(rng, 10, 32), rng.integers(0, 10, 10)
    write_cifar10(tmp_path / "cifar-10-batches-py", images, labels)
    np.testing.assert_array_equal(load_cifar10(tmp_path).images, images)


def test_cifar10_limit_reads_fewer_batches(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    images, labels = _images(rng, 50, 32), rng.integers(0, 10, 50)
    write_cifar10(tmp_path, images, labels)
    for name in ("data_batch_3", "data_batch_4", "data_batch_5"):
        (tmp_path / name).write_bytes(b"not a pickle")
    ds = load_cifar10(tmp_path, limit=15)
    assert len(ds) == 15 and ds.images.shape == (15, 3, 32, 32)
    np.testing.assert_array_equal(ds.images, images[:15])
    np.testing.assert_array_equal(ds.labels, labels[:15])
    with pytest.raises(DatasetError, match="data_batch_3") as info:
        load_cifar10(tmp_path)
    assert str(tmp_path) in str(info.value) and 'b"data"' in str(info.value)


def test_cifar10_missing_dir(tmp_path: Path) -> None:
    root = tmp_path / "nope"
    with pytest.raises(DatasetError) as info:
        load_cifar10(root)
    msg = str(info.value)
    assert str(root) in msg and "does not exist" in msg
    assert "data_batch_1" in msg and "data_batch_5" in msg and "cifar-10-batches-py" in msg


def test_cifar10_missing_file(tmp_path: Path) -> None:
    write_cifar10(tmp_path, _images(np.random.default_rng(3), 5, 32), np.zeros(5, np.int64))
    (tmp_path / "data_batch_4").unlink()
    with pytest.raises(DatasetError) as info:
        load_cifar10(tmp_path)
    msg = str(info.value)
    assert str(tmp_path) in msg and "lacks data_batch_4 " in msg and "data_batch_1" in msg


def test_cifar10_wrong_shape_and_keys(tmp_path: Path) -> None:
    _write_cifar_batches(tmp_path, np.zeros((2, 3000), np.uint8), [0, 1])
    with pytest.raises(DatasetError) as info:
        load_cifar10(tmp_path)
    assert str(tmp_path / "data_batch_1") in str(info.value) and "[N, 3072]" in str(info.value)
    with (tmp_path / "data_batch_1").open("wb") as f:
        pickle.dump({b"data": np.zeros((2, 3072), np.uint8)}, f)
    with pytest.raises(DatasetError) as info:
        load_cifar10(tmp_path)
    assert str(tmp_path / "data_batch_1") in str(info.value) and 'b"labels"' in str(info.value)
    _write_cifar_batches(tmp_path, np.zeros((1, 3072), np.uint8), [10])
    with pytest.raises(DatasetError, match=r"labels must be in 0\.\.9"):
        load_cifar10(tmp_path)


# ---------------------------------------------------------------- ImageNet 64x64


def test_imagenet64_round_trip_and_label_offset(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    images, labels = _images(rng, 25, 64), rng.integers(0, 1000, 25)
    labels[:2] = [0, 999]
    paths = write_imagenet64(tmp_path, images, labels, per_file=10)
    assert [p.name for p in paths] == [f"train_data_batch_{k}.npz" for k in (1, 2, 3)]
    with np.load(paths[0]) as npz:  # on disk: flat planes, 1-based labels
        assert npz["data"].shape == (10, 12288)
        np.testing.assert_array_equal(npz["labels"], labels[:10] + 1)
        assert npz["data"][4, 1 * 4096 + 6 * 64 + 9] == images[4, 1, 6, 9]
    ds = load_imagenet64(tmp_path)
    assert len(ds) == 25 and ds.num_classes == 1000 and ds.images.shape == (25, 3, 64, 64)
    assert ds.images.dtype == np.uint8 and ds.labels.dtype == np.int64
    np.testing.assert_array_equal(ds.images, images)
    np.testing.assert_array_equal(ds.labels, labels)


def test_imagenet64_plane_order_from_handmade_file(tmp_path: Path) -> None:
    np.savez(tmp_path / "train_data_batch_1.npz", data=_marker_row(64)[None], labels=np.array([1000]))
    ds = load_imagenet64(tmp_path)
    assert [ds.images[0, c, 0, 0] for c in range(3)] == [10, 20, 30]
    assert [ds.images[0, c, 1, 2] for c in range(3)] == [200, 201, 202]
    assert ds.labels.tolist() == [999]


def test_imagenet64_numeric_file_order(tmp_path: Path) -> None:
    images = _images(np.random.default_rng(5), 12, 64)
    write_imagenet64(tmp_path, images, np.arange(12), per_file=1)  # files 1..12: "10" sorts before "2" as text
    (tmp_path / "train_data_batch_x.npz").write_bytes(b"ignored")  # not a numbered batch
    ds = load_imagenet64(tmp_path)
    assert ds.labels.tolist() == list(range(12))
    np.testing.assert_array_equal(ds.images, images)


def test_imagenet64_limit(tmp_path: Path) -> None:
    images, labels = _images(np.random.default_rng(6), 25, 64), np.arange(25)
    write_imagenet64(tmp_path, images, labels, per_file=10)
    (tmp_path / "train_data_batch_3.npz").write_bytes(b"garbage")  # never opened with limit=12
    ds = load_imagenet64(tmp_path, limit=12)
    assert len(ds) == 12
    np.testing.assert_array_equal(ds.images, images[:12])
    with pytest.raises(DatasetError, match="train_data_batch_3.npz"):
        load_imagenet64(tmp_path)


def test_imagenet64_missing_dir_and_files(tmp_path: Path) -> None:
    for root in (tmp_path / "nope", tmp_path):
        with pytest.raises(DatasetError) as info:
            load_imagenet64(root)
        msg = str(info.value)
        assert str(root) in msg and "train_data_batch_1.npz" in msg and "[N, 12288]" in msg


def test_imagenet64_wrong_keys_shapes_labels(tmp_path: Path) -> None:
    path = tmp_path / "train_data_batch_1.npz"
    np.savez(path, x=np.zeros((2, 12288), np.uint8), labels=np.ones(2))
    with pytest.raises(DatasetError) as info:
        load_imagenet64(tmp_path)
    assert str(path) in str(info.value) and '"data" uint8 [N, 12288]' in str(info.value)
    np.savez(path, data=np.zeros((2, 3 * 32 * 32), np.uint8), labels=np.ones(2))
    with pytest.raises(DatasetError) as info:
        load_imagenet64(tmp_path)
    assert str(path) in str(info.value) and "[N, 12288]" in str(info.value) and "[2, 3072]" in str(info.value)
    np.savez(path, data=np.zeros((2, 12288), np.uint8), labels=np.ones(3))
    with pytest.raises(DatasetError, match="labels"):
        load_imagenet64(tmp_path)
    np.savez(path, data=np.zeros((2, 12288), np.uint8), labels=np.array([0, 1]))  # 0-based on disk: wrong
    with pytest.raises(DatasetError, match=r"1\.\.1000"):
        load_imagenet64(tmp_path)


# ---------------------------------------------------------------- ImageFolder


def test_imagefolder_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    images, labels = _images(rng, 12, 16), np.array([2, 0, 1, 2, 0, 1, 1, 1, 0, 2, 2, 0])
    write_imagefolder(tmp_path, images, labels)
    ds = open_imagefolder(tmp_path, image_size=16)
    assert isinstance(ds, torch.utils.data.Dataset)
    assert len(ds) == 12 and ds.num_classes == 3 and ds.classes == ["class_0000", "class_0001", "class_0002"]
    seen = set()
    for i in range(len(ds)):
        img, label = ds[i]
        n = int(ds.samples[i][0].stem)
        seen.add(n)
        assert isinstance(label, int) and label == labels[n]
        assert img.dtype == torch.uint8 and tuple(img.shape) == (3, 16, 16)
        np.testing.assert_array_equal(img.numpy(), images[n])
    assert seen == set(range(12))
    assert [lab for _, lab in ds.samples] == sorted(lab for _, lab in ds.samples)  # class-major order


def test_imagefolder_resize_center_crop_and_grayscale(tmp_path: Path) -> None:
    wide = np.zeros((20, 40, 3), np.uint8)  # H=20, W=40: red | green | blue bands
    wide[:, :10, 0], wide[:, 10:30, 1], wide[:, 30:, 2] = 255, 255, 255
    (tmp_path / "a").mkdir()
    Image.fromarray(wide).save(tmp_path / "a" / "wide.png")
    (tmp_path / "b").mkdir()
    Image.fromarray(np.full((30, 12), 77, np.uint8), mode="L").save(tmp_path / "b" / "tall.JPEG")
    ds = open_imagefolder(tmp_path, image_size=10)
    img, label = ds[0]
    assert tuple(img.shape) == (3, 10, 10) and label == 0
    assert img[1].float().mean() > 200 and img[0].float().mean() < 60 and img[2].float().mean() < 60
    gray, label = ds[1]
    assert tuple(gray.shape) == (3, 10, 10) and label == 1
    assert torch.all((gray - 77).abs() <= 3)


def test_imagefolder_limit(tmp_path: Path) -> None:
    images = _images(np.random.default_rng(8), 9, 8)
    write_imagefolder(tmp_path, images, np.arange(9) % 3)
    ds = open_imagefolder(tmp_path, image_size=8, limit=5)
    assert len(ds) == 5 and ds.num_classes == 3


def test_imagefolder_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(DatasetError) as info:
        open_imagefolder(missing, 32)
    assert str(missing) in str(info.value) and "<class_name>/<image>" in str(info.value)
    (tmp_path / "stray.png").write_bytes(b"")
    with pytest.raises(DatasetError) as info:
        open_imagefolder(tmp_path, 32)
    assert "no class sub-folders" in str(info.value) and f"{tmp_path}/<class_name>/<image>" in str(info.value)
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "notes.txt").write_text("x")
    with pytest.raises(DatasetError) as info:
        open_imagefolder(tmp_path, 32)
    assert "no images" in str(info.value) and f"{tmp_path}/<class_name>/<image>" in str(info.value)
    (tmp_path / "cat" / "broken.png").write_bytes(b"not a png")
    ds = open_imagefolder(tmp_path, 32)
    with pytest.raises(DatasetError, match="broken.png"):
        ds[0]


# ---------------------------------------------------------------- Criteo


def _criteo_rows(rng: np.random.Generator, n: int) -> tuple[list, list, np.ndarray]:
    dense = [[None if rng.random() < 0.2 else int(rng.integers(-3, 5000)) for _ in range(13)] for _ in range(n)]
    cats = [[None if rng.random() < 0.2 else f"{int(rng.integers(0, 2**32)):08x}" for _ in range(26)] for _ in range(n)]
    return dense, cats, rng.integers(0, 2, n)


def _expected(dense: list, cats: list, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d = np.array([[0.0 if v is None else math.log1p(max(v, 0)) for v in row] for row in dense], np.float32)
    s = np.array([[0 if h is None else int(h, 16) % SIZES[i] for i, h in enumerate(row)] for row in cats])
    return d, s, labels.astype(np.float32)


def test_criteo_round_trip(tmp_path: Path) -> None:
    dense, cats, labels = _criteo_rows(np.random.default_rng(9), 40)
    path = write_criteo_tsv(tmp_path / "day.tsv", dense, cats, labels)
    out = load_criteo_tsv(path, SIZES)
    d, s, lab = _expected(dense, cats, labels)
    assert len(out) == 40
    assert out.dense.dtype == np.float32 and out.dense.shape == (40, 13)
    assert out.sparse.dtype == np.int64 and out.sparse.shape == (40, 26)
    assert out.labels.dtype == np.float32 and set(out.labels.tolist()) <= {0.0, 1.0}
    np.testing.assert_allclose(out.dense, d, rtol=1e-6)
    np.testing.assert_array_equal(out.sparse, s)
    np.testing.assert_array_equal(out.labels, lab)
    assert ((out.sparse >= 0) & (out.sparse < np.array(SIZES))).all()


def test_criteo_known_hash_and_empty_fields(tmp_path: Path) -> None:
    path = tmp_path / "t.tsv"
    hexes = ["68fd1e64", "68FD1E64", "ffffffff", "ffffffff"] + ["0"] * 22
    full = "1\t" + "\t".join(["3"] * 13) + "\t" + "\t".join(hexes)
    long = "0\t" + "\t" * 13 + "\t".join(["f" * 20] + [""] * 25)  # > 15 hex digits: no int64 overflow
    path.write_text(full + "\n" + "\t" * 39 + "\r\n" + long + "\n\n")  # row 2: all empty; CRLF; blank line
    out = load_criteo_tsv(path, SIZES)
    assert len(out) == 3
    assert out.sparse[2].tolist() == [int("f" * 20, 16) % 1000] + [0] * 25
    # 0x68fd1e64 == 1761418852 (either case); 0xffffffff == 4294967295; sizes 1000, 7, 1, 10**7
    assert out.sparse[0, :4].tolist() == [852, 4, 0, 4967295]
    np.testing.assert_allclose(out.dense[0], np.full(13, math.log(4.0)), rtol=1e-6)
    assert out.labels.tolist() == [1.0, 0.0, 0.0]
    assert not out.dense[1].any() and not out.sparse[1].any()


def test_criteo_directory_and_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(real, "_CHUNK_LINES", 4)  # exercise multi-chunk parsing
    rng = np.random.default_rng(10)
    parts = [_criteo_rows(rng, 7), _criteo_rows(rng, 5)]
    write_criteo_tsv(tmp_path / "a.tsv", *parts[0])
    write_criteo_tsv(tmp_path / "b.txt", *parts[1])
    (tmp_path / "readme.md").write_text("ignored")
    (d0, c0, l0), (d1, c1, l1) = parts
    d, s, lab = _expected(d0 + d1, c0 + c1, np.concatenate([l0, l1]))
    out = load_criteo_tsv(tmp_path, SIZES)
    np.testing.assert_array_equal(out.sparse, s)
    np.testing.assert_allclose(out.dense, d, rtol=1e-6)
    limited = load_criteo_tsv(tmp_path, SIZES, limit=9)  # crosses into the second file
    assert len(limited) == 9
    np.testing.assert_array_equal(limited.sparse, s[:9])
    np.testing.assert_array_equal(limited.labels, lab[:9])
    write_criteo_tsv(tmp_path / "train.txt", *_criteo_rows(rng, 3))  # train.txt wins over other files
    assert len(load_criteo_tsv(tmp_path, SIZES)) == 3


def test_criteo_limit_stops_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(real, "_CHUNK_LINES", 4)
    path = write_criteo_tsv(tmp_path / "x.tsv", *_criteo_rows(np.random.default_rng(11), 9))
    with path.open("a") as f:
        f.write("1\t2\t3\n")  # line 10 is malformed
    assert len(load_criteo_tsv(path, SIZES, limit=9)) == 9
    with pytest.raises(DatasetError) as info:
        load_criteo_tsv(path, SIZES)
    msg = str(info.value)
    assert f"{path}:10:" in msg and "found 3 fields" in msg and "expected 40 tab-separated fields" in msg


def test_criteo_bad_lines(tmp_path: Path) -> None:
    good = "0\t" + "\t".join(["1"] * 13) + "\t" + "\t".join(["00000001"] * 26)
    path = tmp_path / "bad.tsv"
    for bad, pattern in [
        (good + "\textra", r":2: found 41 fields, expected 40 tab-separated fields"),
        (good.replace("00000001", "zz", 1), r":2: categorical field C1='zz' is not hex"),
        (good.replace("\t1\t", "\tx1\t", 1), r":2: field 'x1' is not an integer"),
        ("2" + good[1:], r":2: label must be 0 or 1"),
    ]:
        path.write_text(f"{good}\n{bad}\n{good}\n")
        with pytest.raises(DatasetError, match=pattern) as info:
            load_criteo_tsv(path, SIZES)
        assert str(path) in str(info.value)


def test_criteo_path_and_table_size_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="26 entries"):
        load_criteo_tsv(tmp_path, SIZES[:25])
    missing = tmp_path / "nope.tsv"
    with pytest.raises(DatasetError) as info:
        load_criteo_tsv(missing, SIZES)
    assert str(missing) in str(info.value) and "train.txt" in str(info.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError) as info:
        load_criteo_tsv(tmp_path / "empty", SIZES)
    assert str(tmp_path / "empty") in str(info.value) and "*.tsv" in str(info.value)
