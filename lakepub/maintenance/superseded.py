"""Superseded table folders: what an offline rebuild leaves behind, found and deleted.

An offline rebuild (``lakepub reconcile`` of a derived dataset, ``lakepub rebuild`` of a base one)
writes the new data version into its own table ``<X>__rebuild_<12 hex>``, in its own folder next
to the published table's, and ``store.commit.swap_table`` then points the published table's
catalog row at the rebuild's metadata and drops the rebuild's row. From then on the published
table lives in the rebuild's folder, and its former folder (``<X>/``, or an earlier
``<X>__rebuild_<hex>/``) is referenced by nothing. The per-table janitor only cleans inside the
folders of tables the catalog has, so without this module those files would stay forever.

Invariant: a folder is deleted only if all of these hold, checked in this order:

* its name is ``X`` or ``X__rebuild_<12 hex>`` for a dataset name X the run covers, and it lies
  directly in a namespace folder (the parent folder of a table of the workspace's namespace);
  nothing else there is ever touched;
* it is not, does not contain and is not inside the location of any table the catalog has, in
  any namespace. An in-progress rebuild is a catalog table, so its folder is protected;
* every file in it was modified before ``now - grace`` (``--older-than``): ``create_table``
  writes a folder before the catalog row exists;
* it was first seen superseded at least ``grace`` ago: readers of the old version may still be
  reading its files, however old they are, and nothing records when the swap happened. The first
  janitor run that finds a folder otherwise deletable writes a marker file ``MARKER`` into it
  (status ``marked``) and a later run deletes it once the marker is older than the grace; the
  marker's time is an upper bound on the swap's. With a zero grace (``--older-than 0s``) no
  marker is needed: the run's ``now`` is the first sighting and it deletes at once;
* the catalog, read again right before deleting, still has no table there.

Only the files listed are deleted (through ``filestore``, so S3 works too); a file written after
the listing is never considered, and it keeps its folder (``prune`` removes empty folders only).
``dry_run`` reports and deletes nothing.

Cost: one catalog listing plus one ``load_table`` per table (twice), one non-recursive listing of
each namespace folder and one recursive listing of each matching folder; nothing is read from
tables. On the test workspaces this is a few milliseconds next to the per-table scans.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError

from lakepub.maintenance.filestore import FileInfo, FileStore, Location, filestore_for, split_location

MARKER = "lakepub-superseded-since"  # written by the janitor into a superseded folder it first sees
REBUILD_SUFFIX = re.compile(r"__rebuild_[0-9a-f]{12}")  # lakepub.derive.rebuild.rebuild_name's form


@dataclass
class SupersededFolder:
    """One folder found: its dataset, files and bytes, and what happened to it.

    ``status``: ``deleted``, ``would delete`` (dry run), ``young`` (a file within the grace: kept),
    ``marked`` (first seen now: deletable one grace later; ``would mark`` in a dry run),
    ``claimed`` (a table appeared there before the deletion: kept) or ``failed``.
    ``first_seen``: when the janitor first found it superseded (its marker's time, else ``now``)."""

    folder: str
    dataset: str
    files: int
    bytes: int
    newest_mtime: float
    first_seen: float
    status: str = "would delete"
    files_removed: int = 0
    bytes_removed: int = 0
    failed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return asdict(self)


def table_locations(catalog: Catalog, namespace: str | tuple[str, ...]) -> dict[str, str]:
    """{table name: location} of every table in the namespace (the janitor's table list too)."""
    out = {}
    for ident in catalog.list_tables(namespace):
        try:
            out[".".join(ident)] = catalog.load_table(ident).location()
        except NoSuchTableError:  # dropped meanwhile
            continue
    return out


def catalog_locations(catalog: Catalog) -> dict[str, str]:
    """{table name: location} of every table of every namespace of the catalog."""
    out: dict[str, str] = {}
    for namespace in catalog.list_namespaces():
        out.update(table_locations(catalog, namespace))
    return out


def dataset_of(folder_name: str, names: Iterable[str]) -> str | None:
    """The dataset whose (former or rebuilt) table folder ``folder_name`` is, or None."""
    for name in names:
        if folder_name == name:
            return name
        if folder_name.startswith(name) and REBUILD_SUFFIX.fullmatch(folder_name[len(name):]):
            return name
    return None


def _parent(loc: Location) -> Location:
    path = loc.path.rstrip("/")
    return Location(loc.scheme, loc.authority, path.rsplit("/", 1)[0] if "/" in path else "/")


def _child(parent: Location, name: str) -> Location:
    return Location(parent.scheme, parent.authority, parent.path.rstrip("/") + "/" + name)


def protected(folder: Location, locations: Mapping[str, str]) -> str | None:
    """The name of a catalog table living at, inside or around ``folder``, or None."""
    for name, location in sorted(locations.items()):
        loc = split_location(location)
        same = (loc.scheme, loc.authority, loc.path.rstrip("/")) == (folder.scheme, folder.authority,
                                                                      folder.path.rstrip("/"))
        if same or loc.is_under(folder) or folder.is_under(loc):
            return name
    return None


def sweep(catalog: Catalog, namespace: str, names: Iterable[str], props: Mapping[str, str], *, now: float,
          grace: float, dry_run: bool, cache: dict[str, FileStore] | None = None) -> list[SupersededFolder]:
    """Find (and unless ``dry_run``, delete) the superseded folders of the datasets ``names``;
    see the module docstring. Young folders are reported with status ``young``."""
    names = sorted(set(names), key=lambda n: (-len(n), n))  # the longest name first: `a_b` before `a`
    cache = {} if cache is None else cache
    locations = catalog_locations(catalog)
    parents = {str(_parent(split_location(loc))): _parent(split_location(loc))
               for ident, loc in locations.items() if ident.rsplit(".", 1)[0] == namespace}
    found: list[tuple[SupersededFolder, FileStore, list[FileInfo]]] = []
    for _key, parent in sorted(parents.items()):
        store = filestore_for(str(parent), props, cache)
        for child in store.folders(str(parent)):
            dataset = dataset_of(child, names)
            folder = _child(parent, child)
            if dataset is None or protected(folder, locations) is not None:
                continue
            listing = list(store.list(str(folder)))
            listing = [f for f in listing if split_location(f.path).is_under(folder)]  # never outside it
            marker = str(_child(folder, MARKER))
            marks = [f.mtime for f in listing if str(split_location(f.path)) == marker]
            newest = max((f.mtime for f in listing if str(split_location(f.path)) != marker), default=0.0)
            item = SupersededFolder(str(folder), dataset, len(listing), sum(f.size for f in listing), newest,
                                    first_seen=min(marks, default=now))
            if not listing:  # an emptied folder (a hard delete's, a crashed sweep's): nothing to read
                pass
            elif newest >= now - grace:
                item.status = "young"
            elif item.first_seen > now - grace:
                item.status = "would mark" if dry_run else "marked"
                if not dry_run and not marks:
                    store.touch(marker)  # first sighting; deleted with the folder a grace later
            found.append((item, store, listing))
    if dry_run:
        return [item for item, _store, _listing in found]
    fresh = catalog_locations(catalog)  # right before deleting: a table created there since wins
    for item, store, listing in found:
        if item.status in ("young", "marked"):
            continue
        if protected(split_location(item.folder), fresh) is not None:
            item.status = "claimed"
            continue
        failed = set(store.delete([f.path for f in listing]))
        store.prune(item.folder)
        item.failed = sorted(failed)
        item.files_removed = sum(1 for f in listing if f.path not in failed)
        item.bytes_removed = sum(f.size for f in listing if f.path not in failed)
        item.status = "failed" if failed else "deleted"
    return [item for item, _store, _listing in found]
