"""``--emit-sweep``: the recommended cells as command lines ``raycolloc.sweep`` runs unchanged.

Two forms, written next to the advice:

* ``sweep.txt``: Hydra multirun lines, one per workload (or mix), mode and limit, the degrees of one
  line joined (``degree=1,7``); each carries the words the profiles were composed with, so the
  degree-1 naive cell of every workload is the profile itself (reused, not run again) and the sweep
  can be checked with ``python -m raycolloc.advise --validate``;
* ``plan.csv``: a radT plan of the same cells, one group per cell (they run one after another on
  GPU 0), run with ``python -m raycolloc.sweep +plan=plan.csv`` and the same words. A plan row
  cannot say an MPS active-thread percentage, nor a composition beyond a timm model and a dataset:
  such cells are only in ``sweep.txt`` (the plan's header comment says which).
"""

from __future__ import annotations

import csv
import io
import shlex
from dataclasses import dataclass
from pathlib import Path

from raycolloc.advise.model import Prediction
from raycolloc.advise.rank import Ranking
from raycolloc.advise.run import Profiled
from raycolloc.driver.override_quoting import override_value as hydra_value
from raycolloc.mode_kinds import Sharing, is_baseline, mode_of

__all__ = ["Emitted", "emit_sweep", "plan_csv", "sweep_lines"]

# How a job shares its GPU, as the radT-style plan writes it (MIG writes its instance's profile).
_COLLOCATION = {Sharing.TIME_SLICED: "-", Sharing.CONCURRENT: "MPS"}


@dataclass(frozen=True)
class Emitted:
    """What ``--emit-sweep`` wrote: the lines and the plan, and the cells the plan leaves out."""

    sweep_txt: Path
    plan_csv: Path
    lines: tuple[str, ...]
    plan_command: str
    not_in_plan: tuple[str, ...]


def _cells(rankings: list[Ranking], profiled: list[Profiled]) -> list[tuple[Ranking, Prediction]]:
    """The picks of every ranking, and the solo baseline (naive x1) of each uniform workload."""
    out: list[tuple[Ranking, Prediction]] = []
    for r in rankings:
        chosen = r.picks()
        if not r.mix:
            solo = next((p for p in r.rows if is_baseline(p.mode) and p.degree == 1 and p.fits), None)
            chosen = [solo, *chosen] if solo is not None and solo not in chosen else chosen
        out += [(r, p) for p in chosen]
    return out


def _requested(profiled: list[Profiled], workloads: str) -> Profiled:
    """The requested workload (its words and composition) a prediction's jobs train."""
    return next(p for p in profiled if p.profile is not None and p.profile.workload == workloads)


def sweep_lines(rankings: list[Ranking], profiled: list[Profiled], common: tuple[str, ...]) -> list[str]:
    """One ``python -m raycolloc.sweep -m ...`` line per (workload or mix, mode, limit)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for r, p in _cells(rankings, profiled):
        if r.mix:
            jobs = [
                next(q for q in profiled if q.profile is not None and q.profile.workload == name)
                for name in p.workloads.split("+")
            ]
            # A preset as its name, as a mix's YAML writes it (the same mix hashes the same: reused).
            entries = [{"workload": q.workload["name"] if set(q.workload) == {"name"} else q.workload} for q in jobs]
            words: tuple[str, ...] = (f"mix.jobs={hydra_value(entries)}",)
        else:
            words = _requested(profiled, p.workloads).words
        words += (f"mode={p.mode}",)
        if p.active_thread_percentage:
            atp = p.active_thread_percentage
            words += (f"mode.active_thread_percentage={atp[0] if len(set(atp)) == 1 else hydra_value(list(atp))}",)
        groups.setdefault(words, []).append(p.degree)
    lines = []
    for words, degrees in groups.items():
        degree = [] if words[0].startswith("mix.jobs=") else [f"degree={','.join(map(str, sorted(set(degrees))))}"]
        lines.append(shlex.join(["python", "-m", "raycolloc.sweep", "-m", *words, *degree, *common]))
    return lines


def plan_csv(rankings: list[Ranking], profiled: list[Profiled]) -> tuple[str, list[str]]:
    """The recommended cells as a radT plan; returns it and the labels it cannot hold."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    skipped: list[str] = []
    rows: list[list[str]] = []
    for r, p in _cells(rankings, profiled):
        names = p.workloads.split("+") if r.mix else [p.workloads] * p.degree
        params = [_params(_requested(profiled, n)) for n in names]
        if p.active_thread_percentage or any(x is None for x in params):
            skipped.append(p.label)
            continue
        group = p.label.replace(" ", "-").replace(",", "-").replace("[", "").replace("]", "").replace("/", "-")
        for i, (name, x) in enumerate(zip(names, params, strict=True)):
            colloc = p.mig_profiles[i] if p.mig_profiles else _COLLOCATION[mode_of(p.mode).sharing]
            rows.append(["advise", group, "", f"{name}-{i}", "0", colloc, "raycolloc", "", x or ""])  # csv: None is ""
    if skipped:
        out.write(f"# not in this plan (a plan row cannot say them; see sweep.txt): {'; '.join(skipped)}\n")
    writer.writerow(
        ["Experiment", "Workload", "Status", "Run", "Devices", "Collocation", "File", "Listeners", "Params"]
    )
    writer.writerows(rows)
    return out.getvalue(), skipped


def _params(job: Profiled) -> str | None:
    """A plan row's Params for one job (None: a composition a row cannot name)."""
    w = job.workload
    batch = job.profile.batch_size if job.profile is not None else None
    tail = f" --batch-size {batch} --epochs {job.epochs}" if batch else f" --epochs {job.epochs}"
    if set(w) == {"name"}:
        return f"--workload {w['name']}{tail}"
    if w.get("name") == "timm" and set(w) <= {"name", "model", "dataset", "batch_size"}:
        return f"--model {w['model']} --data {w['dataset']}{tail}"
    return None


def emit_sweep(directory: Path, rankings: list[Ranking], profiled: list[Profiled], common: tuple[str, ...]) -> Emitted:
    """Write ``sweep.txt`` and ``plan.csv`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = sweep_lines(rankings, profiled, common)
    text, skipped = plan_csv(rankings, profiled)
    (directory / "sweep.txt").write_text("\n".join(lines) + "\n")
    (directory / "plan.csv").write_text(text)
    plan_command = shlex.join(["python", "-m", "raycolloc.sweep", f"+plan={directory / 'plan.csv'}", *common])
    return Emitted(directory / "sweep.txt", directory / "plan.csv", tuple(lines), plan_command, tuple(skipped))
