"""The README stays a guide (issue 46): short, and every link between it and docs/ resolves.

The reference, the design and the measurements live in docs/ (STYLE.md: "README as a lab notebook: a
guide first; measurements, their history and caveats in docs/"); a README that grows past a ten-minute
read is the lab notebook again. A link is a relative Markdown link, ``[text](path#anchor)``: its file
exists, and its anchor is a heading of that file as GitHub names it. The reference of the config's keys
(docs/reference.md) is checked against the config's dataclasses, so that it cannot drift from them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import ROOT

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "corpus" / "README.md"]
MAX_README_LINES = 300  # issue 46: "at most ~300 lines"
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    fenced = False
    found: set[str] = set()
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(_anchor(line.lstrip("#")))
    return found


def test_the_readme_is_a_guide_of_at_most_300_lines() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines: move reference or history to docs/"


def test_every_link_between_the_readme_and_docs_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in _LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}: no such file")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{page.relative_to(ROOT)}: {target}: no such heading")
    assert not broken, "\n".join(broken)


def test_the_readme_links_every_page_of_docs() -> None:
    text = README.read_text()
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"](docs/{p.name}" not in text]
    assert not missing, f"docs/ pages the README does not link: {missing}"


def test_the_reference_names_every_key_of_the_config() -> None:
    """docs/reference.md names every key of the config's dataclasses (``Config`` and each group's
    schema), as `key`, `group.key` or `key=...`: a key added to a schema and not to the page fails here."""
    import dataclasses
    import typing

    from raycolloc.config import Config

    text = (ROOT / "docs" / "reference.md").read_text()
    hints = typing.get_type_hints(Config)
    missing = []
    for top in dataclasses.fields(Config):
        keys = [top.name]
        group = hints[top.name]
        if dataclasses.is_dataclass(group):
            keys += [f"{top.name}.{f.name}" for f in dataclasses.fields(group)]
        for key in keys:
            group_name, _, name = key.rpartition(".")
            prefix = rf"(?:{re.escape(group_name)}\.)?" if group_name else ""
            after = r"[`=\s.]" if not group_name else r"[`=\s]"  # a group is also named by its keys: `data.path`
            if not re.search(rf"`{prefix}{re.escape(name)}{after}", text):
                missing.append(key)
    assert not missing, f"keys docs/reference.md does not name: {missing}"


def _blocks(path: Path) -> list[list[str]]:
    """The fenced code blocks of a page, each as its lines."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _form(line: str) -> str:
    """A line's form: every number as N, runs of spaces as one (a table's columns widen with its numbers)."""
    return " ".join(re.sub(r"\d[\d,]*(?:\.\d+)?", "N", line).split())


def _sample(first: str) -> list[str]:
    """The README's sample output that starts with ``first``, less the lines it elides (``...``)."""
    found = [b for b in _blocks(README) if b and b[0].startswith(first)]
    assert len(found) == 1, f"README.md shows no single sample starting {first!r}"
    return [line for line in found[0] if line.strip() and line.strip() != "..."]


@pytest.mark.slow  # two replays of 60 jobs in virtual time (~10 s on 2 cores); nothing starts Ray
def test_the_readmes_queue_samples_have_a_real_runs_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's replay and comparison samples, run as it shows them: each line shown is a line of the
    real output, numbers aside (they move with the code and the machine; a line's words must not)."""
    from analysis.queue import main as compare
    from raycolloc.cli import USAGE
    from raycolloc.queue.__main__ import main as queue

    assert USAGE in README.read_text().splitlines()  # `raycolloc --help`, as the README shows it
    monkeypatch.chdir(tmp_path)
    trace = str(ROOT / "jobs" / "examples" / "queue_trace60.csv")
    words = ["cluster=local", "cluster.num_gpus=4"]
    assert queue(["replay", trace, "queue.policy=raycolloc", *words]) == 0
    replay = {_form(line) for line in capsys.readouterr().out.splitlines()}
    assert queue(["replay", trace, "queue.policy=exclusive", *words]) == 0
    capsys.readouterr()
    assert compare(["results/queue", "--out", "queue-report/"]) == 0
    table = {_form(line) for line in capsys.readouterr().out.splitlines()}
    for first, real in (("queue policy=raycolloc: 60/60", replay), ("trace ", table)):
        unlike = [line for line in _sample(first) if _form(line) not in real]
        assert not unlike, "README lines no real run prints:\n" + "\n".join(unlike) + "\nreal:\n" + "\n".join(real)
