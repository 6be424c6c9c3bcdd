"""Analysis of raycolloc sweeps: load the Parquet tables, build the study's tables and figures.

``python -m analysis.report SWEEP_DIR [SWEEP_DIR ...] --out DIR [--baseline OTHER_SWEEP_DIR]``
"""

from __future__ import annotations

__all__: list[str] = []
