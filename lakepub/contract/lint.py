"""``lakepub contract lint``: seed 001's design rules (sections V and VIII) over contract files.

A finding is ``file:line rule-id level message``; the line is the YAML line of the key the rule
is about (``yamlfile.key_lines``: composed nodes' ``start_mark``). Rules (``RULES``):

* SCHEMA.VALID            the file loads as a contract (any exit-2 problem, with its line)
* SCHEMA.REF_FORMAT       ``contracts/<name>@vX.Y`` matches ``^contracts/[a-z0-9_\\-]+@v\\d+\\.\\d+$``;
                          the file is named ``<name>@vX.Y.yaml`` (warning)
* SCHEMA.COMPAT_ALLOWED   compat_mode is forward | backward | both | break
* SCHEMA.EVOLUTION_DECLARED compat_mode and evolution_policy are written out (warning; seed 001 XI)
* SCHEMA.PK_NOT_NULL      primary key columns (constraints.primary_key, else the entity's key and
                          version) are never nullable and, where constraints.not_null is given, listed in it
* SCHEMA.UNITS_DECLARED   every numeric column but the entity key and version declares a unit
                          (constraints.units or the field's ``unit``; not two different ones)
* SCHEMA.UNITS_SI         every declared unit is SI / accepted with SI / a currency (units.py)
* SCHEMA.ENUM_POLICY      every enum states its new-value policy (unknown | reject | map-to-other)
* SCHEMA.DEFAULT_DISGUISED an ``unknown`` default is not one of the enum's ordinary values
* SCHEMA.TIME_UTC         time columns are UTC: a timestamp declares no other zone; a string or
                          number named like a time (``*_at``, ``*_time``, ``ts``) declares ``timezone: UTC``
* SCHEMA.TIME_WINDOW      a contract with time columns states validation.window and .lateness (warning)
* SCHEMA.UNIQUE_DEDUP     a unique column set has no nullable column (nulls escape uniqueness) (warning)
* SCHEMA.SHADOW_REQUIRED_ON_BREAK compat_mode break needs shadow.enabled: true
* SCHEMA.OWNER_DECLARED   owner.producer and owner.data are named (warning; seed 002)

Seed 001's SCHEMA.METROLOGY_CHECKDIM is about a pipeline file (``$.pipeline.metrology``), not a
contract, and is not checked here. Inside a declared ``grace_period`` (start <= today <= end)
errors are reported as warnings (seed 001 IX), each saying so.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from lakepub.contract.model import Contract, load_contract
from lakepub.contract.spec import COMPAT_MODES
from lakepub.contract.units import unit_problem
from lakepub.errors import ConfigError
from lakepub.yamlfile import key_lines, line_of, read_text

RULES = {
    "SCHEMA.VALID": "the file loads as a contract",
    "SCHEMA.REF_FORMAT": "schema_ref is contracts/<name>@vX.Y, in a file named after it",
    "SCHEMA.COMPAT_ALLOWED": "compat_mode is forward, backward, both or break",
    "SCHEMA.EVOLUTION_DECLARED": "compat_mode and evolution_policy are declared",
    "SCHEMA.PK_NOT_NULL": "primary key columns are declared and never null",
    "SCHEMA.UNITS_DECLARED": "numeric columns declare a unit",
    "SCHEMA.UNITS_SI": "units are SI (or accepted with SI, or a currency)",
    "SCHEMA.ENUM_POLICY": "enums state a new-value policy: unknown, reject or map-to-other",
    "SCHEMA.DEFAULT_DISGUISED": "an unknown default is not an ordinary enum value",
    "SCHEMA.TIME_UTC": "time columns are UTC",
    "SCHEMA.TIME_WINDOW": "validation states the window and lateness policy of time columns",
    "SCHEMA.UNIQUE_DEDUP": "unique column sets have no nullable column",
    "SCHEMA.SHADOW_REQUIRED_ON_BREAK": "compat_mode break needs shadow.enabled",
    "SCHEMA.OWNER_DECLARED": "owner names the producer and the data owner",
}
REF_FORMAT = re.compile(r"^contracts/[a-z0-9_\-]+@v\d+\.\d+$")
_TIME_NAME = re.compile(r"(^|_)(ts|time|timestamp|datetime|at)$")


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    rule: str
    level: str  # error | warning
    message: str

    def text(self) -> str:
        return f"{self.file}:{self.line} {self.rule} {self.level} {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def contract_files(paths: list[Path]) -> list[Path]:
    """Files as given, folders as their ``*.yaml`` files (sorted); a missing path is exit 2."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out += sorted(path.glob("*.yaml"))
        elif path.is_file():
            out.append(path)
        else:
            raise ConfigError(f"{path} not found")
    return out


def lint_paths(paths: list[Path], today: dt.date | None = None) -> list[Finding]:
    today = today or dt.datetime.now(dt.timezone.utc).date()
    return [f for path in contract_files(paths) for f in lint_file(path, today)]


def lint_file(path: Path, today: dt.date) -> list[Finding]:
    try:
        text = read_text(path)
    except ConfigError as exc:  # not UTF-8, not a file
        message = str(exc).removeprefix(f"{path}: ")
        at = re.search(r"at line (\d+)", message)
        return [Finding(str(path), int(at.group(1)) if at else 1, "SCHEMA.VALID", "error", message)]
    out = _Out(str(path), key_lines(text))
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        return [Finding(str(path), line, "SCHEMA.VALID", "error", f"not valid YAML ({' '.join(str(exc).split())})")]
    if not isinstance(data, dict):
        return [Finding(str(path), 1, "SCHEMA.VALID", "error", "expected a YAML mapping")]
    _raw_rules(path, data, out)
    try:
        contract = load_contract(path)
    except ConfigError as exc:
        message = str(exc).removeprefix(f"{path}: ")
        key = _key_of(message)
        if not (key and key[0] in out.reported):  # already said by a raw rule
            out.add(key or (), "SCHEMA.VALID", "error", message)
        return out.findings
    _model_rules(contract, out)
    grace = contract.terms.grace_period
    if grace is not None and grace.active(today):
        note = f" (error downgraded: inside grace_period {grace.start}..{grace.end})"
        return [replace(f, level="warning", message=f.message + note) if f.level == "error" else f
                for f in out.findings]
    return out.findings


class _Out:
    def __init__(self, file: str, lines: dict[tuple[str, ...], int]):
        self.file, self.lines = file, lines
        self.findings: list[Finding] = []
        self.reported: set[str] = set()

    def add(self, path: tuple[str, ...], rule: str, level: str, message: str) -> None:
        if path:
            self.reported.add(path[0])
        self.findings.append(Finding(self.file, line_of(self.lines, path), rule, level, message))


def _key_of(message: str) -> tuple[str, ...] | None:
    m = re.search(r"'([A-Za-z_][\w.]*)'", message)
    return tuple(m.group(1).split(".")) if m else None


def _raw_rules(path: Path, data: dict[str, Any], out: _Out) -> None:
    name, version = data.get("name"), data.get("version")
    version = str(version) if isinstance(version, (int, float)) and not isinstance(version, bool) else version
    ref = data.get("schema_ref") or f"contracts/{name}@v{version}"
    where = ("schema_ref",) if data.get("schema_ref") else ("name",)
    if not isinstance(ref, str) or not REF_FORMAT.match(ref):
        out.add(where, "SCHEMA.REF_FORMAT", "error",
                f"schema_ref {ref!r} does not match contracts/<name>@vX.Y (name: a-z 0-9 _ -; version: major.minor)")
    elif path.name != f"{ref.removeprefix('contracts/')}.yaml":
        out.add(where, "SCHEMA.REF_FORMAT", "warning",
                f"the file of {ref} should be named {ref.removeprefix('contracts/')}.yaml, not {path.name}")
    mode = data.get("compat_mode")
    if "compat_mode" in data and mode not in COMPAT_MODES:
        out.add(("compat_mode",), "SCHEMA.COMPAT_ALLOWED", "error",
                f"compat_mode {mode!r} is not one of {', '.join(COMPAT_MODES)}")
    missing = [k for k in ("compat_mode", "evolution_policy") if k not in data]
    if missing:
        out.add((), "SCHEMA.EVOLUTION_DECLARED", "warning",
                f"{' and '.join(missing)} not declared (compatibility is checked as backward with the default policy)")


def _model_rules(c: Contract, out: _Out) -> None:
    t, k = c.terms, c.terms.constraints
    fields = {f.name: f for f in c.fields}
    # SCHEMA.PK_NOT_NULL
    pk = list(k.primary_key) or [*c.entity.key, c.entity.version]  # the entity's key and version
    for col in pk:
        if fields[col].nullable:
            out.add(("fields", col, "nullable"), "SCHEMA.PK_NOT_NULL", "error",
                    f"primary key column '{col}' is nullable")
        elif k.not_null and col not in k.not_null:
            out.add(("constraints", "not_null"), "SCHEMA.PK_NOT_NULL", "error",
                    f"primary key column '{col}' is missing from constraints.not_null")
    # SCHEMA.UNITS_DECLARED / SCHEMA.UNITS_SI
    identity = {*c.entity.key, c.entity.version}
    for f in c.fields:
        listed = k.units.get(f.name)
        if f.unit and listed and f.unit != listed:
            out.add(("constraints", "units", f.name), "SCHEMA.UNITS_DECLARED", "error",
                    f"'{f.name}' has unit {f.unit!r} on the field and {listed!r} in constraints.units")
        elif f.type.is_numeric and f.name not in identity and not (f.unit or listed):
            out.add(("fields", f.name), "SCHEMA.UNITS_DECLARED", "error",
                    f"numeric column '{f.name}' ({f.type}) declares no unit (constraints.units or unit:; "
                    "1 for a count or ratio)")
    declared_units = [(("fields", f.name, "unit"), f.name, f.unit) for f in c.fields if f.unit]
    declared_units += [(("constraints", "units", col), col, u) for col, u in k.units.items()]
    for where, col, unit in declared_units:
        problem = unit_problem(unit)
        if problem:
            out.add(where, "SCHEMA.UNITS_SI", "error", f"unit {unit!r} of '{col}' {problem}")
    # SCHEMA.ENUM_POLICY / SCHEMA.DEFAULT_DISGUISED
    for i, rule in enumerate(k.enum):
        if rule.on_new is None:
            out.add(("constraints", "enum", str(i)), "SCHEMA.ENUM_POLICY", "error",
                    f"enum of '{rule.col}' states no new-value policy (on_new: unknown | reject | map-to-other)")
        d = fields[rule.col].default
        if d is not None and d.kind == "unknown" and d.value in rule.values and d.value != rule.other:
            out.add(("fields", rule.col, "default"), "SCHEMA.DEFAULT_DISGUISED", "error",
                    f"the 'unknown' default {d.value!r} of '{rule.col}' is an ordinary value of its enum; use null "
                    "or the enum's declared other value")
    # SCHEMA.TIME_UTC / SCHEMA.TIME_WINDOW
    times = []
    for f in c.fields:
        if f.type.name == "timestamp":
            times.append(f.name)
            if f.timezone not in (None, "UTC"):
                out.add(("fields", f.name, "timezone"), "SCHEMA.TIME_UTC", "error",
                        f"timestamp '{f.name}' declares time zone {f.timezone!r}; time columns are UTC")
        elif _TIME_NAME.search(f.name) and f.type.kind != "date":
            times.append(f.name)
            if f.timezone != "UTC":
                out.add(("fields", f.name), "SCHEMA.TIME_UTC", "error",
                        f"'{f.name}' looks like a time but is {f.type} without 'timezone: UTC' "
                        "(declare it timestamp, or state its zone)")
    if times and not (t.validation.window and t.validation.lateness):
        out.add(("validation",), "SCHEMA.TIME_WINDOW", "warning",
                f"time column(s) {', '.join(times)}: state validation.window and validation.lateness")
    # SCHEMA.UNIQUE_DEDUP
    for i, cols in enumerate(k.unique):
        nullable = [col for col in cols if fields[col].nullable]
        if nullable:
            out.add(("constraints", "unique", str(i)), "SCHEMA.UNIQUE_DEDUP", "warning",
                    f"unique set {cols} holds nullable column(s) {nullable}: rows with nulls escape it")
    # SCHEMA.SHADOW_REQUIRED_ON_BREAK
    if t.compat_mode == "break" and not t.shadow.enabled:
        out.add(("compat_mode",), "SCHEMA.SHADOW_REQUIRED_ON_BREAK", "error",
                "compat_mode break needs shadow.enabled: true (a shadow comparison before the switch)")
    # SCHEMA.OWNER_DECLARED
    missing = [r for r in ("producer", "data") if t.owner is None or not getattr(t.owner, r)]
    if missing:
        out.add(("owner",), "SCHEMA.OWNER_DECLARED", "warning",
                f"owner.{' and owner.'.join(missing)} not named (who fixes the pipeline, who explains the meaning)")
