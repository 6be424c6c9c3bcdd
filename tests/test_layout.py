"""The house's rules (issue 14), read from the source: modules stay small, the steward needs no
``type: ignore``, and the job package never imports a mode (a job is bound through its environment);
and the quick test tier starts no Ray."""

from __future__ import annotations

import ast

from .conftest import ROOT

PACKAGE = ROOT / "raycolloc"
MAX_LINES = 400


def test_no_module_is_over_400_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_steward_needs_no_type_ignore() -> None:
    assert "type: ignore" not in (PACKAGE / "node" / "steward.py").read_text()


def test_the_job_package_imports_no_mode() -> None:
    found = []
    for path in (PACKAGE / "job").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)  # `from x import y` counts as x.y
                     else [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.startswith("raycolloc.node.modes")]
    assert not found, found


def test_an_unmarked_test_that_reaches_for_ray_fails_before_ray_starts() -> None:
    """The quick tier starts no Ray: ``session_ray`` refuses a test without the ``slow`` marker (this one)."""
    import pytest

    from . import conftest

    with pytest.raises(pytest.fail.Exception, match="uses Ray: mark it `slow`"):
        conftest.session_ray()  # refused before it looks for (or starts) the session's instance
