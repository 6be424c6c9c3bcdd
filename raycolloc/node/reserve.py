"""Quiet cores: a few cores of each node kept for the node's own processes, never a job's.

A job pinned to a core of its own is not alone there if Ray's raylet, GCS and agents, idle workers,
the trainer actors, the driver, the steward and its sampler and the fork server may all run on
every core: on one H200 (16 cores) raycolloc's naive x1, its training process pinned to core 1 in
each of five runs, spread 1.8x from slowest to fastest, while a raw PyTorch process pinned with
``taskset`` to a core nothing else used spread 8% (issue 30). So each node reserves a small set
(``cluster.reserved_cpus``: ``auto`` is 1 core in 16, at least 1, on the GPU's NUMA node, core 0
first, with its SMT siblings), :class:`~raycolloc.node.cpus.CpuPool` never hands those to a job,
and :func:`confine` moves every thread of the node's Ray processes onto them. A node too small to
keep a core and still give jobs theirs reserves nothing, and says so.

A process whose cores avoid the reserved set already is a training process (pinned to its job's
cores, or to the shared ones) or one someone placed on purpose: it is never touched. A process
already on the reserved set is left as it is, so a training process forked from the confined fork
server, between its fork and pinning itself, keeps the pin it is about to take.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path

import psutil

from raycolloc.config_checks import parse_cpu_list
from raycolloc.spec import Reservation

__all__ = [
    "AUTO_PER_CORES",
    "MIN_AUTO_CORES",
    "confine",
    "confine_process",
    "plan_reservation",
    "ray_processes",
    "raylet_of",
    "thread_siblings",
    "widen",
]

log = logging.getLogger(__name__)
AUTO_PER_CORES = 16  # auto reserves one core per 16 of the node's (16 cores: 1; 64: 4)
MIN_AUTO_CORES = 4  # auto reserves nothing below this: a core of 2 or 3 is too much of the node
_SESSION = re.compile(r"/session_[0-9_-]+")


def plan_reservation(
    setting: str,
    cpus: Sequence[int],
    near: Collection[int] | None = None,
    siblings: Mapping[int, Collection[int]] | None = None,
) -> Reservation:
    """The reserved cores of a node (a pure function of its cores).

    Args:
        setting: ``cluster.reserved_cpus``: ``auto``, ``none``, a count or a cpu list.
        cpus: the node's cores that Ray may use.
        near: the GPU's NUMA-local cores (reserved ones come from there), None: the node's first.
        siblings: each core's SMT siblings (reserved with it: they share its execution units).
    """
    text, pool = str(setting).strip(), sorted(set(cpus))
    if text == "none" or not pool:
        return Reservation(setting=text, note="cluster.reserved_cpus=none")
    if text == "auto" and len(pool) < MIN_AUTO_CORES:
        return Reservation(setting=text, note=f"not reserved: {len(pool)} cores (auto needs {MIN_AUTO_CORES})")
    if text == "auto" or text.isdigit():
        want = max(1, len(pool) // AUTO_PER_CORES) if text == "auto" else int(text)
        local = [c for c in pool if near is None or c in near] or pool
        cores: list[int] = []
        for core in [*local, *(c for c in pool if c not in local)]:  # core 0 first: interrupts like it
            if len(cores) >= want:
                break
            if core not in cores:
                cores += sorted({core, *(s for s in (siblings or {}).get(core, ()) if s in pool)} - set(cores))
    else:
        listed = parse_cpu_list(text)
        cores = [c for c in listed if c in pool]
        if len(cores) < len(listed):
            log.warning("reserved_cpus=%s: cores %s are not this node's", text, sorted(set(listed) - set(pool)))
    if not cores or len(cores) >= len(pool):
        return Reservation(setting=text, note=f"not reserved: {len(pool)} cores leave none for jobs")
    return Reservation(cores=tuple(sorted(cores)), setting=text)


def thread_siblings() -> dict[int, set[int]]:
    """Each core's SMT siblings, from sysfs (empty where it cannot be read)."""
    out: dict[int, set[int]] = {}
    for path in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology/thread_siblings_list"):
        try:
            out[int(path.parts[-3][3:])] = set(parse_cpu_list(path.read_text().strip()))
        except (OSError, ValueError):
            continue
    return out


def confine_process(pid: int, reserved: Collection[int], was: Collection[int] = (), every: Collection[int] = ()) -> int:
    """Move each thread of ``pid`` that may run on a reserved core and on others onto the reserved
    cores; returns how many threads moved (threads elsewhere or already there stay). A thread on
    ``was`` (an earlier reservation) moves to the new one, or to ``every`` core when none is kept."""
    want, before, moved = set(reserved), set(was), 0
    try:
        tasks = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return 0
    for tid in tasks:
        try:
            now = os.sched_getaffinity(tid)
            target = want or set(every) if before and now == before else want if now & want else None
            if target and now != target:
                os.sched_setaffinity(tid, target)
                moved += 1
        except OSError:  # a thread that just ended, or one of another user's
            continue
    return moved


def widen(pid: int, cores: Collection[int]) -> None:
    """Give every thread of ``pid`` ``cores`` again (a driver confined for its sweep, at its end)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), set(cores))
        except OSError:
            continue


def raylet_of(anchor: int) -> int | None:
    """The pid of the raylet above ``anchor`` (a Ray worker), None where there is none."""
    try:
        return next((p.pid for p in psutil.Process(anchor).parents() if p.name() == "raylet"), None)
    except psutil.Error:
        return None


def ray_processes(anchor: int) -> list[int]:
    """This Ray instance's processes on this node: the raylet above ``anchor`` (a Ray worker) and its
    whole tree, and every process naming the raylet's session (GCS, dashboard, monitors). Another
    Ray instance on the host has another session and is left alone."""
    try:
        raylet = next((p for p in psutil.Process(anchor).parents() if p.name() == "raylet"), None)
        if raylet is None:
            return [anchor]
        found = _SESSION.search(" ".join(raylet.cmdline()))
        pids = {raylet.pid, *(p.pid for p in raylet.children(recursive=True))}
    except psutil.Error:
        return [anchor]
    if found is not None:
        for proc in psutil.process_iter():  # not ``info``: see find_control_daemons (node/modes/mps.py)
            if _names(found.group(0), proc):
                pids.add(proc.pid)
    return sorted(pids)


def _names(session: str, proc: psutil.Process) -> bool:
    """Whether a process's command line names ``session`` (as a path part: ``.../session_X/...``)."""
    try:
        line = " ".join(proc.cmdline() or ()) + " "
    except psutil.Error:
        return False
    return session + "/" in line or session + " " in line


def confine(
    reserved: Collection[int], pids: Iterable[int], was: Collection[int] = (), every: Collection[int] = ()
) -> int:
    """Confine every process of ``pids`` to the reserved cores (:func:`confine_process`); returns the
    threads moved."""
    return sum(confine_process(pid, reserved, was, every) for pid in pids) if reserved or was else 0
