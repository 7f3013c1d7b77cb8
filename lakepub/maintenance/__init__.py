"""Table maintenance for lakepub: snapshot expiry, orphan-file removal, abandoned staging branches.

Python API::

    from lakepub.maintenance import JanitorOptions, run_janitor
    report = run_janitor(ws, ["orders_daily"], JanitorOptions(older_than_s=0, retain_last=2))
    report.as_dict()

CLI: ``lakepub janitor`` (``lakepub.maintenance.cli.register_cli(main)`` adds it to the group).
"""

from lakepub.maintenance.durations import InvalidDuration, parse_duration
from lakepub.maintenance.expiry import DEFAULT_RETAIN_LAST, STAGING_PREFIX, ExpiryPlan, commit_expiry, plan_expiry
from lakepub.maintenance.filestore import FileInfo, FileStore, LocalFileStore, S3FileStore, filestore_for, normalize
from lakepub.maintenance.janitor import (DEFAULT_OLDER_THAN_S, JanitorOptions, JanitorReport, TableReport,
                                         UnreadableMetadata, clean_table, run_janitor, targets)
from lakepub.maintenance.orphans import LocationMismatch, check_listing, check_not_nested, classify
from lakepub.maintenance.reachability import Reachability, live_partition_labels

__all__ = [
    "DEFAULT_OLDER_THAN_S", "DEFAULT_RETAIN_LAST", "STAGING_PREFIX",
    "ExpiryPlan", "FileInfo", "FileStore", "InvalidDuration", "JanitorOptions", "JanitorReport",
    "LocalFileStore", "LocationMismatch", "Reachability", "S3FileStore", "TableReport", "UnreadableMetadata",
    "check_listing", "check_not_nested", "classify", "clean_table", "commit_expiry", "filestore_for",
    "live_partition_labels", "normalize", "parse_duration", "plan_expiry", "run_janitor", "targets",
]
