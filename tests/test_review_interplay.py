"""Adversarial review of the features merged separately in this session, together (rev-x): each
test pins a defect found where two of them meet, through the CLI on real Iceberg tables."""

from __future__ import annotations

from pathlib import Path

from tests.test_any_dataset import STREAM_2, _land
from tests.test_dual_write import REF, _dual_write


def test_the_swap_to_default_keeps_the_data_version_of_the_swapped_in_tables(ws_path: Path, cli):
    """The new version's tables recorded the data version of the contract file as it was while
    they were written (``status: DUAL_WRITE`` is part of its canonical form, so of its sha256).
    The swap rewrites the status to DEFAULT: ``lakepub plan`` then said the just swapped-in
    ``customers_all`` was 'breaking' and told the user to rebuild it offline, and the next batch
    moved its data version (``lakepub wait --data-version`` consumers) with nothing changed. The
    version they record is now the one the file says after the swap."""
    landing = _dual_write(ws_path, cli)
    assert cli("run", "customers_all").code == 0
    _land(landing, "0002.jsonl", STREAM_2)
    assert cli("run", "customers_all").code == 0
    r = cli("contract", "promote", REF, "--to", "DEFAULT")
    assert r.code == 0, r.err

    def plan() -> dict:
        r = cli("plan", "--format", "json")
        assert r.code == 0, r.err
        return {d["dataset"]: d for d in r.json()["datasets"]}["customers_all"]

    swapped = plan()
    assert swapped["change"] == "untouched", swapped["reasons"]
    _land(landing, "0003.jsonl", [{"customer_id": "c9", "version": 1, "country": "FR", "plan": "pro",
                                   "mrr_cents": 5, "signup_day": "2025-01-15", "deleted": False}])
    assert cli("run", "customers_all").code == 0
    after = plan()
    assert after["change"] == "untouched"
    assert after == swapped  # the same data version before and after the next batch
