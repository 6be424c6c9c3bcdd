"""raycolloc as installed, not as checked out: the wheel carries ``conf/`` (issue 31, item 7), a
non-editable install runs a sweep from another directory, and the ``raycolloc`` command hands its
arguments to the module mains."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import raycolloc
from raycolloc import cli

from .conftest import ROOT, short_tmp

# What `pip wheel` reads from a checkout: the build config, the README (the long description), the packages.
SOURCES = ("pyproject.toml", "README.md", "raycolloc", "analysis", "hydra_plugins", "conf")


def test_conf_dir_is_the_checkouts_conf_here() -> None:
    assert raycolloc.conf_dir() == (ROOT / "conf").resolve()
    assert (raycolloc.conf_dir() / "config.yaml").is_file()


def test_pyproject_lists_every_package_of_the_tree() -> None:
    """The packages are listed (``packages.find`` takes no ``conf/`` mapping): a new package missing
    from the list would be missing from the wheel."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    tree = {
        ".".join(d.relative_to(ROOT).parts)
        for top in ("raycolloc", "analysis", "hydra_plugins")
        for d in [ROOT / top, *(ROOT / top).rglob("*")]
        if d.is_dir() and d.name != "__pycache__" and any(d.rglob("*.py"))
    }  # namespaces too
    assert set(tool["packages"]) == tree | {"raycolloc.conf"}
    assert tool["package-dir"] == {"raycolloc.conf": "conf"}


@pytest.mark.parametrize("argv", [[], ["bogus"], ["-m", "x=1"]])
def test_raycolloc_without_a_known_command_exits_2_naming_them(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "choose one of: sweep, ls, doctor, advise, queue" in err
    assert (f"unknown command {argv[0]!r}" if argv else "no command given") in err


def test_raycolloc_help_lists_the_commands_each_with_what_it_is_for(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "raycolloc {sweep,ls,doctor,advise,queue}" in out
    for name in cli.COMMANDS:  # issue 46: it listed no subcommand's description
        (line,) = [x for x in out.splitlines() if x.split()[:1] == [name]]
        assert len(line.split()) > 3, line


def test_raycolloc_ls_is_python_m_raycolloc_ls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the command hands its words on through sys.argv
    assert cli.main(["ls", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert cli.main(["ls", str(tmp_path)]) == 2  # an empty directory is a bad argument too (issue 29, item 6)
    assert "no sweeps under" in capsys.readouterr().err


def test_raycolloc_sweep_exits_as_the_sweep_main_does(tmp_path: Path) -> None:
    """A config error: the sweep's own exit 2 and message, before Ray (a subprocess: Hydra's state)."""
    proc = subprocess.run(
        [sys.executable, "-m", "raycolloc.cli", "sweep", "cluster=local", "workload=resnet9000", f"out_dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "config error:" in proc.stderr and "resnet9000" in proc.stderr


def _run(
    args: list[str | Path], cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _wheel(tmp_path: Path) -> Path:
    """Build the wheel from a copy of the checkout (an in-tree build would leave build/ behind, and
    reuse a stale one), offline: the build backend is this environment's."""
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(ROOT / name, src / name)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            tmp_path / "dist",
            src,
        ]
    )
    (wheel,) = (tmp_path / "dist").glob("raycolloc-*.whl")
    return wheel


def _venv(path: Path) -> tuple[Path, Path]:
    """A fresh venv that sees this environment's third-party packages but not raycolloc: a ``.pth``
    lists their site directories (each line a path; ``.pth`` files inside those are not processed, so
    an editable raycolloc's finder is not installed). Returns (its bin directory, its site-packages)."""
    _run([sys.executable, "-m", "venv", "--without-pip", path])
    bin_dir = path / "bin"
    own = Path(
        _run(
            [bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], env=_clean_env()
        ).stdout.strip()
    )
    (own / "third_party.pth").write_text("".join(f"{d}\n" for d in site.getsitepackages()))
    return bin_dir, own


def _clean_env() -> dict[str, str]:
    """This environment without what would bring the checkout or the session's Ray in."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}


@pytest.mark.slow  # builds a wheel, starts a Ray instance of its own and runs a cell
def test_the_wheel_installed_elsewhere_runs_a_one_cell_sweep(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        shipped = {n.removeprefix("raycolloc/conf/") for n in zf.namelist() if n.startswith("raycolloc/conf/")}
    assert shipped == {str(p.relative_to(ROOT / "conf")) for p in (ROOT / "conf").rglob("*.yaml")}

    bin_dir, own = _venv(tmp_path / "venv")
    # --ignore-installed: pip leaves the raycolloc it sees through the .pth alone (it is not this venv's).
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            bin_dir / "python",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--ignore-installed",
            wheel,
        ]
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    found = _run(
        [bin_dir / "python", "-c", "import raycolloc; print(raycolloc.__file__); print(raycolloc.conf_dir())"],
        cwd=elsewhere,
        env=_clean_env(),
    ).stdout.split()
    assert found == [str(own / "raycolloc" / "__init__.py"), str(own / "raycolloc" / "conf")]

    # A multirun reaches the launcher through the wheel's hydra_plugins (Hydra's own launcher would
    # dry-run each cell alone); a dry run starts no Ray.
    dry = _run(
        [
            bin_dir / "python",
            "-m",
            "raycolloc.sweep",
            "-m",
            "cluster=local",
            "workload=tiny_cnn",
            "degree=1,2",
            "+dry_run=true",
            f"out_dir={tmp_path / 'dry'}",
        ],
        cwd=elsewhere,
        env=_clean_env(),
    )
    assert "dry run: 2 cell(s) to run" in dry.stdout + dry.stderr

    out, user_tmp, cache = tmp_path / "out", short_tmp("user"), tmp_path / "compile-cache"
    # A user's environment: no inductor cache named (the session names one), a temporary directory to look in.
    env = {k: v for k, v in _clean_env().items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env.update(TMPDIR=str(user_tmp), RAYCOLLOC_COMPILE_CACHE=str(cache))
    proc = _run(
        [
            bin_dir / "raycolloc",
            "sweep",
            "cluster=local",
            "workload=tiny_cnn",
            "epoch_samples=64",
            "repeats=1",
            f"out_dir={out}",
        ],
        cwd=elsewhere,
        env=env,
        timeout=600,
    )
    assert "1 of 1 cells have a result (exit 0)" in proc.stdout + proc.stderr
    # The fork server's torch._dynamo import, and the driver's memory estimate, made torch's default cache,
    # $TMPDIR/torchinductor_<user>, at every sweep (2026-12-05): it is the node's compile cache's now.
    assert not list(user_tmp.glob("torchinductor_*")) and (cache / "inductor").is_dir()
    (cells,) = out.rglob("cells.parquet")
    assert [row["status"] for row in pq.read_table(cells).to_pylist()] == ["ok"]
    assert not list(elsewhere.iterdir())  # nothing written to the working directory
