"""The workspace as the quick path sees it: a remembered configuration, the SQLite catalog's rows
read with ``sqlite3`` and the tables' metadata JSON read with ``json``.

``remember(ws)`` (called by the full path of ``status``/``log``/``query`` once it has loaded the
configuration and opened the catalog) writes ``.lakepub/quick/workspace.json``: what the quick
path needs of ``lakepub.yaml`` and ``catalog/`` (namespace, catalog name, the SQLite file
SQLAlchemy opened, the warehouse, the dataset names), stamped with the sha256 of the bytes of
``lakepub.yaml`` and of every file under the catalog folder. ``QuickWorkspace.open`` recomputes
that stamp and uses the record only when it matches, so any edit of a definition, a contract or
the configuration sends the next command down the full path (which validates it and remembers it
again). Only the embedded default qualifies: a ``sql`` catalog on a SQLite file, a local
warehouse, no ``${VAR}`` in ``lakepub.yaml``; anything else (PostgreSQL, Glue, REST, S3) is never
remembered and always takes the full path.

``QuickTable`` offers what ``lakepub.store.record`` walks (``metadata.snapshots``,
``metadata.current_snapshot_id``, ``current_snapshot()``, each snapshot's summary properties), as
pyiceberg's ``load_table`` would give it: the catalog row's current metadata location, never a
file no pointer names. A metadata file pyiceberg would read differently (gzip-compressed, remote)
is not read here: ``Unsupported`` sends the command down the full path.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakepub.store.record import latest_record

CONFIG_FILE = "lakepub.yaml"
RECORD = Path(".lakepub") / "quick" / "workspace.json"
VERSION = 2  # 2: "partners" (DUAL_WRITE views) recorded
RETIRED_PROPERTY = "lakepub.retired"  # lifecycle/retirement.py


class Unsupported(Exception):
    """The quick path cannot answer exactly: the full path must run."""


@dataclass(frozen=True)
class Summary:
    additional_properties: dict[str, str]


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    parent_snapshot_id: int | None
    sequence_number: int
    timestamp_ms: int
    summary: Summary | None


@dataclass(frozen=True)
class Metadata:
    snapshots: list[Snapshot]
    current_snapshot_id: int | None
    properties: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class QuickTable:
    """A table's current metadata, read from the location the catalog row names."""

    metadata_location: str
    metadata: Metadata
    raw: dict[str, Any] = field(default_factory=dict, repr=False)  # the metadata JSON (schemas, location)

    def current_snapshot(self) -> Snapshot | None:
        cid = self.metadata.current_snapshot_id
        return next((s for s in self.metadata.snapshots if s.snapshot_id == cid), None) if cid is not None else None


def fingerprint(root: Path, catalog_dir: str) -> str:
    """sha256 over ``lakepub.yaml`` and every file under the catalog folder (names and bytes)."""
    digest = hashlib.sha256((root / CONFIG_FILE).read_bytes())
    folder = root / catalog_dir
    for dirpath, _, filenames in sorted(_walk(folder)):
        for name in sorted(filenames):
            path = Path(dirpath) / name
            digest.update(b"\0" + str(path.relative_to(folder)).encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _walk(folder: Path):
    """``os.walk`` into symlinked folders too (the configuration loader globs through a symlinked
    ``catalog/datasets`` or ``contracts``), each real folder once (a link to an ancestor ends)."""
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        yield dirpath, dirnames, filenames


def find_root(start: Path) -> Path:
    """``config.find_root`` without its error: the nearest folder holding ``lakepub.yaml``."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder
    raise Unsupported("no workspace")  # the full path says so, exit 2


class QuickWorkspace:
    """The remembered configuration of a workspace, valid for its current files."""

    def __init__(self, root: Path, record: dict[str, Any]):
        self.root = root
        self.record = record
        self.namespace: str = record["namespace"]
        self.datasets: list[str] = record["datasets"]
        self.derived: list[str] = record["derived"]
        self._db: sqlite3.Connection | None = None
        self._tables: dict[str, QuickTable | None] = {}  # read once per command

    @classmethod
    def open(cls, path: Path) -> "QuickWorkspace":
        root = find_root(Path(path))
        try:
            record = json.loads((root / RECORD).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise Unsupported("nothing remembered") from None
        if not isinstance(record, dict) or record.get("version") != VERSION or record.get("root") != str(root):
            raise Unsupported("remembered for another workspace or version")
        if fingerprint(root, record["catalog_dir"]) != record["fingerprint"]:
            raise Unsupported("configuration changed since")
        link = record.get("sqlite_link")
        if not isinstance(link, str) or str(Path(link).resolve()) != record["sqlite"]:
            raise Unsupported("the catalog's SQLite path resolves to another file now")  # a symlink re-pointed
        folder = record.get("warehouse_link")  # a relative or plain-path warehouse: resolved on each load
        if folder is not None and str(Path(folder[0]).resolve()) != folder[1]:
            raise Unsupported("the warehouse folder resolves to another folder now")  # the sandbox would differ
        return cls(root, record)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def metadata_location(self, table: str) -> str | None:
        """The catalog row's current metadata location of ``<namespace>.<table>``, or None."""
        if self._db is None:
            uri = Path(self.record["sqlite"]).as_uri() + "?mode=ro"
            try:
                self._db = sqlite3.connect(uri, uri=True, timeout=5)
            except sqlite3.Error:
                raise Unsupported("catalog database unreadable") from None
        try:
            row = self._db.execute(
                "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? "
                "AND table_name = ?", (self.record["catalog_name"], self.namespace, table)).fetchone()
        except sqlite3.Error:
            raise Unsupported("catalog database unreadable") from None
        return row[0] if row else None

    def table(self, table: str) -> QuickTable | None:
        if table not in self._tables:
            location = self.metadata_location(table)
            self._tables[table] = None if location is None else load_table(location)
        return self._tables[table]


def local_path(location: str) -> Path:
    if location.startswith("file://"):
        location = location[len("file://"):]
    if not location.startswith("/") or location.endswith(".gz.metadata.json"):
        raise Unsupported(f"not a local plain metadata file: {location}")
    return Path(location)


def load_table(location: str) -> QuickTable:
    try:
        raw = json.loads(local_path(location).read_bytes())
    except (OSError, ValueError):
        raise Unsupported("metadata unreadable here") from None  # the full path names the problem
    if raw.get("format-version") not in (2,):
        raise Unsupported("format version")
    snapshots = []
    for s in raw.get("snapshots") or []:
        summary = s.get("summary")
        props = {k: v for k, v in summary.items() if k != "operation"} if isinstance(summary, dict) else None
        snapshots.append(Snapshot(int(s["snapshot-id"]), s.get("parent-snapshot-id"), int(s.get("sequence-number", 0)),
                                  int(s["timestamp-ms"]), Summary(props) if props is not None else None))
    current = raw.get("current-snapshot-id")
    return QuickTable(location, Metadata(snapshots, None if current in (None, -1) else int(current),
                                         dict(raw.get("properties") or {})), raw)


def stamp(path: Path) -> str | None:
    """The configuration stamp taken by the full path *before* it loads the configuration (so a
    file edited while it loads is never remembered as the one it loaded); None if unreadable."""
    try:
        import yaml  # the full path has it loaded anyway

        root = find_root(Path(path))
        raw = yaml.safe_load((root / CONFIG_FILE).read_text(encoding="utf-8"))
        folder = raw.get("catalog_dir", "catalog") if isinstance(raw, dict) else None
        return fingerprint(root, folder) if isinstance(folder, str) else None
    except Exception:  # noqa: BLE001 - no stamp: nothing remembered
        return None


def remember(ws: Any, stamp: str | None) -> None:
    """Write the quick path's record of ``ws`` (a full ``Workspace`` whose catalog is open), when
    its configuration qualifies and the files still carry ``stamp``, the stamp taken before the
    configuration was loaded; never fails the command that calls it."""
    try:
        _remember(ws, stamp)
    except Exception:  # noqa: BLE001 - a record not written only means the full path next time
        pass


def _remember(ws: Any, stamp: str | None) -> None:
    config = ws.config
    root = Path(config.root)
    if stamp is None or stamp != fingerprint(root, str(config.catalog_dir)):
        return  # edited while loading (or unreadable): the next full run remembers it
    if "$" in (root / CONFIG_FILE).read_text(encoding="utf-8"):
        return  # ${VAR} expansions depend on the environment: not remembered
    catalog = ws.__dict__.get("catalog")  # opened by the command (never opened just for this)
    engine = getattr(catalog, "engine", None)
    if engine is None or engine.url.get_backend_name() != "sqlite" or not engine.url.database:
        return
    if type(catalog).__name__ != "SqlCatalog" or config.catalog.get("type", "sql") != "sql":
        return
    warehouse = str(config.catalog.get("warehouse", ""))
    if not (warehouse.startswith("file://") or warehouse.startswith("/")):
        return
    if any(k.startswith(("s3.", "py-io-impl")) for k in config.catalog):
        return
    record = {
        "version": VERSION,
        "root": str(root),
        "catalog_dir": str(config.catalog_dir),
        "fingerprint": stamp,
        "sqlite": str(Path(engine.url.database).resolve()),
        "sqlite_link": _sqlite_as_written(root, config.catalog.get("uri", "")),
        "catalog_name": config.catalog_name,
        "namespace": config.namespace,
        "catalog": {str(k): str(v) for k, v in config.catalog.items()},
        "datasets": sorted(config.datasets),
        "derived": list(config.derived),
        "partners": _partner_names(config),
        "warehouse_link": _warehouse_as_written(root, warehouse),
    }
    write_json(root / RECORD, record)


def _sqlite_as_written(root: Path, resolved_uri: str) -> str | None:
    """The SQLite path of ``lakepub.yaml`` before its symlinks are resolved (a relative one joined
    to the root: ``config._resolve`` resolves it on every load; an absolute one SQLAlchemy opens
    as written): the quick path checks it still resolves to the file it remembered."""
    import yaml
    from sqlalchemy.engine import make_url

    written = str((yaml.safe_load((root / CONFIG_FILE).read_text(encoding="utf-8")) or {})["catalog"]["uri"])
    database = make_url(written).database
    if written.startswith("sqlite:////") and database == make_url(resolved_uri).database:
        return database
    if not database or str((root / database).resolve()) != make_url(resolved_uri).database:
        raise ValueError("not the path the configuration resolved")  # not remembered
    return str(root / database)


def _warehouse_as_written(root: Path, resolved: str) -> list[str] | None:
    """[the warehouse path of ``lakepub.yaml`` joined to the root, the folder it resolves to now]
    when ``config._resolve`` resolves it (a path, not a URI), else None."""
    import yaml

    from lakepub.config import local_location

    written = str((yaml.safe_load((root / CONFIG_FILE).read_text(encoding="utf-8")) or {})["catalog"]["warehouse"])
    if "://" in written:
        return None
    folder = (root / written).resolve()
    if local_location(folder) != resolved:
        raise ValueError("not the folder the configuration resolved")  # re-pointed meanwhile: not remembered
    return [str(root / written), str(folder)]


def _partner_names(config: Any) -> list[str]:
    """``dual.view_names`` + ``dual.kept_names``: the ``<dataset>__v<MAJOR>`` views ``lakepub query``
    adds beside the datasets (DUAL_WRITE partners, old versions kept by a swap); functions of the
    configuration's files, so valid while the stamp is."""
    from lakepub.publish.dual import kept_names, view_names

    return [*view_names(config), *kept_names(config)]


def write_json(path: Path, doc: Any) -> None:
    """Atomically replace ``path`` with ``doc`` (a reader sees the old or the new record)."""
    text = json.dumps(doc)  # key order kept: a status dict prints in its order
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, tmp.with_name(path.name))


def retirement(table: QuickTable | None) -> tuple[str, int, float] | None:
    """``lifecycle.retirement.retirement_of``: (state, at_ms, grace_s) of a retired table, else None
    (an unreadable record still counts as retired, with an infinite grace)."""
    text = table.metadata.properties.get(RETIRED_PROPERTY) if table is not None else None
    if not text:
        return None
    try:
        raw = json.loads(text)
        return str(raw.get("state", "retired")), int(raw["at_ms"]), float(raw["grace_s"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return "retired", 0, float("inf")


def committed_guess(config: Any, dataset: str, source: str) -> dict[str, int] | None:
    """The position of ``source`` that ``lakepub run dataset`` will most likely find, read without
    pyiceberg or the remembered record (the newest lakepub record of a table of the dataset's
    entity, through its row in a SQLite catalog and the metadata JSON), for
    ``LandingSource.prefetch``: a guess, never a position anything is published at. {} when no
    table of the entity exists yet; None when it cannot tell (another catalog, remote metadata, any
    error), and the prefetch then parses nothing."""
    try:
        uri = str(config.catalog.get("uri", ""))
        if config.catalog.get("type", "sql") != "sql" or not uri.startswith("sqlite:"):
            return None
        from sqlalchemy.engine import make_url  # loaded with the configuration already

        database = make_url(uri).database
        if not database or database.startswith(":memory:"):
            return None
        path = Path(database).resolve()
        if not path.exists():
            return {}  # no catalog yet: pyiceberg creates it on first use
        db = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True, timeout=5)
        try:
            if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'iceberg_tables'").fetchone() is None:
                return {}
        finally:
            db.close()
        qw = QuickWorkspace(Path(config.root), {"namespace": config.namespace, "datasets": [], "derived": [],
                                                "sqlite": str(path), "catalog_name": config.catalog_name})
        try:
            tables = [t for spec in config.group(dataset).datasets if (t := qw.table(spec.name)) is not None]
        finally:
            qw.close()
        records = [r for t in tables if (r := latest_record(t)) is not None]  # type: ignore[arg-type]
        return dict(records[0].positions.get(source, {})) if records else ({} if not tables else None)
    except Exception:  # noqa: BLE001 - a wrong guess only costs the prefetch
        return None
