"""derive/state.fingerprint remembers digests by what a label reads (version.remembered_digest):
the same prints as computing them afresh, for every way an input maps to output labels, and a
changed checksum a new print."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from lakepub.derive import version
from lakepub.derive.state import EMPTY_CHECKSUM, WHOLE, _GRAIN, _empty, fingerprint, upstream_map
from lakepub.derive.version import digest
from lakepub.projection.partitioning import PartitionBy


def _fresh(ctx, spec, label: str) -> str:
    """The print as computed before it was remembered (the oracle)."""
    parts: dict[str, Any] = {}
    for name, inp in spec.inputs.items():
        checks = ctx.checksums(name)
        mapping = upstream_map(ctx, spec, name) if label != WHOLE else None
        if mapping == "same":
            parts[name] = {label: checks.get(label, EMPTY_CHECKSUM)}
        elif mapping == "finer":
            n = _GRAIN[inp.expr.kind]
            parts[name] = {u: c for u, c in sorted(checks.items()) if u[:n] == label and not _empty(c)}
        elif mapping == "coarser":
            upstream = label[:_GRAIN[ctx.partition_of(name).kind]]
            parts[name] = {upstream: checks.get(upstream, EMPTY_CHECKSUM)}
        else:
            parts[name] = digest(sorted(checks.items()))
    return digest(parts)


class _Ctx:
    def __init__(self, partitions: dict[str, PartitionBy], checks: dict[str, dict[str, str]]):
        self.partitions, self.checks = partitions, checks

    def checksums(self, name: str) -> dict[str, str]:
        return self.checks[name]

    def partition_of(self, name: str) -> PartitionBy:
        return self.partitions[name]


def test_remembered_prints_equal_fresh_ones_for_every_mapping():
    days = [f"2025-0{m}-{d:02d}" for m in (1, 2) for d in (1, 2, 15)]
    months = ["2025-01", "2025-02"]
    inputs = {  # an output partitioned day(day) reading three inputs: (input partition, expression, checksums)
        "same": (PartitionBy("day", "day"), PartitionBy("day", "day"), {d: f"s{d}" for d in days}),
        "coarser": (PartitionBy("month", "day"), PartitionBy("day", "day"), {m: f"c{m}" for m in months}),
        "other": (PartitionBy("identity", "k"), PartitionBy("day", "day"), {"a": "x1", "b": "x2"}),
    }
    spec = SimpleNamespace(inputs={n: SimpleNamespace(expr=expr) for n, (_, expr, _) in inputs.items()})
    ctx = _Ctx({n: p for n, (p, _, _) in inputs.items()}, {n: dict(c) for n, (_, _, c) in inputs.items()})
    assert {upstream_map(ctx, spec, n) for n in inputs} == {"same", "coarser", None}
    finer_spec = SimpleNamespace(inputs={"daily": SimpleNamespace(expr=PartitionBy("month", "day"))})
    finer_ctx = _Ctx({"daily": PartitionBy("day", "day")}, {"daily": {d: f"f{d}" for d in days}})
    assert upstream_map(finer_ctx, finer_spec, "daily") == "finer"
    version._DIGESTS.clear()
    for _ in range(2):  # computed, then remembered
        for label in [*days, "2025-03-01", WHOLE]:
            assert fingerprint(ctx, spec, label) == _fresh(ctx, spec, label)
        for label in [*months, WHOLE]:
            assert fingerprint(finer_ctx, finer_spec, label) == _fresh(finer_ctx, finer_spec, label)
    before = {label: fingerprint(ctx, spec, label) for label in days}
    ctx.checks["coarser"]["2025-02"] = "changed"  # a new checksum is a new key: February's days move
    after = {label: fingerprint(ctx, spec, label) for label in days}
    assert {d for d in days if before[d] != after[d]} == {d for d in days if d.startswith("2025-02")}
    assert all(after[d] == _fresh(ctx, spec, d) for d in days)
    finer_before = fingerprint(finer_ctx, finer_spec, "2025-01")
    finer_ctx.checks["daily"]["2025-01-15"] = EMPTY_CHECKSUM  # emptied: no longer read
    assert fingerprint(finer_ctx, finer_spec, "2025-01") == _fresh(finer_ctx, finer_spec, "2025-01") != finer_before
