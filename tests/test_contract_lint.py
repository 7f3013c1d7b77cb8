"""The contract file's change-protocol sections and ``lakepub contract lint``, through the CLI.

A lint-clean contract (``GOOD``) is mutated once per rule: each rule fires on its mutation, at the
line of the key it is about, and on nothing else; ``GOOD`` itself has no finding. Unknown keys
anywhere in the new sections are exit 2 naming file and key, for lint and for every command that
loads the workspace.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from click.testing import CliRunner

from lakepub.cli import main

GOOD: dict[str, Any] = {
    "name": "shop",
    "version": "1.0",
    "compat_mode": "backward",
    "evolution_policy": {"add_field": "optional-by-default", "remove_field": "deprecate-then-remove",
                         "change_type": "coercible", "change_sematic": "requires-shadow-and-signoff"},
    "owner": {"producer": "team-shop", "data": "finance"},
    "entity": {"key": ["order_id"], "version": "version", "deleted": "deleted"},
    "fields": {
        "order_id": "string",
        "version": "long",
        "status": {"type": "string", "default": {"value": None, "kind": "unknown"}},
        "amount": {"type": "long", "unit": "EUR/100", "description": "order total"},
        "qty": "int",
        "note": {"type": "string", "nullable": True},
        "created_at": {"type": "timestamp", "time_meaning": "event"},
        "deleted": "boolean",
    },
    "constraints": {
        "not_null": ["order_id", "version"],
        "unique": [["order_id", "version"]],
        "range": [{"col": "qty", "rule": "[0, 1000]"}],
        "enum": [{"col": "status", "values": ["ok", "warn", "err"], "on_new": "map-to-other", "other": "err"}],
        "units": {"qty": "1"},
    },
    "validation": {"mode": "strict", "sample": {"rows": 1000, "strategy": "random"}, "window": "1d",
                   "lateness": "2h"},
    "shadow": {"enabled": False},
    "lineage_bind": {"produce": ["lake/shop"], "consume": []},
    "freshness": "published by 08:00 UTC daily",
    "status": "DEFAULT",
    "consumers": [{"name": "finance-monthly", "owner": "finance", "columns": ["amount"]}],
}


def write(folder: Path, doc: dict[str, Any], name: str | None = None) -> Path:
    path = folder / (name or f"{doc['name']}@v{doc['version']}.yaml")
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def lint(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["contract", "lint", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def findings(path: Path, *extra: str) -> tuple[int, list[dict[str, Any]]]:
    code, out, _ = lint(str(path), "--format", "json", *extra)
    return code, json.loads(out)["findings"]


def test_the_good_contract_is_lint_clean(tmp_path: Path):
    code, found = findings(write(tmp_path, GOOD))
    assert (code, found) == (0, [])


def _set(path: tuple, value: Any) -> Callable[[dict], None]:
    def apply(doc: dict) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        if value is _DELETE:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return apply


_DELETE = object()

# rule, mutation, level, the key (path in the file) whose line the finding cites
CASES = [
    ("SCHEMA.REF_FORMAT", _set(("name",), "Shop"), "error", ("name",)),
    ("SCHEMA.REF_FORMAT", _set(("version",), "1"), "error", ("name",)),
    ("SCHEMA.COMPAT_ALLOWED", _set(("compat_mode",), "sideways"), "error", ("compat_mode",)),
    ("SCHEMA.EVOLUTION_DECLARED", _set(("evolution_policy",), _DELETE), "warning", ()),
    ("SCHEMA.PK_NOT_NULL", _set(("constraints", "not_null"), ["order_id"]), "error", ("constraints", "not_null")),
    ("SCHEMA.UNITS_DECLARED", _set(("fields", "amount"), "long"), "error", ("fields", "amount")),
    ("SCHEMA.UNITS_SI", _set(("fields", "amount", "unit"), "cents"), "error", ("fields", "amount", "unit")),
    ("SCHEMA.UNITS_SI", _set(("constraints", "units", "qty"), "mph"), "error", ("constraints", "units", "qty")),
    ("SCHEMA.ENUM_POLICY", _set(("constraints", "enum", 0, "on_new"), _DELETE), "error", ("constraints", "enum", "0")),
    ("SCHEMA.DEFAULT_DISGUISED", _set(("fields", "status", "default"), {"value": "ok", "kind": "unknown"}), "error",
     ("fields", "status", "default")),
    ("SCHEMA.TIME_UTC", _set(("fields", "created_at", "timezone"), "Europe/Paris"), "error",
     ("fields", "created_at", "timezone")),
    ("SCHEMA.TIME_UTC", _set(("fields", "updated_at"), "string"), "error", ("fields", "updated_at")),
    ("SCHEMA.TIME_WINDOW", _set(("validation", "lateness"), _DELETE), "warning", ("validation",)),
    ("SCHEMA.UNIQUE_DEDUP", _set(("constraints", "unique"), [["order_id", "note"]]), "warning",
     ("constraints", "unique", "0")),
    ("SCHEMA.SHADOW_REQUIRED_ON_BREAK", _set(("compat_mode",), "break"), "error", ("compat_mode",)),
    ("SCHEMA.OWNER_DECLARED", _set(("owner",), {"producer": "team-shop"}), "warning", ("owner",)),
    ("SCHEMA.VALID", _set(("shadow", "enabeld"), True), "error", ("shadow", "enabeld")),
    ("SCHEMA.VALID", _set(("constraints", "enum", 0, "on_new"), "drop"), "error", ("constraints", "enum", "0", "on_new")),
]


def _line(path: Path, keys: tuple[str, ...]) -> int:
    from lakepub.yamlfile import key_lines, line_of

    return line_of(key_lines(path.read_text()), keys)


@pytest.mark.parametrize("rule,mutate,level,where", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_rule_fires_on_its_mutation_only(tmp_path: Path, rule, mutate, level, where):
    doc = copy.deepcopy(GOOD)
    mutate(doc)
    path = write(tmp_path, doc)
    code, found = findings(path)
    assert [(f["rule"], f["level"]) for f in found] == [(rule, level)], found
    assert found[0]["line"] == _line(path, where)
    assert code == (1 if level == "error" else 0)


def test_a_misnamed_file_is_a_ref_format_warning(tmp_path: Path):
    code, found = findings(write(tmp_path, GOOD, "shop.yaml"))
    assert code == 0 and [(f["rule"], f["level"]) for f in found] == [("SCHEMA.REF_FORMAT", "warning")]


def test_text_output_is_one_line_per_finding_file_line_rule_level(tmp_path: Path):
    doc = copy.deepcopy(GOOD)
    doc["compat_mode"] = "break"
    del doc["owner"]
    path = write(tmp_path, doc)
    code, out, err = lint(str(path))
    lines = out.splitlines()
    assert code == 1 and len(lines) == 2
    assert lines[0] == (f"{path}:{_line(path, ('compat_mode',))} SCHEMA.SHADOW_REQUIRED_ON_BREAK error compat_mode "
                        "break needs shadow.enabled: true (a shadow comparison before the switch)")
    assert lines[1].startswith(f"{path}:1 SCHEMA.OWNER_DECLARED warning ")
    assert "1 error(s), 1 warning(s)" in err


def test_errors_are_warnings_inside_the_grace_period_and_errors_after(tmp_path: Path):
    doc = copy.deepcopy(GOOD)
    doc["compat_mode"] = "break"
    doc["grace_period"] = {"start": "2026-11-01", "end": "2026-12-31", "dual_write": "v1 and v2 side by side"}
    path = write(tmp_path, doc)
    code, found = findings(path, "--at", "2026-12-01")
    assert code == 0 and [(f["rule"], f["level"]) for f in found] == [("SCHEMA.SHADOW_REQUIRED_ON_BREAK", "warning")]
    assert "inside grace_period 2026-11-01..2026-12-31" in found[0]["message"]
    code, found = findings(path, "--at", "2027-01-01")
    assert code == 1 and [f["level"] for f in found] == ["error"]


def test_lint_defaults_to_the_workspace_catalog_and_folders_are_expanded(cli, ws_path: Path):
    result = cli("contract", "lint", "--format", "json")
    rules = {(f["rule"], f["level"]) for f in result.json()["findings"]}
    # the shipped orders contract predates units: cents declares none
    assert ("SCHEMA.UNITS_DECLARED", "error") in rules and result.code == 1
    good = write(ws_path / "catalog" / "contracts", GOOD)
    code, out, _ = lint(str(ws_path / "catalog" / "contracts"), "--format", "json")
    files = {f["file"] for f in json.loads(out)["findings"]}
    assert str(good) not in files and any(f.endswith("orders@v1.0.yaml") for f in files)


def test_every_section_loads_typed(tmp_path: Path):
    from lakepub.contract.model import load_contract

    doc = copy.deepcopy(GOOD)
    doc["grace_period"] = {"start": "2026-11-01", "end": "2026-12-31"}
    doc["change"] = {"summary": "first", "semantic": [{"field": "amount", "what": "now with VAT"}],
                     "signoff": [{"by": "alice", "role": "data owner", "at": "2026-11-20"}], "references": ["ANN-1"]}
    doc["shadow"] = {"enabled": True, "route": "percent:5", "compare_metrics": ["dq.pass_rate"],
                     "thresholds": {"max_relative_diff": 0}}
    c = load_contract(write(tmp_path, doc))
    t = c.terms
    assert (t.mode, t.policy.change_semantic, t.validation.mode, t.validation.sample.rows) == (
        "backward", "requires-shadow-and-signoff", "strict", 1000)
    assert (t.owner.producer, t.owner.data, t.status, t.freshness) == ("team-shop", "finance", "DEFAULT",
                                                                       "published by 08:00 UTC daily")
    assert c.constraints.enum[0].on_new == "map-to-other" and c.constraints.range[0].rule == "[0, 1000]"
    assert c.field("status").default.kind == "unknown" and c.field("amount").unit == "EUR/100"
    assert c.field("created_at").time_meaning == "event" and t.shadow.thresholds == {"max_relative_diff": 0.0}
    assert t.grace_period.active(__import__("datetime").date(2026, 12, 1)) and t.change.signoff[0].by == "alice"
    assert t.consumers[0].columns == ["amount"] and t.lineage_bind.produce == ["lake/shop"]


@pytest.mark.parametrize("mutate,key", [
    (_set(("validation", "sample", "strategi"), "head"), "validation.sample.strategi"),
    (_set(("owner", "team"), "x"), "owner.team"),
    (_set(("fields", "amount", "units"), "EUR"), "fields.amount.units"),
    (_set(("lineage_bind", "consumes"), []), "lineage_bind.consumes"),
    (_set(("grace_periode",), {}), "grace_periode"),
    (_set(("fields", "status", "default", "kind"), "guess"), "fields.status.default.kind"),
    (_set(("constraints", "units", "weight"), "kg"), "constraints.units.weight"),
    (_set(("freshness",), "soon"), "freshness"),
])
def test_unknown_or_wrong_keys_are_exit_2_naming_file_and_key(ws_path: Path, cli, mutate, key):
    doc = copy.deepcopy(GOOD)
    mutate(doc)
    path = write(ws_path / "catalog" / "contracts", doc)
    result = cli("status")  # any command loading the workspace
    assert result.code == 2 and "Traceback" not in result.err
    assert str(path) in result.err and f"'{key}'" in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1


def test_a_file_that_is_not_yaml_is_one_finding_at_its_line(tmp_path: Path):
    path = tmp_path / "x@v1.0.yaml"
    path.write_text('name: x\nversion: "1.0"\nfields: [a\n')
    code, found = findings(path)
    assert code == 1 and [(f["rule"], f["line"]) for f in found] == [("SCHEMA.VALID", 4)]
