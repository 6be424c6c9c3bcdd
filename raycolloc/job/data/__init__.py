"""Data: synthetic batches and readers for the on-disk formats of the study's datasets."""
