"""Resume: a cell with a valid result for its config hash (in this sweep's directory, under
``out_dir``, or in an earlier sweep's directory that ``out_dir``'s index lists: ``results/index.py``)
is referenced from the cell's directory, not run again; and how a cell of the sweep ended
(:class:`CellResult`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from raycolloc.results.index import REFERENCE, ResultIndex, sweep_root, write_reference
from raycolloc.results.rows import CellRow
from raycolloc.results.store import ResultWriteError, free_space
from raycolloc.spec import CellSpec, CellStatus, as_cell_status

__all__ = ["CellResult", "resume"]


@dataclass(frozen=True)
class CellResult:
    """How one cell of the sweep ended: run (its row), reused, skipped or unfit (an interrupted cell has none)."""

    cell: CellSpec
    cell_dir: Path
    status: CellStatus
    summary: str
    reused_from: Path | None = None
    row: CellRow | None = None

    @property
    def reason(self) -> str | None:
        """Why the cell ended as it did (its row's reason; None for a reused result)."""
        return self.row.reason if self.row is not None else None


def resume(cells: list[tuple[CellSpec, Path]], rerun: bool) -> tuple[list[tuple[CellSpec, Path]], list[CellResult]]:
    """Split cells into those to run and those whose valid result exists (referenced here)."""
    if rerun or not cells:
        return list(cells), []
    # This sweep's own directory too: hydra.sweep.dir may lie anywhere, outside out_dir.
    index = ResultIndex(cells[0][0].config.out_dir, also=[sweep_root(d for _, d in cells)])
    todo, reused = [], []
    for cell, cell_dir in cells:
        found = index.find(cell.config_hash)
        if found is None:
            todo.append((cell, cell_dir))
            continue
        if found.path.resolve() != cell_dir.resolve():
            try:
                write_reference(cell_dir, found, cell.config_hash)
            except OSError as exc:
                raise ResultWriteError(
                    f"cannot write {cell_dir / REFERENCE}: {exc.strerror} ({free_space(cell_dir)})"
                ) from exc
        summary = (
            f"cell {cell.cell_id}: result exists in {found.path} (config hash {cell.config_hash}, "
            f"status={found.status}) - reused; +rerun=true runs it again"
        )
        reused.append(CellResult(cell, cell_dir, as_cell_status(found.status), summary, reused_from=found.path))
    return todo, reused
