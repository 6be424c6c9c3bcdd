"""Modes are one registry (issue 45): every part reads a mode's properties from
:mod:`raycolloc.mode_kinds`; no module outside the modes' own tests a mode's name as a string; the
node's implementations, the config and ``conf/mode/`` list the same modes in the same order."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from raycolloc.config import MODES, ConfigError, ModeConfig, QueueConfig
from raycolloc.mode_kinds import BASELINE_MODE, MODE_KINDS, MODE_NAMES, QUEUE_MODES, mode_of, mode_rank, modes_where

from .conftest import ROOT

# Where a mode's name may be tested: its own implementation and its entry (with the mode config's
# checks, which name the modes a key applies to).
OWN = (ROOT / "raycolloc" / "node" / "modes", ROOT / "raycolloc" / "mode_kinds.py")
SCANNED = ("raycolloc", "analysis", "hydra_plugins", "jobs")


def _names_a_mode(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in MODE_KINDS
    return isinstance(node, ast.Set | ast.Tuple | ast.List) and any(_names_a_mode(e) for e in node.elts)


def mode_tests(source: str) -> list[int]:
    """The lines of ``source`` that test a mode's name as a string: a comparison (``==``, ``!=``,
    ``in``) with a mode's name or a collection holding one, ``.isin([...])`` of one, or a dict keyed
    by modes' names (an order or a property written beside the registry)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_names_a_mode(e) for e in (node.left, *node.comparators)):
            found.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "isin"
            and any(_names_a_mode(a) for a in node.args)
        ):
            found.append(node.lineno)
        elif isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Constant) and k.value in MODE_KINDS for k in node.keys
        ):
            found.append(node.lineno)
    return sorted(found)


def _scanned() -> list[Path]:
    return [
        p for top in SCANNED for p in sorted((ROOT / top).rglob("*.py")) if not any(p.is_relative_to(o) for o in OWN)
    ]


def test_no_mode_name_is_tested_outside_the_modes() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}" for path in _scanned() for line in mode_tests(path.read_text())]
    assert not found, f"a mode's name tested as a string (read its property from raycolloc.mode_kinds): {found}"


@pytest.mark.parametrize(
    "line",
    [
        'if lane.mode == "mps": pass',
        'x = cell.mode != "naive"',
        'ok = mode in ("naive", "mps")',
        'ok = "mig" not in modes',
        'rows = cells[cells["mode"].isin(["naive"])]',
        'order = {"naive": 0, "mig": 1, "mps": 2}',
    ],
)
def test_the_scan_finds_a_mode_tested_by_name(line: str) -> None:
    assert mode_tests(line) == [1]


@pytest.mark.parametrize(
    "line",
    [
        "x = mode_of(cell.mode).needs_daemon",
        'scope = "mig"',
        "if scope == SCOPE_MIG: pass",
        'hashed = {("mig", "allow_reconfigure"): False}',  # the config group mig, not the mode
    ],
)
def test_the_scan_leaves_a_property_or_a_name_used_as_a_value(line: str) -> None:
    assert mode_tests(line) == []


def test_the_registry_is_the_one_list_of_modes() -> None:
    """The config, the node's implementations and ``conf/mode/`` hold the same modes, in the registry's
    order (naive < mps < mig, as tables and the README list them)."""
    from raycolloc.node.modes.registry import MODES as IMPLEMENTATIONS

    assert MODE_NAMES == ("naive", "mps", "mig") == MODES
    assert tuple(IMPLEMENTATIONS) == MODE_NAMES
    assert all(cls.kind is mode_of(name) and cls.name == name for name, cls in IMPLEMENTATIONS.items())
    assert sorted(p.stem for p in (ROOT / "conf" / "mode").glob("*.yaml")) == sorted(MODE_NAMES)
    assert [mode_rank(m) for m in MODE_NAMES] == [0, 1, 2] and mode_rank("later") == len(MODE_NAMES)
    assert sorted(["mig", "naive", None, "mps"], key=mode_rank) == ["naive", "mps", "mig", None]


def test_what_each_mode_is() -> None:
    assert BASELINE_MODE == "naive" and QUEUE_MODES == ("naive", "mps") == modes_where(lambda k: k.advised)
    assert modes_where(lambda k: k.needs_daemon) == ("mps",) and mode_of("mps").max_clients == 48
    assert modes_where(lambda k: k.partitioned) == ("mig",) and not mode_of("mig").shares_memory
    assert mode_of("mig").fit_from == "mps" and all(mode_of(k.fit_from) for k in MODE_KINDS.values() if k.fit_from)
    with pytest.raises(KeyError, match="mode='mpx' is not a mode; the modes are naive, mps, mig"):
        mode_of("mpx")


def test_the_config_reads_the_registry() -> None:
    """``mode``, ``queue.modes`` and ``queue.carma_mode`` are checked against it; the MPS clients' keys
    apply to the modes a daemon serves."""
    with pytest.raises(ConfigError, match="mode.active_thread_percentage applies to mode=mps only"):
        ModeConfig(name="naive", active_thread_percentage=50)
    with pytest.raises(ConfigError, match="queue.modes"):
        QueueConfig(modes=["mig"])
    assert QueueConfig().modes == list(QUEUE_MODES)
