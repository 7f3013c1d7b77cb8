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

A field's mapping may also say ``description``, ``unit``, ``time_meaning``, ``timezone``,
``deprecated`` and ``default: {value, kind: business | unknown | history_only}``; the change
protocol's sections (compat_mode, evolution_policy, constraints, validation, shadow, lineage_bind,
owner, freshness, grace_period, status, consumers, change) are typed in ``contract/spec.py`` and
kept on ``Contract.terms``; ``Contract.sha256`` hashes the canonical form (``canonical.py``).

Invariants checked when the file is read (each violation is one ``ConfigError`` line naming the
file and the key): field names are identifiers and not the ledger's own columns; every type is
one of ``contract.types``; the key, version and deleted fields are declared, of the right types
and never nullable; every column a constraint, consumer or semantic change names is declared; a
default's value has the field's type; a written ``schema_ref`` is the name's and version's. A contract without ``entity:`` (the original orders contract) takes its
roles from ``constraints.primary_key`` (the key is the primary key without ``version``) and a
boolean field named ``deleted``, so it keeps working as written.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field as dc_field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field, field_validator

from lakepub.contract.canonical import canonical_form, canonical_json
from lakepub.contract.spec import Constraints, DefaultKind, Terms
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
    default: "Default | None" = None  # what a reader fills in when a writer lacks the field
    time_meaning: str | None = None   # for time fields: what the instant is (event, ingest, ...)
    timezone: str | None = None       # declared time zone of a time field (timestamps are UTC)
    deprecated: bool = False          # step one of deprecate-then-remove


@dataclass(frozen=True)
class Default:
    """A field default and what it means (seed 002): ``business`` a real business value,
    ``unknown`` a placeholder for "not known", ``history_only`` only for reading old rows (values
    filled from it are flagged ``inferred_from_schema_default``)."""

    value: Any
    kind: str


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
    terms: Terms = dc_field(default_factory=Terms, compare=False)  # (sha256 compares it) compat mode, constraints, shadow, owner, ... (spec.py)
    sha256: str = ""  # of the canonical form (canonical.py); recorded on every published snapshot
    canonical: str = dc_field(default="", compare=False, repr=False)  # that form, as JSON text

    @property
    def schema_ref(self) -> str:
        return f"contracts/{self.name}@v{self.version}"

    @property
    def constraints(self) -> Constraints:
        return self.terms.constraints

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


class _DefaultFile(File):
    value: Any = None
    kind: DefaultKind


class _FieldFile(File):
    type: str
    nullable: bool = False
    description: str = ""
    unit: str | None = None
    default: _DefaultFile | None = None
    time_meaning: str | None = None
    timezone: str | None = None
    deprecated: bool = False


class _EntityFile(File):
    key: list[str]
    version: str
    deleted: str | None = None


class _ContractFile(Terms):
    name: str
    version: str
    description: str = ""
    entity: _EntityFile | None = None
    fields: dict = Field(default_factory=dict)
    extra_fields: Literal["refuse", "ignore"] | None = None  # default: refuse (ignore for the original format)

    @field_validator("version", mode="before")
    @classmethod
    def _numeric_version(cls, value: Any) -> Any:  # `version: 1.0` is a YAML float
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    @field_validator("fields", mode="before")
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
    canonical = canonical_json(canonical_form(raw, fields))
    terms = Terms.model_construct(**{k: getattr(raw, k) for k in Terms.model_fields})
    _check_terms(path, raw, declared)
    return Contract(name=raw.name, version=raw.version, entity=entity, fields=fields, extra_fields=extra,
                    description=raw.description, primary_key=tuple(raw.constraints.primary_key), path=path,
                    terms=terms, sha256=hashlib.sha256(canonical.encode("utf-8")).hexdigest(), canonical=canonical)


def _check_terms(path: Path, raw: _ContractFile, declared: dict[str, FieldSpec]) -> None:
    """Every column a constraint, consumer or semantic change names is a declared field, and a
    declared ``schema_ref`` is the one the name and version make."""
    ref = f"contracts/{raw.name}@v{raw.version}"
    if raw.schema_ref is not None and raw.schema_ref != ref:
        raise ConfigError(f"{path}: 'schema_ref' is {raw.schema_ref!r} but name and version make {ref!r}")
    c = raw.constraints
    named: list[tuple[str, str]] = [("constraints.primary_key", n) for n in c.primary_key]
    named += [("constraints.partition_by", n) for n in c.partition_by]
    named += [(f"constraints.unique.{i}", n) for i, cols in enumerate(c.unique) for n in cols]
    named += [("constraints.not_null", n) for n in c.not_null]
    named += [(f"constraints.range.{i}.col", r.col) for i, r in enumerate(c.range)]
    named += [(f"constraints.enum.{i}.col", r.col) for i, r in enumerate(c.enum)]
    named += [(f"constraints.units.{n}", n) for n in c.units]
    named += [(f"consumers.{i}.columns", n) for i, cons in enumerate(raw.consumers) for n in cons.columns]
    named += [(f"change.semantic.{i}.field", s.field) for i, s in enumerate(raw.change.semantic)]
    for where, name in named:
        _declared(path, where, name, declared)
    for i, r in enumerate(c.range):
        if not declared[r.col].type.is_numeric:
            raise ConfigError(f"{path}: 'constraints.range.{i}.col': '{r.col}' is {declared[r.col].type}; "
                              "a range applies to a numeric field")


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
    default = None
    if parsed.default is not None:
        default = Default(parsed.default.value, parsed.default.kind)
        if default.value is not None and not _fits(ftype, default.value):
            raise ConfigError(f"{path}: '{where}.default.value': {default.value!r} is not a {ftype} value")
    return FieldSpec(name, ftype, parsed.nullable, parsed.description or "", parsed.unit, default,
                     parsed.time_meaning, parsed.timezone, parsed.deprecated)


def _fits(ftype: FieldType, value: Any) -> bool:
    """A default's value is of the field's type (YAML's own scalars; dates and times as text)."""
    if isinstance(value, bool):
        return ftype.name == "boolean"
    if isinstance(value, int):
        return ftype.is_numeric
    if isinstance(value, float):
        return ftype.kind in ("float", "double", "decimal")
    if isinstance(value, str):
        return ftype.name == "string" or ftype.kind in ("date", "timestamp", "decimal")
    return ftype.kind in ("date", "timestamp") and hasattr(value, "isoformat")


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
