"""The trainer's fast paths (``trainer.compile``, ``trainer.amp``, ``trainer.channels_last``).

First ``build_step`` alone on the CPU, one option at a time, checked where each one acts
(dynamo's counters, the forward's dtype under autocast, the conv weights' strides); then
compiled cells of every mode on real Ray with simulated GPUs: compile time is recorded per job
outside the measured epochs, and the jobs of a node share one compile cache.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from torch._dynamo.utils import counters

from raycolloc.config import TrainerConfig
from raycolloc.job.data.sources import build_source
from raycolloc.job.step import TrainStep, build_step
from raycolloc.job.workloads.registry import create_workload
from raycolloc.procs import compile_cache
from raycolloc.results.schema import TABLES

from .conftest import ROOT, load, run_cli, run_one, short_tmp

CPU = torch.device("cpu")
STEPS = 12  # three passes over the synthetic pool of 4 batches: the loss of a later pass must be lower
A100 = "A100-SXM4-40GB"


# --- build_step on the CPU ---------------------------------------------------------------------


@pytest.fixture
def fresh_dynamo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test counts its own graphs; compiled kernels go to the test session's compile cache (the
    directory tests/conftest.py names for the whole session, set again: inductor writes the variable into
    this process's environment, and monkeypatch puts the session's value back after the test)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(compile_cache() / "inductor"))
    # Inductor's precompiled C++ headers go to the system's temporary directory whatever that says
    # (codecache._HEADER_DIR, fixed at import): /tmp/torchinductor_<user> after every `make test`.
    from torch._inductor import codecache

    headers = compile_cache() / "inductor" / "precompiled_headers"
    monkeypatch.setattr(codecache, "_HEADER_DIR", str(headers))
    monkeypatch.setattr(codecache, "_HEADER_LOCK_DIR", str(headers / "locks"))
    torch._dynamo.reset()
    counters.clear()


def _train(workload: str, steps: int = STEPS, hook: Any = None, **options: Any) -> tuple[TrainStep, list[torch.Tensor]]:
    """Build the step of ``workload`` with ``options`` and train ``steps`` steps on synthetic data."""
    spec = create_workload(workload)
    torch.manual_seed(0)
    step = build_step(spec, spec.build_model(), CPU, TrainerConfig(**options))
    if hook is not None:
        step.module.model.register_forward_hook(hook)
    source = build_source(spec, spec.batch_size, CPU, "synthetic", "host", None, 0, seed=0)
    return step, [step(*source.next()) for _ in range(steps)]


def _assert_learns(losses: list[torch.Tensor]) -> None:
    values = [float(v) for v in losses]
    assert all(math.isfinite(v) for v in values), values
    assert sum(values[-4:]) < sum(values[:4]), f"the loss does not decrease: {values}"


def _graphs() -> int:
    return counters["stats"]["unique_graphs"]


def _cpu_fp16_autocast_error() -> str | None:
    """Why this CPU build of torch cannot train under fp16 autocast with a gradient scaler (None: it can)."""
    try:
        layer = torch.nn.Linear(4, 2)
        scaler = torch.amp.GradScaler("cpu")
        with torch.autocast("cpu", dtype=torch.float16):
            out = layer(torch.randn(3, 4))
        if out.dtype != torch.float16:
            return f"autocast(cpu, float16) computes Linear in {out.dtype}"
        scaler.scale(out.float().sum()).backward()
    except (RuntimeError, ValueError, TypeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("workload", ["tiny_cnn", "tiny_dlrm"])
def test_plain_step_learns_without_compiling(workload: str) -> None:
    step, losses = _train(workload)
    _assert_learns(losses)
    assert not step.compiled and step.amp == "off"
    assert _graphs() == 0
    assert all(v.dtype == torch.float32 for v in losses)


@pytest.mark.slow  # inductor compiles C++: ~7 s
@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("workload", ["tiny_cnn", "tiny_dlrm"])
def test_compile_default_compiles_model_and_loss_as_one_graph(workload: str) -> None:
    step, losses = _train(workload, compile="default")
    _assert_learns(losses)
    assert step.compiled
    # One frame, one graph: forward and loss compiled together (_WithLoss), no graph break, and
    # AOTAutograd compiled the backward with it.
    assert _graphs() == 1 and not counters["graph_break"], dict(counters["graph_break"])
    assert counters["aot_autograd"]["ok"] == 1
    assert counters["inductor"]["fxgraph_cache_miss"] + counters["inductor"]["fxgraph_cache_hit"] >= 2
    # Same numbers as eager on the first step (before any update).
    torch._dynamo.reset()
    _, eager = _train(workload, steps=1)
    assert float(losses[0]) == pytest.approx(float(eager[0]), rel=1e-4)


@pytest.mark.slow  # inductor compiles C++: ~7 s alone, minutes on a loaded 2-core machine
@pytest.mark.usefixtures("fresh_dynamo")
def test_reduce_overhead_on_the_cpu_compiles_without_cuda_graphs() -> None:
    step, losses = _train("tiny_cnn", compile="reduce-overhead")
    _assert_learns(losses)
    assert step.compiled and _graphs() == 1
    # Inductor counts a skip when it is asked for CUDA graphs it cannot build (CPU tensors);
    # build_step compiles without them on the CPU, so there is nothing to skip.
    assert counters["inductor"]["cudagraph_skips"] == 0


def _autocast_hook(seen: dict[str, Any]) -> Any:
    """A forward hook noting the output's dtype and whether autocast is on.

    It overwrites keys that exist already: appending to a list would make dynamo guard on the
    list's length and recompile every step.
    """
    seen.update(dtype=None, autocast=None)

    def hook(module: torch.nn.Module, args: Any, output: torch.Tensor) -> None:
        seen["dtype"] = output.dtype
        seen["autocast"] = torch.is_autocast_enabled("cpu")

    return hook


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("amp, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
@pytest.mark.parametrize("workload", ["tiny_cnn", "tiny_dlrm"])
def test_amp_runs_the_forward_under_autocast(workload: str, amp: str, dtype: torch.dtype) -> None:
    if amp == "fp16" and (reason := _cpu_fp16_autocast_error()) is not None:
        pytest.skip(f"this CPU build of torch cannot train under fp16 autocast: {reason}")
    seen: dict[str, Any] = {}
    step, losses = _train(workload, hook=_autocast_hook(seen), amp=amp)
    _assert_learns(losses)
    assert step.amp == amp
    assert seen == {"dtype": dtype, "autocast": True}  # the model's output, inside autocast
    # Autocast, not a cast of the model: the weights (and the optimiser's updates) stay float32.
    assert all(p.dtype == torch.float32 for p in step.module.parameters())
    assert not torch.is_autocast_enabled("cpu")  # the step leaves autocast when it returns


@pytest.mark.usefixtures("fresh_dynamo")
def test_channels_last_stores_conv_weights_and_inputs_nhwc() -> None:
    seen: list[bool] = []
    step, losses = _train("tiny_cnn", channels_last=True)
    _assert_learns(losses)
    convs = [m for m in step.module.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 2
    for conv in convs:
        w = conv.weight
        assert w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous(), w.stride()
    # The step converts each batch, so the first conv sees NHWC input.
    convs[0].register_forward_hook(lambda m, a, o: seen.append(a[0].is_contiguous(memory_format=torch.channels_last)))
    spec = create_workload("tiny_cnn")
    step(*build_source(spec, spec.batch_size, CPU, "synthetic", "host", None, 0, seed=1).next())
    assert seen == [True]


@pytest.mark.usefixtures("fresh_dynamo")
def test_channels_last_leaves_a_dlrm_as_it_is() -> None:
    step, losses = _train("tiny_dlrm", channels_last=True)
    _assert_learns(losses)
    assert all(p.is_contiguous() for p in step.module.parameters())


@pytest.mark.slow  # a compile: ~3.5 s
@pytest.mark.usefixtures("fresh_dynamo")
def test_all_fast_paths_together_on_a_cnn() -> None:
    seen: dict[str, Any] = {}
    step, losses = _train("tiny_cnn", hook=_autocast_hook(seen), compile="default", amp="bf16", channels_last=True)
    _assert_learns(losses)
    assert step.compiled and _graphs() == 1 and not counters["graph_break"]
    # Dynamo traced the hook inside autocast: the compiled model computes in bf16.
    assert seen == {"dtype": torch.bfloat16, "autocast": True}
    conv = next(m for m in step.module.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)


# --- compiled cells on real Ray with simulated GPUs ----------------------------------------------


def _tables(job_dir: Path) -> dict[str, pd.DataFrame]:
    return {name: pd.read_parquet(job_dir / f"{name}.parquet") for name in TABLES}


def _cell(tmp_path: Path, overrides: list[str]) -> tuple[Any, dict[str, pd.DataFrame]]:
    return run_one(load(["epoch_samples=128", *overrides], out_dir=tmp_path), tmp_path / "cell")


def _assert_compile_outside_measured_epochs(jobs: pd.DataFrame, epochs: pd.DataFrame) -> None:
    """Every job timed its compile, and no epoch's wall time contains one."""
    assert (jobs["compile"] == "default").all()
    assert jobs["compile_s"].notna().all() and (jobs["compile_s"] > 0).all(), jobs["compile_s"]
    # The first compile (the slowest: the others may hit its cache) would dwarf a tiny epoch.
    slowest = jobs["compile_s"].max()
    assert (epochs["wall_s"] < 0.5 * slowest).all(), (epochs[["job_index", "epoch", "wall_s"]], jobs["compile_s"])
    assert (jobs["epoch2_s"] < 0.5 * slowest).all()


@pytest.fixture
def pipe_root() -> Iterator[Path]:
    """An MPS pipe root of its own under /tmp (Unix socket paths must stay short; tmp_path is long)."""
    root = short_tmp("rcmps")
    yield root
    shutil.rmtree(root, ignore_errors=True)


MODE_OVERRIDES = {
    "naive": ["mode=naive"],
    "mps": ["mode=mps"],
    "mig": ["mode=mig", f"cluster.gpu_model={A100}", "mig.allow_reconfigure=true"],
}


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("mode", ["naive", "mps", "mig"])
def test_compiled_cell_times_compile_outside_the_measured_epochs(tmp_path: Path, pipe_root: Path, mode: str) -> None:
    extra = [f"mode.pipe_root={pipe_root}"] if mode == "mps" else []
    outcome, t = _cell(tmp_path, ["degree=2", "trainer.compile=default", *MODE_OVERRIDES[mode], *extra])
    jobs, epochs = t["jobs"], t["epochs"]
    assert outcome.status == "ok", t["cells"].loc[0, "reason"]
    assert len(jobs) == 2 and set(jobs["status"]) == {"ok"}, jobs[["status", "error"]]
    assert t["cells"].loc[0, "mode"] == mode
    _assert_compile_outside_measured_epochs(jobs, epochs)
    assert epochs["loss"].map(math.isfinite).all()
    if mode == "mig":
        assert jobs["mig_uuid"].nunique() == 2
    if mode == "mps":
        assert jobs["mps_client"].all()


@pytest.mark.slow  # a sweep that compiles
def test_jobs_of_a_node_share_one_compile_cache(tmp_path: Path) -> None:
    """With an empty cache (``trainer.compile_cache``), the first job compiles and the second loads its
    kernels. The real command line, joining the session's Ray instance."""
    cache, out = tmp_path / "compile-cache", tmp_path / "out"
    proc = run_cli(
        [
            "workload=tiny_cnn",
            "cluster=local",
            "degree=2",
            "epoch_samples=128",
            "trainer.compile=default",
            f"trainer.compile_cache={cache}",
            "telemetry.interval_ms=50",
            f"out_dir={out}",
        ],
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    (job_dir,) = {p.parent for p in out.rglob("jobs.parquet")}
    t = _tables(job_dir)
    jobs, epochs = t["jobs"], t["epochs"]
    assert set(jobs["status"]) == {"ok"}, jobs[["status", "error"]]
    _assert_compile_outside_measured_epochs(jobs, epochs)
    # Both jobs compiled (one after the other, under the node's lock) into this cache.
    assert len(list(cache.glob("compile-*.lock"))) == 1
    assert any((cache / "inductor").rglob("*.py")), "nothing was compiled into the fresh cache"
    first, second = sorted(jobs["compile_s"], reverse=True)
    assert second < 0.5 * first, f"the second job did not reuse the first one's kernels: {first:.1f}s, {second:.1f}s"


@pytest.mark.usefixtures("ray_local")
def test_mixed_cell_takes_fast_paths_per_job(tmp_path: Path) -> None:
    fp16 = "fp16" if _cpu_fp16_autocast_error() is None else "bf16"  # fp16 where this CPU build can
    # Hydra's override grammar: a list of dicts, each a MixJob with its own fast paths.
    mix = (
        "[{workload:tiny_cnn,compile:default},{workload:tiny_cnn,amp:bf16,channels_last:true},"
        f"{{workload:tiny_dlrm,amp:{fp16}}}]"
    )
    outcome, t = _cell(tmp_path, ["mix.name=custom", f"mix.jobs={mix}"])
    jobs = t["jobs"].set_index("job_index")
    assert outcome.status == "ok", t["cells"].loc[0, "reason"]
    assert set(jobs["status"]) == {"ok"}, jobs[["status", "error"]]
    assert t["cells"].loc[0, "mix"] == "custom" and t["cells"].loc[0, "degree"] == 3
    assert jobs["workload"].tolist() == ["tiny_cnn", "tiny_cnn", "tiny_dlrm"]
    assert jobs["compile"].tolist() == ["default", "off", "off"]
    assert jobs["amp"].tolist() == ["off", "bf16", fp16]
    assert jobs["channels_last"].tolist() == [False, True, False]
    # Only the compiled job has a compile time; the top-level trainer keys stay the defaults.
    assert jobs.loc[0, "compile_s"] > 0 and jobs.loc[[1, 2], "compile_s"].isna().all()
    config = json.loads(t["cells"].loc[0, "config_json"])
    assert config["trainer"]["compile"] == "off" and config["trainer"]["amp"] == "off"
    assert [j["compile"] for j in config["mix"]["jobs"]] == ["default", None, None]
    assert t["epochs"]["loss"].map(math.isfinite).all()
