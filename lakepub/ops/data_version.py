"""The data version of a published dataset: one sha256 for what its published rows mean.

Invariant: two snapshots have the same data version exactly when their rows were computed under
the same meaning. Every publish records it on its snapshot (``lakepub.data-version``, base
datasets by the publisher, derived datasets by ``lakepub reconcile``), and ``of_dataset`` (what
``lakepub metrics``, ``lakepub tables`` and the sensors read) returns the recorded one.

The definition lives in ``lakepub/derive/version.py`` (issue 14): for a base dataset, sha256 over
the recorded definition (the projection kind's ``describe()`` and the entity, table property
``lakepub.definition``, what ``publish/guards.py`` holds the YAML to) and the contract content
(``lakepub.contract-sha256``), which is ``compute`` here, unchanged, so records written before
the data version was recorded get the same value recomputed; for a derived dataset, sha256 over
its normalised SQL, columns and partitioning chained with the column versions of the upstream
columns it reads. Records that predate the contract hash hash ``null`` for it.

Cost: one JSON encoding and one sha256 of a few hundred bytes per dataset (none when recorded).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

PREFIX = "sha256:"


def compute(definition: Mapping[str, Any], contract_sha256: str | None) -> str:
    """``sha256:<hex>`` over the canonical JSON of the definition and the contract's hash."""
    payload = json.dumps({"definition": definition, "contract_sha256": contract_sha256 or None},
                         sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return PREFIX + hashlib.sha256(payload.encode("utf-8")).hexdigest()


def of_spec(spec) -> str:
    """The data version a base dataset's definition (its YAML and contract) gives its rows. A
    contract in DUAL_WRITE (the new version's tables, ``publish/dual.py``) counts as the DEFAULT
    the swap rewrites its status to: its tables become the published ones with the data version
    the file then gives them (the status is part of the contract's canonical form)."""
    from lakepub.store.published import definition_of

    return compute(definition_of(spec), _as_promoted(spec.contract))


def _as_promoted(contract) -> str:
    """The contract's sha256, as if a DUAL_WRITE status were DEFAULT (``contract/dual_write.py``)."""
    from lakepub.contract.canonical import canonical_json

    if not contract.canonical:
        return contract.sha256
    doc = json.loads(contract.canonical)
    if doc.get("status") != "DUAL_WRITE":
        return contract.sha256
    return hashlib.sha256(canonical_json({**doc, "status": "DEFAULT"}).encode("utf-8")).hexdigest()


def of_dataset(table, spec, record) -> str | None:
    """The data version of ``table`` (a dataset's published table) as of ``record`` (its newest
    lakepub publish record): the one recorded (``lakepub.data-version``), else, for records of
    older releases, computed from the recorded definition; None before the first publish."""
    from lakepub.store.published import definition_of, recorded_definition

    if record is None:
        return None
    if record.data_version:
        return record.data_version
    return compute(recorded_definition(table) or definition_of(spec), record.contract_sha256)
