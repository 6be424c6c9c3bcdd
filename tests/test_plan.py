"""Tests for raycolloc.driver.radt (radT experiment-plan CSV reader)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from raycolloc.driver.radt import PlanCell, PlanError, groups_to_run, read_plan

from .conftest import compose

HEADER = "Experiment,Workload,Status,Run,Devices,Collocation,File,Listeners,Params\n"


def write(tmp_path: Path, body: str, header: str = HEADER) -> Path:
    path = tmp_path / "plan.csv"
    path.write_text(header + body)
    return path


STUDY = """\
# exp 1: ResNet26 x3 under MPS on GPU 0, ResNet50 x2 naive on GPU 1
1,1,,a,0,MPS,train_resnet.py,smi+dcgmi+top,--model resnet26 --batch-size 128 --epochs 3 --data /d/cifar-10-batches-py
1,1,,b,0,mps,train_resnet.py,smi+dcgmi+top,--model resnet26 --batch-size 128 --epochs 3 --data /d/cifar-10-batches-py
1,1,,c,0,MPS,train_resnet.py,smi+dcgmi+top,--model resnet26 --batch-size 128 --epochs 3 --data /d/cifar-10-batches-py
1,1,,d,1,-,train_resnet.py,smi+dcgmi+top,--model resnet50 --batch-size 256 --epochs 2 --data /d/imagenet64
1,1,,e,1,-,train_resnet.py,smi+dcgmi+top,--model resnet50 --batch-size 256 --epochs 2 --data /d/imagenet64

2,1,,,0,1g.5gb,train.py,smi,--model resnet26 --data /d/cifar10
2,1,,,0,1g.5gb,train.py,smi,--model resnet26 --data /d/cifar10
2,1,,,0,1g.5gb,train.py,smi,--model resnet26 --data /d/cifar10
2,1,,,0,1g.5gb,train.py,smi,--model resnet26 --data /d/cifar10
2,1,,,0,1g.5gb,train.py,smi,--model resnet26 --data /d/cifar10
2,1,,,0,1g.5gb,train.py,smi,--model resnet26 --data /d/cifar10
2,1,,,0,1g.5gb,train.py,smi,--model resnet26 --data /d/cifar10
3,4,,x,0,-,dlrm_s_pytorch.py,smi,--mini-batch-size 2048 --nepochs 1 --data /d/criteo_kaggle \
--arch-sparse-feature-size 16
3,4,,y,0,-,train_resnet.py,smi,--model ResNet152 --batch-size 64 --data /d/ImageNet
"""


def test_study_plan_groups_cells_and_jobs(tmp_path: Path) -> None:
    groups = read_plan(write(tmp_path, STUDY))
    assert [(g.experiment, g.workload, g.status) for g in groups] == [
        ("1", "1", "run"),
        ("2", "1", "run"),
        ("3", "4", "run"),
    ]
    mps, naive = groups[0].cells
    assert (mps.devices, mps.mode, [j.run for j in mps.jobs]) == ("0", "mps", ["a", "b", "c"])
    assert {j.workload for j in mps.jobs} == {"resnet26_cifar10"}
    assert (mps.jobs[0].batch_size, mps.jobs[0].epochs, mps.jobs[0].line) == (128, 3, 3)
    assert mps.jobs[0].listeners == "smi+dcgmi+top"
    assert (naive.devices, naive.mode, len(naive.jobs)) == ("1", "naive", 2)
    assert naive.jobs[0].workload == "resnet50_imagenet64" and naive.jobs[0].mig_profile is None
    (mig,) = groups[1].cells
    assert mig.mode == "mig" and len(mig.jobs) == 7
    assert {j.mig_profile for j in mig.jobs} == {"1g.5gb"}
    assert mig.jobs[0].batch_size is None and mig.jobs[0].epochs is None
    (mixed,) = groups[2].cells
    dlrm, r152 = mixed.jobs
    assert (dlrm.workload, dlrm.batch_size, dlrm.epochs) == ("dlrm_criteo", 2048, 1)
    assert dlrm.extra == {"arch-sparse-feature-size": "16"}
    assert (r152.workload, r152.batch_size) == ("resnet152_imagenet", 64)


def test_whitespace_around_fields_and_header(tmp_path: Path) -> None:
    header = "Experiment, Workload, Status, Run, Devices, Collocation,    File,    Listeners, Params\n"
    body = (
        "  7 ,  2 ,       ,  r1 ,   0 ,    3g.20gb ,  train.py ,  smi+top , --model resnet50 --data /x/imagenet64  \n"
    )
    (group,) = read_plan(write(tmp_path, body, header))
    (cell,) = group.cells
    assert (group.experiment, group.workload, cell.devices, cell.mode) == ("7", "2", "0", "mig")
    assert (cell.jobs[0].run, cell.jobs[0].mig_profile, cell.jobs[0].listeners) == ("r1", "3g.20gb", "smi+top")
    assert cell.jobs[0].workload == "resnet50_imagenet64"


@pytest.mark.parametrize(
    "params",
    [
        "--batch-size 32 --epochs 4 --model efficientnet_v2_s --data-dir /d/imagenet64",
        "batch-size=32 epochs=4 model=efficientnetv2s dataset=/d/imagenet64",
        "--batch_size=32 epochs=4 --model EfficientNetV2-S data=/d/Imagenet_64",
        '"batch-size=32,epochs=4,model=efficientnetv2_s,data=/d/imagenet64"',
    ],
)
def test_both_params_styles(tmp_path: Path, params: str) -> None:
    (group,) = read_plan(write(tmp_path, f"1,1,,,0,-,train.py,smi,{params}\n"))
    job = group.cells[0].jobs[0]
    assert (job.workload, job.batch_size, job.epochs, job.extra) == ("efficientnetv2s_imagenet64", 32, 4, {})


def test_unknown_params_kept_in_extra_and_workload_override(tmp_path: Path) -> None:
    body = "1,1,,,0,-,train.py,smi,--workload tiny_cnn --lr 0.1 --amp warmup=5 --momentum -0.9\n"
    job = read_plan(write(tmp_path, body))[0].cells[0].jobs[0]
    assert job.workload == "tiny_cnn"
    assert job.extra == {"lr": "0.1", "amp": "true", "warmup": "5", "momentum": "-0.9"}


def test_file_hints_model_and_custom_known_workloads(tmp_path: Path) -> None:
    body = "1,1,,,0,-,dlrm_s_pytorch.py,smi,--raw-data-file /d/criteo/train.txt\n"
    assert read_plan(write(tmp_path, body))[0].cells[0].jobs[0].workload == "dlrm_criteo"
    with pytest.raises(PlanError, match="is not a known workload; allowed: only_this"):
        read_plan(write(tmp_path, body), known_workloads=("only_this",))


def test_radt_writeback_and_short_flags(tmp_path: Path) -> None:
    # radT rewrites an empty Collocation as "nan"; "-a/-b DIR" is the PyTorch ImageNet example's CLI.
    body = "5,1,,,0+1,nan,main.py,smi,-a resnet152 -b 96 /d/imagenet/train extra_positional\n"
    (cell,) = read_plan(write(tmp_path, body))[0].cells
    job = cell.jobs[0]
    assert (cell.devices, cell.mode, job.workload, job.batch_size) == ("0+1", "naive", "resnet152_imagenet", 96)
    assert job.extra == {"_positional": "extra_positional"}


def test_blank_and_comment_lines_keep_file_line_numbers(tmp_path: Path) -> None:
    body = "\n# a comment\n   \n1,1,,,0,-,t.py,smi,--model resnet26 --data /d/cifar10\n"
    assert read_plan(write(tmp_path, body))[0].cells[0].jobs[0].line == 5


def test_unknown_model_names_line_column_and_closest(tmp_path: Path) -> None:
    body = (
        "1,1,,ok,0,-,t.py,smi,--model resnet26 --data /d/cifar10\n"
        "4,9,,r7,0,-,t.py,smi,--model vggg16 --data /d/cifar10\n"
    )
    with pytest.raises(PlanError) as err:
        read_plan(write(tmp_path, body))
    msg = str(err.value)
    assert "plan.csv:3:" in msg and "Experiment '4' Workload '9' Run 'r7'" in msg and "'vggg16'" in msg
    assert "column Params: unknown model 'vggg16' (--model takes any timm model); allowed: vgg16" in msg


def test_unknown_dataset_names_line_and_allowed(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as err:
        read_plan(write(tmp_path, "1,2,,,0,-,t.py,smi,--model resnet50 --data /d/mnist\n"))
    msg = str(err.value)
    assert "plan.csv:2:" in msg and "unknown dataset 'mnist'" in msg
    assert "cifar-10-batches-py" in msg and "imagenet64" in msg and "criteo_kaggle" in msg


def test_any_timm_model_on_any_dataset_is_a_composition(tmp_path: Path) -> None:
    body = (
        "1,2,,,0,-,t.py,smi,--model resnet26 --data /d/imagenet\n"
        "1,2,,,0,-,t.py,smi,--model efficientnetv2_s --data /d/cifar10\n"
        "1,2,,,0,-,t.py,smi,--model cait_xxs24_224 --data /d/imagenet64\n"
    )
    jobs = read_plan(write(tmp_path, body))[0].cells[0].jobs
    assert [(j.workload.name, j.workload.model, j.workload.dataset) for j in jobs] == [
        ("timm", "resnet26", "imagenet"),
        ("timm", "efficientnetv2_s", "cifar10"),
        ("timm", "cait_xxs24_224", "imagenet64"),
    ]
    # Pairs of the study keep their preset's name (and config hash).
    assert (
        read_plan(write(tmp_path, "1,2,,,0,-,t.py,smi,--model resnet26 --data /d/cifar10\n"))[0]
        .cells[0]
        .jobs[0]
        .workload
        == "resnet26_cifar10"
    )


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ("--batch-size 128 --data /d/cifar10", "does not name one model"),
        ("--model resnet26", "needs a dataset"),
        ("--workload resnet9000", "unknown workload 'resnet9000'"),
        ("--model resnet26 --data /d/cifar10 --epochs two", "'two' is not an integer"),
    ],
)
def test_missing_or_bad_pieces(tmp_path: Path, params: str, fragment: str) -> None:
    with pytest.raises(PlanError, match=r"plan\.csv:2: .*" + fragment):
        read_plan(write(tmp_path, f"1,1,,,0,-,train.py,smi,{params}\n"))


def test_mixed_modes_in_one_cell_names_rows(tmp_path: Path) -> None:
    body = (
        "1,1,,a,0,MPS,t.py,smi,--model resnet26 --data /d/cifar10\n"
        "1,1,,b,1,-,t.py,smi,--model resnet26 --data /d/cifar10\n"
        "1,1,,c,0,-,t.py,smi,--model resnet26 --data /d/cifar10\n"
    )
    with pytest.raises(PlanError) as err:
        read_plan(write(tmp_path, body))
    msg = str(err.value)
    assert "Devices '0'" in msg and "line 2 Run 'a'" in msg and "line 4 Run 'c'" in msg
    assert "line 3" not in msg and "naive, mps, mig" in msg


def test_unknown_collocation(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match=r"plan\.csv:2: .*unknown Collocation '7g'.*allowed: -, \(empty\), MPS"):
        read_plan(write(tmp_path, "1,1,,,0,7g,t.py,smi,--model resnet26 --data /d/cifar10\n"))


def test_bad_status(tmp_path: Path) -> None:
    body = (
        "1,1,,,0,-,t.py,smi,--model resnet26 --data /d/cifar10\n"
        "1,1,DONE,,0,-,t.py,smi,--model resnet26 --data /d/cifar10\n"
    )
    with pytest.raises(PlanError) as err:
        read_plan(write(tmp_path, body))
    msg = str(err.value)
    assert "plan.csv:3:" in msg and "'DONE'" in msg and "allowed: (empty), PENDING, QUEUED, FINISHED, FAILED" in msg


def test_header_and_field_count_errors(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match=r"header lacks column\(s\) Listeners"):
        read_plan(write(tmp_path, "", "Experiment,Workload,Status,Run,Devices,Collocation,File,Params\n"))
    with pytest.raises(PlanError, match=r"plan\.csv:2: 10 fields"):
        read_plan(write(tmp_path, "1,1,,,0,-,t.py,smi,--model resnet26,--data /d/cifar10\n"))


STATUS_PLAN = """\
1,1,FINISHED,,0,-,t.py,smi,--model resnet26 --data /d/cifar10
1,1,FINISHED done-run (0_A),,0,-,t.py,smi,--model resnet26 --data /d/cifar10
2,1,FAILED,,0,-,t.py,smi,--model resnet26 --data /d/cifar10
2,1,FINISHED,,1,-,t.py,smi,--model resnet26 --data /d/cifar10
3,1,FINISHED,,0,-,t.py,smi,--model resnet26 --data /d/cifar10
3,1,queued,,0,-,t.py,smi,--model resnet26 --data /d/cifar10
4,1,PENDING,,0,-,t.py,smi,--model resnet26 --data /d/cifar10
"""


def test_finished_failed_skipping_and_rerun(tmp_path: Path) -> None:
    groups = read_plan(write(tmp_path, STATUS_PLAN))
    assert [g.status for g in groups] == ["finished", "failed", "run", "run"]
    assert [g.experiment for g in groups_to_run(groups)] == ["3", "4"]
    assert [g.experiment for g in groups_to_run(groups, rerun=True)] == ["2", "3", "4"]
    # A FINISHED row inside a group that runs still runs (the group starts together).
    assert [j.status for j in groups_to_run(groups)[0].cells[0].jobs] == ["finished", "run"]
    assert len(groups_to_run(groups)[0].cells[0].jobs) == 2


def test_a_plan_cell_has_no_overrides_of_its_own_and_its_config_composes(tmp_path: Path) -> None:
    """Issue 31, item 5: ``PlanCell.to_overrides`` had no caller and emitted ``+cell.jobs``, a key the schema
    lacks; a plan's cells become configs through :func:`cell_config` alone, and each one validates."""
    from raycolloc.config import load_config
    from raycolloc.driver.cell_specs import validate_cell
    from raycolloc.driver.radt_runner import cell_config

    assert not hasattr(PlanCell, "to_overrides")
    base = load_config(compose(["cluster=local", f"out_dir={tmp_path}", "epoch_samples=512"]))
    for group in read_plan(write(tmp_path, STUDY))[:2]:  # the third asks for one epoch: refused by name
        for cell in group.cells:
            spec = validate_cell(cell_config(base, group, cell))
            assert spec.mode == cell.mode and len(spec.jobs) == len(cell.jobs)


@pytest.mark.parametrize("name", ["odd-name.v2", "it's,{x}", "null", "128", "back\\slash\\"])
def test_override_values_parse_back_with_hydra(name: str) -> None:
    """The quoting the advisor's emitted sweeps (and a mix's solo cells) use: Hydra reads the value back."""
    from raycolloc.driver.override_quoting import override_value

    job = {"workload": name, "batch_size": None, "epochs": 3, "mig_profile": "1g.5gb"}
    (jobs,) = OverridesParser.create().parse_overrides([f"mix.jobs=[{override_value(job)}]"])
    assert jobs.value() == [job]


def test_a_plan_of_many_bad_rows_lists_the_first_twenty_and_a_count(tmp_path: Path) -> None:
    """Issue 29, item 7: a plan of 132,197 bad rows printed all of their errors (22 MB)."""
    body = "".join(f"1,{i},,r{i},gpu{i},-,t.py,smi,--model resnet26 --data /d/cifar10\n" for i in range(5000))
    with pytest.raises(PlanError) as err:
        read_plan(write(tmp_path, body))
    lines = str(err.value).splitlines()
    assert lines[0] == "5,000 rows cannot run:" and len(lines) == 22
    assert all("column Devices: 'gpu" in line for line in lines[1:21])
    assert lines[21] == (
        "... and 4,980 more (5,000 in all; the first 20 are shown: fix them and run again to see the rest)"
    )


def test_a_binary_plan_is_refused_naming_the_file(tmp_path: Path) -> None:
    """Issue 29, item 5: ``+plan=<a binary file>`` was a UnicodeDecodeError traceback."""
    path = tmp_path / "plan.xlsx"
    path.write_bytes(b"PK\x03\x04" + bytes(range(256)))
    with pytest.raises(PlanError, match=r"plan\.xlsx:2: not a text CSV file \(byte 132 is not UTF-8\)"):
        read_plan(path)
