"""Results: the four Parquet tables of a cell (schemas, atomic IO) and the resume index."""
