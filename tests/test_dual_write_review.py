"""DUAL_WRITE under review (rev-dual): what the window must not do to a retired dataset, a
promotion with nothing to swap, ... Real tables read back by DuckDB, through the CLI."""

from __future__ import annotations

from pathlib import Path

from tests.test_dual_write import REF, TABLES, _dual_write, _pointers


def test_the_swap_refuses_to_bring_a_retired_dataset_back(ws_path: Path, cli):
    """A dataset retired during the window: the swap would point its name at the new version's
    table, which carries no retirement, so the retired dataset silently came back (queryable,
    published by run) and 'restore' said it was not retired."""
    _dual_write(ws_path, cli)
    assert cli("run", "customers_all").code == 0  # the new version built beside, caught up
    assert cli("retire", "customers_all").code == 0
    before = _pointers(ws_path, *TABLES)
    r = cli("contract", "promote", REF, "--to", "DEFAULT")
    assert r.code == 3, (r.code, r.out, r.err)
    assert "customers_all is retired" in r.err and "lakepub restore customers_all" in r.err, r.err
    assert _pointers(ws_path, *TABLES) == before  # nothing swapped
    assert "status: DUAL_WRITE" in (ws_path / "catalog" / "contracts" / "customers@v2.0.yaml").read_text()
    assert cli("query", "SELECT count(*) FROM customers_all").code != 0  # still hidden
    # The way out it names works.
    assert cli("restore", "customers_all").code == 0
    assert cli("contract", "promote", REF, "--to", "DEFAULT").code == 0
    assert cli("retire", "customers_all").code == 0
    assert cli("query", "SELECT count(*) FROM customers_all").code != 0
