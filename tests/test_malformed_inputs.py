"""Every malformed input is refused by name: exit 2, the key, the value and what is allowed, and
nothing written (issue 15, item 7).

The table runs the real entry point (``raycolloc.sweep.main``: Hydra's command line, our launcher)
in this process, so that 50-odd inputs take seconds; a few run as a real subprocess too, for the
exit status the shell sees. Inputs that need the cluster's nodes (cores, memory, MIG tables) run
against the session's local Ray instance.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

import pytest

from raycolloc.driver.outlock import LOCK_NAME

from .conftest import ROOT, run_cli

BASE = ["cluster=local", "workload=tiny_cnn", "epoch_samples=64"]
PLAN_HEADER = "Experiment,Workload,Status,Run,Devices,Collocation,File,Listeners,Params\n"

# (case id, overrides, what the message must say). {tmp} is the test's directory.
CASES: list[tuple[str, list[str], list[str]]] = [
    # Hydra's own errors: unknown group options, wrong types, unknown keys, unparsable overrides.
    ("unknown-workload", ["workload=resnet9000"], ["workload='resnet9000' is not allowed", "tiny_cnn"]),
    ("unknown-mode", ["mode=timeslice"], ["mode='timeslice' is not allowed", "mig, mps, naive"]),
    ("unknown-mix", ["mix=foo"], ["mix='foo' is not allowed", "s_m_m"]),
    ("unknown-cluster", ["cluster=cloud"], ["cluster='cloud' is not allowed", "local"]),
    ("schema-workload", ["workload=base_workload"], ["workload='base_workload' is not allowed", "tiny_cnn"]),
    ("schema-mode", ["mode=base_mode"], ["mode='base_mode' is not allowed", "mig, mps, naive"]),
    ("schema-mix", ["mix=base_mix"], ["mix='base_mix' is not allowed", "none"]),
    ("schema-cluster", ["cluster=base_cluster"], ["cluster='base_cluster' is not allowed", "auto, gpu, local"]),
    ("schema-mig", ["mig=base_mig"], ["mig='base_mig' is not allowed", "auto"]),
    ("degree-word", ["degree=two"], ["degree='two' is not allowed", "integer"]),
    ("degree-fraction", ["degree=1.5"], ["degree='1.5' is not allowed", "integer"]),
    ("epochs-word", ["epochs=two"], ["epochs='two' is not allowed", "integer"]),
    ("bool-word", ["trainer.channels_last=maybe"], ["trainer.channels_last='maybe' is not allowed", "true or false"]),
    ("num-gpus-word", ["cluster.num_gpus=x"], ["cluster.num_gpus='x' is not allowed", "integer"]),
    ("unknown-key", ["foo=1"], ["unknown key foo", "degree"]),
    ("unknown-key-added", ["+foo=1"], ["unknown key foo"]),
    ("unknown-nested-key", ["+trainer.speed=2"], ["unknown key trainer.speed"]),
    ("unparsable", ["degree=="], ["Error parsing override 'degree=='"]),
    ("multirun-degree-word", ["-m", "degree=1,two"], ["degree='two' is not allowed"]),
    ("multirun-unknown-workload", ["-m", "workload=tiny_cnn,resnet9000"], ["workload='resnet9000' is not allowed"]),
    ("multirun-schema-mode", ["-m", "mode=naive,base_mode"], ["mode='base_mode' is not allowed"]),
    # raycolloc's schemas: values out of range or not among the choices.
    ("degree-zero", ["degree=0"], ["degree=0 is not allowed", "1..10000"]),
    ("epochs-one", ["epochs=1"], ["epochs=1 is not allowed", "2..1000000"]),
    ("epoch-samples-negative", ["epoch_samples=-5"], ["epoch_samples=-5 is not allowed"]),
    ("batch-zero", ["batch_size=0"], ["batch_size=0 is not allowed"]),
    ("seed-negative", ["seed=-1"], ["seed=-1 is not allowed"]),
    (
        "allocator",
        ["trainer.allocator=jemalloc"],
        ["trainer.allocator='jemalloc' is not allowed", "native, cuda_async"],
    ),
    ("compile", ["trainer.compile=fast"], ["trainer.compile='fast'", "reduce-overhead"]),
    ("amp", ["trainer.amp=int8"], ["trainer.amp='int8'", "bf16"]),
    ("cpu-affinity", ["trainer.cpu_affinity=numa"], ["trainer.cpu_affinity='numa'", "auto, none"]),
    ("fault", ["trainer.fault=melt"], ["trainer.fault='melt'", "oom, error, exit, hang"]),
    ("fault-job", ["trainer.fault=oom", "trainer.fault_job=5"], ["trainer.fault_job=5 is not allowed", "jobs 0..0"]),
    ("stall-timeout", ["trainer.stall_timeout_s=0"], ["trainer.stall_timeout_s=0.0 is not allowed", "1..10000000"]),
    ("epoch-timeout", ["trainer.epoch_timeout_s=-1"], ["trainer.epoch_timeout_s=-1.0 is not allowed"]),
    ("data-source", ["data.source=disk"], ["data.source='disk'", "synthetic, real"]),
    ("data-placement", ["data.placement=gpu"], ["data.placement='gpu'", "host, device"]),
    ("data-path-missing", ["data.source=real"], ["data.path"]),
    ("backend", ["cluster.backend=cuda"], ["cluster.backend='cuda'", "auto, sim, nvml"]),
    ("gpu-model", ["cluster.gpu_model=Z9000"], ["cluster.gpu_model='Z9000' is not allowed", "H100-80GB"]),
    ("sim-mig-mode", ["cluster.sim_mig_mode=maybe"], ["cluster.sim_mig_mode='maybe'", "auto, enabled, disabled"]),
    ("lease-timeout", ["cluster.lease_timeout_s=0"], ["cluster.lease_timeout_s=0.0 is not allowed"]),
    ("reserved-cpus", ["cluster.reserved_cpus=lots"], ["cluster.reserved_cpus='lots' is not allowed", "auto, none"]),
    ("reserved-cpus-zero", ["cluster.reserved_cpus=0"], ["cluster.reserved_cpus='0' is not allowed", "none"]),
    ("telemetry-source", ["telemetry.source=prometheus"], ["telemetry.source='prometheus'", "dcgm"]),
    ("telemetry-interval", ["telemetry.interval_ms=5"], ["telemetry.interval_ms=5"]),
    ("mps-option-on-naive", ["mode.active_thread_percentage=50"], ["applies to mode=mps only"]),
    ("mps-percentage", ["mode=mps", "mode.active_thread_percentage=150"], ["active_thread_percentage=150", "1..100"]),
    ("mps-memory-limit", ["mode=mps", "mode.pinned_mem_limit=lots"], ["pinned_mem_limit='lots'", "8G"]),
    (
        "epoch-shorter-than-batch",
        ["epoch_samples=16", "batch_size=32"],
        ["epoch_samples=16 is smaller than batch_size=32"],
    ),
    ("rerun-word", ["+rerun=maybe"], ["+rerun='maybe' is not allowed", "+rerun=true"]),
    ("plan-in-multirun", ["-m", "+plan=x.csv"], ["+plan runs a radT plan as one sweep"]),
    # Output directories and radT plans.
    ("out-dir-file", ["out_dir={tmp}/a-file"], ["a-file", "out_dir"]),
    ("out-dir-uncreatable", ["out_dir=/proc/raycolloc-out"], ["/proc/raycolloc-out"]),
    ("plan-missing", ["+plan={tmp}/nothing.csv"], ["nothing.csv"]),
    (
        "plan-devices-word",
        ["+plan={tmp}/devices-abc.csv"],
        ["devices-abc.csv:2", "column Devices: 'abc' is not a GPU index"],
    ),
    (
        "plan-devices-fraction",
        ["+plan={tmp}/devices-frac.csv"],
        ["devices-frac.csv:2", "column Devices: '1.5' is not a GPU index"],
    ),
    # issue 29, item 4: values Hydra's grammar reads only quoted: the key, the character and the form to type.
    (
        "regex-unquoted",
        [
            "workload=script",
            "workload.command=[python,jobs/examples/plain_train.py]",
            r"workload.epoch_regex=^epoch (?P<epoch>\d+) done samples=(?P<samples>\d+)",
        ],
        [
            "cannot read the value of workload.epoch_regex",
            "'^' only inside quotes",
            r"""typed as 'workload.epoch_regex="^epoch (?P<epoch>\d+) done samples=(?P<samples>\d+)"'""",
        ],
    ),
    (
        "out-dir-non-ascii",
        ["out_dir={tmp}/résultats"],
        ["cannot read the value of out_dir", "'é' only inside quotes", """typed as 'out_dir="{tmp}/résultats"'"""],
    ),
    (
        "sweep-dir-semicolon",
        ["-m", "hydra.sweep.dir={tmp}/a;b"],
        [
            "cannot read the value of hydra.sweep.dir",
            "';' only inside quotes",
            """typed as 'hydra.sweep.dir="{tmp}/a;b"'""",
        ],
    ),
    (
        "sweep-dir-dollar-paren",
        ["-m", "hydra.sweep.dir={tmp}/$(x)"],
        [
            "cannot read the value of hydra.sweep.dir",
            "'(' only inside quotes",
            """typed as 'hydra.sweep.dir="{tmp}/$(x)"'""",
        ],
    ),
    ("list-unclosed", ["mig.layout=[3g.20gb,"], ["cannot read the value of mig.layout", "closes its brackets"]),
    ("key-non-ascii", ["dégree=1"], ["cannot read the key 'dégree'", "write key=value"]),
    # issue 29, item 5: a binary file as the plan (was a UnicodeDecodeError traceback)
    ("plan-binary", ["+plan={tmp}/binary.bin"], ["binary.bin:2: not a text CSV file", "save the plan as CSV (UTF-8)"]),
    # issue 29, item 7: a plan of many bad rows prints the first twenty and a count (was every one: 22 MB)
    (
        "plan-many-bad-rows",
        ["+plan={tmp}/many-bad.csv"],
        ["1,000 rows cannot run:", "many-bad.csv:21: ", "... and 980 more (1,000 in all; the first 20 are shown"],
    ),
    # issue 29, item 8: +plan_fanout takes true or false, as +rerun does
    ("plan-fanout-word", ["+plan_fanout=maybe"], ["+plan_fanout='maybe' is not allowed", "+plan_fanout=true"]),
    # issue 29, item 5: tracebacks instead of refusals (an OverflowError; the steward's NotADirectoryError inside
    # Ray, the output lock left; Ray's start tried three times before an OverflowError).
    (
        "degree-past-an-index",
        ["degree=99999999999999999999"],
        ["degree=99999999999999999999 is not allowed", "1..10000"],
    ),
    (
        "mps-pipe-root-a-file",
        ["mode=mps", "mode.pipe_root={tmp}/a-file"],
        ["mode.pipe_root=", "a-file' is not allowed: it is a file, not a directory"],
    ),
    (
        "pipe-root-under-a-file",
        ["mode.pipe_root={tmp}/a-file/mps"],
        ["mode.pipe_root=", "a-file is a file, so it cannot be created"],
    ),
    (
        "dashboard-port",
        ["cluster.dashboard=true", "cluster.dashboard_port=99999"],
        ["cluster.dashboard_port=99999 is not allowed", "1..65535"],
    ),
    ("metrics-port", ["cluster.metrics_export_port=0"], ["cluster.metrics_export_port=0 is not allowed", "1..65535"]),
    # issue 29, item 6: named, but only after Ray started (error rows), or not at all.
    (
        "script-file-missing",
        ["workload=script", "epoch_samples=null", "workload.command=[python,{tmp}/nothing.py]"],
        ["workload.command=", "the script", "nothing.py' does not exist"],
    ),
    (
        "script-program-missing",
        ["workload=script", "epoch_samples=null", "workload.command=[{tmp}/nothing.sh,--fast]"],
        ["workload.command=", "nothing.sh is not an executable file"],
    ),
    (
        "script-program-not-on-path",
        ["workload=script", "epoch_samples=null", "workload.command=[no-such-trainer]"],
        ["workload.command=", "'no-such-trainer' is not a program on PATH"],
    ),
    (
        "data-path-junk",
        ["data.source=real", "data.path={tmp}/junk-cifar"],
        ["data.path", "junk-cifar/data_batch_1 is not a complete pickled CIFAR-10 batch"],
    ),
    (
        "data-path-cut-short",
        ["data.source=real", "data.path={tmp}/cut-cifar"],
        ["data.path", "cut-cifar/data_batch_1 is not a complete pickled CIFAR-10 batch", "cut short"],
    ),
    ("data-path-nonexistent", ["data.source=real", "data.path={tmp}/no-such-data"], ["data.path", "no-such-data"]),
    (
        "python-data-path-nonexistent",
        [
            "workload=python",
            "workload.entry=jobs.examples.tiny_regression:build",
            "data.source=real",
            "data.path={tmp}/no-such-data",
        ],
        ["data.path=", "no-such-data' does not exist"],
    ),
    ("mig-layout-on-naive", ["mig.layout=[3g.20gb]"], ["mig.layout=['3g.20gb'] applies to mode=mig only (mode=naive)"]),
    (
        "mig-layout-on-mps",
        ["mode=mps", "mig.layout=[3g.20gb]"],
        ["mig.layout=['3g.20gb'] applies to mode=mig only (mode=mps)"],
    ),
    # issue 29, item 7: a malformed mig.layout was refused without naming mig.layout.
    (
        "mig-layout-unparsable",
        ["mode=mig", "mig.layout=[3g.20gb,"],
        ["cannot read the value of mig.layout", "closes its brackets"],
    ),
    # issue 47, item 1: Ray started, then a ValueError / OverflowError in the preflight (exit 1).
    ("num-cpus-nan", ["trainer.num_cpus=nan"], ["trainer.num_cpus=nan is not allowed", "0..4096"]),
    ("num-cpus-inf", ["trainer.num_cpus=inf"], ["trainer.num_cpus=inf is not allowed", "0..4096"]),
    # issue 47, item 2: "Config group override must be a string or a list. Got NoneType", no group named.
    ("mode-null", ["mode=null"], ["mode=null is not allowed; choose one of: mig, mps, naive"]),
    ("workload-null", ["workload=null"], ["workload=null is not allowed; choose one of:", "tiny_cnn"]),
    ("multirun-mode-null", ["-m", "mode=naive,null"], ["mode=null is not allowed; choose one of: mig, mps, naive"]),
    # issue 47, item 8: NaN passed every >= check (a NaN learning rate trained; "timed out after nans").
    ("epoch-time-nan", ["epoch_time_s=nan"], ["epoch_time_s=nan is not allowed", "seconds 0.001..10000000"]),
    ("stall-timeout-nan", ["trainer.stall_timeout_s=nan"], ["trainer.stall_timeout_s=nan is not allowed"]),
    ("lease-timeout-nan", ["cluster.lease_timeout_s=nan"], ["cluster.lease_timeout_s=nan is not allowed"]),
    ("lr-nan", ["workload.lr=nan"], ["workload.lr=nan is not allowed", "0..1000"]),
    ("lr-inf", ["workload.lr=inf"], ["workload.lr=inf is not allowed", "0..1000"]),
    ("epoch-timeout-nan", ["trainer.epoch_timeout_s=nan"], ["trainer.epoch_timeout_s=nan is not allowed"]),
    # issue 47: a finite bound on every number (1e300 s overflowed a wait; a 30-digit count an int64 column).
    ("lease-timeout-huge", ["cluster.lease_timeout_s=1e300"], ["cluster.lease_timeout_s=1e+300", "1..10000000"]),
    (
        "epochs-huge",
        ["epochs=1000000000000000000000000000000"],
        ["epochs=1000000000000000000000000000000", "2..1000000"],
    ),
    ("seed-huge", ["seed=99999999999"], ["seed=99999999999 is not allowed", "0..2147483647"]),
    # issue 47: a plan row's numbers are bounded as the config's (a 22-digit epochs ran into the config check).
    (
        "plan-epochs-huge",
        ["+plan={tmp}/epochs-huge.csv"],
        ["epochs-huge.csv:2", "column Params: epochs value '1000000000000000000000' must be 1..1000000"],
    ),
    # issue 47, items 7 and 13 by key (the environment variables: ENV_CASES below).
    (
        "sim-root-a-file",
        ["cluster.sim_root={tmp}/a-file"],
        ["cluster.sim_root=", "a-file' is not allowed: it is a file"],
    ),
    (
        "compile-cache-under-a-file",
        ["trainer.compile_cache={tmp}/a-file/cache"],
        ["trainer.compile_cache=", "a-file is a file, so it cannot be created"],
    ),
]


def _fixtures(tmp_path: Path) -> None:
    import pickle

    (tmp_path / "a-file").write_text("not a directory\n")
    # CIFAR-10's five python batches by name: junk, and real pickles cut short (a copy that did not finish).
    batch = pickle.dumps({b"data": bytes(3072 * 4), b"labels": [0, 1, 2, 3]}, protocol=2)
    for folder, content in (("junk-cifar", b"not a pickle\n"), ("cut-cifar", batch[: len(batch) // 2])):
        (tmp_path / folder).mkdir(exist_ok=True)
        for i in range(1, 6):
            (tmp_path / folder / f"data_batch_{i}").write_bytes(content)
    for name, devices in (("devices-abc", "abc"), ("devices-frac", "1.5")):
        (tmp_path / f"{name}.csv").write_text(PLAN_HEADER + f"1,1,,a,{devices},-,train.py,smi,--workload tiny_cnn\n")
    (tmp_path / "epochs-huge.csv").write_text(
        PLAN_HEADER + "1,1,,a,0,-,train.py,smi,--workload tiny_cnn --epochs 1000000000000000000000\n"
    )
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "many-bad.csv").write_text(
        PLAN_HEADER + "".join(f"1,{i},,a,gpu{i},-,train.py,smi,--workload tiny_cnn\n" for i in range(1000))
    )


def run_main(args: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``python -m raycolloc.sweep ARGS`` in this process: (exit status, everything it printed)."""
    from hydra.core.global_hydra import GlobalHydra

    from raycolloc import sweep

    argv = sys.argv
    sys.argv = ["raycolloc.sweep", *args]
    try:
        sweep.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
        GlobalHydra.instance().clear()
    out, err = capfd.readouterr()
    return code, out + err


def _args(overrides: list[str], tmp_path: Path, out: Path) -> list[str]:
    flags = [o for o in overrides if o == "-m"]
    rest = [o.replace("{tmp}", str(tmp_path)) for o in overrides if o != "-m"]
    given_out = any(o.startswith("out_dir=") for o in rest)
    return [*flags, *BASE, *([] if given_out else [f"out_dir={out}"]), *rest]


def test_the_table_has_at_least_forty_inputs() -> None:
    assert len(CASES) + len(NODE_CASES) + 1 >= 40  # + the held output directory below
    assert len({case for case, _, _ in CASES}) == len(CASES)


@pytest.mark.parametrize(("overrides", "needles"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_input_is_refused_by_name_and_leaves_the_output_as_it_found_it(
    overrides: list[str], needles: list[str], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Refused by name; and (issue 29, item 7: 76 of 129 refusals left two empty ``runs/<date>`` (or
    ``multirun/<date>``) directories in ``out_dir``; item 5: ``degree=99999999999999999999`` left a run
    directory, ``mode.pipe_root=<a file>`` the output lock too) a refusal takes back every directory it
    made, ``out_dir`` too, and no lock stays. One run of each input checks both (they were two tests that
    ran every input twice)."""
    _fixtures(tmp_path)
    before = _tree(tmp_path)
    out = tmp_path / "out"
    code, text = run_main(_args(overrides, tmp_path, out), capfd)
    assert code == 2, text[-3000:]
    for needle in (n.replace("{tmp}", str(tmp_path)) for n in needles):
        assert needle in text, f"{needle!r} not in:\n{text[-3000:]}"
    assert "base_workload" not in text.replace("workload='base_workload'", "")  # no schema offered as a choice
    assert "Traceback" not in text, text[-3000:]
    assert not list(out.rglob("*.parquet")) if out.exists() else True
    assert not out.exists() or (out.is_dir() and not any(out.iterdir())), sorted(map(str, out.rglob("*")))
    assert _tree(tmp_path) == before


# Paths the environment gives (issue 47, items 7 and 13): the steward died inside Ray (ActorDiedError,
# exit 1), every training process died ("training process N died"), the variable never named.
ENV_CASES: list[tuple[str, str, str, list[str]]] = [
    (
        "sim-root-a-file",
        "RAYCOLLOC_SIM_ROOT",
        "{tmp}/a-file",
        ["$RAYCOLLOC_SIM_ROOT=", "a-file' (read as cluster.sim_root) is not allowed: it is a file, not a directory"],
    ),
    (
        "sim-root-uncreatable",
        "RAYCOLLOC_SIM_ROOT",
        "/proc/nope/sim",
        ["$RAYCOLLOC_SIM_ROOT='/proc/nope/sim' (read as cluster.sim_root) is not allowed", "in /proc"],
    ),
    (
        "compile-cache-a-file",
        "RAYCOLLOC_COMPILE_CACHE",
        "{tmp}/a-file",
        ["$RAYCOLLOC_COMPILE_CACHE=", "a-file' is not allowed: it is a file, not a directory"],
    ),
    (
        "compile-cache-uncreatable",
        "RAYCOLLOC_COMPILE_CACHE",
        "/proc/nope/cache",
        ["$RAYCOLLOC_COMPILE_CACHE='/proc/nope/cache' is not allowed", "in /proc"],
    ),
]


@pytest.mark.parametrize(("var", "value", "needles"), [c[1:] for c in ENV_CASES], ids=[c[0] for c in ENV_CASES])
def test_a_path_the_environment_gives_is_refused_naming_the_variable(
    var: str,
    value: str,
    needles: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    _fixtures(tmp_path)
    before = _tree(tmp_path)
    monkeypatch.setenv(var, value.replace("{tmp}", str(tmp_path)))
    out = tmp_path / "out"
    code, text = run_main(_args([], tmp_path, out), capfd)
    assert code == 2, text[-3000:]
    for needle in (n.replace("{tmp}", str(tmp_path)) for n in needles):
        assert needle in text, f"{needle!r} not in:\n{text[-3000:]}"
    assert "Traceback" not in text and _tree(tmp_path) == before


def _tree(root: Path) -> dict[str, int]:
    """Every path under ``root`` with its size (directories: 0)."""
    return {str(p.relative_to(root)): 0 if p.is_dir() else p.stat().st_size for p in root.rglob("*")}


@pytest.mark.parametrize(
    "overrides", [["+dry_run=true"], ["-m", "degree=1,2", "mode=naive,mps", "+dry_run=true"]], ids=["run", "multirun"]
)
def test_a_dry_run_leaves_the_output_as_it_found_it(
    overrides: list[str], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, text = run_main(_args(overrides, tmp_path, out), capfd)
    assert code == 0 and "to run" in text, text[-3000:]
    assert not out.exists(), sorted(map(str, out.rglob("*")))
    (out / "runs").mkdir(parents=True)  # directories that were there stay, even empty
    (out / "multirun").mkdir()
    code, text = run_main(_args(overrides, tmp_path, out), capfd)
    assert code == 0, text[-3000:]
    assert _tree(out) == {"runs": 0, "multirun": 0}


def test_a_multirun_composes_each_cell_once_and_lists_every_bad_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Hydra's basic sweeper composed every job before the launcher composed it again (~0.6 s each)
    and stopped at the first bad one; the raycolloc sweeper leaves both to the launcher."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    loaded: list[list[str]] = []
    load = ConfigLoaderImpl.load_sweep_config

    def counted(self, master_config, sweep_overrides):  # noqa: ANN001, ANN202
        loaded.append(list(sweep_overrides))
        return load(self, master_config, sweep_overrides)

    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", counted)
    code, text = run_main(["-m", *BASE, f"out_dir={tmp_path / 'out'}", "degree=1,2,3", "+dry_run=true"], capfd)
    assert code == 0, text[-3000:]
    assert "3 cell(s) to run" in text
    assert sorted(o for overrides in loaded for o in overrides if o.startswith("degree=")) == [
        "degree=1",
        "degree=2",
        "degree=3",
    ]
    loaded.clear()
    code, text = run_main(["-m", *BASE, f"out_dir={tmp_path / 'out'}", "degree=0,1,-1"], capfd)
    assert code == 2, text[-3000:]
    assert "degree=0 is not allowed" in text and "degree=-1 is not allowed" in text, text[-3000:]
    assert len(loaded) == 3


@pytest.mark.parametrize(
    ("flags", "composed", "cells"),
    [
        ([], 1, "1 cell(s) to run"),
        (["-m", "degree=1,2"], 1, "2 cell(s) to run"),
        (["hydra.mode=MULTIRUN", "degree=1,2"], 2, "2 cell(s) to run"),
    ],
    ids=["run", "multirun", "mode-given"],
)
def test_a_command_composes_the_whole_config_once_unless_it_names_hydra_mode(
    flags: list[str],
    composed: int,
    cells: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Hydra composed the config once only to read ``hydra.mode`` (None: ``conf/`` never sets it), then
    again to run; now the first is skipped unless the command line names ``hydra.mode``, which still
    decides the mode."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.hydra import Hydra

    from raycolloc import conf_dir
    from raycolloc.config import register_configs

    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
        assert compose("config", return_hydra_config=True).hydra.mode is None
    calls: list[str] = []
    compose_config = Hydra.compose_config

    def counted(self, config_name, overrides, run_mode, *args, **kwargs):  # noqa: ANN001, ANN202
        calls.append(str(run_mode))
        return compose_config(self, config_name, overrides, run_mode, *args, **kwargs)

    monkeypatch.setattr(Hydra, "compose_config", counted)
    code, text = run_main([*flags, *BASE, f"out_dir={tmp_path / 'out'}", "+dry_run=true"], capfd)
    assert code == 0, text[-3000:]
    assert cells in text
    assert len(calls) == composed, calls


def test_an_output_directory_another_sweep_holds_is_refused_naming_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    # Another process's lock (a flock on another open file description conflicts as one would).
    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b'{"host": "gpu-box", "pid": 4242, "since": 1700000000.0, "command": "python -m raycolloc.sweep -m"}')
    try:
        code, text = run_main(["-m", *BASE, f"out_dir={out}"], capfd)
    finally:
        os.close(fd)
    assert code == 2, text[-3000:]
    assert "is in use by another sweep: host gpu-box, pid 4242, since 2023-11-" in text, text[-3000:]
    assert not list(out.rglob("*.parquet")) and not list(out.rglob(".hydra"))


# Inputs that only the cluster's nodes can refuse: checked after Ray starts, before any GPU changes.
NODE_CASES: list[tuple[str, list[str], list[str]]] = [
    ("degree-beyond-the-node", ["degree=64"], ["degree=64", "the largest GPU node allows"]),
    ("cpus-beyond-the-node", ["trainer.num_cpus=1000"], ["trainer.num_cpus=1000 needs 1000 cores"]),
    (
        "mig-layout-beyond-the-gpu",
        ["mode=mig", "degree=4", "cluster.gpu_model=A100-SXM4-40GB", "mig.layout=[2g.10gb,2g.10gb,2g.10gb,2g.10gb]"],
        ["needs 8 compute slices"],
    ),
]


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize(("overrides", "needles"), [c[1:] for c in NODE_CASES], ids=[c[0] for c in NODE_CASES])
def test_a_cell_no_node_can_hold_is_refused_before_anything_starts(
    overrides: list[str], needles: list[str], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, text = run_main(_args(overrides, tmp_path, out), capfd)
    assert code == 2, text[-3000:]
    for needle in needles:
        assert needle in text, f"{needle!r} not in:\n{text[-3000:]}"
    assert not list(out.rglob("*.parquet"))


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize(
    ("overrides", "multirun"),
    [*((c[1], False) for c in NODE_CASES), (NODE_CASES[0][1], True)],
    ids=[*(c[0] for c in NODE_CASES), f"{NODE_CASES[0][0]}-multirun"],
)
def test_a_refusal_after_ray_started_leaves_no_lock_and_no_directory(
    overrides: list[str], multirun: bool, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Issue 29, item 7: a refusal after the sweep took the output lock left the lock file."""
    out = tmp_path / "out"
    (out / "keep").mkdir(parents=True)  # a directory the user had: it stays
    code, text = run_main(_args([*(["-m"] if multirun else []), *overrides], tmp_path, out), capfd)
    assert code == 2, text[-3000:]
    assert not (out / LOCK_NAME).exists()
    assert _tree(out) == {"keep": 0}


@pytest.mark.parametrize(
    "overrides",
    [
        ["workload=resnet9000"],
        ["workload=base_workload"],
        ["out_dir=/proc/raycolloc-out"],
    ],
    ids=["hydra-option", "schema-name", "out-dir"],
)
def test_the_shell_sees_exit_status_2(overrides: list[str], tmp_path: Path) -> None:
    """(A Hydra type error and a multirun's bad cell: the import test below, which runs the same commands.)"""
    proc = run_cli(_args(overrides, tmp_path, tmp_path / "out"), cwd=ROOT, timeout=120, own_ray=True)  # refused: no Ray
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "config error" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


def test_the_shell_sees_exit_status_2_for_a_sim_root_that_is_a_file(tmp_path: Path) -> None:
    """Issue 47, item 7, as tried: ``RAYCOLLOC_SIM_ROOT=<a file> python -m raycolloc.sweep ...``."""
    (tmp_path / "a-file").write_text("x\n")
    env = {"RAYCOLLOC_SIM_ROOT": str(tmp_path / "a-file")}
    proc = run_cli(_args([], tmp_path, tmp_path / "out"), cwd=ROOT, timeout=120, env=env, own_ray=True)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "$RAYCOLLOC_SIM_ROOT=" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("multirun", [False, True], ids=["run", "multirun"])
def test_a_read_only_output_directory_is_refused_naming_it(
    tmp_path: Path, multirun: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    import subprocess

    mount = tmp_path / "ro"
    mount.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)], capture_output=True, check=False
        ).returncode
        != 0
    ):
        pytest.skip("mounting a read-only tmpfs needs root")
    try:
        code, text = run_main([*(["-m"] if multirun else []), *BASE, f"out_dir={mount / 'out'}"], capfd)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
    assert code == 2, text[-3000:]
    assert str(mount / "out") in text and "Read-only file system" in text, text[-3000:]
    assert "Traceback" not in text


@pytest.mark.parametrize(
    "overrides",
    [["degree=two"], ["epochs=1"], ["-m", "degree=1,0"], ["+plan=/nonexistent.csv"]],
    ids=["hydra-type", "schema-check", "multirun", "plan"],
)
def test_a_refused_input_is_answered_before_ray_pyarrow_or_torch_load(overrides: list[str], tmp_path: Path) -> None:
    """The engine (Ray, pyarrow, pandas) is imported once the cells are valid: a refusal takes ~1 s, not ~2."""
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "raycolloc.sweep", *_args(overrides, tmp_path, tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "config error" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr  # what the shell sees
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "raycolloc.config" in imported  # -X importtime did report
    heavy = imported & {"ray", "pyarrow", "pandas", "torch"}
    assert not heavy, sorted(heavy)


def test_a_multirun_of_many_bad_cells_lists_the_first_twenty_and_a_count(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Issue 29, item 7: long error lists print the first twenty and a count (the launcher's, as a plan's)."""
    degrees = "degree=" + ",".join(str(-i) for i in range(22))
    code, text = run_main(["-m", *BASE, f"out_dir={tmp_path / 'out'}", degrees], capfd)
    assert code == 2, text[-3000:]
    assert text.count("config error: #") == 20 and "degree=-19 is not allowed" in text and "degree=-20" not in text
    assert "config error: ... and 2 more (22 in all; the first 20 are shown" in text, text[-3000:]
