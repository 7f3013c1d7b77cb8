"""The data version of a published dataset: one sha256 for what its published rows mean.

Invariant: two snapshots have the same data version exactly when their rows were computed under
the same meaning, i.e. the same recorded definition (the projection kind's ``describe()`` and the
entity, table property ``lakepub.definition``: what ``publish/guards.py`` holds the YAML to, with
``DefinitionChanged`` on any difference) and the same contract content (``lakepub.contract-sha256``,
the sha256 of the contract's canonical form recorded on every published snapshot). It changes
when the contract file is edited in place, never when data arrives.

This is the interim definition: issue 14 will define the data version as a sha256 over the
canonical semantic definition chained with the upstreams' versions, and will replace ``compute``
(every caller, ``lakepub metrics`` and ``lakepub tables``, goes through this module). Tables that
predate the recorded definition (the original ``orders_daily``) use the definition as the YAML
declares it, which is what their schema and partition spec were checked against; records that
predate the contract hash hash ``null`` for it.

Cost: one JSON encoding and one sha256 of a few hundred bytes per dataset.
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


def of_dataset(table, spec, record) -> str | None:
    """The data version of ``table`` (a dataset's published table) as of ``record`` (its newest
    lakepub publish record); None before the first publish."""
    from lakepub.store.published import definition_of, recorded_definition

    if record is None:
        return None
    return compute(recorded_definition(table) or definition_of(spec), record.contract_sha256)
