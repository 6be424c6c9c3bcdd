"""The sweep's config from the command line to the jobs: the files it travels through, read from the code.

Each entry's route is a list of hops ``(file, function, name)``: ``function`` of ``file`` hands the
config on by calling ``name`` (directly, or through functions of the same file), and ``name`` is
defined in the next hop's file. So a file put between two hops breaks the test, and the route's
length is the number of its files (docs/architecture.md, "The config's route"). The contract modules
the config takes its types from (``config.py``, ``spec.py``, the workload kinds) are its form, not
stops on its way; Hydra's own modules and ``hydra_plugins/`` (which registers the launcher and
passes nothing) are not the project's route.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_FILES = 8
JOBS = [
    ("raycolloc/driver/plan.py", "run", "run_cells"),
    ("raycolloc/driver/engine.py", "run_cells", "_Sweep"),  # the sweep's queue, whose lanes run its cells
    ("raycolloc/driver/engine.py", "_Sweep._lane", "run_cell"),
    ("raycolloc/driver/cell_run.py", "run_cell", "start"),  # the trainer actor, with the job and its binding
    ("raycolloc/job/trainer.py", "Trainer.start", "send"),  # over the pipe, the process's first message
    ("raycolloc/job/process.py", "run", "recv"),
]
ROUTES = {
    "multirun (-m)": [
        ("raycolloc/driver/launcher.py", "SweepLauncher.launch", "validate_cell"),
        ("raycolloc/driver/cell_specs.py", "validate_cell", "build_cell"),
        ("raycolloc/driver/launcher.py", "SweepLauncher.launch", "run"),
        *JOBS,
    ],
    "single run": [
        ("raycolloc/sweep.py", "task", "validate_cell"),
        ("raycolloc/driver/cell_specs.py", "validate_cell", "build_cell"),
        ("raycolloc/sweep.py", "task", "run"),
        *JOBS,
    ],
    "radT plan (+plan=P.csv)": [
        ("raycolloc/sweep.py", "task", "csv_plan"),
        ("raycolloc/driver/radt_runner.py", "csv_plan", "validate_cell"),
        ("raycolloc/driver/cell_specs.py", "validate_cell", "build_cell"),
        ("raycolloc/sweep.py", "task", "run"),
        *JOBS,
    ],
}


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """Every function of a module by its qualified name (``f``, ``Class.method``)."""
    found: dict[str, ast.FunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    found[f"{node.name}.{item.name}"] = item
    return found


def _called(fn: ast.FunctionDef) -> set[str]:
    names = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "remote" and isinstance(f.value, ast.Attribute):
                names.add(f.value.attr)  # actor.start.remote(...) calls start
            elif isinstance(f, ast.Attribute):
                names.add(f.attr)
            elif isinstance(f, ast.Name):
                names.add(f.id)
    return names


def _reaches(path: str, function: str, name: str) -> bool:
    """Whether ``function`` of ``path`` calls ``name``, itself or through functions of the same file."""
    functions = _functions(ast.parse((ROOT / path).read_text()))
    assert function in functions, f"{path} has no function {function}"
    owner = function.split(".")[0] + "." if "." in function else ""
    seen, todo = set(), [function]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        calls = _called(functions[current])
        if name in calls:
            return True
        todo += [f for f in functions if f.split(".")[-1] in calls and (f == f.split(".")[-1] or f.startswith(owner))]
    return False


def _defines(path: str, name: str) -> bool:
    return any(q.split(".")[-1] == name for q in _functions(ast.parse((ROOT / path).read_text())))


@pytest.mark.parametrize("entry", sorted(ROUTES))
def test_each_hop_hands_the_config_to_the_next(entry: str) -> None:
    route = ROUTES[entry]
    for i, (path, function, name) in enumerate(route):
        assert _reaches(path, function, name), f"{entry}: {path}:{function} no longer calls {name}"
        following = [p for p, f, _ in route[i + 1 :] if f.split(".")[-1] == name]
        if following:  # a hop's callee is the next function of the route that bears its name
            assert _defines(following[0], name), f"{entry}: {following[0]} does not define {name}"


@pytest.mark.parametrize("entry", sorted(ROUTES))
def test_the_config_travels_through_at_most_eight_files(entry: str) -> None:
    files = list(dict.fromkeys(p for p, _, _ in ROUTES[entry]))
    assert len(files) <= MAX_FILES, f"{entry}: {len(files)} files: {files}"


def test_the_launchers_plugin_passes_nothing_on() -> None:
    """``hydra_plugins/`` only names the launcher: its class adds no function of its own."""
    tree = ast.parse((ROOT / "hydra_plugins/raycolloc_launcher/raycolloc_launcher.py").read_text())
    launcher = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RayCollocLauncher")
    assert not [n for n in launcher.body if isinstance(n, ast.FunctionDef)]


def test_the_training_process_reads_the_job_the_trainer_sends() -> None:
    """The pipe's two ends: the trainer sends ``(job, binding)``, the process's ``run`` reads them first."""
    run = _functions(ast.parse((ROOT / "raycolloc/job/process.py").read_text()))["run"]
    first = next(n for n in ast.walk(run) if isinstance(n, ast.Assign) and "recv" in ast.unparse(n.value))
    assert ast.unparse(first.targets[0]) == "(job, binding)"
    start = _functions(ast.parse((ROOT / "raycolloc/job/trainer.py").read_text()))["Trainer.start"]
    assert "self._conn.send((job, binding))" in ast.unparse(start)
