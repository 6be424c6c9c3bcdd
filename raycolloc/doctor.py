"""``python -m raycolloc.doctor [--fix]``: what raycolloc runs left on this node, without Ray.

Reports (and with ``--fix`` puts right) what a killed run can leave behind:

* MPS control daemons a dead steward started (its records under ``mode.pipe_root``), and any
  other control daemon on the node (reported, never stopped: it is not raycolloc's);
* MIG layouts a dead steward changed and did not restore (from ``mig-found.json``);
* GPU directories under ``mode.pipe_root`` of dead stewards;
* training processes (and fork servers) whose trainer (steward) is gone, and fork servers'
  sockets and logs of dead stewards;
* with ``--out-dir``: who holds that output directory's lock.

Exit status: 0 when nothing is left (after ``--fix``: when everything was put right), 1 otherwise, 2
when ``--out-dir`` is not a directory or ``--pipe-root`` is a file (before anything is looked at);
the socket and log a dead steward's fork server left are reported as stale files and removed by
``--fix`` (or the next steward), but hold nothing and do not count.
A steward does the same for its own GPUs whenever it starts (:mod:`raycolloc.node.leftovers`).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
from pathlib import Path

import psutil

from raycolloc.config import ModeConfig
from raycolloc.driver.outlock import LOCK_NAME
from raycolloc.node.leftovers import clean_leftovers, find_leftovers, open_recorded_backend
from raycolloc.node.modes.mps import find_control_daemons

__all__ = ["main", "orphan_trainers"]


def _under(value: str, root: Path) -> bool:
    return value.startswith(str(root) + os.sep)


def orphan_trainers(pipe_root: Path) -> list[psutil.Process]:
    """Training processes and fork servers of runs on ``pipe_root`` whose trainer or steward is gone
    (adopted by init). A fork server names its socket under the pipe root (its forked children show
    its command line); an exec'd training process has its MPS pipe directory there."""
    found = []
    for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        ours = any(m in " ".join(cmd) for m in ("raycolloc.job.process", "raycolloc.job.forkserver"))
        if proc.info["ppid"] != 1 or not ours:
            continue
        try:
            ours = any(_under(arg, pipe_root) for arg in cmd) or _under(
                proc.environ().get("CUDA_MPS_PIPE_DIRECTORY", ""), pipe_root
            )
        except psutil.Error:
            continue
        if ours:
            found.append(proc)
    return found


def _lock_line(out_dir: Path) -> str:
    """Who holds ``out_dir``'s lock (a dead holder's lock is no problem: the next sweep takes it over)."""
    lock = out_dir / LOCK_NAME
    try:
        fh = open(lock, "r+")  # a sweep removes its lock file when it ends
    except FileNotFoundError:
        return f"out_dir {out_dir}: free (no sweep holds it)"
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return f"out_dir {out_dir}: held by a running sweep: {fh.read().strip()}"
        fcntl.flock(fh, fcntl.LOCK_UN)
        text = fh.read().strip()
    left = f" (its last holder, now gone, was {json.loads(text)})" if text else ""
    return f"out_dir {out_dir}: free{left}; the next sweep takes it"


def _refused_paths(pipe_root: str, out_dir: Path | None) -> str | None:
    """Why a path given cannot be what it names (None: both can): a pipe root that is a file (one not
    made yet holds nothing to report), an output directory that is missing or not a directory."""
    if Path(pipe_root).exists() and not Path(pipe_root).is_dir():
        return f"--pipe-root {pipe_root}: not a directory (give mode.pipe_root of the runs to check)"
    if out_dir is not None and not out_dir.is_dir():
        why = "not a directory" if out_dir.exists() else "no such directory"
        return f"--out-dir {out_dir}: {why} (give the out_dir of a sweep)"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raycolloc.doctor", description=__doc__.split("\n")[0])
    parser.add_argument("--pipe-root", default=ModeConfig().pipe_root, help="mode.pipe_root of the runs to check")
    parser.add_argument("--out-dir", type=Path, help="also report who holds this output directory")
    parser.add_argument("--fix", action="store_true", help="stop, restore and remove what dead runs left")
    args = parser.parse_args(argv)
    refused = _refused_paths(args.pipe_root, args.out_dir)
    if refused:
        parser.error(refused)  # exit 2, before anything is looked at or changed
    pipe_root = Path(args.pipe_root)
    found, in_use = find_leftovers(pipe_root)
    ours = {item.pid for item in found if item.pid is not None}
    ours |= {d["pid"] for d in find_control_daemons() if Path(d["pipe_dir"]).is_relative_to(pipe_root)}
    foreign = [d for d in find_control_daemons() if d["pid"] not in ours]
    orphans = orphan_trainers(pipe_root)
    print(f"raycolloc doctor: node {os.uname().nodename}, pipe root {pipe_root}")
    for item in in_use:
        print(f"  in use: {item.path} by {item.owner.describe()}")
    for leftover in found:
        label = "stale file" if leftover.kind == "file" else f"left: {leftover.kind}"
        print(f"  {label}: {leftover.detail}")
    for daemon in foreign:
        print(
            f"  not raycolloc's: MPS control daemon pid {daemon['pid']} on pipe {daemon['pipe_dir']} "
            f"(visible devices {daemon['visible']}); stop it with "
            f"`echo quit | CUDA_MPS_PIPE_DIRECTORY={daemon['pipe_dir']} nvidia-cuda-mps-control`"
        )
    for proc in orphans:
        print(f"  left: training process or fork server pid {proc.pid} without its trainer or steward")
    if args.out_dir is not None:
        print("  " + _lock_line(args.out_dir.absolute()))
    # A dead steward's fork-server socket and log hold nothing (the next steward removes them); the
    # rest holds GPU state, memory or cores.
    problems = [*(item for item in found if item.kind != "file"), *orphans]
    if not args.fix:
        if not problems:
            print("nothing left behind")
            return 0
        print(f"{len(problems)} thing(s) left behind; `python -m raycolloc.doctor --fix` puts them right")
        return 1
    failed = clean_leftovers(found, open_recorded_backend)
    for proc in orphans:
        try:
            proc.kill()
        except psutil.Error as exc:
            failed.append(f"training process {proc.pid}: {exc}")
    for line in failed:
        print(f"  not fixed: {line}")
    print("fixed" if not failed else f"{len(failed)} thing(s) could not be fixed")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
