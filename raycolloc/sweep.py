"""Entry point: ``python -m raycolloc.sweep [-m] key=value ...``.

One Hydra job is one cell. With ``-m`` Hydra hands every cell to our launcher
(``hydra_plugins/raycolloc_launcher``); without it, :func:`task` validates its one cell (or a
radT plan, ``+plan=PATH.csv``) and runs it through the same engine. ``+dry_run=true`` prints what
would run instead, and leaves no run directory.

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

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from raycolloc import conf_dir
from raycolloc.config import ConfigError, register_configs
from raycolloc.driver import signals
from raycolloc.driver.cells import cell_dir_names, split_options, sweep_cells, validate_cell
from raycolloc.driver.hydra_errors import as_config_error, check_group_choices
from raycolloc.driver.outcome import EXIT_CONFIG, EXIT_OK, EXIT_WRITE, print_outcome
from raycolloc.driver.rundirs import discard, forget, remove_made
from raycolloc.driver.teardown import begin, shut_down
from raycolloc.results.errors import ResultWriteError, free_space

__all__ = ["main", "task"]

log = logging.getLogger("raycolloc")
# Errors of Hydra creating its run directory (out_dir a file, read-only): config errors.
_DIR_ERRORS = (errno.ENOTDIR, errno.EEXIST, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT)
# A full disk (or quota), wherever it strikes (Hydra's multirun.yaml, a cell's tables): exit 3.
_FULL_ERRORS = (errno.ENOSPC, errno.EDQUOT)

register_configs()


def _discard_run_dir(run_dir: Path) -> None:
    """A config error (or a dry run) writes nothing: remove the fresh directory Hydra made for this run,
    and its parents that the run made (``runs/<date>``, ``out_dir``) where they are empty."""
    discard(run_dir, {".hydra", "sweep.log", f"{HydraConfig.get().job.name}.log"})


def _dry_run_status(run_dir: Path, refused: int) -> int:
    _discard_run_dir(run_dir)  # a dry run leaves nothing behind
    return EXIT_CONFIG if refused else EXIT_OK


def _run(dcfg: DictConfig, run_dir: Path) -> int:
    """Run the cell(s) or the plan; returns the exit status."""
    options = split_options(dcfg)
    check_group_choices(HydraConfig.get().runtime.choices)
    if options.plan:
        from raycolloc.driver.radt_runner import run_plan

        ended = run_plan(dcfg, options, run_dir)
        if ended.get("dry_run"):
            return _dry_run_status(run_dir, ended["refused"])
        return print_outcome(ended["results"])
    specs = sweep_cells([validate_cell(dcfg)])
    if options.dry_run:
        from raycolloc.driver.dryrun import DryRunLine, print_dry_run

        print_dry_run([DryRunLine(s.label, s) for s in specs], specs[0].config.out_dir, rerun=options.rerun,
                      sweep_dir=run_dir)
        return _dry_run_status(run_dir, 0)
    # Ray, pyarrow and pandas come with the engine, once the cell is valid: a refused one answers sooner.
    from raycolloc.driver.engine import run_cells

    if len(specs) == 1:
        results = run_cells([(specs[0], run_dir)], rerun=options.rerun)
    else:
        # A mix (with its solo cells) or repeats: one directory per cell under the run directory.
        from raycolloc.driver.launcher import print_sweep_summary

        results = run_cells([(s, run_dir / name) for s, name in zip(specs, cell_dir_names(specs), strict=True)],
                            rerun=options.rerun)
        print_sweep_summary(run_dir)
    return print_outcome(results)


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def task(dcfg: DictConfig) -> int:
    """One cell (or a radT plan) run in Hydra's run directory; multiruns go to our launcher."""
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        code = _run(dcfg, run_dir)
    except ConfigError as exc:
        _discard_run_dir(run_dir)
        log.error("config error: %s", exc)
        sys.exit(EXIT_CONFIG)
    except ResultWriteError as exc:
        log.error("%s", exc)
        sys.exit(EXIT_WRITE)
    if code:
        sys.exit(code)
    return code


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
        task()
    except KeyboardInterrupt as exc:
        how = "terminated (SIGTERM)" if isinstance(exc, signals.Terminated) else "interrupted"
        print(f"{how}: the running cells released their GPUs and wrote nothing; a re-run resumes",
              file=sys.stderr, flush=True)
        sys.exit(signals.exit_status(exc))
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno in _FULL_ERRORS:
            where = _written_path(exc)
            print(f"cannot write {where}: {exc.strerror} ({free_space(where)})", file=sys.stderr, flush=True)
            sys.exit(EXIT_WRITE)
        error = as_config_error(exc)
        if error is None and isinstance(exc, OSError) and exc.errno in _DIR_ERRORS and exc.filename:
            error = ConfigError(f"cannot create {exc.filename}: {exc.strerror} (out_dir must be a writable "
                                f"directory)")
        if error is None:
            raise
        remove_made()  # refused: the directories made for the run go (those left empty)
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
