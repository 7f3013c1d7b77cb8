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

The files are checked against pydantic models that forbid unknown keys (a misspelt ``comit:``
would otherwise be silently ignored) and wrong types; ``catalog:`` stays a free mapping. Every
problem is one ``ConfigError`` line naming the file and the key path (``constraints.primary_key``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlalchemy.engine import make_url

from lakepub.errors import ConfigError, UnknownDataset
from lakepub.positions import NAME_RULE, valid_name

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
    path: Path | None = None  # the YAML file that defines it, for errors naming file and key


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


# --- the files' models: unknown keys and wrong types are refused --------------------------------


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _WorkspaceFile(_File):
    catalog: dict  # free: passed to pyiceberg's load_catalog
    namespace: str = "lakepub"
    catalog_dir: str = "catalog"
    landing: str = "landing"
    commit: Literal["auto", "atomic", "ordered"] = "auto"
    key_index: bool = True


class _DatasetFile(_File):
    name: str
    source: str
    contract: str
    partition: str = "month"
    description: str = ""

    @field_validator("description", mode="before")
    @classmethod
    def _no_description(cls, value: Any) -> Any:
        return "" if value is None else value


class _Constraints(_File):
    primary_key: list[str] = Field(default_factory=list)
    not_null: list[str] = Field(default_factory=list)


class _ContractFile(_File):
    name: str
    version: str
    fields: dict = Field(default_factory=dict)
    constraints: _Constraints = Field(default_factory=_Constraints)

    @field_validator("version", mode="before")
    @classmethod
    def _numeric_version(cls, value: Any) -> Any:  # `version: 1.0` is a YAML float
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    @field_validator("fields", "constraints", mode="before")
    @classmethod
    def _empty(cls, value: Any) -> Any:
        return {} if value is None else value


_KINDS = {"string_type": "a string", "bool_type": "true or false", "dict_type": "a mapping",
          "model_type": "a mapping", "model_attributes_type": "a mapping", "list_type": "a list"}
_SPECIAL = {("catalog",): "must be a mapping of pyiceberg catalog properties",
            ("fields",): "must map field names to types"}


def _parse(model: type[BaseModel], raw: dict[str, Any], path: Path) -> Any:
    """``raw`` as ``model``, or one ConfigError line naming the file and the key path."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(str(part) for part in err["loc"])
        key, kind, got = ".".join(loc), err["type"], _short(err.get("input"))
    if kind == "missing" or (got == "None" and len(loc) == 1 and model.model_fields[loc[0]].is_required()):
        raise ConfigError(f"{path}: '{key}' is required") from None
    if kind == "extra_forbidden":
        known = f" (known keys: {', '.join(model.model_fields)})" if len(loc) == 1 else ""
        raise ConfigError(f"{path}: unknown key '{key}'{known}") from None
    if loc in _SPECIAL:
        raise ConfigError(f"{path}: '{key}' {_SPECIAL[loc]}") from None
    if kind in _KINDS:
        raise ConfigError(f"{path}: '{key}' must be {_KINDS[kind]}, not {got}") from None
    if kind == "literal_error":
        raise ConfigError(f"{path}: '{key}' must be one of {err['ctx']['expected']}, not {got}") from None
    raise ConfigError(f"{path}: '{key}' {err['msg'].lower()}, not {got}") from None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- loading ----------------------------------------------------------------------------------


def load_workspace(root: Path) -> WorkspaceConfig:
    root = Path(root).resolve()
    path = root / CONFIG_FILE
    raw = _read_yaml(path)
    if not isinstance(raw.get("catalog"), dict) or not raw["catalog"]:
        raise ConfigError(f"{path}: 'catalog' must be a mapping of pyiceberg catalog properties")
    parsed: _WorkspaceFile = _parse(_WorkspaceFile, raw, path)
    resolved = {str(k): _resolve(str(k), os.path.expandvars(str(v)), root) for k, v in parsed.catalog.items()}
    catalog_dir = Path(parsed.catalog_dir)
    return WorkspaceConfig(
        root=root,
        catalog=resolved,
        namespace=parsed.namespace,
        catalog_dir=catalog_dir,
        landing=Path(parsed.landing),
        commit=parsed.commit,
        key_index=parsed.key_index,
        datasets=load_datasets(root / catalog_dir),
    )


def load_datasets(catalog_dir: Path) -> dict[str, DatasetSpec]:
    contracts = {c.schema_ref: c for c in _load_contracts(catalog_dir / "contracts")}
    datasets: dict[str, DatasetSpec] = {}
    folder = catalog_dir / "datasets"
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        raw: _DatasetFile = _parse(_DatasetFile, _read_yaml(path), path)
        for key in ("name", "source", "contract"):
            _required(getattr(raw, key), key, path)
        if raw.contract not in contracts:
            raise ConfigError(f"{path}: contract '{raw.contract}' not found in {catalog_dir / 'contracts'}")
        if raw.partition not in PARTITION_GRAINS:
            raise ConfigError(f"{path}: partition must be one of {', '.join(PARTITION_GRAINS)}, got '{raw.partition}'")
        if not raw.name.isidentifier():
            raise ConfigError(f"{path}: dataset name '{raw.name}' must be a SQL identifier (letters, digits, _)")
        if not valid_name(raw.source):  # it names the landing folder landing/<source>/
            raise ConfigError(f"{path}: source name '{raw.source}' is not valid: use {NAME_RULE}")
        datasets[raw.name] = DatasetSpec(
            name=raw.name,
            source=raw.source,
            contract=contracts[raw.contract],
            partition=raw.partition,
            description=raw.description,
            path=path,
        )
    return datasets


def _load_contracts(folder: Path) -> list[Contract]:
    out = []
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        raw: _ContractFile = _parse(_ContractFile, _read_yaml(path), path)
        out.append(
            Contract(
                name=_required(raw.name, "name", path),
                version=_required(raw.version, "version", path),
                fields={str(k): str(v) for k, v in raw.fields.items()},
                primary_key=tuple(raw.constraints.primary_key),
            )
        )
    return out


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


def _required(value: str, key: str, path: Path) -> str:
    if not value:
        raise ConfigError(f"{path}: '{key}' is required")
    return value


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
