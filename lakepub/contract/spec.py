"""The change-protocol sections of a contract file (seed 001 section III, seed 002), typed.

Every section is a pydantic model that forbids unknown keys (``lakepub.yamlfile.File``), so a
misspelt ``compat_mod:`` or ``shadow.enabeld:`` is one ``ConfigError`` line naming the file and
the key path, exit 2. Every section is optional and has the default a contract without it always
had, so contracts written before these sections existed keep loading and mean what they meant::

    compat_mode: backward            # forward | backward | both | break
    evolution_policy: {add_field: optional-by-default, remove_field: deprecate-then-remove,
                       change_type: coercible, change_semantic: requires-shadow-and-signoff}
    constraints:
      primary_key: [order_id, version]
      partition_by: [day]
      unique: [[order_id, version]]
      not_null: [order_id, version]
      range: [{col: cents, rule: "[0, 1e9]"}]
      enum: [{col: status, values: [ok, warn, err], on_new: map-to-other, other: err}]
      units: {cents: EUR/100}
    validation: {mode: strict, sample: {rows: 10000, strategy: random}, significance: {alpha: 0.05}}
    shadow: {enabled: true, route: "percent:5", compare_metrics: [dq.pass_rate], thresholds: {max_relative_diff: 0.001}}
    lineage_bind: {produce: [lake/orders_daily], consume: ["contracts/raw_orders@v1.2"]}
    owner: {producer: team-orders, data: finance@example.com}
    freshness: "published by 08:00 UTC daily"      # or "within 2h"
    grace_period: {start: 2026-11-01, end: 2026-12-31, dual_write: "v1 and v2 published together"}
    status: DEFAULT                  # PROPOSED VALIDATED CANARY DUAL_WRITE DEFAULT DEPRECATED RETIRED
    consumers: [{name: finance-monthly, owner: finance, columns: [cents]}]
    change: {summary: "...", semantic: [{field: cents, what: "now includes VAT"}],
             signoff: [{by: alice, role: data owner, at: 2026-11-20}], references: ["ANN-42"]}

Field-level keys (description, unit, default with its kind, time_meaning, timezone, deprecated)
live in ``model._FieldFile``. Publish gates, shadow runs and lifecycle promotion read these
sections; this module only types and checks them.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from lakepub.yamlfile import File

CompatMode = Literal["forward", "backward", "both", "break"]
COMPAT_MODES = ("forward", "backward", "both", "break")
LIFECYCLE = ("PROPOSED", "VALIDATED", "CANARY", "DUAL_WRITE", "DEFAULT", "DEPRECATED", "RETIRED")
Lifecycle = Literal["PROPOSED", "VALIDATED", "CANARY", "DUAL_WRITE", "DEFAULT", "DEPRECATED", "RETIRED"]
DefaultKind = Literal["business", "unknown", "history_only"]


def _none_to_empty(value: Any, empty: Any) -> Any:
    return empty if value is None else value


def _date(value: Any) -> Any:
    """YAML reads ``2026-11-01`` as a date; a quoted one is a string: accept both."""
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            return value  # pydantic names the key: not a date
    return value


class EvolutionPolicy(File):
    add_field: Literal["optional-by-default", "feature-flag"] = "optional-by-default"
    remove_field: Literal["forbid", "deprecate-then-remove"] = "deprecate-then-remove"
    change_type: Literal["coercible", "forbid"] = "coercible"
    change_semantic: Literal["requires-shadow-and-signoff", "forbid"] = "requires-shadow-and-signoff"

    @model_validator(mode="before")
    @classmethod
    def _spelling(cls, value: Any) -> Any:
        """Seed 001 spells it ``change_sematic``: accepted as the same key (not both at once)."""
        if isinstance(value, dict) and "change_sematic" in value and "change_semantic" not in value:
            value = {("change_semantic" if k == "change_sematic" else k): v for k, v in value.items()}
        return value


class RangeRule(File):
    col: str
    rule: str  # "[lo, hi]", "(lo, hi]", "[lo, )": inclusive/exclusive bounds, either may be open

    @field_validator("rule")
    @classmethod
    def _parse(cls, value: str) -> str:
        parse_range(value)
        return value


_RANGE = re.compile(r"^\s*([\[(])\s*([^,\s]*)\s*,\s*([^\])\s]*)\s*([\])])\s*$")


def parse_range(rule: str) -> tuple[float | None, bool, float | None, bool]:
    """``(lo, lo_inclusive, hi, hi_inclusive)``; ValueError naming the accepted form."""
    m = _RANGE.match(rule)
    if not m:
        raise ValueError("must look like '[lo, hi]' (brackets inclusive, parentheses exclusive, a bound may be empty)")
    bounds = []
    for text in (m.group(2), m.group(3)):
        if text == "":
            bounds.append(None)
            continue
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"bound {text!r} is not a number") from None
        if math.isnan(number):
            raise ValueError("a bound may not be NaN")
        bounds.append(number)
    lo, hi = bounds
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"lower bound {lo} is above upper bound {hi}")
    return lo, m.group(1) == "[", hi, m.group(4) == "]"


class EnumRule(File):
    col: str
    values: list[str | int]
    on_new: Literal["unknown", "reject", "map-to-other"] | None = None  # None: not declared (lint says so)
    other: str | int | None = None  # the value new symbols map to (map-to-other) or the unknown marker

    @model_validator(mode="after")
    def _other(self) -> "EnumRule":
        if len(set(map(str, self.values))) != len(self.values):
            raise ValueError("lists a value twice")
        if self.on_new == "map-to-other" and (self.other is None or self.other not in self.values):
            raise ValueError("on_new: map-to-other needs 'other:' naming one of its values")
        return self


class Constraints(File):
    primary_key: list[str] = Field(default_factory=list)
    partition_by: list[str] = Field(default_factory=list)
    unique: list[list[str]] = Field(default_factory=list)
    not_null: list[str] = Field(default_factory=list)
    range: list[RangeRule] = Field(default_factory=list)
    enum: list[EnumRule] = Field(default_factory=list)
    units: dict[str, str] = Field(default_factory=dict)

    @field_validator("primary_key", "partition_by", "unique", "not_null", "range", "enum", mode="before")
    @classmethod
    def _empty_list(cls, value: Any) -> Any:
        return _none_to_empty(value, [])

    @field_validator("units", mode="before")
    @classmethod
    def _empty_map(cls, value: Any) -> Any:
        return _none_to_empty(value, {})


class Sample(File):
    rows: int = Field(10_000, ge=1)
    strategy: Literal["head", "random", "stratified"] = "random"


class Significance(File):
    alpha: float = Field(0.05, gt=0, lt=1)

    @field_validator("alpha", mode="before")
    @classmethod
    def _float(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class Validation(File):
    mode: Literal["strict", "lenient"] = "strict"
    sample: Sample = Field(default_factory=Sample)
    significance: Significance = Field(default_factory=Significance)
    window: str | None = None    # seed 001 V: windows and lateness policy are stated here
    lateness: str | None = None


class Shadow(File):
    enabled: bool = False
    route: str = "percent:100"
    compare_metrics: list[str] = Field(default_factory=list)
    thresholds: dict[str, float] = Field(default_factory=dict)  # e.g. max_relative_diff: 0.001

    @field_validator("route")
    @classmethod
    def _route(cls, value: str) -> str:
        m = re.match(r"^percent:(\d+(\.\d+)?)$", value)
        if m and not 0 < float(m.group(1)) <= 100:
            raise ValueError("percent must be in (0, 100]")
        return value

    @field_validator("thresholds", mode="before")
    @classmethod
    def _floats(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in value.items()}
        return value


class LineageBind(File):
    produce: list[str] = Field(default_factory=list)
    consume: list[str] = Field(default_factory=list)


class Owner(File):
    producer: str | None = None  # runs the pipeline: paged when it fails
    data: str | None = None      # explains the meaning: signs off semantic changes


_FRESH_BY = re.compile(r"^published by ([01]\d|2[0-3]):([0-5]\d) UTC (daily|hourly)$")
_FRESH_WITHIN = re.compile(r"^within (\d+)(m|h|d)$")


def parse_freshness(text: str) -> dict[str, Any]:
    """``published by HH:MM UTC daily`` -> {"by": "HH:MM", "every": "daily"};
    ``within 2h`` -> {"max_age_s": 7200}. ValueError otherwise."""
    text = " ".join(text.split())
    if m := _FRESH_BY.match(text):
        return {"by": f"{m.group(1)}:{m.group(2)}", "every": m.group(3)}
    if m := _FRESH_WITHIN.match(text):
        return {"max_age_s": int(m.group(1)) * {"m": 60, "h": 3600, "d": 86400}[m.group(2)]}
    raise ValueError("must be 'published by HH:MM UTC daily' or 'within N(m|h|d)'")


class GracePeriod(File):
    start: dt.date
    end: dt.date
    dual_write: str | None = None  # seed 001 IX: the dual-write strategy of the migration window

    @field_validator("start", "end", mode="before")
    @classmethod
    def _dates(cls, value: Any) -> Any:
        return _date(value)

    @model_validator(mode="after")
    def _order(self) -> "GracePeriod":
        if self.end < self.start:
            raise ValueError(f"end {self.end} is before start {self.start}")
        return self

    def active(self, on: dt.date) -> bool:
        return self.start <= on <= self.end


class Consumer(File):
    name: str
    owner: str | None = None
    columns: list[str] = Field(default_factory=list)  # empty: every column


class SemanticChange(File):
    field: str
    what: str


class Signoff(File):
    by: str
    role: str | None = None
    at: dt.date | None = None

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, value: Any) -> Any:
        return _date(value)


class Change(File):
    """What the author declares about this version relative to the previous one."""

    summary: str = ""
    semantic: list[SemanticChange] = Field(default_factory=list)
    signoff: list[Signoff] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)  # announcement anchors (seed 001 IX)


class Terms(File):
    """Every change-protocol section of a contract file, with its default."""

    schema_ref: str | None = None
    constraints: Constraints = Field(default_factory=Constraints)
    compat_mode: CompatMode | None = None  # None: not declared; compatibility is checked as backward
    evolution_policy: EvolutionPolicy | None = None
    validation: Validation = Field(default_factory=Validation)
    shadow: Shadow = Field(default_factory=Shadow)
    lineage_bind: LineageBind = Field(default_factory=LineageBind)
    owner: Owner | None = None
    freshness: str | None = None
    grace_period: GracePeriod | None = None
    status: Lifecycle | None = None
    consumers: list[Consumer] = Field(default_factory=list)
    change: Change = Field(default_factory=Change)

    @field_validator("constraints", "validation", "shadow", "lineage_bind", "change", mode="before")
    @classmethod
    def _empty_section(cls, value: Any) -> Any:  # `shadow:` with nothing under it
        return _none_to_empty(value, {})

    @field_validator("freshness")
    @classmethod
    def _freshness(cls, value: str | None) -> str | None:
        if value is not None:
            parse_freshness(value)
        return value

    @field_validator("consumers", mode="before")
    @classmethod
    def _consumer_names(cls, value: Any) -> Any:  # a bare name is a consumer without details
        if isinstance(value, list):
            return [{"name": v} if isinstance(v, str) else v for v in value]
        return _none_to_empty(value, [])

    @property
    def mode(self) -> str:
        return self.compat_mode or "backward"

    @property
    def policy(self) -> EvolutionPolicy:
        return self.evolution_policy or EvolutionPolicy()


TERM_KEYS = tuple(Terms.model_fields)
