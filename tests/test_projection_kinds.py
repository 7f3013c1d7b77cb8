"""Projection kinds (lakepub/projection/): incremental maintenance equals a rebuild equals a
brute-force oracle, for both kinds and every partition transform; definition errors; overflow;
the generic checksum; and the legacy orders projection against today's publish code."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from datetime import date, timedelta
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.schema import Schema
from pyiceberg.types import DateType, LongType, NestedField, StringType

from lakepub import identity
from lakepub.errors import ConfigError, LakepubError
from lakepub.projection import Entity, OverflowRefused, PartitionBy, kind_of, partition_checksum
from lakepub.projection.current import CHANGE_SIGN
from lakepub.store.layout import day_partition_value, partition_label

ARROW = {"string": pa.string(), "long": pa.int64(), "date": pa.date32(), "bool": pa.bool_(),
         "decimal": pa.decimal128(18, 2)}
VALUES = {
    "string": ["a", "b", "a|b", 'q"', "null", ""],
    "long": [-3, 0, 2, 7, 10 ** 12],
    "date": [date(1969, 12, 31), date(2024, 12, 31), date(2025, 1, 1), date(2025, 2, 15), date(2025, 10, 1)],
    "bool": [True, False],
    "decimal": [Decimal("-1.25"), Decimal("0.00"), Decimal("3.10"), Decimal("99999.99")],
}
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- scenarios: a contract-like schema and a stream of state transitions --------------------


@st.composite
def scenarios(draw):
    key_types = draw(st.lists(st.sampled_from(["string", "long", "date"]), min_size=1, max_size=2))
    field_types = draw(st.lists(st.sampled_from(list(ARROW)), min_size=1, max_size=4))
    nullable = draw(st.lists(st.booleans(), min_size=len(field_types), max_size=len(field_types)))
    keys = [f"k{i}" for i in range(len(key_types))]
    fields = [f"f{i}" for i in range(len(field_types))]
    schema = pa.schema([(k, ARROW[t]) for k, t in zip(keys, key_types)] + [("version", pa.int64())]
                       + [(f, ARROW[t]) for f, t in zip(fields, field_types)] + [("deleted", pa.bool_())])
    entity = Entity(schema, tuple(keys), "version", "deleted")
    pool = draw(st.lists(st.tuples(*[st.sampled_from(VALUES[t]) for t in key_types]), min_size=1, max_size=6,
                         unique=True))
    field_value = [st.sampled_from(VALUES[t] + ([None] if n else [])) for t, n in zip(field_types, nullable)]
    op = st.tuples(st.integers(0, len(pool) - 1), st.sampled_from(["upsert", "upsert", "delete"]),
                   st.tuples(*field_value))
    batches = draw(st.lists(st.lists(op, min_size=1, max_size=8), min_size=1, max_size=5))
    return entity, keys, fields, field_types, pool, batches


def transitions(entity, keys, fields, pool, batches):
    """(before, after) per batch, as the versioned core yields them, and the final live states."""
    live: dict[tuple, dict] = {}
    versions: dict[tuple, int] = defaultdict(int)
    steps = []
    for batch in batches:
        start = dict(live)
        for k, action, values in batch:
            key = pool[k]
            versions[key] += 1
            if action == "delete":
                live.pop(key, None)
            else:
                live[key] = {**dict(zip(keys, key)), "version": versions[key], **dict(zip(fields, values)),
                             "deleted": False}
        changed = [key for key in {pool[k] for k, _, _ in batch} if start.get(key) != live.get(key)]
        before = [start[key] for key in changed if key in start]
        after = [live[key] for key in changed if key in live]
        steps.append((_table(before, entity), _table(after, entity)))
    return steps, _table(list(live.values()), entity)


def _table(rows, entity):
    return pa.Table.from_pylist(rows, schema=entity.schema)


def _types(entity, keys, fields, field_types):
    by_arrow = {str(t): name for name, t in ARROW.items()}
    return {**{k: by_arrow[str(entity.schema.field(k).type)] for k in keys}, **dict(zip(fields, field_types)),
            "version": "long"}


def partition_options(columns: list[str], types: dict[str, str]) -> list[str]:
    options = ["none"]
    for c in columns:
        if types[c] != "date":  # identity of a date is refused: day(c) is the same partitioning
            options.append(f"identity({c})")
        if types[c] == "date":
            options += [f"day({c})", f"month({c})", f"year({c})"]
        if types[c] != "bool":
            options.append(f"bucket(3, {c})")
    return options


def publish_stepwise(kind, steps):
    """Apply changes batch by batch, partition by partition, as the publisher will: each
    partition's apply sees only its own rows and its own change rows."""
    part = kind.partition
    published: dict = {}
    for before, after in steps:
        changes = kind.changes(before, after)
        values = part.values(changes)
        for p in set(values.to_pylist()):
            mask = pc.is_null(values) if p is None else pc.equal(values, pa.scalar(p, values.type))
            mine = changes.filter(mask)
            current = published.get(p, kind.empty())
            new = kind.apply(current, mine)
            assert set(part.values(new).to_pylist()) <= {p}, "apply moved rows into another partition"
            shuffled = kind.apply(_shuffle(current), _shuffle(mine))
            assert shuffled.equals(new), "apply is not deterministic under input order"
            if new.num_rows:
                published[p] = new
            else:
                published.pop(p, None)
    return published


def _shuffle(table):
    order = list(range(table.num_rows))
    random.Random(table.num_rows).shuffle(order)
    return table.take(pa.array(order, pa.int64()))


def check_against_build(kind, published, states, oracle_rows):
    built = kind.build(states)
    part = kind.partition
    values = part.values(built)
    for p, rows in published.items():
        mask = pc.is_null(values) if p is None else pc.equal(values, pa.scalar(p, values.type))
        assert built.filter(mask).equals(rows), f"partition {part.label(p)} differs from build"
    assert sum(t.num_rows for t in published.values()) == built.num_rows
    got = Counter(tuple(r.values()) for t in published.values() for r in t.to_pylist())
    assert got == Counter(oracle_rows)
    assert Counter(tuple(r.values()) for r in built.to_pylist()) == Counter(oracle_rows)


# --- the oracle property tests ---------------------------------------------------------------


@SETTINGS
@given(scenarios(), st.data())
def test_aggregate_incremental_equals_build_and_oracle(scenario, data):
    entity, keys, fields, field_types, pool, batches = scenario
    types = _types(entity, keys, fields, field_types)
    group_by = data.draw(st.lists(st.sampled_from(keys + fields), min_size=0, max_size=3, unique=True))
    summable = [f for f, t in zip(fields, field_types) if t in ("long", "decimal")]
    measures = {"n": "count()", **{f"s_{f}": f"sum({f})" for f in summable}}
    steps, states = transitions(entity, keys, fields, pool, batches)
    oracle: dict[tuple, list] = {}
    for row in states.to_pylist():
        acc = oracle.setdefault(tuple(row[g] for g in group_by), [0] + [0 for _ in summable])
        acc[0] += 1
        for i, f in enumerate(summable):
            acc[i + 1] += row[f] or 0
    oracle_rows = [g + (acc[0],) + tuple(acc[1:]) for g, acc in oracle.items()]
    for partition in partition_options(group_by, types):
        definition = {"projection": {"kind": "aggregate", "group_by": group_by, "measures": measures},
                      "partition": partition}
        kind = kind_of(definition, entity, where="catalog/datasets/t.yaml", dataset="t")
        assert kind.output_schema().names == group_by + list(measures)
        published = publish_stepwise(kind, steps)
        check_against_build(kind, published, states, oracle_rows)


@SETTINGS
@given(scenarios(), st.data())
def test_current_incremental_equals_build_and_oracle(scenario, data):
    entity, keys, fields, field_types, pool, batches = scenario
    types = _types(entity, keys, fields, field_types)
    listed = data.draw(st.none() | st.lists(st.sampled_from(fields + keys + ["version"]), unique=True))
    steps, states = transitions(entity, keys, fields, pool, batches)
    columns = keys + [c for c in (listed if listed is not None else fields) if c not in keys]
    oracle_rows = [tuple(row[c] for c in columns) for row in states.to_pylist()]
    for partition in partition_options(columns, types):
        definition = {"projection": {"kind": "current", **({"columns": listed} if listed is not None else {})},
                      "partition": partition}
        kind = kind_of(definition, entity, where="catalog/datasets/t.yaml", dataset="t")
        assert kind.output_schema().names == columns
        published = publish_stepwise(kind, steps)
        check_against_build(kind, published, states, oracle_rows)


# --- partitioning ------------------------------------------------------------------------------


def test_partition_parse_and_spec():
    schema = Schema(NestedField(1, "country", StringType(), required=False),
                    NestedField(2, "day", DateType(), required=False),
                    NestedField(3, "customer_id", LongType(), required=False))
    for text, name, source in [("month", "day_month", 2), ("month(day)", "day_month", 2),
                               ("identity(country)", "country", 1), ("bucket(8, customer_id)", "customer_id_bucket", 3),
                               ("year(day)", "day_year", 2), ("day", "day_day", 2)]:
        spec = PartitionBy.parse(text, "f.yaml: partition").iceberg_spec(schema)
        (field,) = spec.fields
        assert (field.name, field.source_id, field.field_id) == (name, source, 1000)
    assert PartitionBy.parse("none", "w").iceberg_spec(schema).fields == ()
    for bad in ["hour(day)", "bucket(0, x)", "month(", "identity(a b)", ""]:
        with pytest.raises(ConfigError, match="f.yaml: partition"):
            PartitionBy.parse(bad, "f.yaml: partition")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.dates(date(1900, 1, 1), date(2200, 12, 31)), min_size=1, max_size=50), st.sampled_from(["day", "month", "year"]))
def test_legacy_partition_values_and_labels_equal_layout(days, grain):
    part = PartitionBy.parse(grain, "w")
    rows = pa.table({"day": pa.array(days, pa.date32())})
    assert part.values(rows).to_pylist() == [day_partition_value(d, grain) for d in days]
    assert part.labels(rows) == [partition_label(d, grain) for d in days]


def test_partition_labels():
    rows = pa.table({"c": pa.array(["FR", None]), "d": pa.array([date(2025, 10, 1), None], pa.date32())})
    assert PartitionBy.parse("identity(c)", "w").labels(rows) == ["FR", "null"]
    assert PartitionBy.parse("identity(d)", "w").labels(rows) == ["2025-10-01", "null"]
    assert PartitionBy.parse("day(d)", "w").labels(rows) == ["2025-10-01", "null"]
    assert PartitionBy.parse("none", "w").labels(rows) == ["all", "all"]
    assert PartitionBy.parse("bucket(4, c)", "w").labels(rows)[0] in {"0", "1", "2", "3"}


# --- definition errors ---------------------------------------------------------------------------

CUSTOMERS = Entity(pa.schema([("customer_id", pa.string()), ("version", pa.int64()), ("country", pa.string()),
                              ("plan", pa.string()), ("mrr_cents", pa.int64()), ("ratio", pa.float64()),
                              ("amount", pa.decimal128(18, 2)), ("signup_day", pa.date32()),
                              ("deleted", pa.bool_())]), ("customer_id",), "version", "deleted")
WHERE = "catalog/datasets/x.yaml"


def _aggregate(measures, group_by=("country", "plan"), partition="identity(country)"):
    return kind_of({"projection": {"kind": "aggregate", "group_by": list(group_by), "measures": measures},
                    "partition": partition}, CUSTOMERS, where=WHERE, dataset="x")


@pytest.mark.parametrize("text, why", [
    ("min(mrr_cents)", "not maintainable under retraction"),
    ("max(mrr_cents)", "not maintainable under retraction"),
    ("count(distinct plan)", "not maintainable under retraction"),
    ("sum(distinct mrr_cents)", "not maintainable under retraction"),
    ("avg(mrr_cents)", "declare sum\\(col\\) and count\\(\\) and divide when reading"),
    ("sum(ratio)", "not exact under retraction.*decimal"),
    ("sum(plan)", "non-numeric"),
    ("sum(nope)", "unknown field 'nope'"),
    ("median(mrr_cents)", "unknown function 'median'"),
    ("count(plan)", "not supported"),
    ("mrr_cents", "expected sum\\(col\\) or count\\(\\)"),
])
def test_refused_measures_name_file_and_key(text, why):
    with pytest.raises(ConfigError, match=f"^{WHERE}: projection.measures.m: .*{why}"):
        _aggregate({"n": "count()", "m": text})


def test_other_definition_errors():
    with pytest.raises(ConfigError, match="declare a count\\(\\) measure"):
        _aggregate({"mrr": "sum(mrr_cents)"})
    with pytest.raises(ConfigError, match="must be a group_by column"):
        _aggregate({"n": "count()"}, partition="month(signup_day)")
    with pytest.raises(ConfigError, match="cannot be applied"):
        _aggregate({"n": "count()"}, group_by=["country"], partition="month(country)")
    with pytest.raises(ConfigError, match="projection.group_by: unknown field 'x'"):
        _aggregate({"n": "count()"}, group_by=["x"], partition="none")
    with pytest.raises(ConfigError, match="projection.kind"):
        kind_of({"projection": {"kind": "pivot"}}, CUSTOMERS, where=WHERE)
    with pytest.raises(ConfigError, match="projection.colums: unknown key"):
        kind_of({"projection": {"kind": "current", "colums": ["plan"]}}, CUSTOMERS, where=WHERE)
    with pytest.raises(ConfigError, match="projection.columns: unknown field 'mrr'"):
        kind_of({"projection": {"kind": "current", "columns": ["mrr"]}}, CUSTOMERS, where=WHERE)
    current = kind_of({"projection": {"kind": "current", "columns": ["plan", "customer_id"]},
                       "partition": "bucket(8, customer_id)"}, CUSTOMERS, where=WHERE)
    assert current.output_schema().names == ["customer_id", "plan"]
    assert current.partition_columns == ("customer_id",)
    assert _aggregate({"n": "count()", "a": "sum(amount)"}).output_schema().field("a").type == pa.decimal128(38, 2)


# --- overflow -------------------------------------------------------------------------------------

BIG = Entity(pa.schema([("id", pa.string()), ("version", pa.int64()), ("g", pa.string()), ("v", pa.int64()),
                        ("d", pa.decimal128(38, 0))]), ("id",), "version")


def _big_kind(measure="sum(v)"):
    return kind_of({"projection": {"kind": "aggregate", "group_by": ["g"], "measures": {"s": measure, "n": "count()"}},
                    "partition": "identity(g)"}, BIG, where=WHERE, dataset="big")


def _states(values, column="v"):
    n = len(values)
    other = "d" if column == "v" else "v"
    return pa.table({"id": [f"e{i}" for i in range(n)], "version": [1] * n, "g": ["G"] * n,
                     column: pa.array(values, BIG.schema.field(column).type), other: pa.nulls(n, BIG.schema.field(other).type)},
                    schema=BIG.schema)


def test_sum_of_exactly_int64_max_is_accepted_and_beyond_is_refused():
    kind, top = _big_kind(), 2 ** 63 - 1
    built = kind.build(_states([2 ** 62, 2 ** 62 - 1]))
    assert built.to_pylist() == [{"g": "G", "s": top, "n": 2}]
    with pytest.raises(OverflowRefused, match="dataset 'big'.*measure 's' of group g='G' \\(partition G\\)"):
        kind.build(_states([2 ** 62, 2 ** 62]))
    # Incrementally: current total 2**63 - 2, plus 1 is accepted, plus 2 is refused (nothing wraps).
    current = kind.build(_states([2 ** 62, 2 ** 62 - 2]))
    plus_one = kind.changes(_states([]), _states([1]).set_column(0, "id", pa.array(["new"])))
    assert kind.apply(current, plus_one).column("s").to_pylist() == [top]
    plus_two = kind.changes(_states([]), _states([2]).set_column(0, "id", pa.array(["new"])))
    with pytest.raises(OverflowRefused) as refused:
        kind.apply(current, plus_two)
    assert (refused.value.partition, refused.value.group, refused.value.total) == ("G", {"g": "G"}, 2 ** 63)
    assert refused.value.exit_code == 2


def test_net_change_beyond_int64_stays_exact():
    kind = _big_kind()
    three = _states([2 ** 62] * 3)
    changes = kind.changes(_states([]), three)  # +3 * 2**62: no published total could hold it...
    with pytest.raises(OverflowRefused):
        kind.apply(kind.empty(), changes)
    # ...but deleting an entity holding -2**63 is a net change of +2**63 onto a total that fits.
    low = _states([-2 ** 63, 5])
    changes = kind.changes(low.slice(0, 1), _states([]))
    assert kind.apply(kind.build(low), changes).to_pylist() == [{"g": "G", "s": 5, "n": 1}]


def test_decimal38_overflow_refused():
    kind = _big_kind("sum(d)")
    nine = Decimal(9 * 10 ** 37)
    assert kind.build(_states([nine], "d")).column("s").to_pylist() == [nine]
    with pytest.raises(OverflowRefused, match="decimal\\(38, 0\\)"):
        kind.build(_states([nine, nine], "d"))


def test_negative_count_is_an_inconsistency():
    kind = _big_kind()
    changes = kind.changes(_states([3]), _states([]))
    with pytest.raises(LakepubError, match="verify --deep"):
        kind.apply(kind.empty(), changes)


# --- checksum ---------------------------------------------------------------------------------------

ORDER_ROWS = st.lists(st.tuples(st.dates(date(1970, 1, 1), date(2100, 1, 1)), st.integers(-2 ** 63, 2 ** 63 - 1),
                                st.integers(0, 2 ** 40)), max_size=30)


def _orders(rows):
    return pa.table({"day": pa.array([r[0] for r in rows], pa.date32()), "cents": pa.array([r[1] for r in rows], pa.int64()),
                     "orders": pa.array([r[2] for r in rows], pa.int64())})


@settings(max_examples=60, deadline=None)
@given(ORDER_ROWS, st.randoms())
def test_checksum_equals_identity_and_ignores_order(rows, rnd):
    expected = identity.partition_checksum(rows)
    assert partition_checksum(_orders(rows)) == expected
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    assert partition_checksum(_orders(shuffled)) == expected
    if rows:
        i = rnd.randrange(len(rows))
        changed = list(rows)
        day, cents, orders = changed[i]
        changed[i] = rnd.choice([(day + timedelta(days=1), cents, orders), (day, cents ^ 1, orders), (day, cents, orders + 1)])
        assert partition_checksum(_orders(changed)) != expected


def test_checksum_strings_and_types_do_not_collide():
    def one(**cols):
        return partition_checksum(pa.table(cols))
    assert one(a=["x|y"], b=["z"]) != one(a=["x"], b=["y|z"])
    assert one(a=['x"|"y']) != one(a=["x", "y"])
    assert one(a=pa.array(["null"])) != one(a=pa.array([None], pa.string()))
    assert one(a=["", ""]) != one(a=[""])
    assert one(a=pa.array([0.0])) != one(a=pa.array([-0.0]))
    assert one(a=pa.array([0.0, -0.0])) == one(a=pa.array([-0.0, 0.0]))
    assert one(a=pa.array([True])) != one(a=pa.array([False]))
    assert one(a=pa.array([Decimal("1.50")], pa.decimal128(9, 2))) != one(a=pa.array([Decimal("1.05")], pa.decimal128(9, 2)))
    assert one(a=pa.array([1, None]), b=pa.array([None, 1])) != one(a=pa.array([None, 1]), b=pa.array([None, 1]))


# --- the legacy orders projection against today's publish code --------------------------------------

ORDERS = Entity(pa.schema([("order_id", pa.string()), ("version", pa.int64()), ("day", pa.date32()),
                           ("cents", pa.int64()), ("deleted", pa.bool_())]), ("order_id",), "version", "deleted")


def test_current_change_rows_carry_the_sign():
    kind = kind_of({"projection": {"kind": "current"}, "partition": "none"}, ORDERS, where=WHERE)
    row = pa.table({"order_id": ["a"], "version": [1], "day": pa.array([date(2025, 1, 1)], pa.date32()),
                    "cents": [5], "deleted": [False]}, schema=ORDERS.schema)
    changes = kind.changes(row, row)
    assert changes.column(CHANGE_SIGN).to_pylist() == [-1, 1]
    assert kind.output_schema().names == ["order_id", "day", "cents"]


def _reference_checksum(rows: pa.Table) -> str:
    """The checksum's rules written row by row in plain Python (the vectorised one must agree)."""
    import hashlib

    def text(v, t):
        if v is None:
            return "null"
        if pa.types.is_string(t):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if pa.types.is_boolean(t):
            return "true" if v else "false"
        if pa.types.is_date32(t):
            return v.isoformat()
        if pa.types.is_decimal(t):
            return str(v)
        return str(v)
    names = rows.column_names
    ts = [rows.schema.field(n).type for n in names]
    cols = [pc.cast(rows.column(n), pa.int64()).to_pylist() if pa.types.is_timestamp(t) else rows.column(n).to_pylist()
            for n, t in zip(names, ts)]
    rendered = ["|".join(text(v, t) + (t.unit if pa.types.is_timestamp(t) and v is not None else "")
                         for v, t in zip(row, ts)) for row in zip(*cols)]

    def key(i):
        return tuple((cols[c][i] is None, cols[c][i] if cols[c][i] is not None else 0) for c in range(len(cols))) + (rendered[i],)
    h = hashlib.sha256(b"lakepub-partition-v1")
    for i in sorted(range(len(rendered)), key=key):
        payload = rendered[i].encode()
        h.update(len(payload).to_bytes(8, "little") + payload)
    return h.hexdigest()


MIXED = st.lists(st.tuples(st.none() | st.text(max_size=6), st.none() | st.integers(-2 ** 63, 2 ** 63 - 1),
                           st.none() | st.booleans(), st.none() | st.dates(date(1, 1, 1), date(9999, 12, 31)),
                           st.none() | st.decimals(min_value=-10 ** 6, max_value=10 ** 6, places=3, allow_nan=False),
                           st.none() | st.integers(-2 ** 60, 2 ** 60)), max_size=25)


@settings(max_examples=60, deadline=None)
@given(MIXED)
def test_checksum_matches_its_row_by_row_definition(rows):
    cols = list(zip(*rows)) if rows else [()] * 6
    table = pa.table({"s": pa.array(cols[0], pa.string()), "i": pa.array(cols[1], pa.int64()),
                      "b": pa.array(cols[2], pa.bool_()), "d": pa.array(cols[3], pa.date32()),
                      "m": pa.array(cols[4], pa.decimal128(18, 3)),
                      "t": pa.array(cols[5], pa.int64()).cast(pa.timestamp("us", tz="UTC"))})
    assert partition_checksum(table) == _reference_checksum(table)
    assert partition_checksum(table.slice(1)) == _reference_checksum(table.slice(1))
