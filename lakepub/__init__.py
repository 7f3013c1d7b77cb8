"""lakepub: publish versioned full-state entity events as atomic Iceberg snapshots, read with DuckDB.

Python API::

    from lakepub import Workspace
    ws = Workspace.open(".")
    ws.publish("orders_daily", "batch.jsonl", source="orders", start={"p0": 0}, end={"p0": 4})
    ws.run("orders_daily")
    ws.connect().sql("SELECT * FROM orders_daily").fetchall()

``Workspace`` is imported on first use (PEP 562 ``__getattr__``): importing any submodule, e.g.
``lakepub.cli`` for ``lakepub --help``, does not load pyiceberg, pyarrow or DuckDB
(``tests/test_startup.py`` pins it).
"""

from typing import Any

from lakepub.errors import LakepubError

__all__ = ["LakepubError", "Workspace"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "Workspace":
        from lakepub.workspace import Workspace

        return Workspace
    raise AttributeError(f"module 'lakepub' has no attribute {name!r}")
