"""``hydra/launcher=raycolloc``: run the cells of a multirun as Ray tasks, one per GPU at a time.

(No ``from __future__ import annotations`` here: Hydra executes plugin modules without
registering them in sys.modules, where postponed annotations break dataclasses.)

Each task blocks on its cell's GPU lease. The launcher keeps no more tasks in flight than the
cluster has GPUs (``cluster.max_concurrent_cells`` lowers it further) and submits the largest
cells first, so the largest-first order holds. Before anything starts, every cell's config
is composed and validated, and the cluster is checked (e.g. MIG available): one bad cell stops
the sweep before any GPU state changes. Cell tasks run on the driver's node, so results land in
the sweep directory there; their trainers run wherever their GPU lease is.

Ctrl-C cancels the running cells; each releases its GPU (MPS stopped, MIG restored) before the
driver exits. Completed cells are on disk already (written atomically), so a re-run resumes.
"""


import copy
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

log = logging.getLogger(__name__)


@dataclass
class RayCollocLauncherConf:
    """Options of the launcher (``hydra.launcher.*``)."""

    _target_: str = "hydra_plugins.raycolloc_launcher.raycolloc_launcher.RayCollocLauncher"
    poll_interval_s: float = 1.0
    cancel_grace_s: float = 180.0


ConfigStore.instance().store(group="hydra/launcher", name="raycolloc", node=RayCollocLauncherConf, provider="raycolloc")


def _run_remote(hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig,
                singleton_state: dict[Any, Any]) -> JobReturn:
    """Body of one cell task: Hydra's own run_job (job dir, .hydra/, logging) around the task."""
    setup_globals()
    Singleton.set_state(singleton_state)
    return run_job(hydra_context=hydra_context, task_function=task_function, config=config,
                   job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")


def _print_sweep_summary(sweep_dir: Path) -> None:
    """The sweep's gain table (against degree 1 and against the best solo run) and mixed cells
    against running their jobs one after the other."""
    try:
        from analysis.load import load_sweeps
        from analysis.report import format_gain
        from analysis.tables import gain_table, mixed_table

        data = load_sweeps([sweep_dir])
        print(f"\nsweep {sweep_dir}: {len(data.cells)} cells, {int((data.cells['status'] == 'ok').sum())} ok")
        gain = gain_table(data.cells, data.jobs)
        if not gain.empty:
            print("throughput gain (gain_vs_solo: same settings at degree 1; gain_vs_best_solo: fastest degree-1 "
                  "run of the workload in the sweep)")
            print(format_gain(gain))
        mixed = mixed_table(data.cells, data.jobs, data.epochs)
        if not mixed.empty:
            cols = ["mix", "mode", "job_name", "job_total_s", "solo_total_s", "cell_total_s", "serial_s",
                    "change_vs_sequential_pct"]
            print("mixed cells against their jobs run one after the other (serial_s needs each job's solo cell)")
            print(mixed[cols].to_string(index=False, na_rep="-", float_format=lambda v: f"{v:,.2f}"))
    except Exception as exc:  # noqa: BLE001 - the summary is a convenience; the results are on disk
        log.warning("sweep summary unavailable: %s", exc)


_MODE_ORDER = {"naive": 0, "mig": 1, "mps": 2}


def _cell_size(spec: Any) -> tuple[int, int]:
    """Sort key, largest cell first (LPT scheduling): with more cells than GPUs this keeps a long
    cell from starting last and stretching the sweep.

    Size is the samples to train, summed over the cell's jobs. Of two cells with as many samples,
    the naive one comes first: time-slicing's aggregate throughput barely grows with the degree, so
    it runs longest (4 x H200, resnet26, 51,200 samples a job: naive x7 31.5 s against MPS x7 21.0 s
    alone).
    """
    samples = sum(j.epoch_samples * j.epochs for j in spec.jobs)
    return -samples, _MODE_ORDER.get(spec.mode.name, len(_MODE_ORDER))


class RayCollocLauncher(Launcher):
    """Hydra launcher that fans a sweep out over the GPUs of a Ray cluster."""

    def __init__(self, poll_interval_s: float = 1.0, cancel_grace_s: float = 180.0) -> None:
        self.poll_interval_s = poll_interval_s
        self.cancel_grace_s = cancel_grace_s
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def _compose_all(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[tuple[DictConfig, Any]]:
        from raycolloc.config import ConfigError
        from raycolloc.prepare import prepare_job

        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()  # resolve ${now:} once, here
        composed, errors = [], []
        for idx, overrides in enumerate(job_overrides):
            idx += initial_job_idx
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(cfg):
                cfg.hydra.job.id = idx
                cfg.hydra.job.num = idx
                cfg.hydra.sweep.dir = str(sweep_dir)
                cfg.out_dir = str(Path(str(cfg.out_dir)).absolute())
            task_cfg = copy.deepcopy(cfg)
            with read_write(task_cfg), open_dict(task_cfg):
                del task_cfg["hydra"]
            try:
                composed.append((cfg, prepare_job(task_cfg)))
            except ConfigError as exc:
                errors.append(f"#{idx} ({' '.join(filter_overrides(overrides))}): {exc}")
        if errors:
            for line in errors:
                log.error("config error: %s", line)
            sys.exit(2)
        clusters = {OmegaConf.to_yaml(c.cluster) for c, _ in composed}
        if len(clusters) > 1:
            log.error("config error: cluster.* must be the same for every cell of a sweep")
            sys.exit(2)
        return composed

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from raycolloc.cluster import connect
        from raycolloc.config import ConfigError
        from raycolloc.prepare import RESUME_ENV, check_cluster
        from raycolloc.progress import BOARD_ENV, ProgressBoard, ProgressView
        from raycolloc.results import completed_index
        from raycolloc.steward import start_stewards

        setup_globals()
        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        composed = self._compose_all(job_overrides, initial_job_idx)
        jobs = [job for _, job in composed]
        sweep_dir = Path(str(composed[0][0].hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        results: dict[int, JobReturn] = {}
        # Resume: cells with results already on disk are linked in here, in this process, without
        # Ray; only the rest are launched (and Ray is started only if any are left).
        index = completed_index(jobs[0].cfg.out_dir)
        for i, (cfg, job) in enumerate(composed):
            previous = None if job.options.rerun else index.get(job.spec.config_hash)
            if previous is not None:
                with open_dict(cfg):
                    cfg.hydra.job.env_set[RESUME_ENV] = str(previous)
                results[i] = run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=cfg,
                                     job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
                print(self._summary(results[i]), flush=True)
        todo = [i for i in range(len(composed)) if i not in results]
        if not todo:
            _print_sweep_summary(sweep_dir)
            return [results[i] for i in range(len(composed))]
        connect(jobs[0].cfg.cluster, max_jobs_per_cell=max(j.spec.degree for j in jobs))
        try:
            check_cluster([jobs[i].cfg for i in todo])
        except ConfigError as exc:
            log.error("config error: %s", exc)
            sys.exit(2)
        log.info("sweep=%s cells=%d to_run=%d gpus=%s", sweep_dir, len(jobs), len(todo),
                 ray.cluster_resources().get("GPU", 0))
        first = jobs[todo[0]].cfg
        start_stewards(first.cluster, first.mode.pipe_root)

        board_name = f"raycolloc:progress:{os.getpid()}:{int(time.time())}"
        board = ProgressBoard.options(name=board_name, namespace="raycolloc").remote()
        node = ray.get_runtime_context().get_node_id()
        remote = ray.remote(num_cpus=0, max_retries=0)(_run_remote)
        state = Singleton.get_state()
        # No more cells in flight than the cluster has GPUs: a submitted cell waits for its lease, and
        # Ray grants waiting leases in no set order, so submitting every cell at once would lose the
        # largest-first order below (4 x H200: the largest cell started fifth and the sweep took 60.8 s;
        # 53.0 s on another host with this order; docs/measurements.md, fourth session).
        gpus = int(ray.cluster_resources().get("GPU", 0)) or len(jobs)
        limit = min(jobs[0].cfg.cluster.max_concurrent_cells or gpus, gpus)
        queue = sorted(todo, key=lambda i: _cell_size(jobs[i].spec))
        refs: dict[Any, int] = {}
        view = ProgressView({jobs[i].spec.cell_id: jobs[i].spec.label for i in todo}, board)
        try:
            while queue or refs:
                while queue and len(refs) < limit:
                    i = queue.pop(0)
                    cfg, job = composed[i]
                    ref = remote.options(
                        name=f"raycolloc:cell:{job.spec.cell_id}",
                        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                        runtime_env={"env_vars": {BOARD_ENV: board_name}},
                    ).remote(self.hydra_context, self.task_function, cfg, state)
                    refs[ref] = i
                done, _ = ray.wait(list(refs), num_returns=1, timeout=self.poll_interval_s)
                for ref in done:
                    i = refs.pop(ref)
                    results[i] = self._result(ref, composed[i][0])
                    view.write(self._summary(results[i]))
                view.refresh()
        except KeyboardInterrupt:
            log.warning("interrupted: cancelling %d running cells; each releases its GPU first", len(refs))
            for ref in refs:
                ray.cancel(ref)
            ray.wait(list(refs), num_returns=len(refs), timeout=self.cancel_grace_s)
            raise
        finally:
            view.refresh()
            view.close()
        _print_sweep_summary(sweep_dir)
        return [results[i] for i in range(len(composed))]

    @staticmethod
    def _summary(ret: JobReturn) -> str:
        if ret.status == JobStatus.COMPLETED and isinstance(ret.return_value, dict):
            return str(ret.return_value.get("summary", ""))
        return f"cell failed outside raycolloc's error handling: {ret._return_value!r}"

    @staticmethod
    def _result(ref: Any, cfg: DictConfig) -> JobReturn:
        import ray

        try:
            return ray.get(ref, timeout=60)
        except Exception as exc:  # noqa: BLE001 - the task itself died: report it as a failed job
            ret = JobReturn()
            ret.cfg = cfg
            ret.status = JobStatus.FAILED
            ret._return_value = exc
            return ret
