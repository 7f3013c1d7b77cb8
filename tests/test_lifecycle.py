"""``lakepub contract promote``: each lifecycle move checks its conditions against the workspace
(lint, check, shadow runs, observed consumers, replacements, grace periods) and rewrites only the
contract file's status line (lakepub/contract/lifecycle.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_any_dataset import CONTRACT, STREAM_1, _land, _setup
from tests.test_shadow import ALL_COLUMNS

UNITS = "constraints:\n  units: {mrr_cents: EUR/100}\n"
V1_0 = CONTRACT.replace("  mrr_cents: long\n", "  mrr_cents: {type: long, unit: EUR/100}\n") + "status: DEFAULT\n"
V1_1 = (V1_0.replace('version: "1.0"', 'version: "1.1"').replace("status: DEFAULT\n", "")
        .replace("  deleted: boolean\n", "  deleted: boolean\n  referrer: {type: string, nullable: true}\n"))
V2_0 = (V1_0.replace('version: "1.0"', 'version: "2.0"').replace("status: DEFAULT\n", "status: VALIDATED\n")
        .replace("  signup_day: date\n", "")
        + "extra_fields: ignore\ncompat_mode: break\nshadow: {enabled: true}\n"
          "grace_period: {start: 2026-01-01, end: 2026-03-31}\n")


def _workspace(ws_path: Path, cli) -> Path:
    landing = _setup(ws_path, ALL_COLUMNS)
    contracts = ws_path / "catalog" / "contracts"
    (contracts / "customers@v1.0.yaml").write_text(V1_0)
    _land(landing, "0001.jsonl", STREAM_1)
    assert cli("run", "customers_all").code == 0
    return contracts


def _status(path: Path) -> str:
    return [line for line in path.read_text().splitlines() if line.startswith("status:")][-1]


def test_a_compatible_version_is_promoted_step_by_step_and_the_old_one_deprecated(ws_path: Path, cli):
    contracts = _workspace(ws_path, cli)
    new = contracts / "customers@v1.1.yaml"
    new.write_text(V1_1.replace("  mrr_cents: {type: long, unit: EUR/100}\n", "  mrr_cents: long\n"))
    r = cli("contract", "promote", "contracts/customers@v1.1", "--to", "VALIDATED")
    assert r.code == 3 and "lint: 1 error(s), first SCHEMA.UNITS_DECLARED" in r.err and "nothing was changed" in r.err
    assert "status:" not in new.read_text()  # a refusal changes nothing
    new.write_text(V1_1 + "# reviewed in PR 12\n")
    r = cli("contract", "promote", "contracts/customers@v1.1", "--to", "validated")
    assert r.code == 0, r.err
    assert "ok  check: compatible with contracts/customers@v1.0" in r.out
    assert _status(new) == "status: VALIDATED" and "# reviewed in PR 12" in new.read_text()
    r = cli("contract", "promote", "contracts/customers@v1.1", "--to", "CANARY")
    assert r.code == 3 and "no shadow run of customers_all: run 'lakepub shadow customers_all" in r.err
    assert cli("shadow", "customers_all", "--contract", "contracts/customers@v1.1").code == 0
    r = cli("contract", "promote", "contracts/customers@v1.1", "--to", "CANARY", "--format", "json")
    assert r.code == 0, r.err
    assert {c["name"]: c["ok"] for c in r.json()["conditions"]} == {"lint": True, "check": True, "shadow": True}
    r = cli("contract", "promote", "contracts/customers@v1.0", "--to", "DEPRECATED")
    assert r.code == 3 and "no newer version of the contract is DEFAULT yet" in r.err
    assert cli("contract", "promote", "contracts/customers@v1.1", "--to", "DEFAULT").code == 0  # compatible: no dual write
    assert cli("contract", "promote", "contracts/customers@v1.0", "--to", "DEPRECATED").code == 0
    r = cli("contract", "promote", "contracts/customers@v1.0", "--to", "RETIRED")
    assert r.code == 3 and "customers_all still name contracts/customers@v1.0" in r.err
    log = [json.loads(line) for line in (ws_path / ".lakepub" / "lifecycle.jsonl").read_text().splitlines()]
    assert [(e["contract"][-4:], e["from"], e["to"]) for e in log] == [
        ("v1.1", "PROPOSED", "VALIDATED"), ("v1.1", "VALIDATED", "CANARY"), ("v1.1", "CANARY", "DEFAULT"),
        ("v1.0", "DEFAULT", "DEPRECATED")]


def test_a_shadow_run_of_other_content_does_not_count(ws_path: Path, cli):
    contracts = _workspace(ws_path, cli)
    new = contracts / "customers@v1.1.yaml"
    new.write_text(V1_1 + "status: VALIDATED\n")
    assert cli("shadow", "customers_all", "--contract", "contracts/customers@v1.1").code == 0
    new.write_text(V1_1.replace("referrer: {type: string, nullable: true}", "referrer: {type: string, nullable: true, "
                                "description: who sent them}") + "status: VALIDATED\n")
    r = cli("contract", "promote", "contracts/customers@v1.1", "--to", "CANARY")
    assert r.code == 3 and "compared another content of contracts/customers@v1.1" in r.err


def test_a_promotion_is_refused_while_an_observed_consumer_reads_a_removed_column(ws_path: Path, cli):
    contracts = _workspace(ws_path, cli)
    new = contracts / "customers@v2.0.yaml"
    new.write_text(V2_0)
    assert cli("query", "SELECT customer_id, signup_day FROM customers_all").code == 0  # observed: reads signup_day
    assert cli("shadow", "customers_all", "--contract", "contracts/customers@v2.0").code == 0
    assert cli("contract", "promote", "contracts/customers@v2.0", "--to", "CANARY", "--at", "2026-01-10").code == 0
    r = cli("contract", "promote", "contracts/customers@v2.0", "--to", "DEFAULT", "--since", "2000-01-01")
    assert r.code == 3, (r.out, r.err)
    assert "consumers: column(s) removed by contracts/customers@v2.0 are still read since 2000-01-01" in r.err
    assert "reads customers_all.signup_day" in r.err and "via query" in r.err
    assert _status(new) == "status: CANARY"
    r = cli("contract", "promote", "contracts/customers@v2.0", "--to", "DUAL_WRITE", "--dry-run")  # test_dual_write.py
    assert r.code == 0 and "would move contracts/customers@v2.0 CANARY -> DUAL_WRITE" in r.out, r.err
    r = cli("contract", "promote", "contracts/customers@v2.0", "--to", "RETIRED")
    assert r.code == 2 and "CANARY -> RETIRED is not a lifecycle move" in r.err
    # Once nobody has read the column since the cut-off, the promotion goes through.
    r = cli("contract", "promote", "contracts/customers@v2.0", "--to", "DEFAULT", "--since", "2999-01-01", "--dry-run")
    assert r.code == 0 and "would move contracts/customers@v2.0 CANARY -> DEFAULT" in r.out, r.err
    assert _status(new) == "status: CANARY"  # --dry-run changes nothing
