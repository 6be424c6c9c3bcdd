"""Finding earlier results for resume: newest first, errors skipped, the run's own directory excluded."""

from __future__ import annotations

import os
from pathlib import Path

from raycolloc.results import completed_index, find_completed, write_cell


def _cell(where: Path, digest: str, status: str, mtime: float) -> Path:
    write_cell(where, {"cells": [{"cell_id": where.name, "config_hash": digest, "status": status}]})
    os.utime(where / "cells.parquet", (mtime, mtime))
    return where


def test_newest_result_wins_errors_do_not_count_and_exclude_falls_back_to_the_older(tmp_path: Path) -> None:
    older = _cell(tmp_path / "a", "h1", "ok", 1_000)
    newer = _cell(tmp_path / "b", "h1", "partial", 2_000)
    _cell(tmp_path / "c", "h1", "error", 3_000)  # a crash is not a result
    _cell(tmp_path / "d", "h2", "error", 1_000)
    assert completed_index(tmp_path) == {"h1": newer}
    assert find_completed(tmp_path, "h1") == newer
    assert find_completed(tmp_path, "h1", exclude=newer) == older
    assert find_completed(tmp_path, "h2") is None
    assert completed_index(tmp_path / "missing") == {}
