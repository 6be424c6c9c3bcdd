"""The measured corpus: real collocation cells that grade the advisor and play the queue simulator's GPUs.

Runs the real sweep command for each corpus entry (a workload alone at several degrees, naive and MPS;
pairs of different workloads for mixes) and keeps every cell it measured in two small Parquet tables
under the corpus folder: ``cells.parquet`` (one row per cell run: aggregate rate and its interval, SM
activity, memory, power, energy, provenance) and ``jobs.parquet`` (one row per job of those cells:
its rate alone in the cell, its peak memory). It resumes: a configuration the corpus already holds for
this GPU model is not measured again, so a device call cut short by its time limit goes on in the next.

    python jobs/corpus.py measure corpus/ [--only NAME,...] [--limit-s 540] [--work DIR]
    python jobs/corpus.py measure corpus/ --pass 2026-12-03 ...     # measure again: runs of its own
    python jobs/corpus.py measure corpus-sim/ --backend sim        # simulated GPUs, tiny workloads: plumbing
    python jobs/corpus.py show corpus/                              # what it holds, per entry and mode
    python jobs/corpus.py pool OUT corpus/ corpus/passes/2026-12-03/  # one corpus of several passes' rows

Provenance: each row carries the GPU's name, driver, host, the date, the command and the commit
(``RAYCOLLOC_COMMIT`` in the environment: the device machine's copy of the tree has no git).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import pandas as pd

from raycolloc.mode_kinds import modes_where

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.load import SweepDirError, load_sweeps  # noqa: E402  (after the checkout is on the path)

TIMM = "workload=timm workload.model={model} workload.dataset={dataset}"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One workload of the corpus (or a pair of them: a mix), with why it is there."""

    name: str
    words: str  # the sweep's workload words
    shape: str  # what kind of model it stands for
    mix: bool = False


# At least eight timm models of different shapes: small and large CNNs, a mobile net, a transformer,
# at 32, 64 and 224 px; then pairs of different models for mixes.
GPU_ENTRIES = (
    Entry("resnet26_cifar10", "workload=resnet26_cifar10", "small CNN, 32 px (the study's S)"),
    Entry("mobilenetv3_cifar10", TIMM.format(model="mobilenetv3_large_100", dataset="cifar10"), "mobile net, 32 px"),
    Entry("vit_tiny_imagenet", TIMM.format(model="vit_tiny_patch16_224", dataset="imagenet"), "transformer, 224 px"),
    Entry("resnet50_imagenet64", "workload=resnet50_imagenet64", "CNN, 64 px (the study's M)"),
    Entry("resnet152_imagenet", "workload=resnet152_imagenet", "large CNN, 224 px (the study's L)"),
    Entry("convnext_atto_cifar10", TIMM.format(model="convnext_atto", dataset="cifar10"), "small ConvNeXt, 32 px"),
    Entry("efficientnetv2s_imagenet64", "workload=efficientnetv2s_imagenet64", "EfficientNetV2, 64 px (study's M)"),
    Entry("resnet18_cifar10", TIMM.format(model="resnet18", dataset="cifar10"), "small CNN, 32 px"),
    Entry("cait_xxs24_imagenet", "workload=cait_xxs24_imagenet", "transformer, 224 px (the study's L)"),
    Entry(
        "mix_resnet26_resnet50",
        "mix.name=r26_r50 mix.jobs=[{workload:resnet26_cifar10},{workload:resnet50_imagenet64}]",
        "pair: small CNN beside a 64 px CNN",
        mix=True,
    ),
    Entry(
        "mix_resnet26_effnet",
        "mix.name=r26_effv2 mix.jobs=[{workload:resnet26_cifar10},{workload:efficientnetv2s_imagenet64}]",
        "pair: small CNN beside EfficientNetV2",
        mix=True,
    ),
)
SIM_ENTRIES = (
    Entry("tiny_cnn", "workload=tiny_cnn", "tiny CPU CNN (simulated GPU)"),
    Entry("tiny_dlrm", "workload=tiny_dlrm", "tiny CPU recommender (simulated GPU)"),
    Entry("mix_tiny", "mix=tiny_mixed", "tiny mix (simulated GPU)", mix=True),
)
GPU_DEGREES = (1, 2, 3, 7, 14, 16)
SIM_DEGREES = (1, 2, 3)
MODES = modes_where(lambda k: k.advised)  # what the advisor ranks and the queue replays
# Every column of the sweep's cells and jobs is kept (the advisor's profiles read config_json, the
# memory columns, the telemetry means); its epochs whole; its telemetry at GPU scope inside each cell's
# measured window (what a profile averages), not the per-process samples that make it large.
TABLES = ("cells", "jobs", "epochs", "telemetry")
FIRST_PASS = "first"  # the ``pass`` of rows measured without --pass (and of rows older than the column)


def gpu_name(backend: str) -> str:
    """The GPU model this call measures on: NVML's name, or ``sim`` on the simulated backend."""
    if backend == "sim":
        return "sim"
    import pynvml

    pynvml.nvmlInit()
    try:
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        return name.decode() if isinstance(name, bytes) else str(name)
    finally:
        pynvml.nvmlShutdown()


def read_table(corpus: Path, name: str) -> pd.DataFrame:
    path = corpus / f"{name}.parquet"
    return pd.read_parquet(path) if path.exists() else pd.DataFrame()


def measured(corpus: Path, gpu: str, again: str | None = None) -> set[tuple[str, str, int]]:
    """(entry, mode, degree) the corpus holds a result for on this GPU model (a failed cell counts:
    an OOM at x16 is a measurement, and running it again gives the same); with ``again``, only the
    results of that pass (a pass measures every configuration once more, on another day or machine:
    runs far apart in time show the host's drift that runs of one sweep do not)."""
    cells = read_table(corpus, "cells")
    if cells.empty:
        return set()
    mine = cells[(cells["gpu_name"] == gpu) & cells["status"].isin(["ok", "partial", "oom", "unfit"])]
    if again is not None:
        mine = mine[mine["pass"] == again] if "pass" in mine else mine.iloc[:0]
    return {(str(e), str(m), int(d)) for e, m, d in zip(mine["entry"], mine["mode"], mine["degree"], strict=True)}


def sweep_words(
    entry: Entry, modes: str, degrees: list[int], backend: str, work: Path, epoch_s: float, again: str | None = None
) -> list[str]:
    words = ["-m", *shlex.split(entry.words), f"mode={modes}"]
    if not entry.mix:
        words.append("degree=" + ",".join(str(d) for d in degrees))
    words += [
        f"epoch_time_s={epoch_s}",
        "measure.target_ci=0.05",  # repeats where the interval is wider than ±5%
        "measure.budget=0.5",  # ... within half the first pass's GPU time again
        f"out_dir={sweeps_out(work, again)}",  # a pass reuses no earlier run
        f"hydra.sweep.dir={sweep_dir(work, entry, modes, again)}",
    ]
    if backend == "sim":
        words += ["cluster=local", "cluster.num_gpus=1"]
    else:
        words.append("cluster.isolate_measurement=true")
    return words


def sweeps_out(work: Path, again: str | None = None) -> Path:
    """The sweeps' ``out_dir``: a pass's own, so that none of its cells is reused from another pass."""
    return work / (f"res-{again}" if again else "res")


def sweep_dir(work: Path, entry: Entry, modes: str, again: str | None = None) -> Path:
    return sweeps_out(work, again) / entry.name / modes.replace(",", "-")


def export(corpus: Path, entry: Entry, sweep_dir: Path, gpu: str, command: str, again: str | None = None) -> int:
    """Add the cells measured under ``sweep_dir`` (every run, repeats included) to the corpus."""
    try:
        data = load_sweeps([sweep_dir], all_results=True)
    except SweepDirError:
        return 0
    if again is not None:  # a run of another pass has the same config, so the same cell id: named apart
        data = dataclasses.replace(
            data,
            **{
                name: getattr(data, name).assign(cell_id=lambda t: t["cell_id"] + f"@{again}")
                for name in TABLES
                if not getattr(data, name).empty
            },
        )
    cells = data.cells.copy()
    old = {name: read_table(corpus, name) for name in TABLES}
    if not old["cells"].empty:
        cells = cells[~cells["cell_id"].isin(old["cells"]["cell_id"])]
    cells.insert(0, "entry", entry.name)
    cells["shape"] = entry.shape
    cells["gpu_name"] = cells["gpu_name"].fillna(gpu) if gpu != "sim" else "sim"
    cells["commit"] = os.environ.get("RAYCOLLOC_COMMIT", "unknown")
    cells["measured_on"] = datetime.now(UTC).strftime("%Y-%m-%d")
    cells["command"] = command
    cells["pass"] = again if again is not None else FIRST_PASS
    ids = cells["cell_id"]
    windows = cells.set_index("cell_id")[["measured_start_ts", "measured_end_ts"]]
    tele = data.telemetry[(data.telemetry["scope"] == "gpu") & data.telemetry["cell_id"].isin(ids)]
    tele = tele.join(windows, on="cell_id")
    tele = tele[(tele["ts"] >= tele["measured_start_ts"]) & (tele["ts"] <= tele["measured_end_ts"])]
    new = {
        "cells": cells.drop(columns=["cell_dir"], errors="ignore"),
        "jobs": data.jobs[data.jobs["cell_id"].isin(ids)],
        "epochs": data.epochs[data.epochs["cell_id"].isin(ids)],
        "telemetry": tele.drop(columns=["measured_start_ts", "measured_end_ts"]),
    }
    corpus.mkdir(parents=True, exist_ok=True)
    for name in (*TABLES[1:], "cells"):  # cells last: they index the rest
        add = new[name].assign(entry=entry.name) if name != "cells" else new[name]
        both = pd.concat([old[name], add], ignore_index=True) if not old[name].empty else add
        tmp = corpus / f".{name}.parquet.tmp"
        both.to_parquet(tmp, index=False)
        tmp.replace(corpus / f"{name}.parquet")
    return len(cells)


def steps(entry: Entry, degrees: list[int], done: set[tuple[str, str, int]]) -> list[tuple[Entry, str, list[int]]]:
    """The sweeps that measure what the corpus lacks of ``entry``: one over both modes where they lack
    the same degrees (one Ray start, one warm lane), else one per mode."""
    todo = {m: [d for d in ([1] if entry.mix else degrees) if (entry.name, m, d) not in done] for m in MODES}
    if len({tuple(v) for v in todo.values()}) == 1:
        first = todo[MODES[0]]
        return [(entry, ",".join(MODES), first)] if first else []
    return [(entry, m, ds) for m, ds in todo.items() if ds]


def run_sweep(words: list[str], env: dict[str, str], out: IO[str], limit_s: float) -> int:
    """Run one sweep; past ``limit_s`` end it as a user would, with SIGTERM (the sweep records what it
    measured and releases the GPU: its MPS daemon, its training processes), and SIGKILL only if it
    has not ended 30 s later. A SIGKILLed driver left its jobs' processes on the GPU (a device call)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "raycolloc.sweep", *words], cwd=ROOT, env=env, stdout=out, stderr=out
    )
    try:
        return proc.wait(timeout=max(limit_s, 1))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def measure(args: argparse.Namespace) -> int:
    corpus, work = Path(args.corpus), Path(args.work)
    backend = args.backend
    entries = SIM_ENTRIES if backend == "sim" else GPU_ENTRIES
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {e.name for e in entries})
        if unknown:
            print(f"error: --only {','.join(unknown)}: no such entry; choose from {', '.join(e.name for e in entries)}")
            return 2
        entries = tuple(e for e in entries if e.name in wanted)
    degrees = (
        [int(d) for d in args.degrees.split(",")]
        if args.degrees
        else list(SIM_DEGREES if backend == "sim" else GPU_DEGREES)
    )
    if backend != "sim":  # raycolloc gives every training process a core of its own
        degrees = [d for d in degrees if d <= (os.cpu_count() or 1)]
    if args.again is not None and (args.again == FIRST_PASS or not re.fullmatch(r"[A-Za-z0-9._-]+", args.again)):
        print(f"error: --pass {args.again!r}: a name of letters, digits, '.', '_' or '-', other than {FIRST_PASS!r}")
        return 2
    gpu = gpu_name(backend)
    done = measured(corpus, gpu, args.again)
    start = time.monotonic()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if backend == "sim":
        env.setdefault("RAYCOLLOC_SIM_ROOT", str(work / "sim"))
    plan = [step for e in entries for step in steps(e, degrees, done)]
    print(f"corpus {corpus} on {gpu}: {len(done)} configurations held; {len(plan)} sweeps to run", flush=True)
    for i, (entry, modes, todo) in enumerate(plan, 1):
        left = args.limit_s - (time.monotonic() - start)
        if left < 45:
            print(f"time limit: {len(plan) - i + 1} sweeps left for the next call", flush=True)
            return 3
        words = sweep_words(entry, modes, todo, backend, work, args.epoch_s, args.again)
        command = "python -m raycolloc.sweep " + shlex.join(words)
        print(f"[{i}/{len(plan)}] {entry.name} {modes} x{','.join(map(str, todo))} ({left:.0f} s left)", flush=True)
        log = work / f"{entry.name}-{modes.replace(',', '-')}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as out:
            rc = run_sweep(words, env, out, left - 40)
        added = export(corpus, entry, sweep_dir(work, entry, modes, args.again), gpu, command, args.again)
        print(f"    exit {rc}, {added} cells added; log {log}", flush=True)
    return 0


def show(args: argparse.Namespace) -> int:
    cells = read_table(Path(args.corpus), "cells")
    if cells.empty:
        print(f"{args.corpus}: empty")
        return 0
    ok = cells[cells["status"] == "ok"]
    table = ok.groupby(["gpu_name", "entry", "mode", "degree"])["agg_samples_per_s"].agg(["median", "count"])
    print(table.to_string(float_format=lambda v: f"{v:,.0f}"))
    print(f"{len(cells)} cell runs ({dict(cells['status'].value_counts())})")
    return 0


def pool(args: argparse.Namespace) -> int:
    """Write one corpus at ``args.out`` holding every row of the corpora given (their passes pooled: a
    configuration's runs of every pass are its repeats); the first's rows that name no pass are ``first``."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in TABLES:
        frames = [f for c in args.corpora if not (f := read_table(Path(c), name)).empty]
        if not frames:  # a table none of them has (an old corpus: no epochs, no telemetry)
            continue
        both = pd.concat(frames, ignore_index=True)
        if name == "cells":
            both["pass"] = both["pass"].fillna(FIRST_PASS) if "pass" in both else FIRST_PASS
            if both["cell_id"].duplicated().any():
                print(f"error: {args.corpora}: a cell id held twice (the same pass given twice?)")
                return 2
        tmp = out / f".{name}.parquet.tmp"
        both.to_parquet(tmp, index=False)
        tmp.replace(out / f"{name}.parquet")
    print(f"wrote {out}: {len(read_table(out, 'cells'))} cell runs from {len(args.corpora)} corpora")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="measure what the corpus lacks on this GPU model")
    m.add_argument("corpus")
    m.add_argument("--only", help="entries to measure (comma-separated names)")
    m.add_argument("--limit-s", type=float, default=540.0, help="stop starting sweeps past this (s)")
    m.add_argument("--work", default="/tmp/raycolloc-corpus-work", help="the sweeps' own output")
    m.add_argument("--backend", choices=("gpu", "sim"), default="gpu")
    m.add_argument("--degrees", help="degrees to measure (default: 1,2,3,7,14,16 on a GPU, 1,2,3 simulated)")
    m.add_argument("--epoch-s", type=float, default=3.0, help="every epoch's length (s)")
    m.add_argument(
        "--pass",
        dest="again",
        help="measure every configuration once more, as runs of this pass (a name, e.g. the date); resumes",
    )
    s = sub.add_parser("show", help="what the corpus holds")
    s.add_argument("corpus")
    p = sub.add_parser("pool", help="one corpus of the rows of several (passes pooled)")
    p.add_argument("out")
    p.add_argument("corpora", nargs="+")
    args = parser.parse_args(argv)
    return {"measure": measure, "show": show, "pool": pool}[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
