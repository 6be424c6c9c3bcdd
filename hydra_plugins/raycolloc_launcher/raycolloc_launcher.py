"""``hydra/launcher=raycolloc``: the sweep's cells fanned out over the GPUs of a Ray cluster.

(No ``from __future__ import annotations`` here: Hydra executes plugin modules without
registering them in sys.modules, where postponed annotations break dataclasses.)

This module only registers the launcher with Hydra; the work is in ``raycolloc.driver.launcher``
(compose and validate every cell once) and ``raycolloc.driver.engine`` (run them, one lane per GPU).
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, configure_log, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

log = logging.getLogger(__name__)


@dataclass
class RayCollocLauncherConf:
    """Options of the launcher (``hydra.launcher.*``); it has none of its own yet."""

    _target_: str = "hydra_plugins.raycolloc_launcher.raycolloc_launcher.RayCollocLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="raycolloc", node=RayCollocLauncherConf, provider="raycolloc")


class RayCollocLauncher(Launcher):
    """Hydra launcher that runs a sweep's cells on the GPUs of a Ray cluster."""

    def __init__(self) -> None:
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        # The task function is not called: each cell's work is raycolloc's own (the entry point's
        # single-run path and this launcher share raycolloc.driver.engine.run_cells).
        self.config, self.hydra_context = config, hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from raycolloc.driver.launcher import launch

        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return launch(self.hydra_context, self.config, job_overrides, initial_job_idx)
