"""Every command README.md and docs/ show runs as written (issue 29, item 4).

Each ``python -m raycolloc...`` / ``python -m analysis...`` command of a code block (fenced, or
indented four spaces; ``\\`` continuations joined; one embedded after ``ray job submit ... --``
too) is split as a POSIX shell splits it (``shlex``) and run in this process through its module's
``main``: a sweep with ``+dry_run=true`` appended (it would train; a dry run composes and validates
every cell and connects to no Ray), the other entry points against a small fixture sweep written
with the real writer. A command refused (exit 2) or failing fails the test, naming the file and
line. Placeholders a reader fills in (``<date>/<time>``, a host's ``/data``) and commands that need
what a test machine has not (a live MLflow server, a GPU to profile on) are listed below with why.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# `raycolloc sweep|ls|doctor|advise ARGS` is `python -m raycolloc.<name> ARGS` (raycolloc/cli.py).
_COMMAND = re.compile(r"python -m (?:raycolloc|analysis)\b|raycolloc (?:sweep|ls|doctor|advise)\b")
FIXTURE_SWEEP = "results/multirun/2026-01-02/10-00-00"  # the README's own ls example names this sweep

# What a reader replaces before running: the one change made to a command, each with its reason.
SUBSTITUTIONS = {
    "<date>/<time>": "2026-01-02/10-00-00",  # a sweep's directory: the fixture sweep's
    "out_dir=/data/results": "out_dir={tmp}/data/results",  # a DGX host's mount (docs/deployment.md)
    " [more sweeps] [--fit DIR ...]": "",  # a synopsis's optional parts, left out
}

# Commands shown that do not run here, by their text as extracted, with why.
SKIPPED = {
    # Synopses and diagram labels: `...` and [brackets] stand for what a user adds.
    "python -m raycolloc.sweep -m ...": "a diagram's label (docs/architecture.md), "
    "the advisor's emitted lines (README): `...` is any overrides",
    "python -m raycolloc.sweep ...": "a diagram's label (docs/architecture.md): `...` is any overrides",
    "python -m raycolloc.sweep +plan=P.csv": "a diagram's label (docs/architecture.md): P.csv is any plan",
    "python -m raycolloc.sweep ... mode=mps   (same settings)": "a transcript (docs/measurements.md): `...` is "
    "the line above's settings",
    "python -m raycolloc.advise workload=resnet26_cifar10 [workload=resnet50_imagenet64 ...] [cluster=...] "
    "[epoch_samples=25600] [max_slowdown=1.5] [degrees=1,2,3,7] [probe_degrees=8,48|none] "
    "[confirm_budget_s=900] [confirm_k=4] [--no-confirm] [--fit DIR ...] [--emit-sweep]": (
        "a synopsis whose least form profiles resnet26 by training it (Ray; tests/test_advise*.py run the advisor)"
    ),
    "python -m raycolloc.sweep +plan=plan.csv ...": "docs/advise.md's words for the advisor's emitted plan: "
    "`...` is any overrides",
    "python -m analysis.report DIR [DIR ...] --out OUT [--baseline OTHER]": "a synopsis (docs/results.md); its "
    "least form is the README's report command, run",
    "python -m raycolloc.<name> ARGS": "a synopsis (README): the installed `raycolloc NAME` is this module's command",
    "raycolloc advise workload=resnet26_cifar10 workload=tiny_cnn --emit-sweep": "profiles both workloads by "
    "training them (Ray; tests/test_advise*.py run the advisor, tests/test_packaging.py the command)",
    "python -m analysis.queue RUN_DIR [RUN_DIR ...] --out DIR": "a synopsis (docs/queue.md); the README's "
    "analysis.queue command is its least form",
    "python -m analysis.queue results/queue --out queue-report/": "needs the replays' runs the README's replay "
    "commands write (run above, each in its own directory); tests/test_queue_analysis.py runs analysis.queue",
    "raycolloc advise workload=tiny_cnn cluster=local confirm_budget_s=120": "profiles, probes and confirms tiny_cnn "
    "by training it (Ray, ~2 min; tests/test_advise*.py run the advisor, tests/test_packaging.py the command)",
    "raycolloc doctor --fix": "stops what other runs left on this machine (the suite's own MPS daemons among them); "
    "`python -m raycolloc.doctor` runs above",
    "python -m raycolloc.advise --validate corpus --out /tmp/validation.json": "docs/advise.md's grade on the "
    "committed corpus, run from the repository's root (tests/test_advise_corpus.py runs the same validation "
    "and holds its errors)",
    # Needs what a test machine has not.
    "python -m analysis.export_mlflow results/multirun/<date>/<time> --tracking-uri http://mlflow:5000": (
        "needs a live MLflow server at http://mlflow:5000 (tests/test_export_mlflow.py exports to local stores)"
    ),
}


@dataclass(frozen=True)
class DocCommand:
    """One command as a page shows it: where, and its text with continuations joined."""

    path: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.text}"


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every line in a code block: fenced, or indented four spaces outside one."""
    lines: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced or line.startswith("    "):
            lines.append((number, line))
    return lines


def doc_commands(path: Path) -> list[DocCommand]:
    """The commands of a page's code blocks, ``\\`` continuations joined, split where a second
    ``python -m`` starts (a diagram's labels side by side)."""
    found: list[DocCommand] = []
    pending: tuple[int, str] | None = None
    for number, line in _code_lines(path):
        start, text = pending or (number, "")
        text = f"{text} {line.strip()}".strip()
        if text.endswith("\\"):
            pending = (start, text[:-1].rstrip())
            continue
        pending = None
        # A command begins the line or follows `--` (ray job submit ... -- python -m ...); a layout's
        # "ls.py   python -m raycolloc.ls: ..." describes a file. Further ones on its line are a diagram's.
        starts = [m.start() for m in _COMMAND.finditer(text)]
        if not starts or not (starts[0] == 0 or text[: starts[0]].rstrip().endswith(" --")):
            continue
        for begin, end in zip(starts, [*starts[1:], len(text)], strict=False):  # none: no command
            found.append(DocCommand(path, start, text[begin:end].strip()))
    return found


# The pages whose running text is checked too: the README, and the pages its reference moved to (issue 46).
INLINE_PAGES = [ROOT / "README.md", *(ROOT / "docs" / f"{n}.md" for n in ("reference", "results", "advise", "queue"))]


def inline_commands(path: Path) -> list[DocCommand]:
    """A page's commands in running text (`` `python -m ...` ``, wrapped lines joined)."""
    lines = path.read_text().splitlines()
    for number, _ in _code_lines(path):
        lines[number - 1] = ""  # code blocks are doc_commands'
    text = "\n".join(lines)
    return [
        DocCommand(path, text.count("\n", 0, m.start()) + 1, " ".join(m.group(1).split()))
        for m in re.finditer(r"`(python -m (?:raycolloc|analysis)\b[^`]*)`", text)
    ]


ALL = [c for page in DOCS for c in doc_commands(page)] + [c for page in INLINE_PAGES for c in inline_commands(page)]
RUN = [c for c in ALL if c.text not in SKIPPED]


def test_the_pages_show_the_commands_this_module_runs() -> None:
    """The extraction finds what the pages show, and every skip still names a shown command."""
    texts = {c.text for c in ALL}
    assert any("workload.epoch_regex=" in t for t in texts) and any("raycolloc.ls" in t for t in texts)
    assert any(c.path.name == "deployment.md" for c in ALL)
    assert set(SKIPPED) <= texts, sorted(set(SKIPPED) - texts)
    assert len(RUN) >= 15, [str(c) for c in RUN]


def _fixture_sweep(root: Path) -> None:
    from .test_analysis import cell, job

    sweep = root / FIXTURE_SWEEP
    cell(sweep, "0", "cnn", "naive", [job(0, "cnn", 1.5)], agg=200.0)
    # Two jobs as the advisor predicts them from the solo (time-slicing: 1.6x, slowdown 1.25), so that
    # `advise --validate` on it meets its targets.
    cell(sweep, "1", "cnn", "naive", [job(0, "cnn", 1.875), job(1, "cnn", 1.875)], agg=320.0)


def _argv(command: DocCommand, tmp_path: Path) -> tuple[str, list[str]]:
    """The module and its arguments, as a shell would pass them (comments dropped), placeholders filled."""
    text = command.text
    for placeholder, value in SUBSTITUTIONS.items():
        text = text.replace(placeholder, value.replace("{tmp}", str(tmp_path)))
    words = shlex.split(text, comments=True)
    if words[0] == "raycolloc":  # the installed command: `raycolloc NAME ARGS` is `python -m raycolloc.NAME ARGS`
        return f"raycolloc.{words[1]}", words[2:]
    assert words[:2] == ["python", "-m"], command
    return words[2], words[3:]


def _run(module: str, args: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``python -m MODULE ARGS`` in this process: (exit status, everything it printed)."""
    from .test_malformed_inputs import run_main

    if module == "raycolloc.sweep":
        return run_main([*args, *([] if "+dry_run=true" in args else ["+dry_run=true"])], capfd)
    if module == "raycolloc.ls":
        from raycolloc.ls import main
    elif module == "analysis.report":
        from analysis.report import main
    elif module == "raycolloc.advise":
        from raycolloc.advise.__main__ import main
    elif module == "raycolloc.doctor":
        from raycolloc.doctor import main
    elif module == "raycolloc.queue":
        from raycolloc.queue.__main__ import main
    else:
        pytest.fail(f"no way to run {module}: add it here or to SKIPPED with the reason")
    argv = sys.argv
    sys.argv = [module, *args]
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
    out, err = capfd.readouterr()
    return code, out + err


def _marks(command: DocCommand) -> list[pytest.MarkDecorator]:
    # The report draws every figure (~4 s on the fixture); nothing here trains or starts Ray.
    return [pytest.mark.slow] if "analysis.report" in command.text else []


@pytest.mark.parametrize("command", [pytest.param(c, marks=_marks(c), id=f"{c.path.name}:{c.line}") for c in RUN])
def test_a_shown_command_runs_as_written(
    command: DocCommand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # The reader's checkout: relative paths (jobs/examples/..., results/...) resolve as in the README.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jobs").symlink_to(ROOT / "jobs")
    _fixture_sweep(tmp_path)
    module, args = _argv(command, tmp_path)
    code, text = _run(module, args, capfd)
    # The doctor exits 1 when it finds what other runs left on this (shared) machine: a report, not a refusal.
    assert code in ((0, 1) if module == "raycolloc.doctor" else (0,)), f"{command}\nexit {code}:\n{text[-3000:]}"
    assert "Traceback" not in text, f"{command}\n{text[-3000:]}"
