"""``python -m raycolloc.advise``: what should I collocate, and how? Asked before spending GPU hours.

::

    python -m raycolloc.advise workload=resnet26_cifar10 [workload=... for a mix] [cluster=...]
        [epoch_samples=...] [max_slowdown=1.5] [degrees=1,2,3,7] [cores=N] [probe_degrees=8,48|none]
        [confirm_budget_s=900] [confirm_k=4] [--no-confirm] [--fit DIR ...] [--emit-sweep] [--out FILE.json]
    python -m raycolloc.advise --validate SWEEP_DIR [SWEEP_DIR ...] [--fit DIR ...] [cores=N] [--out FILE.json]

The first form profiles each workload alone (one short degree-1 cell each, or an existing one with
the same settings; again, up to three runs, while its interval is wider than +-10%) and probes it at
high degrees (naive and MPS at ``probe_degrees``: 8 and the largest ranked by default, less what the
fit covers: with the committed corpus as the prior, on an H200 nothing), fits the model's parameters
on the measured sweeps under ``out_dir`` and the corpus (or ``--fit``) of *other* workloads and on
those probes, prints a ranked table per workload (and
for the mix) with memory fit, aggregate throughput and each job's slowdown with their 95%
intervals, energy per sample and which lines are extrapolated, then confirms: the top
``confirm_k`` (default 2: the pick and its plateau's knee, a short cell each) candidates measured by
successive halving within ``confirm_budget_s`` (``--no-confirm``: skip), the pick the best measured;
it prints the GPU time its own cells took. ``advice.json`` holds it all, and ``--emit-sweep`` writes
the recommended cells (the confirmed pick among them) as a sweep and as a radT plan. The second
form compares the model with a measured sweep (leave-one-out). Exit status: 0; 2 for a config error
(nothing has run) or a sweep directory that is missing, empty or corrupt; 1 for a validation that misses a target or
a cell predicted to fit that ran out
of memory.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from raycolloc.config import ConfigError
from raycolloc.results.errors import SweepDirError

if TYPE_CHECKING:
    from raycolloc.advise.advice import Advice
    from raycolloc.advise.run import Profiled, Request

__all__ = ["main"]

log = logging.getLogger("raycolloc")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m raycolloc.advise",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("words", nargs="*", help="workload=NAME [workload.KEY=V] ... overrides and advisor keys")
    p.add_argument("--validate", nargs="+", metavar="SWEEP_DIR", help="compare predictions with measured sweeps")
    p.add_argument(
        "--fit",
        action="append",
        default=[],
        metavar="DIR",
        help="measured sweeps or corpus folders to fit the parameters on (default: out_dir and corpus/)",
    )
    p.add_argument("--no-confirm", action="store_true", help="advise from the predictions alone (measure no candidate)")
    p.add_argument("--emit-sweep", action="store_true", help="write the recommended cells as a sweep and a radT plan")
    p.add_argument("--out", type=Path, help="where the JSON goes (default: the advice directory / validation.json)")
    return p


def _check_fit(dirs: list[str]) -> None:
    """Each ``--fit DIR`` holds a readable cell, checked before anything runs (the default, ``out_dir``,
    may hold none yet).

    Raises:
        SweepDirError: naming the directory and why (missing, not a directory, no cell, only corrupt ones).
    """
    from analysis.load import check_sweep_dir
    from raycolloc.advise.corpus import is_corpus

    for path in dirs:
        if is_corpus(path):  # a corpus folder (its tables directly inside) is read by load_corpus
            continue
        try:
            check_sweep_dir(path)
        except SweepDirError as exc:
            raise SweepDirError(f"--fit {path}: {str(exc).removeprefix('error: ')}") from None


def _check_out(out: Path | None) -> None:
    """``--out FILE.json`` can be written once the work is done: not a directory, in one this user can
    make and write (a JSON that cannot be written was found only after every profile had run).

    Raises:
        ConfigError: naming the path and why.
    """
    from raycolloc.driver.node_paths import dir_problem

    if out is None:
        return
    parent = out.absolute().parent
    problem = dir_problem(parent)
    why = "it is a directory; give the JSON's file name" if out.is_dir() else problem and f"{parent}: {problem}"
    if why:
        raise ConfigError(f"--out {out} cannot be written: {why}")


def _validate(args: argparse.Namespace) -> int:
    from raycolloc.advise.advice import write_json
    from raycolloc.advise.run import parse_number
    from raycolloc.advise.validate import format_validation, validate

    cores = None
    for word in args.words:
        key, _, value = word.partition("=")
        if key != "cores":
            raise ConfigError(f"{word!r} is not allowed with --validate; it takes cores=N (the GPU node's cores)")
        cores = parse_number("cores", value, int)
    result = validate(args.validate, args.fit, cores=cores)
    print(format_validation(result), flush=True)
    out = args.out or Path(args.validate[0]) / "validation.json"
    print(f"wrote {write_json(out, result)}")
    failed = any(m.passed is False for m in result.metrics) or bool(result.unsafe_fits)
    return 1 if failed else 0


def _advise(args: argparse.Namespace) -> int:
    from raycolloc.advise.advice import format_advice, gpu_time, write_json
    from raycolloc.advise.emit import emit_sweep
    from raycolloc.advise.memory import MPS_MAX_CLIENTS
    from raycolloc.advise.rank import DEFAULT_DEGREES
    from raycolloc.advise.run import parse_request
    from raycolloc.driver.kept_lanes import lanes_kept

    request = dataclasses.replace(parse_request(args.words, DEFAULT_DEGREES), confirm=not args.no_confirm)
    # One lane for the advice's sweeps (solo, probes, confirmation) on one GPU, sized for the largest
    # degree it ranks (those asked for, and the node's cores: raycolloc.advise.rank), opened once.
    with lanes_kept(lambda cores: max(*request.degrees, min(request.cores or cores, MPS_MAX_CLIENTS))):
        advice, profiled, advice_dir = _measured_advice(args, request)
    if args.emit_sweep:
        advice = dataclasses.replace(
            advice, emitted=emit_sweep(advice_dir, list(advice.rankings), profiled, request.common)
        )
    spent, n_cells = gpu_time(advice_dir)
    advice = dataclasses.replace(advice, gpu_time_s=spent, gpu_cells=n_cells)
    print(format_advice(advice), flush=True)
    out = args.out or advice_dir / "advice.json"
    print(f"wrote {write_json(out, advice, {'command': ['python', '-m', 'raycolloc.advise', *sys.argv[1:]]})}")
    return 0


def _measured_advice(args: argparse.Namespace, request: Request) -> tuple[Advice, list[Profiled], Path]:
    """The solo profiles, the probes, the advice and its confirmation: every cell the advice runs."""
    from raycolloc.advise.advice import advise, gpu_of, measured
    from raycolloc.advise.corpus import CORPUS_DIR, is_corpus
    from raycolloc.advise.measure import confirm_rankings, fitted_reach, prior_covers, run_probes, steady_profiles
    from raycolloc.advise.run import node_cores, run_profiles

    profiled, advice_dir = run_profiles(request)
    out_dir = Path(profiled[0].spec.config.out_dir).absolute()
    # The committed corpus is the default prior beside out_dir: an unseen model then needs its solo and
    # one or two short confirmation cells, no probes (the corpus covers naive and MPS up to x16 on an H200).
    fit_dirs = [Path(d) for d in args.fit] or [out_dir, *([CORPUS_DIR] if is_corpus(CORPUS_DIR) else [])]
    backend = next((p.profile.backend for p in profiled if p.profile is not None), "nvml")
    cores = node_cores(request.cores, backend)
    gpu = gpu_of(profiled, out_dir, cores)
    names = frozenset(p.profile.workload for p in profiled if p.profile is not None)
    found = measured(fit_dirs, names, gpu.name, cores)
    # With the default plan, a prior covering every ranked degree stands in for the solo's repeats.
    prior = prior_covers(found.params, gpu) if request.probe_degrees is None else None
    profiled = steady_profiles(profiled, request, found.profiles, advice_dir, prior)
    # The default probes skip the degrees the fit already covers.
    covered = fitted_reach(found.params) if request.probe_degrees is None else None
    probes = run_probes(profiled, request, gpu, advice_dir, covered)
    if probes.dirs and not any(advice_dir.is_relative_to(d.absolute()) for d in fit_dirs):
        fit_dirs.append(advice_dir / "probe")  # the probes are fitted on wherever the other cells are
    keep = probes.fitted(covered)
    advice = advise(profiled, request, fit_dirs, out_dir, cores, keep=keep, calibration=probes.calibration())
    if request.confirm:
        advice = confirm_rankings(advice, profiled, request, advice_dir, probes.labels, probes.rates)
    return advice, profiled, advice_dir


def main(argv: list[str] | None = None) -> int:
    """Run the advisor; returns the exit status."""
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    args = _parser().parse_intermixed_args(argv)  # words may follow a flag (--no-confirm x=y)
    from raycolloc.advise.advice import NothingProfiled

    try:
        _check_fit(args.fit)
        _check_out(args.out)
        return _validate(args) if args.validate else _advise(args)
    except NothingProfiled as exc:  # as SystemExit(message) did: the message on stderr, exit 1
        print(exc, file=sys.stderr, flush=True)
        return 1
    except ConfigError as exc:
        log.error("config error: %s", exc)
        return 2
    except SweepDirError as exc:  # a sweep directory to validate on or fit on is missing, empty or corrupt
        print(exc, file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
