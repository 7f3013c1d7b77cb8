"""``lakepub contract check OLD... NEW``: the compatibility matrix, version bumps, semantic changes,
and ``lakepub contract export``, through the CLI.

The matrix: nine changes of one base contract against each compat mode; ``breaking`` in the JSON
report is what Avro-style resolution on Iceberg types says for that direction (backward: the new
reader reads old data; forward: the old reader reads new data; both and break: both).
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from click.testing import CliRunner

from lakepub.cli import main

BASE: dict[str, Any] = {
    "name": "shop",
    "version": "1.0",
    "compat_mode": "backward",
    "owner": {"producer": "team-shop", "data": "finance"},
    "entity": {"key": ["order_id"], "version": "version", "deleted": "deleted"},
    "fields": {
        "order_id": "string",
        "version": "long",
        "status": "string",
        "amount": {"type": "long", "unit": "EUR/100"},
        "qty": {"type": "int", "unit": "1", "deprecated": True},
        "price": {"type": "decimal(10,2)", "unit": "EUR"},
        "deleted": "boolean",
    },
    "constraints": {"enum": [{"col": "status", "values": ["ok", "warn", "err"], "on_new": "reject"}]},
    "consumers": [{"name": "finance-monthly", "owner": "finance", "columns": ["amount"]}],
}


def _fields(doc: dict) -> dict:
    return doc["fields"]


CHANGES: dict[str, Callable[[dict], None]] = {
    "add_optional": lambda d: _fields(d).update(note={"type": "string", "nullable": True}),
    "add_required": lambda d: _fields(d).update(region="string"),
    "remove": lambda d: _fields(d).pop("qty"),
    "promote": lambda d: _fields(d)["qty"].update(type="long"),
    "narrow": lambda d: _fields(d)["amount"].update(type="int"),
    "decimal_scale": lambda d: _fields(d)["price"].update(type="decimal(12,3)"),
    "enum_removal": lambda d: d["constraints"]["enum"][0].update(values=["ok", "warn"]),
    "key_change": lambda d: d["entity"].update(key=["order_id", "status"]),
    "unit_change": lambda d: _fields(d)["amount"].update(unit="EUR"),
}
# breaking per mode: backward (new reads old), forward (old reads new), both, break (both directions)
MATRIX = {
    "add_optional": (False, False, False, False),
    "add_required": (True, False, True, True),
    "remove": (False, True, True, True),
    "promote": (False, True, True, True),
    "narrow": (True, False, True, True),
    "decimal_scale": (True, True, True, True),
    "enum_removal": (True, False, True, True),
    "key_change": (True, True, True, True),
    "unit_change": (False, False, False, False),
}
MODES = ("backward", "forward", "both", "break")


def write(folder: Path, doc: dict[str, Any]) -> Path:
    path = folder / f"{doc['name']}@v{doc['version']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def check(*args: str, ws: Path | None = None) -> tuple[int, Any, str]:
    prefix = ["-w", str(ws)] if ws else []
    result = CliRunner().invoke(main, [*prefix, "contract", "check", *map(str, args), "--format", "json"],
                                catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else None, result.stderr


def versions(tmp_path: Path, kind: str, mode: str, version: str = "1.1", **extra: Any) -> tuple[Path, Path]:
    old = copy.deepcopy(BASE)
    old["compat_mode"] = mode
    new = copy.deepcopy(old)
    CHANGES[kind](new)
    new["version"] = version
    new.update(extra)
    return write(tmp_path, old), write(tmp_path, new)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("change", list(CHANGES))
def test_compatibility_matrix(tmp_path: Path, change: str, mode: str):
    expected = MATRIX[change][MODES.index(mode)]
    old, new = versions(tmp_path, change, mode, "2.0" if mode == "break" else "1.1",
                        shadow={"enabled": True})
    code, report, _ = check(old, new)
    assert report["compat_mode"] == mode
    assert report["breaking"] is expected, report["findings"]
    rules = {f["rule"] for f in report["findings"]}
    if change == "unit_change":  # structurally nothing; semantically a change needing sign-off
        assert "SEMANTIC.CHANGED" in rules and code == 1
    elif change == "add_required" and mode != "break":  # add_field: optional-by-default refuses it anyway
        assert "POLICY.ADD_NOT_OPTIONAL" in rules and code == 1
    elif mode == "break":  # allowed with the major version and shadow: reported, not refused
        assert code == 0 and all(f["level"] != "error" for f in report["findings"]), report["findings"]
    else:  # a minor bump: refused exactly when breaking, naming the major version it needs
        assert (code == 1) is expected and ("VERSION.MAJOR_REQUIRED" in rules) is expected


def test_findings_name_the_failure_mode_and_declared_consumers(tmp_path: Path):
    old, new = versions(tmp_path, "narrow", "backward", "2.0")
    code, report, _ = check(old, new)
    [f] = [f for f in report["findings"] if f["rule"] == "COMPAT.TYPE_CHANGED"]
    assert code == 0 and f["field"] == "amount" and f["failure_mode"] == "new reader cannot parse old data"
    assert "narrowing" in f["message"] and f["consumers"] == ["declared finance-monthly, owner finance"]
    old, new = versions(tmp_path, "key_change", "forward", "2.0")
    [f] = [f for f in check(old, new)[1]["findings"] if f["rule"] == "COMPAT.KEY_CHANGED"]
    assert f["failure_mode"] == "join key changes"


def test_text_report_cites_the_new_file_and_line(tmp_path: Path):
    old, new = versions(tmp_path, "decimal_scale", "backward")
    result = CliRunner().invoke(main, ["contract", "check", str(old), str(new)])
    lines = result.stdout.splitlines()
    line = next(i for i, text in enumerate(new.read_text().splitlines(), 1) if text.strip().startswith("price:"))
    assert result.exit_code == 1
    assert any(x.startswith(f"{new}:{line} COMPAT.TYPE_CHANGED error ") and "scale change" in x
               and "[failure: new reader cannot parse old data]" in x for x in lines), lines
    assert "breaking, refused" in result.stderr


def test_an_enum_added_where_there_was_none_narrows_what_old_data_may_hold(tmp_path: Path):
    old_doc = copy.deepcopy(BASE)
    old_doc["constraints"] = {}
    new_doc = copy.deepcopy(BASE)
    new_doc["version"] = "1.1"
    code, report, _ = check(write(tmp_path, old_doc), write(tmp_path, new_doc))
    [f] = [f for f in report["findings"] if f["rule"] == "COMPAT.ENUM_SYMBOL"]
    assert code == 1 and f["breaking"] and "(any value: no enum)" in f["message"]
    new_doc["constraints"]["enum"][0].update(on_new="map-to-other", other="err")
    code, report, _ = check(tmp_path / "shop@v1.0.yaml", write(tmp_path, new_doc))
    [f] = [f for f in report["findings"] if f["rule"] == "COMPAT.ENUM_SYMBOL"]
    assert code == 0 and f["level"] == "warning" and f["failure_mode"] == "enum falls to default"


def test_removal_needs_deprecation_first_and_forbid_refuses_it(tmp_path: Path):
    old_doc = copy.deepcopy(BASE)
    new_doc = copy.deepcopy(BASE)
    new_doc["version"] = "1.1"
    new_doc["fields"].pop("price")  # not deprecated in 1.0
    code, report, _ = check(write(tmp_path, old_doc), write(tmp_path, new_doc))
    assert code == 1 and "POLICY.REMOVE_NOT_DEPRECATED" in {f["rule"] for f in report["findings"]}
    new_doc["evolution_policy"] = {"remove_field": "forbid"}
    code, report, _ = check(tmp_path / "shop@v1.0.yaml", write(tmp_path, new_doc))
    assert code == 1 and "POLICY.REMOVE_FORBIDDEN" in {f["rule"] for f in report["findings"]}


def test_version_must_increase_and_break_needs_shadow(tmp_path: Path):
    old, new = versions(tmp_path, "add_optional", "backward", "1.0")
    code, report, _ = check(old, new)
    assert code == 1 and "VERSION.NOT_INCREASED" in {f["rule"] for f in report["findings"]}
    old, new = versions(tmp_path, "key_change", "break", "2.0")  # no shadow
    code, report, _ = check(old, new)
    assert code == 1 and "VERSION.BREAK_NEEDS_SHADOW" in {f["rule"] for f in report["findings"]}


def test_a_signed_off_semantic_change_with_shadow_is_a_warning(tmp_path: Path):
    change = {"semantic": [{"field": "amount", "what": "now includes VAT"}],
              "signoff": [{"by": "alice", "role": "data owner", "at": "2026-11-20"}]}
    old, new = versions(tmp_path, "unit_change", "backward", "1.1", change=change, shadow={"enabled": True})
    code, report, _ = check(old, new)
    semantic = [f for f in report["findings"] if f["kind"] == "semantic"]
    assert code == 0 and len(semantic) == 2 and {f["level"] for f in semantic} == {"warning"}
    assert all(f["failure_mode"] == "metric drift" and "signed off by alice" in f["message"] for f in semantic)
    old, new = versions(tmp_path, "unit_change", "backward", "1.1", change={"semantic": change["semantic"]})
    code, report, _ = check(old, new)
    assert code == 1 and all("needs a sign-off (change.signoff) and shadow.enabled" in f["message"]
                             for f in report["findings"] if f["kind"] == "semantic")


def test_both_is_transitive_against_every_earlier_version(tmp_path: Path):
    v10 = copy.deepcopy(BASE)
    v10["compat_mode"] = "both"
    v11 = copy.deepcopy(v10)
    v11["version"] = "1.1"
    v11["fields"]["tier"] = {"type": "string", "default": {"value": "basic", "kind": "history_only"}}
    v12 = copy.deepcopy(v11)
    v12["version"] = "1.2"
    v12["fields"]["tier"] = "string"  # required, default dropped: 1.0 data has no tier
    p10, p11, p12 = (write(tmp_path, d) for d in (v10, v11, v12))
    code, report, _ = check(p10, p11)
    assert code == 0 and any("inferred_from_schema_default" in f["message"] for f in report["findings"])
    assert check(p11, p12)[0] == 0
    code, report, _ = check(p10, p11, p12)
    assert code == 1 and report["breaking"]
    [f] = [f for f in report["findings"] if f["rule"] == "COMPAT.FIELD_ADDED_REQUIRED"]
    assert f["against"] == "contracts/shop@v1.0" and f["field"] == "tier"


def test_check_names_dataset_and_other_contract_consumers_in_a_workspace(ws_path: Path):
    contracts = ws_path / "catalog" / "contracts"
    downstream = copy.deepcopy(BASE)
    downstream.update(name="invoices", lineage_bind={"consume": ["contracts/orders@v1.0"]})
    write(contracts, downstream)
    downstream.update(name="refunds", lineage_bind={"consume": ["orders_daily"]})  # a dataset of it
    write(contracts, downstream)
    new = yaml.safe_load((contracts / "orders@v1.0.yaml").read_text())
    new["version"] = "1.1"
    new["fields"]["cents"] = {"type": "long", "unit": "EUR/100"}  # semantic: a unit where there was none
    new_path = ws_path / "orders@v1.1.yaml"
    new_path.write_text(yaml.safe_dump(new))
    code, report, _ = check("contracts/orders@v1.0", new_path, ws=ws_path)  # a schema ref of the catalog
    [f] = [f for f in report["findings"] if f["rule"] == "SEMANTIC.CHANGED"]
    assert code == 1 and f["field"] == "cents"
    assert f["consumers"] == ["declared contracts/invoices@v1.0 (lineage_bind.consume)",
                              "declared contracts/refunds@v1.0 (lineage_bind.consume of dataset orders_daily)",
                              "dataset orders_daily (cents)"]


def test_export_manifest_lists_artifacts_with_sha256(tmp_path: Path):
    doc = copy.deepcopy(BASE)
    doc["change"] = {"references": ["ANN-42"]}
    path = write(tmp_path, doc)
    changelog = tmp_path / "changelog.md"
    changelog.write_text("# 1.0\nfirst\n")
    out = tmp_path / "export"
    result = CliRunner().invoke(main, ["contract", "export", str(path), "--out", str(out), "--artifact",
                                       str(changelog), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    manifest = json.loads(result.stdout)["export_manifest"]
    assert manifest == json.loads((out / "export_manifest.json").read_text())["export_manifest"]
    from lakepub.contract.model import load_contract

    sha = load_contract(path).sha256
    schema, log = manifest["artifacts"]
    assert schema["path"] == "contracts/shop@v1.0.schema.json" and schema["sha256"] == sha == manifest["contract_sha256"]
    assert hashlib.sha256((out / schema["path"]).read_bytes()).hexdigest() == sha
    assert log == {"path": str(changelog), "sha256": hashlib.sha256(changelog.read_bytes()).hexdigest(), "bytes": 12}
    assert manifest["references"] == ["ANN-42"] and manifest["version"] == "v1.0"


def test_the_canonical_hash_ignores_spelling_but_not_meaning(tmp_path: Path):
    from lakepub.contract.model import load_contract

    a = tmp_path / "a" / "shop@v1.0.yaml"
    a.parent.mkdir()
    a.write_text(yaml.safe_dump(BASE, sort_keys=False))
    spelled = copy.deepcopy(BASE)
    spelled["fields"]["order_id"] = {"type": "string"}
    spelled["fields"]["price"]["type"] = "decimal( 10 , 2 )"
    spelled["validation"] = {"mode": "strict"}  # a default written out
    b = tmp_path / "b" / "shop@v1.0.yaml"
    b.parent.mkdir()
    b.write_text("# a comment\n" + yaml.safe_dump(dict(reversed(list(spelled.items()))), sort_keys=False))
    assert load_contract(a).sha256 == load_contract(b).sha256
    spelled["fields"]["amount"]["unit"] = "EUR"
    b.write_text(yaml.safe_dump(spelled, sort_keys=False))
    assert load_contract(a).sha256 != load_contract(b).sha256
    b.write_text(yaml.safe_dump(BASE))  # field order is the events' column order: it counts
    assert load_contract(a).sha256 != load_contract(b).sha256
