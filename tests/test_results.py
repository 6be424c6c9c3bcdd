"""Results on disk: rows built from the schema, validated reads, and the resume index (newest valid
result wins, errors and corrupt tables do not count, corrupt ones are set aside)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from raycolloc.results.index import ResultIndex, read_reference, write_reference
from raycolloc.results.rows import ROWS, SCHEMA_VERSION, CellRow, JobRow
from raycolloc.results.schema import SCHEMAS
from raycolloc.results.store import InvalidResult, read_cell

from .conftest import write_fixture_cell


def _cell(where: Path, digest: str, status: str, finished: float, jobs: int = 1) -> Path:
    write_fixture_cell(
        where,
        {
            "cells": [
                {
                    "cell_id": where.name,
                    "config_hash": digest,
                    "status": status,
                    "finished_at": finished,
                    "n_jobs": jobs,
                }
            ],
            "jobs": [{"cell_id": where.name, "job_index": i, "status": status} for i in range(jobs)],
        },
    )
    return where


def test_every_schema_column_is_a_row_field_and_builders_must_fill_them() -> None:
    for name, row in ROWS.items():
        assert SCHEMAS[name].names == ["schema_version", *(f.name for f in dataclasses.fields(row))]
    # A builder that forgets a column fails at once (no silent empty column).
    with pytest.raises(TypeError, match="missing"):
        JobRow(cell_id="c", job_index=0)  # type: ignore[call-arg] - the missing columns are the point
    required = [f.name for f in dataclasses.fields(CellRow) if f.default is dataclasses.MISSING]
    assert "agg_samples_per_s" in required and "status" in required


def test_newest_valid_result_wins_and_errors_do_not_count(tmp_path: Path) -> None:
    older = _cell(tmp_path / "a", "h1", "ok", 1_000)
    newer = _cell(tmp_path / "b", "h1", "partial", 2_000)
    _cell(tmp_path / "c", "h1", "error", 3_000)  # a crash is not a result
    _cell(tmp_path / "d", "h2", "error", 1_000)
    _cell(tmp_path / "e", "h3", "skipped", 1_000)  # nor is a cell the cluster could not run
    index = ResultIndex(tmp_path)
    assert index.find("h1").path == newer
    assert index.find("h2") is None and index.find("h3") is None
    assert older.exists()
    assert ResultIndex(tmp_path / "missing").find("h1") is None


def test_a_corrupt_table_is_set_aside_and_the_older_result_found(tmp_path: Path) -> None:
    older = _cell(tmp_path / "a", "h1", "ok", 1_000)
    newer = _cell(tmp_path / "b", "h1", "ok", 2_000)
    jobs = newer / "jobs.parquet"
    jobs.write_bytes(jobs.read_bytes()[:40])  # truncated, as a full disk or a killed copy leaves it
    with pytest.raises(InvalidResult, match="jobs.parquet"):
        read_cell(newer)
    index = ResultIndex(tmp_path)
    assert index.find("h1").path == older
    ((aside, why),) = index.set_aside
    assert not newer.exists() and aside.name.startswith("b.invalid-") and (aside / "cells.parquet").exists()
    assert "jobs.parquet" in why


def test_tables_that_disagree_are_not_a_result(tmp_path: Path) -> None:
    cell = _cell(tmp_path / "a", "h1", "ok", 1_000, jobs=2)
    table = pq.read_table(cell / "jobs.parquet").slice(0, 1)  # one job row lost: cells says two
    pq.write_table(table, cell / "jobs.parquet")
    with pytest.raises(InvalidResult, match="1 jobs; cells.parquet says 2"):
        read_cell(cell)
    assert ResultIndex(tmp_path).find("h1") is None


def test_a_reference_names_the_result_it_reuses(tmp_path: Path) -> None:
    result = _cell(tmp_path / "a", "h1", "ok", 1_000)
    found = ResultIndex(tmp_path).find("h1")
    write_reference(tmp_path / "sweep2" / "cell", found, "h1")
    assert read_reference(tmp_path / "sweep2" / "cell") == result.resolve()
    assert read_reference(tmp_path / "a") is None
    assert read_cell(result).cells.column("schema_version")[0].as_py() == SCHEMA_VERSION


def test_a_results_tree_moved_elsewhere_still_finds_its_reused_cells(tmp_path: Path) -> None:
    import shutil

    result = _cell(tmp_path / "out" / "a", "h1", "ok", 1_000)
    write_reference(tmp_path / "out" / "sweep2" / "cell", ResultIndex(tmp_path / "out").find("h1"), "h1")
    shutil.move(tmp_path / "out", tmp_path / "laptop")  # copied off the cluster: the absolute path is gone
    assert not result.exists()
    assert read_reference(tmp_path / "laptop" / "sweep2" / "cell") == (tmp_path / "laptop" / "a").resolve()


def test_results_record_raycolloc_version_and_commit() -> None:
    from importlib import metadata

    import raycolloc
    from raycolloc.driver.environment import environment

    env = environment()
    # One version, written once: the installed metadata is read from raycolloc.__version__ too.
    assert env["raycolloc"] == raycolloc.__version__ == metadata.version("raycolloc")
    assert env["raycolloc_commit"] != ""


WITHIN_RUN = {
    "cells": ["agg_rate_low", "agg_rate_high", "rate_cv", "unstable"],
    "jobs": ["epoch2_rate_low", "epoch2_rate_high", "epoch2_rate_cv"],
    "epochs": ["windows", "rate_low", "rate_high", "rate_cv"],
}


def test_a_result_written_before_the_within_run_columns_reads_them_as_nulls(tmp_path: Path) -> None:
    where = tmp_path / "old"
    write_fixture_cell(
        where,
        {
            "cells": [{"cell_id": "old", "config_hash": "h1", "status": "ok", "finished_at": 1_000, "n_jobs": 1}],
            "jobs": [{"cell_id": "old", "job_index": 0, "status": "ok", "epoch2_samples_per_s": 500.0}],
            "epochs": [{"cell_id": "old", "job_index": 0, "epoch": 2, "samples_per_s": 500.0}],
        },
    )
    for name, columns in WITHIN_RUN.items():  # as an earlier raycolloc wrote them
        path = where / f"{name}.parquet"
        pq.write_table(pq.read_table(path).drop_columns(columns), path)
        assert not set(columns) & set(pq.read_schema(path).names)
    tables = read_cell(where)
    for name, columns in WITHIN_RUN.items():
        table = getattr(tables, name)
        assert table.schema == SCHEMAS[name]
        assert all(table.column(c).null_count == table.num_rows for c in columns)
    assert tables.jobs.column("epoch2_samples_per_s").to_pylist() == [500.0]
    assert ResultIndex(tmp_path).find("h1").path == where  # resume still reuses it
