"""Kept for compatibility with recording code that imports it: use `python -m guide records status`."""
from guide import project
from guide.records import environment, gpu_name, source_hash  # noqa: F401

RECORDS = project.path("records")
