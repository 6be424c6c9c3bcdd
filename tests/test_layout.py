"""The house's rules (issues 14 and 31), read from the source: modules stay small, the steward needs
no ``type: ignore``, the job package never imports a mode (a job is bound through its environment)
nor anything of the node (its device comes in its binding), no backend's name is tested outside the
GPU backends, no import circle among the project's modules, the config contract imports nothing above
it; and the quick test tier starts no Ray."""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import ROOT

PACKAGE = ROOT / "raycolloc"
MAX_LINES = 400
PROJECT = ("raycolloc", "analysis", "hydra_plugins")
# The config contract: what every process reads (issue 31). It sits at the bottom of the house.
CONTRACT = (
    "raycolloc.config",
    "raycolloc.config_checks",
    "raycolloc.config_groups",
    "raycolloc.spec",
    "raycolloc.workload_config",
    "raycolloc.workload_kinds",
    "raycolloc.datasets",
)
ABOVE_CONTRACT = ("raycolloc.node", "raycolloc.job", "raycolloc.driver")
NEEDS_TORCH = ("torch", "timm", "torchvision")


def _modules() -> dict[str, Path]:
    """Every module of the project by dotted name (a package by its own name)."""
    out = {}
    for top in PROJECT:
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported_names(module: str, path: Path) -> set[str]:
    """The dotted names a module imports anywhere (inside functions too), except under
    ``if TYPE_CHECKING:`` (never run); ``from x import y`` counts as ``x.y``."""
    tree = ast.parse(path.read_text())
    checking_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = set()
    for node in ast.walk(tree):
        if id(node) in checking_only:
            continue
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level-1
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names |= {f"{base}.{a.name}" for a in node.names}
    return names


def _import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(project module -> the project modules it imports, project module -> other top-level packages it imports)."""
    modules = _modules()

    def owner(name: str) -> str | None:  # the longest project module a dotted name falls in
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def packages_of(name: str) -> set[str]:  # Python runs each package's __init__ before the module
        parts = name.split(".")
        return {p for i in range(1, len(parts)) if (p := ".".join(parts[:i])) in modules}

    graph, outside = {}, {}
    for module, path in modules.items():
        names = _imported_names(module, path)
        owners = {o for n in names if (o := owner(n))}
        graph[module] = {m for o in owners for m in (o, *packages_of(o)) if m != module}
        outside[module] = {n.split(".")[0] for n in names if owner(n) is None}
    return graph, outside


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_steward_needs_no_type_ignore() -> None:
    assert "type: ignore" not in (PACKAGE / "node" / "steward.py").read_text()


def test_the_job_package_imports_no_mode() -> None:
    found = []
    for path in (PACKAGE / "job").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)  # `from x import y` counts as x.y
                else [f"{node.module}.{a.name}" for a in node.names]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.startswith("raycolloc.node.modes")]
    assert not found, found


def test_no_import_circle_among_the_projects_modules() -> None:
    """An import inside a function counts (it only hides the circle until the call); an import under
    ``if TYPE_CHECKING:`` does not (it never runs). Importing ``a.b.c`` imports the packages ``a`` and
    ``a.b`` first: a package whose ``__init__`` imports its own modules is in a circle with each of them
    that imports a sibling (issue 45: workloads -> presets -> compose -> workloads)."""
    assert _cycles(_import_graph()[0]) == []


def test_the_import_graph_sees_a_package_that_imports_itself_through_its_modules() -> None:
    graph = {"p": {"p.a"}, "p.a": {"p.b", "p"}, "p.b": {"p"}}
    assert _cycles(graph) == [["p", "p.a", "p.b"]]
    assert "raycolloc.job" in _import_graph()[0]["raycolloc.job.workloads.resolve"]  # a package of what it imports


def test_the_config_contract_imports_nothing_above_it() -> None:
    """``config.py``, ``spec.py``, the workload config and kinds, and everything they import in turn:
    nothing of the driver, the node or the job, and nothing that needs torch."""
    graph, outside = _import_graph()
    reached, todo = {}, [(m, m) for m in CONTRACT]  # module -> the import path that reached it
    while todo:
        module, trail = todo.pop()
        if module in reached:
            continue
        reached[module] = trail
        todo += [(n, f"{trail} -> {n}") for n in graph[module]]
    upward = [trail for module, trail in reached.items() if module.startswith(ABOVE_CONTRACT)]
    torch = [f"{trail} -> {pkg}" for module, trail in reached.items() for pkg in outside[module] & set(NEEDS_TORCH)]
    assert not upward and not torch, [*upward, *torch]


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports (``from x import y`` counts as ``x.y``), at any depth."""
    tree = ast.parse(path.read_text())
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def test_the_job_package_imports_nothing_of_the_node() -> None:
    """A job reaches its (simulated or real) GPU through the device in its binding, never by importing
    the node's code: the device's class comes with the binding."""
    found = [
        f"{p.relative_to(ROOT)}: {n}"
        for p in (PACKAGE / "job").rglob("*.py")
        for n in _imports(p)
        if n.startswith("raycolloc.node")
    ]
    assert not found, found


def _names_sim(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value == "sim"
    return isinstance(node, ast.Set | ast.Tuple | ast.List) and any(_names_sim(e) for e in node.elts)


def test_no_backend_name_is_tested_outside_the_gpu_backends() -> None:
    """What differs between the simulated and real GPUs is in their traits and devices
    (``raycolloc.devices``), not in ``== "sim"`` tests spread over the layers."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.is_relative_to(PACKAGE / "node" / "gpu"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(_names_sim(e) for e in (node.left, *node.comparators)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found


def test_each_backend_carries_the_traits_of_its_name_and_its_jobs_device() -> None:
    """The seam chosen once per node: a backend class's traits are those the driver looks up by
    ``cluster.backend``; a simulated GPU's job gets a device that survives the trip to a script's
    launcher; a real GPU's needs nothing."""
    from raycolloc.config import ClusterConfig
    from raycolloc.devices import CudaDevice
    from raycolloc.job.script_exec import decode_device, encode_device
    from raycolloc.node.gpu.kinds import backend_traits
    from raycolloc.node.gpu.nvml import NvmlBackend
    from raycolloc.node.gpu.sim import SimBackend
    from raycolloc.node.gpu.sim_cuda import SimJobDevice
    from raycolloc.node.steward_handles import steward_name

    assert NvmlBackend.traits is backend_traits("nvml") and SimBackend.traits is backend_traits("sim")
    assert NvmlBackend.kind == "nvml" and SimBackend.kind == "sim"
    for device in (CudaDevice(), SimJobDevice()):
        assert decode_device(encode_device(device)) == device
    assert CudaDevice().cuda and not SimJobDevice().cuda
    assert CudaDevice().attach(1, lambda: 1 / 0, 1) == 0.0  # a real GPU never asks for the job's size
    # One steward per node and set of GPUs: the names as they were.
    sim = ClusterConfig(backend="sim", gpu_model="H100-80GB", sim_mig_mode="auto")
    assert steward_name("0123456789abcdef", sim) == "raycolloc:steward:0123456789ab:sim-H100-80GB-auto"
    assert steward_name("0123456789abcdef", ClusterConfig(backend="nvml")) == "raycolloc:steward:0123456789ab:nvml"


def test_an_unmarked_test_that_reaches_for_ray_fails_before_ray_starts() -> None:
    """The quick tier starts no Ray: ``session_ray`` refuses a test without the ``slow`` marker (this one)."""
    import pytest

    from . import conftest

    with pytest.raises(pytest.fail.Exception, match="uses Ray: mark it `slow`"):
        conftest.session_ray()  # refused before it looks for (or starts) the session's instance


def test_the_sweep_summary_imports_neither_pandas_nor_the_analysis_package() -> None:
    """Issue 30/31: the runtime keeps to its edges; its end-of-run summary is built from the rows."""
    graph, outside = _import_graph()
    reached, todo = set(), ["raycolloc.driver.summary", "raycolloc.results.summary_tables"]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo += graph.get(module, set())
    assert not [m for m in reached if m.split(".")[0] == "analysis"], sorted(reached)
    assert not {p for m in reached for p in outside.get(m, set())} & {"pandas", "numpy", "matplotlib"}
