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

Catalog keys are passed unchanged except that ``${VAR}`` is expanded from the environment and a
relative SQLite path or a relative warehouse folder is resolved against the workspace folder, so a
workspace can be moved or cloned (the SQLite URI percent-encoded, the warehouse a ``file://`` URI
or, for a path holding ``#``, ``?`` or ``%``, the bare path: see ``local_location``). Any other
catalog (PostgreSQL URI, S3 warehouse, Glue, REST) is used exactly as written; a ``file:``
warehouse holding one of those characters is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy.engine import make_url

from lakepub.errors import ConfigError, UnknownDataset

CONFIG_FILE = "lakepub.yaml"
PARTITION_GRAINS = ("day", "month", "year")


@dataclass(frozen=True)
class Contract:
    """A versioned data contract, referenced as ``contracts/<name>@vX.Y``."""

    name: str
    version: str
    fields: dict[str, str]
    primary_key: tuple[str, ...]

    @property
    def schema_ref(self) -> str:
        return f"contracts/{self.name}@v{self.version}"


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset of the declarative catalog (``catalog/datasets/<name>.yaml``)."""

    name: str
    source: str
    contract: Contract
    partition: str = "month"
    description: str = ""


@dataclass(frozen=True)
class WorkspaceConfig:
    root: Path
    catalog: dict[str, str]
    namespace: str = "lakepub"
    catalog_dir: Path = Path("catalog")
    landing: Path = Path("landing")
    commit: str = "auto"
    key_index: bool = True  # keep the ledger's key index (local warehouses): store/key_index.py
    datasets: dict[str, DatasetSpec] = field(default_factory=dict)

    @property
    def catalog_name(self) -> str:
        return self.catalog.get("name", "lakepub")

    def catalog_properties(self) -> dict[str, str]:
        return {k: v for k, v in self.catalog.items() if k != "name"}

    def dataset(self, name: str) -> DatasetSpec:
        try:
            return self.datasets[name]
        except KeyError:
            known = ", ".join(sorted(self.datasets)) or "none"
            raise UnknownDataset(
                f"unknown dataset '{name}' (defined in {self.root / self.catalog_dir / 'datasets'}: {known})"
            ) from None

    def landing_dir(self, source: str, override: Path | None = None) -> Path:
        """The landing folder of one source: its partition subfolders hold JSONL segments."""
        return Path(override) if override is not None else self.root / self.landing / source


def find_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` holding ``lakepub.yaml``."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder
    raise ConfigError(f"no {CONFIG_FILE} in {start} or any parent folder; run 'lakepub init' first")


def load_workspace(root: Path) -> WorkspaceConfig:
    root = Path(root).resolve()
    raw = _read_yaml(root / CONFIG_FILE)
    catalog = raw.get("catalog")
    if not isinstance(catalog, dict) or not catalog:
        raise ConfigError(f"{root / CONFIG_FILE}: 'catalog' must be a mapping of pyiceberg catalog properties")
    resolved = {str(k): _resolve(str(k), os.path.expandvars(str(v)), root) for k, v in catalog.items()}
    catalog_dir = Path(raw.get("catalog_dir", "catalog"))
    cfg = WorkspaceConfig(
        root=root,
        catalog=resolved,
        namespace=str(raw.get("namespace", "lakepub")),
        catalog_dir=catalog_dir,
        landing=Path(raw.get("landing", "landing")),
        commit=str(raw.get("commit", "auto")),
        key_index=_flag(raw, "key_index", True, root / CONFIG_FILE),
        datasets=load_datasets(root / catalog_dir),
    )
    return cfg


def load_datasets(catalog_dir: Path) -> dict[str, DatasetSpec]:
    contracts = {c.schema_ref: c for c in _load_contracts(catalog_dir / "contracts")}
    datasets: dict[str, DatasetSpec] = {}
    folder = catalog_dir / "datasets"
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        raw = _read_yaml(path)
        name = _required(raw, "name", path)
        ref = _required(raw, "contract", path)
        if ref not in contracts:
            raise ConfigError(f"{path}: contract '{ref}' not found in {catalog_dir / 'contracts'}")
        partition = str(raw.get("partition", "month"))
        if partition not in PARTITION_GRAINS:
            raise ConfigError(f"{path}: partition must be one of {', '.join(PARTITION_GRAINS)}, got '{partition}'")
        if not name.isidentifier():
            raise ConfigError(f"{path}: dataset name '{name}' must be a SQL identifier (letters, digits, _)")
        datasets[name] = DatasetSpec(
            name=name,
            source=_required(raw, "source", path),
            contract=contracts[ref],
            partition=partition,
            description=str(raw.get("description", "")),
        )
    return datasets


def _load_contracts(folder: Path) -> list[Contract]:
    out = []
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        raw = _read_yaml(path)
        fields = raw.get("fields") or {}
        if not isinstance(fields, dict):
            raise ConfigError(f"{path}: 'fields' must map field names to types")
        constraints = raw.get("constraints") or {}
        out.append(
            Contract(
                name=_required(raw, "name", path),
                version=_required(raw, "version", path),
                fields={str(k): str(v) for k, v in fields.items()},
                primary_key=tuple(constraints.get("primary_key", ())),
            )
        )
    return out


def _flag(raw: dict[str, Any], key: str, default: bool, path: Path) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: '{key}' must be true or false, not {value!r}")
    return value


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a YAML mapping")
    return data


def _required(raw: dict[str, Any], key: str, path: Path) -> str:
    value = raw.get(key)
    if value in (None, ""):
        raise ConfigError(f"{path}: '{key}' is required")
    return str(value)


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
