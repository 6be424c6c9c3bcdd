"""Entry point: ``python -m raycolloc.sweep [-m] key=value ...``.

One Hydra job is one cell. With ``-m`` Hydra hands every cell to our launcher
(``hydra_plugins/raycolloc_launcher``); without it, :func:`task` plans its one cell (or a radT plan,
``+plan=PATH.csv``). Either way one :class:`~raycolloc.driver.plan.SweepPlan` is run by
:func:`raycolloc.driver.plan.run`, and :func:`main` alone turns how it ended into the exit status.
``+dry_run=true`` prints what would run instead, and leaves no run directory.

Exit status (:mod:`raycolloc.driver.outcome`): 0 every cell has a result; 1 some cells have none
(the last lines say which and why); 2 refused before anything ran (a config error, Hydra's
included, or an output directory another sweep holds or that cannot be written), leaving no run
directory; 3 results could not be written (disk full); 130 interrupted (Ctrl-C), 143 terminated
(SIGTERM: ``timeout``, Slurm, Kubernetes), either after the running cells released their GPUs and
Ray shut down; a second signal ends it at once (:mod:`raycolloc.driver.signals`).
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from raycolloc import conf_dir
from raycolloc.config import ConfigError, register_configs
from raycolloc.config_checks import listed
from raycolloc.driver import signals
from raycolloc.driver.cell_specs import cell_dir_names, split_options, sweep_cells, validate_cell
from raycolloc.driver.dryrun import DryRunLine
from raycolloc.driver.hydra_errors import as_config_error, check_group_choices
from raycolloc.driver.outcome import EXIT_CONFIG, EXIT_WRITE, SweepEnded
from raycolloc.driver.plan import CellsRefused, PlannedCell, Step, SweepPlan, repeat_cells, run
from raycolloc.driver.radt_runner import csv_plan
from raycolloc.driver.rundirs import discard_run, forget
from raycolloc.driver.teardown import begin, shut_down
from raycolloc.results.errors import ResultWriteError, free_space

__all__ = ["main", "single_run_plan", "task"]

log = logging.getLogger("raycolloc")
# Errors of Hydra creating its run directory (out_dir a file, read-only): config errors.
_DIR_ERRORS = (errno.ENOTDIR, errno.EEXIST, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT)
# A full disk (or quota), wherever it strikes (Hydra's multirun.yaml, a cell's tables): exit 3.
_FULL_ERRORS = (errno.ENOSPC, errno.EDQUOT)

register_configs()


def _mode_from_the_flag() -> None:
    """Hydra composes the whole config once before a command only to read ``hydra.mode``
    (``Hydra.get_mode``), then again to run it: ~0.4 s of OmegaConf per command on 2 cores (profiled:
    38 of 96 s of 97 refused inputs run in one process). ``conf/`` never sets ``hydra.mode``
    (tests/test_malformed_inputs.py holds it), so unless the command line does, that composition
    answers None, and Hydra takes the mode from ``-m``: it is answered so without composing."""
    from hydra._internal.hydra import Hydra

    compose_for_mode = Hydra.get_mode

    def get_mode(self: Hydra, config_name: str | None, overrides: list[str]) -> Any:
        if any(o.lstrip("+~").startswith("hydra.mode") for o in overrides):
            return compose_for_mode(self, config_name, overrides)
        return None

    Hydra.get_mode = get_mode  # type: ignore[method-assign]


_mode_from_the_flag()


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def task(dcfg: DictConfig) -> None:
    """One cell (or a radT plan) run in Hydra's run directory; multiruns go to our launcher.

    Raises:
        SweepEnded: the sweep's exit status is not 0, or what ended it (:func:`_run_task` unwraps it).
    """
    hydra_cfg = HydraConfig.get()
    try:
        outcome = run(single_run_plan(dcfg, Path(hydra_cfg.runtime.output_dir), hydra_cfg.runtime.choices))
    except Exception as exc:  # past Hydra as it is: the main maps it to the exit status
        raise SweepEnded() from exc
    if outcome.code:
        raise SweepEnded(outcome)


def single_run_plan(dcfg: DictConfig, run_dir: Path, choices: Any) -> SweepPlan:
    """The plan of ``python -m raycolloc.sweep ARGS`` without ``-m``: its one cell (a mix's solo cells
    and repeats beside it, each in its own directory), or the radT plan ``+plan=PATH.csv`` names.

    Raises:
        ConfigError: the cell (or the plan) is invalid.
    """
    options = split_options(dcfg)
    check_group_choices(choices)
    if options.plan:
        return csv_plan(dcfg, options, run_dir)
    specs = sweep_cells([validate_cell(dcfg)])
    dirs = [run_dir] if len(specs) == 1 else [run_dir / name for name in cell_dir_names(specs)]
    cells = tuple(PlannedCell(s, d) for s, d in zip(specs, dirs, strict=True))
    return SweepPlan(
        run_dir,
        specs[0].config.out_dir,
        (Step(cells, repeat=repeat_cells(cells)),),
        rerun=options.rerun,
        dry_run=options.dry_run,
        lines=tuple(DryRunLine(s.label, s) for s in specs),
        summary=len(specs) > 1,
    )


def _run_task() -> None:
    """Hydra's command line (a run or a multirun); what ended a single run raised as itself."""
    try:
        task()
    except SweepEnded as ended:
        if ended.outcome is None and isinstance(ended.__cause__, Exception):
            raise ended.__cause__ from None
        raise


def _written_path(exc: OSError) -> str:
    """Where a write that found the disk full went: the error's file, else the directory Hydra (or the
    launcher) was writing in. Hydra's own writes (``multirun.yaml``, ``.hydra/``) raise errors that name
    no file, so the innermost ``output_dir`` or ``sweep_dir`` of the failing call chain names it."""
    if exc.filename:
        return str(exc.filename)
    found, tb = None, exc.__traceback__
    while tb is not None:
        local = tb.tb_frame.f_locals
        found = next((local[k] for k in ("output_dir", "sweep_dir") if k in local), found)
        tb = tb.tb_next
    return str(Path(str(found)).absolute()) if found is not None else "the output directory"


def main() -> None:
    """Console-script entry point (``raycolloc-sweep``): Hydra's own errors exit 2 like ours."""
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises its errors to us instead of printing them
    forget()  # directories an earlier run in this process made are not this one's
    signals.install()  # SIGTERM (timeout, Slurm, Kubernetes) ends the sweep as Ctrl-C does
    begin()
    try:
        _run_task()
    except SweepEnded as exc:
        sys.exit(exc.outcome.code if exc.outcome is not None else 1)
    except KeyboardInterrupt as exc:
        how = "terminated (SIGTERM)" if isinstance(exc, signals.Terminated) else "interrupted"
        print(
            f"{how}: the running cells released their GPUs and wrote nothing; a re-run resumes",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(signals.exit_status(exc))
    except ResultWriteError as exc:
        log.error("%s", exc)
        sys.exit(EXIT_WRITE)
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno in _FULL_ERRORS:
            where = _written_path(exc)
            print(f"cannot write {where}: {exc.strerror} ({free_space(where)})", file=sys.stderr, flush=True)
            sys.exit(EXIT_WRITE)
        error = as_config_error(exc)
        if error is None and isinstance(exc, OSError) and exc.errno in _DIR_ERRORS and exc.filename:
            error = ConfigError(f"cannot create {exc.filename}: {exc.strerror} (out_dir must be a writable directory)")
        if error is None:
            raise
        discard_run()  # refused: the directories made for the run go (those holding only Hydra's files too)
        if error is exc:  # raised by raycolloc, once Hydra had set up its logging: logged, one line a cell
            for line in listed(exc.errors) if isinstance(exc, CellsRefused) else [str(exc)]:
                log.error("config error: %s", line)
        else:  # Hydra's own, before its logging is set up
            print(f"config error: {error}", file=sys.stderr, flush=True)
        sys.exit(EXIT_CONFIG)
    finally:
        signals.ending()  # a signal from now on ends the command at once
        try:
            shut_down()  # Ray (a local instance stops), then what a dead steward left on this host
        finally:
            signals.uninstall()


if __name__ == "__main__":
    main()
