"""lakepub: publish versioned full-state entity events as atomic Iceberg snapshots, read with DuckDB.

Python API::

    from lakepub import Workspace
    ws = Workspace.open(".")
    ws.publish("orders_daily", "batch.jsonl", source="orders", start={"p0": 0}, end={"p0": 4})
    ws.run("orders_daily")
    ws.connect().sql("SELECT * FROM orders_daily").fetchall()
"""

from lakepub.errors import LakepubError
from lakepub.workspace import Workspace

__all__ = ["LakepubError", "Workspace"]
__version__ = "0.1.0"
