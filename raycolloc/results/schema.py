"""The Arrow schema of each result table, derived from its row dataclass (:mod:`raycolloc.results.rows`)."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any

import pyarrow as pa

from raycolloc.results import rows as _rows
from raycolloc.results.rows import METRIC_COLUMNS, READABLE_VERSIONS, ROWS, SCHEMA_VERSION, TABLES

__all__ = [
    "METRIC_COLUMNS",
    "READABLE_VERSIONS",
    "ROWS",
    "SCHEMAS",
    "SCHEMA_VERSION",
    "TABLES",
    "arrow_schema",
    "to_table",
]

_ARROW = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}


def _arrow_type(annotation: Any) -> pa.DataType:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _arrow_type(inner)
    if typing.get_origin(annotation) is list:  # an epoch's windows: a list column
        (item,) = typing.get_args(annotation)
        return pa.list_(_ARROW[item])
    return _ARROW[annotation]


@functools.cache
def arrow_schema(row: type) -> pa.Schema:
    """The Arrow schema of a row dataclass: ``schema_version`` first, then its fields in order."""
    hints = typing.get_type_hints(row)
    return pa.schema(
        [("schema_version", pa.int32()), *((f.name, _arrow_type(hints[f.name])) for f in dataclasses.fields(row))]
    )


SCHEMAS: dict[str, pa.Schema] = {name: arrow_schema(row) for name, row in ROWS.items()}
assert tuple(f for f in SCHEMAS["telemetry"].names if f in METRIC_COLUMNS) == METRIC_COLUMNS


def to_table(name: str, rows: list[Any]) -> pa.Table:
    """Rows (instances of ``ROWS[name]``) as an Arrow table of that table's schema."""
    row_type, schema = ROWS[name], SCHEMAS[name]
    columns: dict[str, list[Any]] = {f: [] for f in schema.names}
    columns["schema_version"] = [_rows.SCHEMA_VERSION] * len(rows)
    for row in rows:
        if not isinstance(row, row_type):
            raise TypeError(f"{name}: expected {row_type.__name__} rows, got {type(row).__name__}")
        for key, value in vars(row).items():  # flat rows of plain values: no deep copy needed
            columns[key].append(value)
    return pa.table(columns, schema=schema)
