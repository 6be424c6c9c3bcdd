"""Entry point of the ``raycolloc`` command: ``raycolloc sweep|ls|doctor|advise|queue ARGS...``.

``raycolloc NAME ARGS...`` is ``python -m raycolloc.NAME ARGS...``: the arguments go unchanged to
that module's ``main``, and its exit status is the command's. Any other first word exits 2 with
the allowed ones.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

__all__ = ["COMMANDS", "HELP", "main"]

# Subcommand -> the module whose `main` runs it. Imported only when chosen: `raycolloc ls` loads no
# Hydra, and importing `raycolloc.sweep` registers the config schemas.
COMMANDS = {
    "sweep": "raycolloc.sweep",
    "ls": "raycolloc.ls",
    "doctor": "raycolloc.doctor",
    "advise": "raycolloc.advise.__main__",
    "queue": "raycolloc.queue.__main__",
}
USAGE = f"usage: raycolloc {{{','.join(COMMANDS)}}} [ARGS...]  (raycolloc NAME --help: that command's help)"
# What each subcommand is for, one line each: `raycolloc --help` lists them.
SAYS = {
    "sweep": "run the collocation matrix (Hydra: -m degree=1,2,3,7 mode=naive,mps,mig ...)",
    "ls": "list the sweeps under results/ and the cells of one",
    "doctor": "find what a killed run left on a node (MPS daemons, MIG layouts, pipes); --fix cleans it",
    "advise": "rank collocation configurations for a workload; --validate grades the advisor",
    "queue": "a queue of training jobs packed onto shared GPUs: trace, replay, serve, submit, status",
}
HELP = "\n".join([USAGE, "", "commands:", *(f"  {name:<8}{SAYS[name]}" for name in COMMANDS)])


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; returns its exit status (2: no subcommand, or an unknown one)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(HELP)
        return 0
    if not args or args[0] not in COMMANDS:
        given = f"unknown command {args[0]!r}" if args else "no command given"
        print(f"{USAGE}\nraycolloc: error: {given}; choose one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    name, rest = args[0], args[1:]
    # The mains read sys.argv themselves (Hydra's `@hydra.main` does; the advisor records it in
    # advice.json, the output lock names its holder by it): they see what `python -m` would give.
    sys.argv = [f"{sys.argv[0]} {name}", *rest]
    run: Callable[[], int | None] = importlib.import_module(COMMANDS[name]).main
    return run() or 0  # `raycolloc.sweep.main` exits itself unless every cell has a result


if __name__ == "__main__":
    sys.exit(main())
