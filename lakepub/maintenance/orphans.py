"""Orphan files: listed under a table location, referenced by nothing, older than the grace.

Two pure functions. ``check_listing`` refuses to go on when the listing and the metadata do not
describe the same place (a moved table, a bucket alias, an unexpected scheme): there every file
would look unreferenced, and deleting them would destroy the table. ``classify`` splits the
unreferenced files into deletable ones and ones still within the grace period: a writer's files
are unreferenced until its commit lands, so only files older than the grace may go.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from lakepub.errors import UserError
from lakepub.maintenance.filestore import FileInfo, Location, split_location


class LocationMismatch(UserError):
    """The files listed under a table location do not match the locations its metadata uses."""


@dataclass
class Classified:
    """Unreferenced files of one table, split by age, plus the ones expired snapshots left."""

    deletable: list[FileInfo] = field(default_factory=list)
    young: list[FileInfo] = field(default_factory=list)

    @property
    def deletable_bytes(self) -> int:
        return sum(f.size for f in self.deletable)


def check_listing(table_name: str, location: str, metadata_location: str, listing: list[FileInfo],
                  referenced: Iterable[str]) -> None:
    """Raise LocationMismatch unless the listing and the metadata agree on where the table lives.

    * every listed file must be inside the table location (same scheme, authority and folder);
    * a referenced file with the same path but another scheme or authority than a listed one means
      the two sides spell locations differently: refuse (Iceberg's prefix-mismatch "error" mode);
    * ``metadata_location``, a metadata file loaded before the listing started, must have been
      listed if it lies inside the table location (a newer one may legitimately be missing).
    """
    folder = split_location(location)
    listed_paths: dict[str, Location] = {}
    for info in listing:
        loc = split_location(info.path)
        if not loc.is_under(folder):
            raise LocationMismatch(f"{table_name}: listed file {info.path} is not under the table location "
                                   f"{location}; deleted nothing")
        listed_paths[loc.path] = loc
    for ref in referenced:
        ref_loc = split_location(ref)
        same_path = listed_paths.get(ref_loc.path)
        if same_path is not None and (same_path.scheme, same_path.authority) != (ref_loc.scheme, ref_loc.authority):
            raise LocationMismatch(f"{table_name}: metadata references {ref} but the listing has {same_path}; "
                                   "scheme or authority differ; deleted nothing")
    current = split_location(metadata_location)
    if current.is_under(folder) and current.path not in listed_paths:
        raise LocationMismatch(f"{table_name}: the metadata file {metadata_location} is not among the "
                               f"files listed under {location}; deleted nothing")


def check_not_nested(table_name: str, location: str, others: Mapping[str, str]) -> None:
    """Raise LocationMismatch if another table lives at or inside this table's location: its
    files would be listed here and, referenced only by its own metadata, look orphaned."""
    folder = split_location(location)
    for name, other in sorted(others.items()):
        loc = split_location(other)
        same = (loc.scheme, loc.authority, loc.path.rstrip("/")) == (
            folder.scheme, folder.authority, folder.path.rstrip("/"))
        if name != table_name and (same or loc.is_under(folder)):
            raise LocationMismatch(f"{table_name}: table {name} lives at {other}, inside its location {location}; "
                                   "deleted nothing")


def classify(listing: Iterable[FileInfo], referenced: set[str], cutoff: float) -> Classified:
    """Unreferenced listed files: deletable if modified before ``cutoff`` (epoch s), else young."""
    out = Classified()
    for info in listing:
        if str(split_location(info.path)) in referenced:
            continue
        (out.deletable if info.mtime < cutoff else out.young).append(info)
    return out
