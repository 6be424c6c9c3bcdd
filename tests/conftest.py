"""Shared fixtures: the real conf/ tree composed with CPU overrides, one local Ray instance with
fake GPUs for the whole session, and a runner for the real command line."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
# Nothing of the tests' Ray instances goes to ~/.ray (Ray >= 2.60 writes an auth token there).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAYCOLLOC_COMPILE_CACHE", str(Path(tempfile.gettempdir()) / "raycolloc-test-compile-cache"))

CPU_OVERRIDES = ["cluster=local", "workload=tiny_cnn", "telemetry.interval_ms=50"]


def compose(overrides: list[str] | None = None):  # noqa: ANN201 - returns a DictConfig
    """Compose the real config tree with ``overrides`` (no Hydra run, no output dir)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from raycolloc.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides or [])


def load(overrides: list[str] | None = None, out_dir: Path | None = None):  # noqa: ANN201
    """Compose and validate into a raycolloc Config (CPU overrides first)."""
    from raycolloc.prepare import prepare_job

    extra = [f"out_dir={out_dir}"] if out_dir else []
    return prepare_job(compose(CPU_OVERRIDES + extra + (overrides or [])))


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """One local Ray instance with 2 fake GPUs, shared by the in-process cell tests."""
    import ray

    ray.init(address="local", num_cpus=16, num_gpus=2, namespace="raycolloc", include_dashboard=False,
             log_to_driver=False, _system_config={"worker_niceness": 0})
    yield
    ray.shutdown()


def run_cli(args: list[str], cwd: Path, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m raycolloc.sweep ARGS`` as a user would (its own Ray instance)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "raycolloc.sweep", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, check=False)
