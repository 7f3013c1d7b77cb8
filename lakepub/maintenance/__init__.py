"""Table maintenance for lakepub: snapshot expiry, orphan-file removal, abandoned staging branches,
table folders superseded by an offline rebuild.

Python API::

    from lakepub.maintenance import JanitorOptions, run_janitor
    report = run_janitor(ws, ["orders_daily"], JanitorOptions(older_than_s=0, retain_last=2))
    report.as_dict()

CLI: ``lakepub janitor`` (``lakepub.maintenance.cli.register_cli(main)`` adds it to the group).

The names below are imported on first use, so importing ``lakepub.maintenance.cli`` (for
``lakepub --help``) does not load pyiceberg.
"""

from importlib import import_module
from typing import Any

_HOME = {
    "DEFAULT_OLDER_THAN_S": "durations", "DEFAULT_RETAIN_LAST": "durations", "InvalidDuration": "durations",
    "parse_duration": "durations",
    "STAGING_PREFIX": "expiry", "ExpiryPlan": "expiry", "commit_expiry": "expiry", "plan_expiry": "expiry",
    "FileInfo": "filestore", "FileStore": "filestore", "LocalFileStore": "filestore", "S3FileStore": "filestore",
    "filestore_for": "filestore", "normalize": "filestore",
    "JanitorOptions": "janitor", "JanitorReport": "janitor", "TableReport": "janitor",
    "UnreadableMetadata": "janitor", "clean_table": "janitor", "run_janitor": "janitor", "targets": "janitor",
    "LocationMismatch": "orphans", "check_listing": "orphans", "check_not_nested": "orphans", "classify": "orphans",
    "Reachability": "reachability", "live_partition_labels": "reachability",
    "FoldResult": "fold", "fold_deletes": "fold",  # merge-on-read: lakepub compact folds delete files
    "SupersededFolder": "superseded", "sweep": "superseded",
}

__all__ = [
    "DEFAULT_OLDER_THAN_S", "DEFAULT_RETAIN_LAST", "STAGING_PREFIX",
    "ExpiryPlan", "FileInfo", "FoldResult", "fold_deletes", "FileStore", "InvalidDuration", "JanitorOptions",
    "JanitorReport", "LocalFileStore", "LocationMismatch", "Reachability", "S3FileStore", "SupersededFolder",
    "TableReport", "UnreadableMetadata",
    "check_listing", "check_not_nested", "classify", "clean_table", "commit_expiry", "filestore_for",
    "live_partition_labels", "normalize", "parse_duration", "plan_expiry", "run_janitor", "sweep", "targets",
]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(f"lakepub.maintenance.{_HOME[name]}"), name)
    raise AttributeError(f"module 'lakepub.maintenance' has no attribute {name!r}")
