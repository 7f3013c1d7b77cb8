"""``lakepub contract check OLD... NEW``: is NEW a safe change of OLD, in the direction its
``compat_mode`` names, and does its version number say what kind of change it is?

Structural compatibility is Avro-style schema resolution on Iceberg's types, with one contract
as the *writer* (the data) and the other as the *reader* (the code reading it):

* backward: NEW reads OLD's data (reader NEW, writer OLD); forward: OLD reads NEW's data; both:
  both, against every earlier version given (transitive, like Schema Registry's ``FULL_TRANSITIVE``);
  break: anything (structural and policy findings are warnings), but it is a breaking change
  (major version, ``shadow.enabled``); semantic changes still need their sign-off.
* A reader field the writer lacks is filled with its default, else null if nullable, else the
  reader cannot parse. A writer field the reader lacks is ignored. A type must be the same or an
  Iceberg promotion (int->long, float->double, decimal(p,s)->decimal(P,s) with P >= p); narrowing
  and scale changes are not. A writer that may write null into a required reader field breaks it.
  An enum symbol the reader does not know breaks it, unless the reader's ``on_new`` policy is
  unknown or map-to-other (then the value falls to that default: a warning).
* Key (entity key, version, primary key) and ``partition_by`` changes break every mode.
* ``evolution_policy``: remove_field forbid | deprecate-then-remove (the field must carry
  ``deprecated: true`` in OLD); change_type forbid refuses promotions too; add_field
  optional-by-default refuses a required new field without default.

Semantic changes cannot be seen structurally: a field's unit, description, time meaning or zone,
its default's value or kind (adding or dropping a default is structural), or a declared ``change.semantic`` entry is reported as *semantic*: an error until
NEW records a sign-off (``change.signoff``) and enables ``shadow``; then a warning (the shadow
comparison still has to pass before promotion).

Versions: NEW must be higher than the latest OLD; a minor bump only for a compatible change, a
major bump for a breaking one (a new major version starts a new compatibility line: its breaking
findings are warnings, published beside the old version, never in place). Every finding names its failure mode (old reader cannot parse,
new reader cannot parse old data, field becomes null, enum falls to default, join key changes,
partition pruning lost, metric drift) and the consumers it affects (``consumers.Affected``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field as dc_field, replace
from typing import Any, Callable, Iterable

from lakepub.contract.model import Contract, FieldSpec
from lakepub.contract.types import FieldType

OLD_CANNOT_PARSE = "old reader cannot parse"
NEW_CANNOT_PARSE = "new reader cannot parse old data"
BECOMES_NULL = "field becomes null"
ENUM_DEFAULT = "enum falls to default"
JOIN_KEY = "join key changes"
PRUNING = "partition pruning lost"
DRIFT = "metric drift"


@dataclass(frozen=True)
class Finding:
    rule: str
    kind: str  # structural | semantic | version | policy
    level: str  # error | warning | info
    message: str
    field: str | None = None
    failure_mode: str | None = None
    against: str = ""  # the OLD schema_ref this finding compares with
    breaking: bool = False  # incompatible in the checked direction(s): needs a major version
    consumers: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["consumers"] = list(self.consumers)
        return out


@dataclass
class CheckResult:
    old: list[str]
    new: str
    mode: str
    findings: list[Finding] = dc_field(default_factory=list)

    @property
    def breaking(self) -> bool:
        return any(f.breaking for f in self.findings)

    @property
    def ok(self) -> bool:
        return not any(f.level == "error" for f in self.findings)

    def as_dict(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "compat_mode": self.mode, "breaking": self.breaking,
                "ok": self.ok, "findings": [f.as_dict() for f in self.findings]}


def promotable(writer: FieldType, reader: FieldType) -> bool:
    """Iceberg's type promotions: what a reader of ``reader`` type can read from ``writer`` data."""
    if writer == reader:
        return True
    if (writer.name, reader.name) in (("int", "long"), ("float", "double")):
        return True
    return (writer.kind == reader.kind == "decimal" and writer.scale == reader.scale
            and reader.precision >= writer.precision)


def check(olds: list[Contract], new: Contract,
          affected: Callable[[Contract, str | None], Iterable[str]] = lambda c, f: ()) -> CheckResult:
    """Compare NEW with OLD versions (oldest first). ``affected(contract, field)`` names the
    consumers a change of ``field`` (None: every column) reaches."""
    mode = new.terms.mode
    previous = olds[-1]
    result = CheckResult([c.schema_ref for c in olds], new.schema_ref, mode)
    targets = olds if mode == "both" else [previous]
    out: list[Finding] = []
    for old in targets:
        directions = {"backward": [(new, old)], "forward": [(old, new)]}.get(mode, [(new, old), (old, new)])
        for reader, writer in directions:
            out += _resolve(reader, writer, reader is new, against=old.schema_ref)
        out += _keys(old, new)
    out += _policy(previous, new)
    out += _semantic(previous, new)
    if mode == "break" or _major(new) > _major(previous):
        # a new major version starts a new compatibility line: breaking is reported, not refused
        out = [replace(f, level="warning") if f.level == "error" and (f.breaking or f.kind == "policy") else f
               for f in out]
    out = _dedupe(out)
    out += _version(previous, new, any(f.breaking for f in out))
    result.findings = [replace(f, consumers=tuple(affected(new if f.field in new.names or f.field is None else previous,
                                                          f.field))) for f in out]
    return result


def reads_old_data(old: Contract, new: Contract) -> list[Finding]:
    """The findings of NEW reading OLD's data (the backward direction), whatever NEW's
    ``compat_mode``: what an in-place evolution needs, as the published tables keep the rows
    written under OLD and are read with NEW's schema (``publish/evolution.py``)."""
    return _resolve(new, old, True, against=old.schema_ref)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (f.rule, f.field, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _enum(contract: Contract, name: str):
    return next((e for e in contract.constraints.enum if e.col == name), None)


def _resolve(reader: Contract, writer: Contract, reader_is_new: bool, against: str) -> list[Finding]:
    """What goes wrong when ``reader`` reads data written under ``writer``."""
    cannot = NEW_CANNOT_PARSE if reader_is_new else OLD_CANNOT_PARSE
    who = f"{reader.schema_ref} reading {writer.schema_ref} data"
    out: list[Finding] = []
    written = {f.name: f for f in writer.fields}
    for rf in reader.fields:
        wf = written.get(rf.name)
        if wf is None:
            change = "added in" if reader_is_new else "removed in"
            other = reader.schema_ref if reader_is_new else writer.schema_ref
            if rf.default is not None:
                out.append(Finding("COMPAT.FIELD_DEFAULTED", "structural", "info",
                                   f"{who}: '{rf.name}' ({change} {other}) is filled from its {rf.default.kind} "
                                   f"default {rf.default.value!r}" + (" (flagged inferred_from_schema_default)"
                                                                      if rf.default.kind == "history_only" else ""),
                                   rf.name, BECOMES_NULL if rf.default.value is None else None, against))
            elif rf.nullable:
                out.append(Finding("COMPAT.FIELD_NULL", "structural", "info",
                                   f"{who}: '{rf.name}' ({change} {other}) reads as null", rf.name, BECOMES_NULL, against))
            else:
                rule = "COMPAT.FIELD_ADDED_REQUIRED" if reader_is_new else "COMPAT.FIELD_REMOVED_REQUIRED"
                out.append(Finding(rule, "structural", "error",
                                   f"{who}: '{rf.name}' ({change} {other}) is required, has no default and is not "
                                   "in the data (make it nullable or give it a default)", rf.name, cannot, against,
                                   breaking=True))
            continue
        if wf.type != rf.type and promotable(wf.type, rf.type):
            out.append(Finding("COMPAT.TYPE_PROMOTED", "structural", "info",
                               f"{who}: '{rf.name}' {wf.type} is read as {rf.type} (an Iceberg promotion)",
                               rf.name, None, against))
        elif not promotable(wf.type, rf.type):
            what = ("scale change" if wf.type.kind == rf.type.kind == "decimal" and wf.type.scale != rf.type.scale
                    else "narrowing" if promotable(rf.type, wf.type) else "type change")
            out.append(Finding("COMPAT.TYPE_CHANGED", "structural", "error",
                               f"{who}: '{rf.name}' is {wf.type} in the data and {rf.type} in the reader ({what}; "
                               "Iceberg promotes only int->long, float->double, decimal precision at equal scale)",
                               rf.name, cannot, against, breaking=True))
        if wf.nullable and not rf.nullable:
            out.append(Finding("COMPAT.NOW_REQUIRED", "structural", "error",
                               f"{who}: '{rf.name}' may be null in the data but is required by the reader",
                               rf.name, cannot, against, breaking=True))
        out += _enum_symbols(reader, writer, rf.name, who, cannot, against)
    return out


def _enum_symbols(reader: Contract, writer: Contract, name: str, who: str, cannot: str, against: str) -> list[Finding]:
    r_enum, w_enum = _enum(reader, name), _enum(writer, name)
    if r_enum is None:
        return []
    # a writer without an enum may write any value: the reader's enum narrows the domain
    unknown = [v for v in w_enum.values if v not in r_enum.values] if w_enum else ["(any value: no enum)"]
    if not unknown:
        return []
    if r_enum.on_new in ("unknown", "map-to-other"):
        target = f"its other value {r_enum.other!r}" if r_enum.on_new == "map-to-other" else "unknown"
        return [Finding("COMPAT.ENUM_SYMBOL", "structural", "warning",
                        f"{who}: '{name}' values {unknown} are not in the reader's enum and fall to {target}",
                        name, ENUM_DEFAULT, against)]
    return [Finding("COMPAT.ENUM_SYMBOL", "structural", "error",
                    f"{who}: '{name}' values {unknown} are not in the reader's enum (on_new: "
                    f"{r_enum.on_new or 'not declared'})", name, cannot, against, breaking=True)]


def _keys(old: Contract, new: Contract) -> list[Finding]:
    out = []
    old_key = (old.entity.key, old.entity.version, tuple(old.constraints.primary_key))
    new_key = (new.entity.key, new.entity.version, tuple(new.constraints.primary_key))
    if old_key != new_key:
        out.append(Finding("COMPAT.KEY_CHANGED", "structural", "error",
                           f"the key changes from {_key_text(old)} to {_key_text(new)}: rows of the two versions "
                           "identify entities differently", None, JOIN_KEY, old.schema_ref, breaking=True))
    if old.constraints.partition_by != new.constraints.partition_by:
        out.append(Finding("COMPAT.PARTITION_CHANGED", "structural", "error",
                           f"partition_by changes from {old.constraints.partition_by} to "
                           f"{new.constraints.partition_by}: readers filtering on the old columns scan everything",
                           None, PRUNING, old.schema_ref, breaking=True))
    return out


def _key_text(c: Contract) -> str:
    pk = f", primary_key {list(c.constraints.primary_key)}" if c.constraints.primary_key else ""
    return f"key {list(c.entity.key)} version '{c.entity.version}'{pk}"


def _policy(old: Contract, new: Contract) -> list[Finding]:
    policy, out = new.terms.policy, []
    for of in old.fields:
        if of.name in new.names:
            continue
        if policy.remove_field == "forbid":
            out.append(Finding("POLICY.REMOVE_FORBIDDEN", "policy", "error",
                               f"'{of.name}' is removed but evolution_policy.remove_field is forbid", of.name,
                               BECOMES_NULL, old.schema_ref, breaking=True))
        elif not of.deprecated:
            out.append(Finding("POLICY.REMOVE_NOT_DEPRECATED", "policy", "error",
                               f"'{of.name}' is removed without being deprecated first (deprecate-then-remove: mark "
                               f"it 'deprecated: true' in one version, remove it in a later one)", of.name,
                               BECOMES_NULL, old.schema_ref, breaking=True))
        else:
            out.append(Finding("POLICY.REMOVED", "policy", "info",
                               f"'{of.name}' (deprecated in {old.schema_ref}) is removed: readers still reading it "
                               "get nothing", of.name, BECOMES_NULL, old.schema_ref))
    old_fields = {f.name: f for f in old.fields}
    for nf in new.fields:
        of = old_fields.get(nf.name)
        if of is None:
            if policy.add_field == "optional-by-default" and not nf.nullable and nf.default is None:
                out.append(Finding("POLICY.ADD_NOT_OPTIONAL", "policy", "error",
                                   f"'{nf.name}' is added as required without a default (add_field: "
                                   "optional-by-default)", nf.name, NEW_CANNOT_PARSE, old.schema_ref))
        elif of.type != nf.type and policy.change_type == "forbid":
            out.append(Finding("POLICY.TYPE_CHANGE_FORBIDDEN", "policy", "error",
                               f"'{nf.name}' changes type {of.type} -> {nf.type} but evolution_policy.change_type "
                               "is forbid", nf.name, OLD_CANNOT_PARSE, old.schema_ref, breaking=True))
    return out


_SEMANTIC_KEYS = (("unit", "unit"), ("description", "description"), ("time_meaning", "time meaning"),
                  ("timezone", "time zone"))


def _semantic(old: Contract, new: Contract) -> list[Finding]:
    changes: list[tuple[str, str]] = []
    old_fields = {f.name: f for f in old.fields}
    for nf in new.fields:
        of = old_fields.get(nf.name)
        if of is None:
            continue
        for key, label in _SEMANTIC_KEYS:
            before, after = _unit(old, of) if key == "unit" else getattr(of, key), \
                _unit(new, nf) if key == "unit" else getattr(nf, key)
            if (before or None) != (after or None):
                changes.append((nf.name, f"{label} changes from {before!r} to {after!r}"))
        if of.default is not None and nf.default is not None and of.default != nf.default:
            changes.append((nf.name, f"default changes from {_default(of)} to {_default(nf)}"))
    changes += [(s.field, f"declared: {s.what}") for s in new.terms.change.semantic]
    signoff, shadow = new.terms.change.signoff, new.terms.shadow.enabled
    forbidden = new.terms.policy.change_semantic == "forbid"
    out = []
    for name, what in changes:
        if forbidden:
            level, note = "error", "evolution_policy.change_semantic is forbid: add a new field instead"
        elif signoff and shadow:
            level, note = "warning", (f"signed off by {', '.join(s.by for s in signoff)}; the shadow comparison "
                                      "must pass before promotion")
        else:
            missing = [m for m, ok in (("a sign-off (change.signoff)", signoff), ("shadow.enabled", shadow)) if not ok]
            level, note = "error", f"needs {' and '.join(missing)}"
        out.append(Finding("SEMANTIC.CHANGED", "semantic", level, f"'{name}': {what}; {note}", name, DRIFT,
                           old.schema_ref))
    return out


def _unit(c: Contract, f: FieldSpec) -> str | None:
    return f.unit or c.constraints.units.get(f.name)


def _default(f: FieldSpec) -> str:
    return "none" if f.default is None else f"{f.default.value!r} ({f.default.kind})"


def _major(c: Contract) -> int:
    try:
        return int(c.version.split(".")[0])
    except ValueError:
        return -1


def _version(old: Contract, new: Contract, breaking: bool) -> list[Finding]:
    try:
        o = tuple(int(p) for p in old.version.split("."))
        n = tuple(int(p) for p in new.version.split("."))
    except ValueError:
        return [Finding("VERSION.FORMAT", "version", "error",
                        f"versions {old.version!r} -> {new.version!r} are not major.minor numbers")]
    out = []
    if n <= o:
        out.append(Finding("VERSION.NOT_INCREASED", "version", "error",
                           f"{new.schema_ref} is not a higher version than {old.schema_ref}"))
    elif breaking and n[0] <= o[0]:
        out.append(Finding("VERSION.MAJOR_REQUIRED", "version", "error",
                           f"a breaking change needs a major version (v{o[0] + 1}.0), not v{new.version}"))
    elif not breaking and n[0] > o[0]:
        out.append(Finding("VERSION.MAJOR_UNNEEDED", "version", "info",
                           f"v{new.version} is a major bump for a compatible change (a minor bump would do)"))
    if new.terms.mode == "break" and not new.terms.shadow.enabled:
        out.append(Finding("VERSION.BREAK_NEEDS_SHADOW", "version", "error",
                           "compat_mode break needs shadow.enabled: true"))
    return out
