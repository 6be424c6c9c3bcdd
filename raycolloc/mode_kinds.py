"""The collocation modes as data: what every part reads about a mode, by its name (issue 45).

One entry per mode: its name, its order (tables, figures and the sweep's schedule list modes in it),
what its jobs share of the GPU, whether a per-GPU daemon serves them, and how the advisor fits and
ranks it. The config checks ``mode``, ``queue.modes`` and ``queue.carma_mode`` against it; the node's
implementations (:data:`raycolloc.node.modes.registry.MODES`) are paired with it by name, one each
(a test holds the two in step); the planner, the queue, the summaries and the report read it instead
of testing a mode's name. It imports nothing but the standard library: the job's process, the
analysis package and the config contract read it without Ray, pandas or torch.

Adding a mode is adding its entry here, its implementation under ``raycolloc/node/modes/``, its
``conf/mode/<name>.yaml`` and its advisor term.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

__all__ = [
    "BASELINE_MODE",
    "MODE_KINDS",
    "MODE_NAMES",
    "QUEUE_MODES",
    "ModeKind",
    "Sharing",
    "is_baseline",
    "mode_of",
    "mode_rank",
    "modes_where",
]


class Sharing(Enum):
    """How a mode's jobs share the GPU's SMs: the advisor's term for the mode reads it."""

    TIME_SLICED = "time-sliced"  # one context runs at a time; the GPU switches between them
    CONCURRENT = "concurrent"  # the jobs' kernels run side by side on the SMs and share DRAM bandwidth
    PARTITIONED = "partitioned"  # each job has its own slice of SMs (and of memory, per instance)


@dataclass(frozen=True)
class ModeKind:
    """One collocation mode as data.

    Attributes:
        name: the mode's name (``mode=<name>``, ``cells.mode``).
        order: its place in every listing and, among cells of one size, the sweep's schedule (lowest
            first: naive < mps < mig).
        sharing: how its jobs share the SMs (:class:`Sharing`).
        shares_memory: its jobs allocate from one pool, the whole GPU's memory (False: each its own slice).
        needs_daemon: a per-GPU daemon serves its jobs (MPS's control daemon); the GPU is freed of it
            when its last job leaves.
        max_clients: the most jobs one GPU serves in it (None: no limit of the mode's own).
        baseline: a job alone in this mode is the workload's profile: nothing stands between it and the
            GPU (the reference a queue, an advisor and a corpus read a workload's needs from).
        queued: the queue may open a GPU in it (jobs join and leave a GPU while others run there; a MIG
            layout is fixed for a cell's life).
        advised: the advisor ranks and measures candidates in it (MIG needs a layout change first).
        fit_from: the mode whose fitted terms the advisor starts this one's fit from, and borrows where
            no cell of this mode was measured (None: its own defaults).
    """

    name: str
    order: int
    sharing: Sharing
    shares_memory: bool
    needs_daemon: bool
    max_clients: int | None
    baseline: bool
    queued: bool
    advised: bool
    fit_from: str | None

    @property
    def partitioned(self) -> bool:
        """Each job has its own slice of the GPU (a MIG device): the GPU must hold a layout for it."""
        return self.sharing is Sharing.PARTITIONED


_KINDS = (
    ModeKind(
        name="naive",
        order=0,
        sharing=Sharing.TIME_SLICED,
        shares_memory=True,
        needs_daemon=False,
        max_clients=None,
        baseline=True,
        queued=True,
        advised=True,
        fit_from=None,
    ),
    ModeKind(
        name="mps",
        order=1,
        sharing=Sharing.CONCURRENT,
        shares_memory=True,
        needs_daemon=True,
        # Client CUDA contexts one MPS server takes on Volta and newer (NVIDIA's MPS documentation).
        max_clients=48,
        baseline=False,
        queued=True,
        advised=True,
        fit_from=None,
    ),
    ModeKind(
        name="mig",
        order=2,
        sharing=Sharing.PARTITIONED,
        shares_memory=False,
        needs_daemon=False,
        max_clients=None,
        baseline=False,
        queued=False,
        advised=False,
        fit_from="mps",
    ),
)

MODE_KINDS: dict[str, ModeKind] = {k.name: k for k in sorted(_KINDS, key=lambda k: k.order)}
MODE_NAMES: tuple[str, ...] = tuple(MODE_KINDS)


def modes_where(test: Callable[[ModeKind], bool]) -> tuple[str, ...]:
    """The names of the modes ``test`` holds for, in order."""
    return tuple(k.name for k in MODE_KINDS.values() if test(k))


QUEUE_MODES: tuple[str, ...] = modes_where(lambda k: k.queued)
BASELINE_MODE: str = modes_where(lambda k: k.baseline)[0]


def mode_of(name: object) -> ModeKind:
    """The mode named ``name``.

    Raises:
        KeyError: no such mode (the message names the modes there are).
    """
    try:
        return MODE_KINDS[str(name)]
    except KeyError:
        raise KeyError(f"mode={name!r} is not a mode; the modes are {', '.join(MODE_NAMES)}") from None


def is_baseline(name: object) -> bool:
    """Whether ``name`` is the baseline mode (:attr:`ModeKind.baseline`); False for anything else."""
    found = MODE_KINDS.get(str(name))
    return found is not None and found.baseline


def mode_rank(name: object) -> int:
    """Sort key of a mode's name: its order, and after every mode anything that is not one (a table's
    missing value, a mode of results written by a later version)."""
    found = MODE_KINDS.get(str(name))
    return found.order if found is not None else len(MODE_KINDS)
