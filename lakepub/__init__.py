"""lakepub: publish versioned full-state entity events as atomic Iceberg snapshots, read with DuckDB.

Python API::

    import lakepub
    with lakepub.Workspace.open(".") as ws:          # or lakepub.Workspace.init("shop")
        ws.publish("orders_daily", "batch.jsonl", source="orders", start={"p0": 0}, end={"p0": 4})
        ws.run("orders_daily")
        ws.query("SELECT * FROM orders_daily")       # a pyarrow Table
        ws.janitor(older_than="3d"); ws.compact("orders_daily")
    try: ...
    except lakepub.BlockedError as exc: exc.exit_code, exc.kind, exc.details()

Every name of ``__all__`` is imported on first use (module ``__getattr__``), so ``import lakepub``
stays cheap: the workspace pulls in pyiceberg, pyarrow and DuckDB only when it is touched
(``tests/test_startup.py`` pins that ``lakepub.cli`` loads none of them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_ERRORS = (
    "LakepubError", "UserError", "ConfigError", "InvalidEvent", "InvalidPosition", "QueryError", "UnknownDataset",
    "DefinitionChanged", "SumOverflow", "BlockedError", "PayloadConflict", "StaleStart", "ForeignChange", "GateRefused",
    "IncompatibleContract",
    "RetryableError", "CommitContention", "CatalogBusy", "DiskFull", "OutcomeUnknown", "VerifyFailed",
    "CorruptTable",
)
_WHERE = {
    **{name: "lakepub.errors" for name in _ERRORS},
    "Workspace": "lakepub.workspace", "RunResult": "lakepub.workspace",
    "PublishResult": "lakepub.publish.publisher", "init_workspace": "lakepub.init",
}
__all__ = ["Workspace", "RunResult", "PublishResult", "init_workspace", *_ERRORS]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ imports on use
    from lakepub.errors import (  # noqa: F401
        BlockedError, CatalogBusy, CommitContention, ConfigError, CorruptTable, DefinitionChanged, DiskFull,
        ForeignChange, GateRefused, InvalidEvent, InvalidPosition, LakepubError, OutcomeUnknown, PayloadConflict, QueryError,
        RetryableError, StaleStart, SumOverflow, UnknownDataset, UserError, VerifyFailed,
    )
    from lakepub.init import init_workspace  # noqa: F401
    from lakepub.publish.publisher import PublishResult  # noqa: F401
    from lakepub.workspace import RunResult, Workspace  # noqa: F401


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562)."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'lakepub' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the lazy ones included."""
    return sorted({*globals(), *__all__})
