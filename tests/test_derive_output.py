"""derive/output.group: per-partition checksums from one sort equal partition_checksum of each
partition alone (the oracle), on random tables with nulls, strings, floats and timestamps."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta, timezone

import pyarrow as pa
import pytest

from lakepub.derive.output import group
from lakepub.projection.checksum import partition_checksum
from lakepub.projection.partitioning import PartitionBy
from lakepub.publish.published_state import split


def _table(rng: random.Random, n: int) -> pa.Table:
    day0 = date(2025, 1, 1)
    pick = lambda values, p=0.15: [None if rng.random() < p else rng.choice(values) for _ in range(n)]  # noqa: E731
    return pa.table({
        "day": pa.array(pick([day0 + timedelta(days=d) for d in range(0, 90, 7)], 0.05), pa.date32()),
        "ts": pa.array(pick([datetime(2025, 1, 1, tzinfo=timezone.utc) + timedelta(hours=h) for h in range(50)]),
                       pa.timestamp("us", tz="UTC")),
        "s": pa.array(pick(["a", "b|c", 'q"x', "null", "", "é"]), pa.string()),
        "f": pa.array(pick([0.1, -0.0, 0.0, float("nan"), 1e20]), pa.float64()),
        "n": pa.array(pick(list(range(-3, 4))), pa.int64()),
        "k": pa.array(pick(["x", "y", "z"]), pa.string()),
    })


@pytest.mark.parametrize("text", ["day(day)", "month(day)", "identity(k)", "none", "day(ts)"])
def test_group_checksums_equal_partition_checksum_per_partition(text):
    rng = random.Random(hash(text) & 0xFFFF)
    partition = PartitionBy.parse(text, "test")
    for n in (0, 1, 7, 300):
        rows = _table(rng, n)
        got = group(rows, partition)
        oracle = {partition.label(v): partition_checksum(r) for v, r in split(rows, partition).items()}
        assert got.checksums == oracle
        assert sum(got.counts) == n and len(got.values) == len(oracle)
        for i, value in enumerate(got.values):  # each group holds exactly that partition's rows
            part = got.part(i)
            assert partition_checksum(part) == oracle[partition.label(value)]
            assert set(got.index.slice(sum(got.counts[:i]), got.counts[i]).to_pylist()) == {i}
