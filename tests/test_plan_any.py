"""radT plans as researchers write them: any timm model, data directories named freely (recognised
by what they hold), their own scripts as File, and every column checked by row and column."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from raycolloc.driver.radt import PlanError, read_plan
from raycolloc.job.data.writers import (
    write_cifar10,
    write_criteo_tsv,
    write_imagefolder,
    write_imagenet64,
)

from .conftest import ROOT, SHORT_TMP, run_cli

HEADER = "Experiment,Workload,Status,Run,Devices,Collocation,File,Listeners,Params\n"
TIMM_TRAIN_HEAD = '#!/usr/bin/env python3\n""" ImageNet Training Script\n"""\nimport timm\n'


def _images(n: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.integers(0, 255, (n, 3, side, side), dtype=np.uint8), rng.integers(0, 3, n)


def _datasets(root: Path) -> None:
    """Four directories whose names say nothing of what they hold."""
    write_cifar10(root / "c10_local", *_images(80, 32))
    write_imagenet64(root / "imagenet64_images", *_images(8, 64), per_file=4)
    write_imagefolder(root / "pics", *_images(9, 40))
    write_criteo_tsv(root / "clicks" / "train.txt", [[1] * 13] * 4, [[7] * 26] * 4, [0, 1, 0, 1])


def _plan(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "plan.csv"
    path.write_text(HEADER + body)
    return path


def test_free_named_directories_are_recognised_by_their_contents(tmp_path: Path) -> None:
    _datasets(tmp_path)
    body = (
        "1,1,,a,0,MPS,train.py,smi,--model convnext_atto --data c10_local\n"
        "1,1,,b,0,MPS,train.py,smi,--model cait_xxs24_224 --data imagenet64_images\n"
        f"1,1,,c,0,MPS,train.py,smi,--model resnet10t --data {tmp_path / 'pics'}\n"
        "1,1,,d,0,MPS,dlrm_s_pytorch.py,smi,--data clicks\n"
        "1,1,,e,0,MPS,train.py,smi,--model efficientnetv2_s --data mystery\n"
    )
    (cell,) = read_plan(_plan(tmp_path, body), datasets={"mystery": "imagenet64"})[0].cells
    a, b, c, d, e = cell.jobs
    assert (a.workload.model, a.workload.dataset, a.data_dir) == (
        "convnext_atto",
        "cifar10",
        str(tmp_path / "c10_local"),
    )
    assert (b.workload.model, b.workload.dataset) == ("cait_xxs24_224", "imagenet64")
    assert (c.workload.dataset, c.workload.num_classes, c.workload.dataset_size) == ("imagefolder", 3, 9)
    assert d.workload == "dlrm_criteo"
    assert e.workload == "efficientnetv2s_imagenet64"  # +plan_datasets, then the study's preset name
    # Unrecognised and unmapped: refused by default, synthetic images with data.source=synthetic.
    with pytest.raises(PlanError, match=r"column Params: unknown dataset 'mystery'.*\+plan_datasets="):
        read_plan(_plan(tmp_path, body))
    synthetic = read_plan(_plan(tmp_path, body), synthetic=True)[0].cells[0].jobs[4].workload
    assert (synthetic.dataset, synthetic.resolution, synthetic.num_classes) == ("synthetic", 288, 1000)


def test_a_researchers_own_file_runs_as_a_script_and_timms_train_py_does_not(tmp_path: Path) -> None:
    (tmp_path / "my_train.py").write_text("print('epoch 1')\n")
    (tmp_path / "train.py").write_text(TIMM_TRAIN_HEAD)
    body = (
        "1,1,,a,0,-,my_train.py,smi,--model resnet50 --epochs 1 --data /d/imagenet64\n"
        "1,1,,b,0,-,train.py,smi,--model resnet50 --data /d/imagenet64\n"
    )
    a, b = read_plan(_plan(tmp_path, body), epoch_regex=r"^epoch \d+")[0].cells[0].jobs
    assert a.kind == "script" and a.workload.name == "script"
    assert a.workload.command == [
        "python",
        "my_train.py",
        "--model",
        "resnet50",
        "--epochs",
        "1",
        "--data",
        "/d/imagenet64",
    ]
    assert a.workload.cwd == str(tmp_path.resolve()) and a.workload.epoch_regex == r"^epoch \d+"
    assert (a.workload.model, a.workload.dataset) == ("resnet50", "imagenet64")
    assert b.kind == "model" and b.workload == "resnet50_imagenet64"


BAD_ROWS = """\
,1,,r1,0,-,train.py,smi,--model resnet26 --data /d/cifar10
1,,,r2,0,-,train.py,smi,--model resnet26 --data /d/cifar10
1,1,DONE,r3,0,-,train.py,smi,--model resnet26 --data /d/cifar10
1,1,,r4,gpu0,-,train.py,smi,--model resnet26 --data /d/cifar10
1,1,,r5,1,7g,train.py,smi,--model resnet26 --data /d/cifar10
1,1,,r6,2,-,,smi,--model resnet26 --data /d/cifar10
1,1,,r7,3,-,train.py,smi+!top,--model resnet26 --data /d/cifar10
1,1,,r8,4,-,train.py,smi,--model resnet26 --batch-size many --data /d/cifar10
1,1,,r9,5,-,train.py,smi,--model resnet26 --epochs 0 --data /d/cifar10
1,1,,r10,6,-,train.py,smi,--model resnt26 --data /d/cifar10
1,1,,r11,7,-,train.py,smi,--model resnet26 --data /d/mnist
1,1,,r12,8,-,train.py,smi,"--model 'resnet26 --data /d/cifar10"
1,1,,ok,9,-,train.py,smi,--model resnet26 --data /d/cifar10
"""


def test_every_malformed_value_is_refused_by_row_and_column(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as err:
        read_plan(_plan(tmp_path, BAD_ROWS))
    lines = str(err.value).splitlines()
    assert lines[0] == "12 rows cannot run:"
    expected = [
        (2, "column Experiment: is empty"),
        (3, "column Workload: is empty"),
        (4, "column Status: unknown Status 'DONE'"),
        (5, "column Devices: 'gpu0' is not a GPU index"),
        (6, "column Collocation: unknown Collocation '7g'"),
        (7, "column File: is empty"),
        (8, "column Listeners: '!top' is not a listener name"),
        (9, "column Params: batch value 'many' is not an integer"),
        (10, "column Params: epochs value '0' must be >= 1"),
        (11, "column Params: unknown model 'resnt26' (--model takes any timm model); allowed: resnet26"),
        (12, "column Params: unknown dataset 'mnist'"),
        (13, "column Params: cannot split"),
    ]
    for (line, needle), text in zip(expected, lines[1:], strict=True):
        assert text.startswith(f"{tmp_path / 'plan.csv'}:{line}: ") and needle in text, text


@pytest.mark.slow  # a dry run, then a plan cell of two jobs on real data: about 40 s on 2 cores
def test_plan_with_a_script_row_and_a_timm_row_runs_on_real_data(tmp_path: Path) -> None:
    """A custom File (an unmodified PyTorch loop) and a timm model on a freely named CIFAR-10
    directory, collocated under MPS in one cell; a dry run first prints it and runs nothing."""
    write_cifar10(tmp_path / "c10_local", *_images(80, 32))
    shutil.copy(ROOT / "jobs" / "examples" / "plain_train.py", tmp_path / "my_train.py")
    plan = _plan(
        tmp_path,
        "1,1,,mine,0,MPS,my_train.py,smi,--epochs 3 --steps 2 --batch-size 8\n"
        "1,1,,timm,0,MPS,train.py,smi,--model resnet10t --batch-size 16 --epochs 2 "
        "--data c10_local\n",
    )
    out, pipe_root = tmp_path / "res", SHORT_TMP / f"rcplanany{os.getpid()}"
    args = [
        f"+plan={plan}",
        "cluster=local",
        "data.source=real",
        "epoch_samples=64",
        f"mode.pipe_root={pipe_root}",
        r"+plan_epoch_regex='^epoch (?P<epoch>\d+) done samples=(?P<samples>\d+)'",
        f"out_dir={out}",
    ]
    dry = run_cli([*args, "+dry_run=true"], cwd=tmp_path, timeout=300)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "run    mix-1-1-dev0-mps" in dry.stdout and "script `python my_train.py --epochs 3" in dry.stdout
    assert "resnet10t on cifar10 (3x32x32, 10 classes)" in dry.stdout
    assert "not checked against the cluster" in dry.stdout
    assert not out.exists() or not list(out.rglob("*.parquet"))
    assert ",," in plan.read_text().splitlines()[1]  # Status not written back by a dry run
    proc = run_cli(args, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (jobs_file,) = out.rglob("jobs.parquet")
    jobs = pd.read_parquet(jobs_file).set_index("job_index")
    epochs = pd.read_parquet(jobs_file.parent / "epochs.parquet")
    assert list(jobs["kind"]) == ["script", "model"] and set(jobs["status"]) == {"ok"}
    assert jobs.loc[1, "workload"] == "resnet10t_cifar10" and jobs.loc[1, "data_source"] == "real"
    assert jobs["mps_client"].all() and jobs.loc[0, "exit_code"] == 0
    assert sorted(epochs.loc[epochs.job_index == 0, "epoch"]) == [1, 2, 3]
    assert "FINISHED" in plan.read_text().splitlines()[1]


# Rows in the form of the study's own plan (its artifacts repository's collocation_experiment.csv):
# data directories of the study's DGX, none of which exists here.
STUDY_ROWS = """\
33,1,,,0,-,timm/train.py,smi+top+dcgmi,--model resnet26 --data-dir /raid/datasets/cifar10/ \
--warmup-epochs 0 --batch-size 128
33,14,,,0,-,timm/train.py,smi+top+dcgmi,--model resnet50 --data-dir /raid/datasets/imagenet64_images/ \
--warmup-epochs 0 --batch-size 128
33,17,,,0,MPS,timm/train.py,smi+top+dcgmi,--model resnet50 --data-dir /raid/datasets/imagenet64_images/ \
--warmup-epochs 0 --batch-size 128
33,17,,,0,MPS,timm/train.py,smi+top+dcgmi,--model resnet50 --data-dir /raid/datasets/imagenet64_images/ \
--warmup-epochs 0 --batch-size 128
36,14,,,0,-,timm/train.py,smi+top+dcgmi,--model efficientnetv2_s --data-dir /raid/datasets/imagenet64_images/ \
--warmup-epochs 0 --batch-size 128
33,27,,,0,-,timm/train.py,smi+top+dcgmi,--model resnet152 --data-dir /raid/datasets/imagenet/ \
--warmup-epochs 0 --batch-size 128
"""


def test_the_study_plans_imagenet64_rows_train_at_64_px(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 29, item 3: ``--data-dir /raid/datasets/imagenet64_images/`` is ImageNet64 (the study's
    "M" workloads), not synthetic images of ResNet50's 224 px; one log line per directory, not per row."""
    from .test_malformed_inputs import run_main

    plan = _plan(tmp_path, STUDY_ROWS)
    for synthetic in (True, False):  # data.source=synthetic or real: the same workloads
        jobs = [j for g in read_plan(plan, synthetic=synthetic) for c in g.cells for j in c.jobs]
        assert [j.workload for j in jobs] == [
            "resnet26_cifar10",
            *["resnet50_imagenet64"] * 3,
            "efficientnetv2s_imagenet64",
            "resnet152_imagenet",
        ]
    code, text = run_main([f"+plan={plan}", "+dry_run=true", "cluster=local", f"out_dir={tmp_path / 'out'}"], capfd)
    assert code == 0, text[-3000:]
    assert text.count("resnet50 on imagenet64 (3x64x64, 1000 classes), batch 128, 1281167 samples") == 3, text
    assert "efficientnetv2_s on imagenet64 (3x64x64, 1000 classes)" in text
    assert text.count("x224x224") == 1 and "resnet152 on imagenet (3x224x224" in text  # the study's "L" rows only
    assert "synthetic images" not in text and "not recognised" not in text
    said = [line for line in text.splitlines() if "imagenet64_images/' is not on this machine" in line]
    assert len(said) == 1 and "taken for imagenet64 (64 px, 1000 classes, 1,281,167 samples)" in said[0], text
    assert "4 rows: lines 3-6" in said[0]


@pytest.mark.parametrize(
    ("directory", "dataset"),
    [
        ("/raid/datasets/imagenet64_images/", "imagenet64"),
        ("/d/Imagenet64_train", "imagenet64"),
        ("/x/imagenet64", "imagenet64"),
        ("/data/downsampled_imagenet/64x64", "imagenet64"),
        ("/data/imagenet/train_64x64", "imagenet64"),
        ("/d/Imagenet64x64/train", "imagenet64"),
        ("/raid/datasets/cifar10/", "cifar10"),
        ("/d/cifar-10-batches-py", "cifar10"),
        ("/scratch/c10", "cifar10"),
        ("/d/CIFAR-10", "cifar10"),
        ("/raid/datasets/imagenet/", "imagenet"),
        ("/d/ILSVRC2012/train", "imagenet"),
        ("/d/criteo_kaggle", "criteo"),
        ("/d/cifar100", None),
        ("/d/imagenet32", None),
        ("/d/downsampled-imagenet", None),
        ("/d/mnist", None),
    ],
)
def test_data_directories_not_here_are_known_by_their_names(directory: str, dataset: str | None) -> None:
    from raycolloc.job.data.detect import dataset_by_name

    assert dataset_by_name(directory) == dataset


def test_an_imagenet64_tree_of_images_trains_at_64_px(tmp_path: Path) -> None:
    """ImageNet64 as PNGs in class folders (how timm's train.py reads it): an image folder at 64 px."""
    write_imagefolder(tmp_path / "imagenet64_images", *_images(6, 64))
    plan = _plan(tmp_path, "1,1,,a,0,-,train.py,smi,--model resnet50 --data-dir imagenet64_images\n")
    job = read_plan(plan)[0].cells[0].jobs[0]
    assert (job.workload.dataset, job.workload.resolution, job.workload.dataset_size) == ("imagefolder", 64, 6)


FANOUT_PLAN = """\
1,1,,a,0,-,train.py,smi,--workload tiny_cnn --epochs 2
1,2,,b,0,MPS,train.py,smi,--workload tiny_cnn --epochs 2
"""


@pytest.mark.parametrize(
    ("option", "where"),
    [
        ([], "gpu: GPU 0, its Devices, with the 1 cell(s) of its group"),
        (["+plan_fanout=true"], "gpu: any free GPU of the cluster (+plan_fanout"),
    ],
)
def test_a_dry_run_says_where_plan_cells_run(
    tmp_path: Path, option: list[str], where: str, capfd: pytest.CaptureFixture[str]
) -> None:
    from .test_malformed_inputs import run_main

    code, text = run_main(
        [
            f"+plan={_plan(tmp_path, FANOUT_PLAN)}",
            "+dry_run=true",
            "cluster=local",
            f"out_dir={tmp_path / 'out'}",
            *option,
        ],
        capfd,
    )
    assert code == 0 and text.count(where) == 2, text[-3000:]


@pytest.mark.slow  # two plan runs of two one-job cells on the session's two simulated GPUs: about 60 s
def test_plan_fanout_runs_groups_at_once_on_any_gpu_and_devices_pin_them_by_default(tmp_path: Path) -> None:
    """Issue 29, item 8: a plan's groups ran one after another on their Devices GPU (the study's
    plan names GPU 0 for every naive and MPS row). ``+plan_fanout=true`` runs them at once on any
    free GPU; without it they follow Devices, and the summary says what idled."""
    pipe_root = SHORT_TMP / f"rcfan{os.getpid()}"
    runs = {}
    for fanout in (False, True):
        (tmp_path / f"fanout-{fanout}").mkdir()
        plan = _plan(tmp_path / f"fanout-{fanout}", FANOUT_PLAN)
        out = tmp_path / f"res-{fanout}"
        args = [
            f"+plan={plan}",
            "cluster=local",
            # Epochs of 2 s (a time budget): a cell outlasts a lane's set-up, so fanned out each
            # lane takes one (64-sample cells could both end on the lane that opened first).
            "epoch_samples=1000000",
            "epoch_time_s=2",
            f"mode.pipe_root={pipe_root}",
            f"out_dir={out}",
            *(["+plan_fanout=true"] if fanout else []),
        ]
        proc = run_cli(args, cwd=tmp_path, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        cells = pd.concat([pd.read_parquet(p) for p in out.rglob("cells.parquet")]).sort_values("started_at")
        assert list(cells["status"]) == ["ok", "ok"] and cells["gpu_uuid"].notna().all()
        runs[fanout] = (cells, proc.stdout)
        assert [line.split(",")[2] for line in plan.read_text().splitlines()[1:]] == ["FINISHED", "FINISHED"]
    pinned, text = runs[False]
    assert list(pinned["gpu_index"]) == [0, 0]  # both groups on GPU 0, as Devices says
    first, second = pinned.to_dict("records")
    assert first["finished_at"] <= second["started_at"]  # one group after the other
    assert (
        "plan: its 2 groups ran one after another as their Devices say (cells: 2 to GPU 0) while 1 of the "
        "cluster's 2 GPUs idled; +plan_fanout=true runs them at once on any free GPU"
    ) in text, text[-3000:]
    fanned, text = runs[True]
    assert sorted(fanned["gpu_index"]) == [0, 1] and fanned["gpu_uuid"].nunique() == 2
    first, second = fanned.to_dict("records")
    assert second["started_at"] < first["finished_at"]  # at the same time
    assert "plan: 2 group(s) at once on any free GPU (+plan_fanout=true)" in text and "idled" not in text
