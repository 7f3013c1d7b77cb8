"""Workspace configuration (``lakepub.yaml``) and the declarative catalog (``catalog/``).

``lakepub.yaml``::

    catalog:            # passed to pyiceberg's load_catalog(name, **properties)
      name: lakepub
      type: sql
      uri: sqlite:///.lakepub/catalog.db
      warehouse: .lakepub/warehouse
    namespace: lakepub  # Iceberg namespace of the published and state tables
    commit: auto        # atomic (SQL catalogs) | ordered (any catalog); auto picks
    catalog_dir: catalog
    landing: landing
    cache:              # local copies of the key index of an object-store warehouse (store/cache.py)
      folder: .lakepub/cache
      limit_mb: 4096

Catalog keys are passed unchanged except that ``${VAR}`` is expanded from the environment (one
not set is refused: it would be used as the literal text) and a
relative SQLite path or a relative warehouse folder is resolved against the workspace folder, so a
workspace can be moved or cloned (the SQLite URI percent-encoded, the warehouse a ``file://`` URI
or, for a path holding ``#``, ``?`` or ``%``, the bare path: see ``local_location``). Any other
catalog (PostgreSQL URI, S3 warehouse, Glue, REST) is used exactly as written; a ``file:``
warehouse holding one of those characters is refused.

The files are checked against pydantic models that forbid unknown keys (a misspelt ``comit:``
would otherwise be silently ignored) and wrong types; ``catalog:`` stays a free mapping. Every
problem is one ``ConfigError`` line naming the file and the key path (``constraints.primary_key``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator
from sqlalchemy.engine import make_url

from lakepub.contract.model import Contract, load_contracts
from lakepub.errors import ConfigError, UnknownDataset, UserError
from lakepub.projection.base import Entity, Kind, kind_of
from lakepub.projection.partitioning import PartitionBy
from lakepub.positions import NAME_RULE, valid_name
from lakepub.yamlfile import File as _File, parse, read_yaml

AUDIT_TABLE = "lakepub_audit"  # the audit table (store/audit.py): no dataset may take its name

CONFIG_FILE = "lakepub.yaml"


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset of the declarative catalog (``catalog/datasets/<name>.yaml``): what it
    publishes (its projection ``kind``, partitioned by ``partition``) from which entity's events."""

    name: str
    source: str
    contract: Contract
    kind: Kind
    entity: str  # datasets naming the same entity share its ledger and publish together
    description: str = ""
    write_mode: str = "copy-on-write"  # or merge-on-read (kind current): publish/merge_on_read.py
    fold_threshold: float | None = None  # merge-on-read: a deleted share that rewrites a partition whole
    path: Path | None = None  # the YAML file that defines it, for errors naming file and key

    @property
    def partition(self) -> PartitionBy:
        return self.kind.partition


@dataclass(frozen=True)
class EntityGroup:
    """The datasets of one entity: one ledger, one source, one contract, published together."""

    name: str
    source: str
    contract: Contract
    datasets: tuple[DatasetSpec, ...]

    @property
    def dataset_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.datasets)


@dataclass(frozen=True)
class WorkspaceConfig:
    root: Path
    catalog: dict[str, str]
    namespace: str = "lakepub"
    catalog_dir: Path = Path("catalog")
    landing: Path = Path("landing")
    commit: str = "auto"
    key_index: bool = True  # keep the ledger's key index: store/key_index.py
    cache_folder: Path = Path(".lakepub/cache")  # local copies of an object store's index runs: store/cache.py
    cache_limit_mb: int = 4096
    datasets: dict[str, DatasetSpec] = field(default_factory=dict)
    # Derived datasets (``projection.kind: sql``, lakepub/derive/model.py), in graph order: they
    # read published datasets, have no source, contract or entity, and are not in ``datasets``.
    derived: dict[str, Any] = field(default_factory=dict)

    @property
    def cache_dir(self) -> Path:
        """The cache folder (``cache.folder``, relative to the workspace folder)."""
        return self.root / self.cache_folder

    def group(self, dataset: str) -> EntityGroup:
        """The entity ``dataset`` publishes, with every dataset of it (in name order)."""
        spec = self.dataset(dataset)
        members = tuple(d for _, d in sorted(self.datasets.items()) if d.entity == spec.entity)
        return EntityGroup(spec.entity, spec.source, spec.contract, members)

    @property
    def catalog_name(self) -> str:
        return self.catalog.get("name", "lakepub")

    def catalog_properties(self) -> dict[str, str]:
        return {k: v for k, v in self.catalog.items() if k != "name"}

    def dataset(self, name: str) -> DatasetSpec:
        try:
            return self.datasets[name]
        except KeyError:
            if name in self.derived:
                raise UserError(f"dataset '{name}' is derived ({self.derived[name].path}: projection.kind: sql): it "
                                "has no source, events or ledger; 'lakepub plan' and 'lakepub reconcile' compute it "
                                "from its inputs, 'lakepub query' reads it") from None
            known = ", ".join(sorted(self.datasets)) or "none"
            raise UnknownDataset(
                f"unknown dataset '{name}' (defined in {self.root / self.catalog_dir / 'datasets'}: {known})"
            ) from None

    def definition(self, name: str) -> Any:
        """Any dataset of the catalog by name: a base ``DatasetSpec`` or a derived one
        (``lakepub.derive.model.DerivedSpec``); UnknownDataset (exit 2) otherwise. For what every
        dataset has (its table, partitioning, path): state, wait, retire, restore."""
        if name in self.derived:
            return self.derived[name]
        return self.dataset(name)

    def landing_dir(self, source: str, override: Path | None = None) -> Path:
        """The landing folder of one source: its partition subfolders hold JSONL segments."""
        return Path(override) if override is not None else self.root / self.landing / source


def open_config(path: str | Path = ".", *, search_parents: bool = True) -> WorkspaceConfig:
    """The configuration of the workspace holding ``path`` (its folder or a parent, unless
    ``search_parents=False``); ConfigError (exit 2) when there is none (``Workspace.open``)."""
    path = Path(path)
    root = find_root(path) if search_parents else path.resolve()
    if not (root / CONFIG_FILE).is_file():
        raise ConfigError(f"{root / CONFIG_FILE} not found; run 'lakepub init' first")
    return load_workspace(root)


def find_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` holding ``lakepub.yaml``."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder
    raise ConfigError(f"no {CONFIG_FILE} in {start} or any parent folder; run 'lakepub init' first")


# --- the files' models: unknown keys and wrong types are refused --------------------------------


class _CacheFile(_File):
    folder: str = ".lakepub/cache"
    limit_mb: int = Field(4096, ge=1)


class _WorkspaceFile(_File):
    catalog: dict  # free: passed to pyiceberg's load_catalog
    namespace: str = "lakepub"
    catalog_dir: str = "catalog"
    landing: str = "landing"
    commit: Literal["auto", "atomic", "ordered"] = "auto"
    key_index: bool = True
    cache: _CacheFile | None = None


class _DatasetFile(_File):
    name: str
    source: str
    contract: str
    entity: str | None = None
    projection: dict | None = None
    partition: str | None = None
    description: str = ""
    write_mode: Literal["copy-on-write", "merge-on-read"] = "copy-on-write"
    fold_threshold: float | None = None

    @field_validator("description", mode="before")
    @classmethod
    def _no_description(cls, value: Any) -> Any:
        return "" if value is None else value


_SPECIAL = {("catalog",): "must be a mapping of pyiceberg catalog properties"}


def _parse(model: type[BaseModel], raw: dict[str, Any], path: Path) -> Any:
    return parse(model, raw, path, _SPECIAL)


# --- loading ----------------------------------------------------------------------------------


def load_workspace(root: Path) -> WorkspaceConfig:
    root = Path(root).resolve()
    path = root / CONFIG_FILE
    raw = read_yaml(path)
    if not isinstance(raw.get("catalog"), dict) or not raw["catalog"]:
        raise ConfigError(f"{path}: 'catalog' must be a mapping of pyiceberg catalog properties")
    parsed: _WorkspaceFile = _parse(_WorkspaceFile, raw, path)
    if not all(part.strip() for part in parsed.namespace.split(".")):
        raise ConfigError(f"{path}: 'namespace' must be an Iceberg namespace (names separated by dots, none of them "
                          f"blank), not {parsed.namespace!r}")
    resolved = {str(k): _resolve(str(k), _expand(str(k), str(v), path), root) for k, v in parsed.catalog.items()}
    catalog_dir = Path(parsed.catalog_dir)
    derived: dict[str, Any] = {}
    datasets = load_datasets(root / catalog_dir, derived, root / ".lakepub" / "derive")
    return WorkspaceConfig(
        root=root,
        catalog=resolved,
        namespace=parsed.namespace,
        catalog_dir=catalog_dir,
        landing=Path(parsed.landing),
        commit=parsed.commit,
        key_index=parsed.key_index,
        cache_folder=Path(parsed.cache.folder if parsed.cache else ".lakepub/cache"),
        cache_limit_mb=parsed.cache.limit_mb if parsed.cache else 4096,
        datasets=datasets,
        derived=_graph_ordered(datasets, derived),
    )


def load_datasets(catalog_dir: Path, derived: dict[str, Any] | None = None,
                  cache_dir: Path | None = None) -> dict[str, DatasetSpec]:
    """The base datasets of ``catalog/datasets``; derived ones (``projection.kind: sql``) go to
    ``derived`` (left out when it is None), their checked queries cached in ``cache_dir``."""
    contracts = {c.schema_ref: c for c in load_contracts(catalog_dir / "contracts")}
    checked = None
    datasets: dict[str, DatasetSpec] = {}
    folder = catalog_dir / "datasets"
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        document = read_yaml(path)
        if _is_derived(document):
            if derived is not None:
                from lakepub.derive.model import QueryCache, load_derived

                checked = checked or QueryCache(cache_dir)
                spec = load_derived(path, document, checked)
                if spec.name in derived:
                    raise ConfigError(f"{path}: dataset '{spec.name}' is also defined in {derived[spec.name].path}")
                derived[spec.name] = spec
            continue
        raw: _DatasetFile = _parse(_DatasetFile, document, path)
        for key in ("name", "source", "contract"):
            _required(getattr(raw, key), key, path)
        if raw.contract not in contracts:
            raise ConfigError(f"{path}: contract '{raw.contract}' not found in {catalog_dir / 'contracts'}")
        if not raw.name.isidentifier():
            raise ConfigError(f"{path}: dataset name '{raw.name}' must be a SQL identifier (letters, digits, _)")
        if raw.name.endswith(("__ledger", "__rejects")) or raw.name == AUDIT_TABLE:
            raise ConfigError(f"{path}: 'name': '{raw.name}' is the name of one of lakepub's own tables "
                              "(entity ledgers end in __ledger, rejects tables in __rejects; the audit table); "
                              "choose another name")
        if not valid_name(raw.source):  # it names the landing folder landing/<source>/
            raise ConfigError(f"{path}: source name '{raw.source}' is not valid: use {NAME_RULE}")
        entity = raw.entity or raw.name
        if not entity.isidentifier():
            raise ConfigError(f"{path}: 'entity': '{entity}' must be an identifier (it names the entity's ledger)")
        if raw.name in datasets:
            raise ConfigError(f"{path}: dataset '{raw.name}' is also defined in {datasets[raw.name].path}")
        contract = contracts[raw.contract]
        definition = {k: v for k, v in (("projection", raw.projection), ("partition", raw.partition)) if v is not None}
        if "projection" not in definition and not contract.is_orders_v1:
            raise ConfigError(f"{path}: 'projection' is required (kind: aggregate or current): only a dataset of the "
                              "original orders contract may leave it out")
        kind = kind_of(definition, entity_of(contract), where=str(path), dataset=raw.name)
        if raw.write_mode == "merge-on-read" and kind.name != "current":
            raise ConfigError(f"{path}: write_mode: merge-on-read is only for kind: current datasets (this one is "
                              f"kind: {kind.name}); remove write_mode or set it to copy-on-write")
        if raw.fold_threshold is not None:
            if kind.name != "current":  # kept, unused, while a current dataset is copy-on-write
                raise ConfigError(f"{path}: 'fold_threshold' is only for kind: current datasets written "
                                  f"merge-on-read (this one is kind: {kind.name}); remove it")
            if not 0.0 <= raw.fold_threshold <= 1.0:
                raise ConfigError(f"{path}: 'fold_threshold' must be between 0 and 1 (the deleted fraction of a "
                                  f"partition's stored rows), got {raw.fold_threshold}")
        datasets[raw.name] = DatasetSpec(name=raw.name, source=raw.source, contract=contract, kind=kind,
                                         entity=entity, description=raw.description, path=path,
                                         write_mode=raw.write_mode, fold_threshold=raw.fold_threshold)
    _check_entities(datasets)
    if checked is not None:
        checked.save()
    return datasets


def _is_derived(document: dict[str, Any]) -> bool:
    projection = document.get("projection")
    return isinstance(projection, dict) and projection.get("kind") == "sql"


def _graph_ordered(datasets: dict[str, DatasetSpec], derived: dict[str, Any]) -> dict[str, Any]:
    """The derived datasets checked against the whole graph, upstreams first."""
    if not derived:
        return {}
    from lakepub.derive.model import check_graph

    return {name: derived[name] for name in check_graph(datasets, derived)}


def entity_of(contract: Contract) -> Entity:
    """The contract's entity as the projection kinds see it."""
    e = contract.entity
    return Entity(contract.arrow_schema, e.key, e.version, e.deleted)


def _check_entities(datasets: dict[str, DatasetSpec]) -> None:
    """Datasets sharing an entity share its ledger (``<entity>__ledger``): one contract, one source."""
    first: dict[str, DatasetSpec] = {}
    for spec in datasets.values():
        other = first.setdefault(spec.entity, spec)
        for key, mine, theirs in (("contract", spec.contract.schema_ref, other.contract.schema_ref),
                                  ("source", spec.source, other.source)):
            if mine != theirs:
                raise ConfigError(f"{spec.path}: '{key}' is '{mine}' but '{other.name}' ({other.path}) of the same "
                                  f"entity '{spec.entity}' has '{theirs}': datasets of one entity share its ledger, "
                                  f"so they need one {key}")
        if spec.entity != spec.name and spec.entity in datasets and datasets[spec.entity].entity != spec.entity:
            raise ConfigError(f"{spec.path}: 'entity': '{spec.entity}' is a dataset of another entity; "
                              "choose another entity name")


def _required(value: str, key: str, path: Path) -> str:
    if not value:
        raise ConfigError(f"{path}: '{key}' is required")
    return value


def _expand(key: str, value: str, path: Path) -> str:
    """``value`` with ``${VAR}`` expanded; a ``${VAR}`` not set is refused (it would be used as
    the literal text: a warehouse folder named ``${VAR}``, a credential that is not one)."""
    for found in re.finditer(r"\$\{([^}]*)\}", value):
        if found.group(1) not in os.environ:
            raise ConfigError(f"{path}: 'catalog.{key}' uses {found.group(0)}, but the environment variable "
                              f"{found.group(1)!r} is not set; set it, or write the value in {path.name}")
    return os.path.expandvars(value)


def _resolve(key: str, value: str, root: Path) -> str:
    if key == "uri" and value.startswith("sqlite:///") and not value.startswith("sqlite:////"):
        url = make_url(value)
        if url.database and not url.database.startswith(":memory:"):
            # Built by SQLAlchemy, which percent-encodes the path: '#', '?' and '%' in a folder
            # name are then read back as themselves (with plain text, '?' would start the query).
            return url.set(database=str((root / url.database).resolve())).render_as_string(hide_password=False)
    if key == "warehouse" and value.startswith("file:") and (bad := [c for c in _URI_SYNTAX if c in value]):
        raise ConfigError(f"{root / CONFIG_FILE}: catalog warehouse {value!r} holds {bad[0]!r}, which pyiceberg "
                          "reads as URI syntax, not as part of the folder name; write the folder as a plain path "
                          "(absolute, or relative to the workspace)")
    if key == "warehouse" and "://" not in value:
        path = (root / value).resolve()
        path.mkdir(parents=True, exist_ok=True)
        return local_location(path)
    return value


# Characters that a URI reads as syntax (fragment, query, escape), not as part of a file name.
_URI_SYNTAX = "#?%"


def local_location(path: Path) -> str:
    """The location of a local folder as pyiceberg and DuckDB read it.

    ``file://`` plus the path, unless the path holds ``#``, ``?`` or ``%``: pyiceberg parses a
    ``file://`` location as a URI without percent-decoding it (``proj#1`` would become the file
    ``proj``, and ``proj%231`` a folder of that name), so such a path is given bare, which
    pyiceberg, DuckDB and the janitor all read as a local path, character for character.
    """
    text = str(path)
    return text if any(c in text for c in _URI_SYNTAX) else f"file://{text}"
