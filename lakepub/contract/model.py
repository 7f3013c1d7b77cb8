"""A data contract: the typed fields of an entity's events and the roles some of them play.

``catalog/contracts/<name>@vX.Y.yaml``, referenced by datasets as ``contracts/<name>@vX.Y``::

    name: customers
    version: "1.0"
    entity:
      key: [customer_id]        # one or more fields (string, int, long or date); never null
      version: version          # int or long >= 1, assigned by the source, monotonic per key
      deleted: deleted          # optional boolean field; omit when entities are never deleted
    fields:
      customer_id: string
      version: long
      country: {type: string, nullable: true}   # may be null on a live event
      plan: string              # required on live events; may be null on a delete
      deleted: boolean
    extra_fields: refuse        # refuse (default) | ignore: an input field not declared here
                                # (a contract without ``entity:`` defaults to ignore, as it always did)

Invariants checked when the file is read (each violation is one ``ConfigError`` line naming the
file and the key): field names are identifiers and not the ledger's own columns; every type is
one of ``contract.types``; the key, version and deleted fields are declared, of the right types
and never nullable. A contract without ``entity:`` (the original orders contract) takes its
roles from ``constraints.primary_key`` (the key is the primary key without ``version``) and a
boolean field named ``deleted``, so it keeps working as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field, field_validator

from lakepub.contract.types import INTEGER_TYPES, KEY_TYPES, FieldType
from lakepub.errors import ConfigError
from lakepub.yamlfile import File, parse, read_yaml

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Columns the ledger adds to the contract's fields (store/layout.py): a field may not shadow them.
RESERVED = ("batch_id", "floor", "k1", "k2", "history", "compacted")


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: FieldType
    nullable: bool = False  # may be null on a live event (any non-key field may be null on a delete)
    description: str = ""
    unit: str | None = None


@dataclass(frozen=True)
class Entity:
    key: tuple[str, ...]
    version: str
    deleted: str | None = None


@dataclass(frozen=True)
class Contract:
    """A versioned data contract, referenced as ``contracts/<name>@v<version>``."""

    name: str
    version: str
    entity: Entity
    fields: tuple[FieldSpec, ...]
    extra_fields: str = "refuse"
    description: str = ""
    primary_key: tuple[str, ...] = ()
    path: Path | None = None

    @property
    def schema_ref(self) -> str:
        return f"contracts/{self.name}@v{self.version}"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def field(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def state_names(self) -> tuple[str, ...]:
        """Every field but the key and the version: the state an event carries (deleted included)."""
        skip = {*self.entity.key, self.entity.version}
        return tuple(f.name for f in self.fields if f.name not in skip)

    @property
    def arrow_schema(self) -> pa.Schema:
        """The validated events' schema: the key, version and deleted fields are never null."""
        required = {*self.entity.key, self.entity.version, self.entity.deleted}
        return pa.schema([pa.field(f.name, f.type.arrow, nullable=f.name not in required) for f in self.fields])

    @property
    def is_orders_v1(self) -> bool:
        """The shape of the original orders contract, whose batch digests predate contracts
        (``identity.events_digest`` keeps computing them the same way for it)."""
        return ([(f.name, f.type.name) for f in self.fields]
                == [("order_id", "string"), ("version", "long"), ("day", "date"), ("cents", "long"),
                    ("deleted", "boolean")]
                and self.entity == Entity(("order_id",), "version", "deleted"))


# --- the file ---------------------------------------------------------------------------------


class _FieldFile(File):
    type: str
    nullable: bool = False
    description: str = ""
    unit: str | None = None


class _EntityFile(File):
    key: list[str]
    version: str
    deleted: str | None = None


class _Constraints(File):
    primary_key: list[str] = Field(default_factory=list)
    not_null: list[str] = Field(default_factory=list)


class _ContractFile(File):
    name: str
    version: str
    description: str = ""
    entity: _EntityFile | None = None
    fields: dict = Field(default_factory=dict)
    extra_fields: Literal["refuse", "ignore"] | None = None  # default: refuse (ignore for the original format)
    constraints: _Constraints = Field(default_factory=_Constraints)

    @field_validator("version", mode="before")
    @classmethod
    def _numeric_version(cls, value: Any) -> Any:  # `version: 1.0` is a YAML float
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    @field_validator("fields", "constraints", mode="before")
    @classmethod
    def _empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("description", mode="before")
    @classmethod
    def _no_description(cls, value: Any) -> Any:
        return "" if value is None else value


_SPECIAL = {("fields",): "must map field names to types"}


def load_contracts(folder: Path) -> list[Contract]:
    """Every ``*.yaml`` contract of a folder (none if it does not exist)."""
    return [load_contract(path) for path in sorted(folder.glob("*.yaml"))] if folder.is_dir() else []


def load_contract(path: Path) -> Contract:
    raw: _ContractFile = parse(_ContractFile, read_yaml(path), path, _SPECIAL)
    for key in ("name", "version"):
        if not getattr(raw, key):
            raise ConfigError(f"{path}: '{key}' is required")
    fields = tuple(_field(path, name, spec) for name, spec in raw.fields.items())
    if not fields:
        raise ConfigError(f"{path}: 'fields' must declare at least the entity's key and version")
    declared = {f.name: f for f in fields}
    entity = _entity(path, raw, declared)
    # The original format (no ``entity:``) dropped undeclared input fields; it keeps doing so.
    extra = raw.extra_fields or ("ignore" if raw.entity is None else "refuse")
    return Contract(name=raw.name, version=raw.version, entity=entity, fields=fields, extra_fields=extra,
                    description=raw.description, primary_key=tuple(raw.constraints.primary_key), path=path)


def _field(path: Path, name: Any, spec: Any) -> FieldSpec:
    where = f"fields.{name}"
    if not isinstance(name, str) or not IDENTIFIER.match(name):
        raise ConfigError(f"{path}: '{where}': a field name must be an identifier (letters, digits, _; not first a digit)")
    if name in RESERVED:
        raise ConfigError(f"{path}: '{where}': '{name}' is a column of the ledger; rename the field")
    if isinstance(spec, str):
        spec, type_key = {"type": spec}, where
    elif isinstance(spec, dict):
        type_key = f"{where}.type"
    else:
        raise ConfigError(f"{path}: '{where}' must be a type name or a mapping with 'type', not {spec!r}")
    parsed: _FieldFile = parse(_FieldFile, spec, path, prefix=f"{where}.")
    try:
        ftype = FieldType.parse(parsed.type)
    except ValueError as exc:
        raise ConfigError(f"{path}: '{type_key}': {exc}") from None
    return FieldSpec(name, ftype, parsed.nullable, parsed.description or "", parsed.unit)


def _entity(path: Path, raw: _ContractFile, declared: dict[str, FieldSpec]) -> Entity:
    if raw.entity is not None:
        entity = Entity(tuple(raw.entity.key), raw.entity.version, raw.entity.deleted)
        prefix = "entity"
    else:  # the original contract format: roles from the primary key and a field named deleted
        pk = list(raw.constraints.primary_key)
        if "version" not in declared or not [k for k in pk if k != "version"]:
            raise ConfigError(f"{path}: 'entity' is required: the entity's key fields, its version field and "
                              "(optionally) its deleted flag, e.g. entity: {key: [id], version: version, deleted: deleted}")
        deleted = "deleted" if "deleted" in declared and declared["deleted"].type.name == "boolean" else None
        entity = Entity(tuple(k for k in pk if k != "version"), "version", deleted)
        prefix = "constraints.primary_key"
    if not entity.key:
        raise ConfigError(f"{path}: '{prefix}.key' must name at least one field")
    if len(set(entity.key)) != len(entity.key):
        raise ConfigError(f"{path}: '{prefix}.key' names a field twice")
    for name in entity.key:
        f = _declared(path, f"{prefix}.key", name, declared)
        if f.type.name not in KEY_TYPES:
            raise ConfigError(f"{path}: '{prefix}.key': key field '{name}' is {f.type}; a key must be one of "
                              f"{', '.join(KEY_TYPES)} (values with one exact encoding)")
        _not_nullable(path, f, "a key field")
    version = _declared(path, f"{prefix}.version", entity.version, declared)
    if entity.version != "version" and "version" in declared:
        raise ConfigError(f"{path}: 'fields.version': the ledger and its key index name the version role 'version'; "
                          f"rename this field, or make it the entity's version")
    if version.type.name not in INTEGER_TYPES or version.name in entity.key:
        raise ConfigError(f"{path}: '{prefix}.version': '{version.name}' must be an int or long field outside the key")
    _not_nullable(path, version, "the version field")
    if entity.deleted is not None:
        deleted = _declared(path, f"{prefix}.deleted", entity.deleted, declared)
        if deleted.type.name != "boolean" or deleted.name in (*entity.key, entity.version):
            raise ConfigError(f"{path}: '{prefix}.deleted': '{deleted.name}' must be a boolean field outside the key "
                              "and version")
        _not_nullable(path, deleted, "the deleted flag")
    return entity


def _declared(path: Path, where: str, name: str, declared: dict[str, FieldSpec]) -> FieldSpec:
    if name not in declared:
        raise ConfigError(f"{path}: '{where}': '{name}' is not a declared field (fields: {', '.join(declared)})")
    return declared[name]


def _not_nullable(path: Path, f: FieldSpec, role: str) -> None:
    if f.nullable:
        raise ConfigError(f"{path}: 'fields.{f.name}.nullable': {role} is never null; remove 'nullable: true'")
