"""Events validated against any contract (issue 11): types, roles, nullability, extra and missing
fields, JSON Lines / Parquet / records agreeing, and the batch digest of any contract."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakepub.contract.model import Contract, Entity, FieldSpec, load_contract
from lakepub.contract.types import FieldType
from lakepub.contract.validate import (
    events_from_arrow, events_from_records, read_events, validate_record,
)
from lakepub.errors import InvalidEvent
from lakepub.events import ORDERS_CONTRACT
from lakepub.identity import canonical, events_digest

UTC = dt.timezone.utc
CUSTOMERS = """\
name: customers
version: "1.0"
entity: {key: [customer_id], version: version, deleted: deleted}
fields:
  customer_id: string
  version: long
  country: {type: string, nullable: true}
  plan: string
  mrr_cents: long
  seats: int
  score: double
  ratio: float
  signup_day: date
  updated_at: timestamp
  balance: decimal(12,2)
  active: boolean
  deleted: boolean
"""
GOOD = {"customer_id": "c1", "version": 1, "country": "FR", "plan": "pro", "mrr_cents": 4900, "seats": 3,
        "score": 0.5, "ratio": 0.25, "signup_day": "2025-01-31", "updated_at": "2025-02-01T10:00:00.5+02:00",
        "balance": "12.50", "active": True, "deleted": False}
GOOD_VALUES = {**GOOD, "signup_day": dt.date(2025, 1, 31),
               "updated_at": dt.datetime(2025, 2, 1, 8, 0, 0, 500000, tzinfo=UTC), "balance": Decimal("12.50")}


def contract_from(tmp_path: Path, text: str, name: str = "c@v1.0.yaml") -> Contract:
    path = tmp_path / name
    path.write_text(text)
    return load_contract(path)


@pytest.fixture
def customers(tmp_path: Path) -> Contract:
    return contract_from(tmp_path, CUSTOMERS)


def jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def rows(table: pa.Table) -> list[dict]:
    out = table.to_pylist()
    for row in out:  # compare instants, whatever tzinfo object Arrow returns
        if isinstance(row.get("updated_at"), dt.datetime):
            row["updated_at"] = row["updated_at"].astimezone(UTC)
    return out


def refused(exc: pytest.ExceptionInfo, *fragments: str) -> None:
    message = str(exc.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


# --- valid input round-trips -------------------------------------------------------------------


def test_jsonl_records_and_parquet_round_trip(customers: Contract, tmp_path: Path):
    tomb = {"customer_id": "c2", "version": 7, "deleted": True}  # missing fields are null on a delete
    nulls = {**GOOD, "customer_id": "c3", "country": None, "updated_at": "2025-02-01 08:00:00.500000000Z",
             "balance": 12.5, "score": -0.0}
    records = [GOOD, tomb, nulls]
    table = read_events(jsonl(tmp_path / "c.jsonl", records), customers)
    assert table.schema == customers.arrow_schema
    expected_tomb = {f: None for f in customers.names} | {"customer_id": "c2", "version": 7, "deleted": True}
    expected = [GOOD_VALUES, expected_tomb, {**GOOD_VALUES, "customer_id": "c3", "country": None, "score": 0.0}]
    assert rows(table) == expected
    assert math.copysign(1, table.column("score")[2].as_py()) == 1  # -0.0 stored as 0.0
    assert rows(events_from_records(records, customers)) == expected
    assert events_from_records(records, customers).equals(table)

    parquet = tmp_path / "c.parquet"
    pq.write_table(table, parquet)
    assert read_events(parquet, customers).equals(table)


def test_a_small_parquet_batch_is_decoded_on_the_calling_thread(customers: Contract, tmp_path: Path, monkeypatch):
    """Arrow's threaded read cost a new process ~0.1-0.2 s for a 100k-event batch (its CPU pool
    started) against ~0.02 s on one thread (issue 16): a file below ``THREADED_PARQUET_FROM`` is
    read without threads, a larger one with them, the same table either way (file or bytes)."""
    from lakepub.contract import validate

    table = events_from_records([GOOD, {**GOOD, "customer_id": "c9", "version": 2}], customers)
    parquet = tmp_path / "c.parquet"
    pq.write_table(table, parquet)
    real, seen = pq.read_table, []

    def spy(source, **kwargs):
        seen.append(kwargs.get("use_threads"))
        return real(source, **kwargs)

    monkeypatch.setattr(validate.pq, "read_table", spy)
    assert read_events(parquet, customers).equals(table)
    assert validate.events_from_bytes(parquet.read_bytes(), customers, "<bytes>").equals(table)
    monkeypatch.setattr(validate, "THREADED_PARQUET_FROM", 1)  # as if the file were large
    assert read_events(parquet, customers).equals(table)
    assert seen == [False, False, True]


def test_parquet_lossless_conversions(customers: Contract, tmp_path: Path):
    expected = events_from_records([GOOD], customers)
    paris = pa.array([dt.datetime(2025, 2, 1, 8, 0, 0, 500000, tzinfo=UTC)], pa.timestamp("ns", "UTC"))
    converted = {
        "customer_id": pa.array([b"c1"], pa.binary()), "version": pa.array([1], pa.uint8()),
        "country": pa.array(["FR"], pa.large_string()), "plan": pa.array(["pro"]).dictionary_encode(),
        "mrr_cents": pa.array([4900], pa.int32()), "seats": pa.array([3], pa.int64()),
        "score": pa.array([0.5], pa.float32()), "ratio": pa.array([0.25], pa.float32()),
        "signup_day": pa.array([dt.date(2025, 1, 31)], pa.date64()),
        "updated_at": paris.cast(pa.timestamp("ns", "Europe/Paris")),
        "balance": pa.array([Decimal("12.5")], pa.decimal128(5, 1)), "active": pa.array([True]),
        "deleted": pa.array([False]),
    }
    pq.write_table(pa.table(converted), tmp_path / "a.parquet")
    assert read_events(tmp_path / "a.parquet", customers).equals(expected)
    text = {**converted, "signup_day": pa.array(["2025-01-31"]),
            "updated_at": pa.array(["2025-02-01T09:00:00.5+01:00"])}
    assert events_from_arrow(pa.table(text), customers).equals(expected)


def test_composite_key_and_a_contract_without_deleted_flag(tmp_path: Path):
    contract = contract_from(tmp_path, """\
name: accounts
version: "2.0"
entity: {key: [region, account_no], version: v}
fields: {region: string, account_no: int, v: int, opened: date, note: {type: string, nullable: true}}
""")
    good = {"region": "eu", "account_no": 7, "v": 1, "opened": "2024-12-01", "note": None}
    table = read_events(jsonl(tmp_path / "a.jsonl", [good, {**good, "account_no": 8}]), contract)
    assert table.schema == contract.arrow_schema and table.num_rows == 2
    for field, value, fragment in [("account_no", None, "key field"), ("region", None, "key field"),
                                   ("v", 2**31, "from 1 to 2147483647"), ("opened", None, "not declared nullable")]:
        with pytest.raises(InvalidEvent) as exc:
            read_events(jsonl(tmp_path / "b.jsonl", [good, {**good, field: value}]), contract)
        refused(exc, "b.jsonl:2", f"field '{field}'", fragment)
        with pytest.raises(InvalidEvent) as exc:
            events_from_arrow(pa.Table.from_pylist([good, {**good, field: value}]), contract)
        refused(exc, "row 2", f"field '{field}'")
    keys = [("region", "ascending"), ("account_no", "ascending"), ("v", "ascending"), ("opened", "ascending"),
            ("note", "ascending")]
    shuffled = table.take([1, 0])
    assert canonical(shuffled, contract).equals(shuffled.sort_by(keys))


# --- each rule refused, naming file, line or row, and field --------------------------------------

JSON_REFUSALS = [
    ("customer_id", None, "key field"),
    ("customer_id", 5, "must be a string"),
    ("version", 0, "integer >= 1"),
    ("version", "1", "integer >= 1"),
    ("deleted", None, "true or false"),
    ("deleted", 0, "true or false"),
    ("plan", None, "not a delete"),
    ("seats", 2**31, "32-bit integer"),
    ("mrr_cents", 2**63, "64-bit integer"),
    ("mrr_cents", 1.0, "64-bit integer"),
    ("score", "0.5", "must be a number"),
    ("ratio", 1e39, "range of a float"),
    ("active", 1, "true or false"),
    ("signup_day", "2025-02-30", "ISO date"),
    ("signup_day", "9999-01-01", "ISO date"),
    ("updated_at", "2025-02-01T10:00:00", "no UTC offset"),
    ("updated_at", "2025-02-01T10:00:00.1234567Z", "microsecond"),
    ("updated_at", "2025-02-01", "RFC 3339"),
    ("updated_at", "2025-02-01T10:00:00+24:00", "RFC 3339"),
    ("updated_at", "9998-12-31T23:00:00-02:00", "9998-12-31T23:59:59.999999Z"),
    ("updated_at", 1738400000, "RFC 3339"),
    ("balance", 1.234, "more than 2 fractional digits"),
    ("balance", "1.001", "more than 2 fractional digits"),
    ("balance", 12345678901, "does not fit decimal(12,2)"),
    ("balance", "12,5", "decimal(12,2)"),
    ("balance", True, "decimal(12,2)"),
]


@pytest.mark.parametrize("field, value, fragment", JSON_REFUSALS)
def test_jsonl_refusals_name_file_line_and_field(customers: Contract, tmp_path: Path, field, value, fragment):
    path = jsonl(tmp_path / "c.jsonl", [GOOD, {**GOOD, "customer_id": "c9", field: value}])
    with pytest.raises(InvalidEvent) as exc:
        read_events(path, customers)
    refused(exc, "c.jsonl:2", f"field '{field}'", fragment)
    with pytest.raises(InvalidEvent) as exc:
        events_from_records([GOOD, {**GOOD, "customer_id": "c9", field: value}], customers)
    refused(exc, "record 2", f"field '{field}'", fragment)


def test_a_key_given_twice_names_the_line_and_field(customers: Contract, tmp_path: Path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD)[:-1] + ', "plan": "free"}\n')
    with pytest.raises(InvalidEvent) as exc:
        read_events(path, customers)
    refused(exc, "c.jsonl:2", "field 'plan'", "twice")


def test_nullability_follows_the_deleted_flag(customers: Contract, tmp_path: Path):
    tomb = {"customer_id": "c2", "version": 2, "plan": None, "country": None, "deleted": True}
    assert read_events(jsonl(tmp_path / "c.jsonl", [GOOD, tomb]), customers).num_rows == 2
    live_without_country = {**GOOD, "country": None}
    assert validate_record(live_without_country, customers) is None
    missing_plan = {k: v for k, v in GOOD.items() if k != "plan"}
    assert validate_record(missing_plan, customers) == ("plan", "is null but the event is not a delete")


def test_an_undeclared_field_is_refused_naming_it_and_its_first_line(customers: Contract, tmp_path: Path):
    path = jsonl(tmp_path / "c.jsonl", [GOOD, GOOD, {**GOOD, "colour": "red"}, {**GOOD, "colour": "blue"}])
    with pytest.raises(InvalidEvent) as exc:
        read_events(path, customers)
    refused(exc, "c.jsonl:3", "field 'colour'", "not declared by contracts/customers@v1.0", "extra_fields: ignore")
    pq.write_table(events_from_records([GOOD], customers).append_column("colour", pa.array(["red"])),
                   tmp_path / "c.parquet")
    with pytest.raises(InvalidEvent) as exc:
        read_events(tmp_path / "c.parquet", customers)
    refused(exc, "c.parquet", "field 'colour'", "not declared")

    ignoring = dataclasses.replace(customers, extra_fields="ignore")
    assert read_events(path, ignoring).equals(read_events(jsonl(tmp_path / "d.jsonl", [GOOD] * 4), customers))
    assert read_events(tmp_path / "c.parquet", ignoring).column_names == list(customers.names)


PARQUET_REFUSALS = [
    ("customer_id", pa.array(["a", None]), "key field"),
    ("version", pa.array([1, 0]), "integer >= 1"),
    ("plan", pa.array(["a", None]), "not a delete"),
    ("seats", pa.array([1, 2**31]), "does not fit a 32-bit integer"),
    ("ratio", pa.array([0.5, 0.1], pa.float64()), "has type double, expected float"),
    ("score", pa.array([0.5, float("inf")]), "finite number"),
    ("score", pa.array([1, 2]), "has type int64, expected double"),
    ("updated_at", pa.array([dt.datetime(2025, 1, 1)] * 2, pa.timestamp("us")), "without a time zone"),
    ("updated_at", pa.array([0, 1001], pa.timestamp("ns", "UTC")), "whole microsecond"),
    ("updated_at", pa.array(["2025-01-01T00:00:00Z", "2025-01-01T00:00:00"]), "no UTC offset"),
    ("balance", pa.array([Decimal("1.000"), Decimal("1.001")], pa.decimal128(6, 3)), "has type decimal128(6, 3)"),
    ("balance", pa.array([Decimal("1"), Decimal("1" * 20)], pa.decimal128(38, 0)), "does not fit decimal(12,2)"),
    ("signup_day", pa.array([dt.date(2025, 1, 1), dt.date(9999, 1, 1)]), "ISO date"),
    ("active", pa.array([1, 0]), "has type int64, expected bool"),
    ("customer_id", pa.array([b"a", b"\xff"]), "UTF-8"),
]


@pytest.mark.parametrize("field, column, fragment", PARQUET_REFUSALS)
def test_parquet_refusals_name_file_row_and_field(customers: Contract, tmp_path: Path, field, column, fragment):
    base = events_from_records([GOOD, {**GOOD, "customer_id": "c2"}], customers)
    table = base.set_column(base.schema.get_field_index(field), field, column)
    pq.write_table(table, tmp_path / "c.parquet")
    with pytest.raises(InvalidEvent) as exc:
        read_events(tmp_path / "c.parquet", customers)
    refused(exc, "c.parquet row ", f"field '{field}'", fragment)
    if "has type" not in fragment and "without a time zone" not in fragment:
        refused(exc, "c.parquet row 2")


def test_a_missing_column_is_refused_unless_nullable(customers: Contract, tmp_path: Path):
    base = events_from_records([GOOD], customers)
    with pytest.raises(InvalidEvent) as exc:
        events_from_arrow(base.drop_columns(["plan"]), customers, "x.parquet")
    refused(exc, "x.parquet", "field 'plan'", "is missing")
    without_country = events_from_arrow(base.drop_columns(["country"]), customers)
    assert without_country.column("country").null_count == 1
    assert without_country.schema == customers.arrow_schema


def test_decimals_are_exact_never_rounded(customers: Contract):
    for value, stored in [("1.50000", "1.50"), (1e2, "100.00"), ("-0.5", "-0.50"), (7, "7.00"),
                          ("9999999999.99", "9999999999.99"), (Decimal("0.10"), "0.10")]:
        table = events_from_records([{**GOOD, "balance": value}], customers)
        assert table.column("balance")[0].as_py() == Decimal(stored), value
    for value in ["0.001", "1e-3", "10000000000", "NaN", "Infinity", " 1"]:
        assert validate_record({**GOOD, "balance": value}, customers)[0] == "balance", value


def test_timestamps_need_an_offset_and_become_utc_microseconds(customers: Contract, tmp_path: Path):
    cases = {"2025-02-01T10:00:00Z": dt.datetime(2025, 2, 1, 10, tzinfo=UTC),
             "2025-02-01T10:00:00-05:30": dt.datetime(2025, 2, 1, 15, 30, tzinfo=UTC),
             "2025-02-01 10:00:00.000001+00:00": dt.datetime(2025, 2, 1, 10, 0, 0, 1, tzinfo=UTC),
             "0001-01-01T00:30:00+00:30": dt.datetime(1, 1, 1, tzinfo=UTC)}
    records = [{**GOOD, "customer_id": f"c{i}", "updated_at": text} for i, text in enumerate(cases)]
    fast = read_events(jsonl(tmp_path / "t.jsonl", records), customers)
    assert [r["updated_at"] for r in rows(fast)] == list(cases.values())
    assert events_from_records(records, customers).equals(fast)


# --- the orders contract keeps today's behaviour and digest ---------------------------------


def test_the_orders_constant_is_what_the_catalog_file_loads_to():
    root = Path(__file__).parents[1]
    for path in (root / "catalog/contracts/orders@v1.0.yaml",
                 root / "lakepub/templates/catalog/contracts/orders@v1.0.yaml"):
        assert dataclasses.replace(load_contract(path), path=None) == ORDERS_CONTRACT
    assert ORDERS_CONTRACT.is_orders_v1


ORDERS_BATCH = [
    {"order_id": "b", "version": 2, "day": "2025-10-02", "cents": 150, "deleted": False},
    {"order_id": "a", "version": 1, "day": "2025-10-01", "cents": 0, "deleted": False},
    {"order_id": "é-ü", "version": 3, "day": None, "cents": None, "deleted": True},
    {"order_id": "a", "version": 2, "day": "0001-01-01", "cents": 9223372036854775807, "deleted": True},
    {"order_id": "b", "version": 2, "day": "2025-10-02", "cents": 150, "deleted": False},
    {"order_id": "c", "version": 9223372036854775807, "day": "9998-12-31", "cents": None, "deleted": True},
    {"order_id": "c", "version": 1, "day": None, "cents": 7, "deleted": True},
]


def test_orders_digest_is_pinned_to_the_one_published_batches_carry():
    """Computed by the code before contracts: a retried old batch must keep its identity."""
    from lakepub.events import events_from_records as orders_records

    table = orders_records(ORDERS_BATCH)
    pinned = "b917b31a78cb1c28e33a3d5d4319b0e9584ec340adae66146b7757d0fa77e392"
    assert events_digest(table) == pinned
    assert events_digest(table, ORDERS_CONTRACT) == pinned
    assert events_digest(canonical(table, ORDERS_CONTRACT), ORDERS_CONTRACT, is_canonical=True) == pinned
    assert events_digest(table.slice(0, 0)) == "1cede5b93dffc45803e322f34e56a7817eddcb6ed774189ed228640c8621a22a"
    assert [(r["order_id"], r["version"]) for r in canonical(table).to_pylist()] == [
        ("a", 1), ("a", 2), ("b", 2), ("b", 2), ("c", 1), ("c", 9223372036854775807), ("é-ü", 3)]
    assert events_from_records(ORDERS_BATCH, ORDERS_CONTRACT).equals(table)


def test_a_contract_digest_is_pinned(customers: Contract):
    """The digest of other contracts (lakepub-events-v2) is part of batch identities too."""
    table = events_from_records([GOOD, {"customer_id": "c2", "version": 7, "deleted": True}], customers)
    assert events_digest(table, customers) == events_digest(table.take([1, 0]), customers)
    assert events_digest(table, customers) == "59e3e951295ffe0e71e087632de89e025aadf3e7f4a26e8f772ef2099d14c9b6"


# --- any contract: a property test ------------------------------------------------------------

_TYPES = ["string", "int", "long", "float", "double", "boolean", "date", "timestamp", "decimal(9,2)", "decimal(38,6)"]


def _value(ftype: str) -> st.SearchStrategy:
    if ftype == "string":
        return st.text(st.characters(codec="utf-8"), max_size=6)
    if ftype == "int":
        return st.integers(-(2**31), 2**31 - 1)
    if ftype == "long":
        return st.integers(-(2**63), 2**63 - 1)
    if ftype == "float":
        return st.floats(width=32, allow_nan=False, allow_infinity=False)
    if ftype == "double":
        return st.floats(allow_nan=False, allow_infinity=False)
    if ftype == "boolean":
        return st.booleans()
    if ftype == "date":
        return st.dates(dt.date(1, 1, 1), dt.date(9998, 12, 31)).map(dt.date.isoformat)
    if ftype == "timestamp":
        return st.datetimes(dt.datetime(1, 1, 2), dt.datetime(9998, 12, 30)).map(
            lambda d: d.isoformat(timespec="microseconds") + "Z")
    p, s = (9, 2) if ftype == "decimal(9,2)" else (38, 6)
    return st.decimals(min_value=-(10 ** (p - s)) + 1, max_value=10 ** (p - s) - 1, places=s,
                       allow_nan=False, allow_infinity=False).map(str)


@st.composite
def contract_and_records(draw):
    n_keys = draw(st.integers(1, 2))
    keys = [(f"k{i}", draw(st.sampled_from(["string", "int", "long", "date"]))) for i in range(n_keys)]
    others = [(f"f{i}", draw(st.sampled_from(_TYPES)), draw(st.booleans())) for i in range(draw(st.integers(0, 5)))]
    with_deleted = draw(st.booleans())
    fields = ([FieldSpec(n, FieldType.parse(t)) for n, t in keys] + [FieldSpec("version", FieldType("long"))]
              + [FieldSpec(n, FieldType.parse(t), nullable) for n, t, nullable in others]
              + ([FieldSpec("deleted", FieldType("boolean"))] if with_deleted else []))
    entity = Entity(tuple(n for n, _ in keys), "version", "deleted" if with_deleted else None)
    contract = Contract("random", "1.0", entity, tuple(draw(st.permutations(fields))))
    records = []
    for _ in range(draw(st.integers(1, 12))):
        deleted = with_deleted and draw(st.booleans())
        record = {n: draw(_value(t)) for n, t in keys} | {"version": draw(st.integers(1, 2**63 - 1))}
        for n, t, nullable in others:
            record[n] = draw(st.none() | _value(t)) if nullable or deleted else draw(_value(t))
        if with_deleted:
            record["deleted"] = deleted
        records.append(record)
    return contract, records


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=contract_and_records(), data=st.data())
def test_random_valid_records_validate_and_digest_is_order_free_and_sensitive(case, data, tmp_path_factory):
    contract, records = case
    folder = tmp_path_factory.mktemp("prop")
    table = read_events(jsonl(folder / "e.jsonl", records), contract)
    assert table.schema == contract.arrow_schema and table.num_rows == len(records)
    assert events_from_records(records, contract).equals(table)
    pq.write_table(table, folder / "e.parquet")
    assert read_events(folder / "e.parquet", contract).equals(table)

    digest = events_digest(table, contract)
    order = data.draw(st.permutations(range(len(records))))
    assert events_digest(table.take(order), contract) == digest
    assert events_digest(canonical(table.take(order), contract), contract, is_canonical=True) == digest

    row = data.draw(st.integers(0, len(records) - 1))
    name = data.draw(st.sampled_from(contract.names))
    spec = contract.field(name)
    changed = dict(records[row])
    if name == contract.entity.version:
        candidates = st.integers(1, 2**63 - 1)
    elif name == contract.entity.deleted:
        # a delete may become live only if it holds every field a live event needs
        can_flip = all(f.nullable or changed.get(f.name) is not None for f in contract.fields)
        candidates = st.just(not changed[name]) if can_flip else st.just(True)
    else:
        candidates = _value(spec.type.name)
        if name not in contract.entity.key and (spec.nullable or changed.get(contract.entity.deleted or "", False)):
            candidates = st.none() | candidates
    new_value = data.draw(candidates)
    changed[name] = new_value
    new_table = events_from_records(records[:row] + [changed] + records[row + 1:], contract)
    if new_table.slice(row, 1).equals(table.slice(row, 1)):
        return  # the same value drawn again (or 0.0 for -0.0)
    assert events_digest(new_table, contract) != digest


_INVALID = {
    "string": [5, True, ["a"]], "int": [2**31, -(2**31) - 1, 1.5, "1", True], "long": [2**63, 1.0, "1", False],
    "float": ["1", True, 1e39], "double": ["1.5", True, 1e309], "boolean": [0, "true", None],
    "date": ["2025-02-30", "2025-1-01", "9999-01-01", "0000-12-31", 20250101],
    "timestamp": ["2025-01-01T00:00:00", "2025-01-01T00:00Z", "2025-01-01T00:00:00.0000001Z", "2025-01-01Z",
                  "2025-01-01T00:00:00+24:00", "9998-12-31T23:59:59-00:01", "0001-01-01T00:00:00+00:01"],
    "decimal(9,2)": ["0.001", 10_000_000, "1,5", "NaN", 1e-3], "decimal(38,6)": ["0.0000001", "1e32", "-1e32", "x"],
}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=contract_and_records(), data=st.data())
def test_any_single_bad_value_is_refused_naming_its_line_and_field(case, data, tmp_path_factory):
    """The vectorised path and the line-by-line locator agree: a bad value is never accepted,
    nor reported as an unlocated parse failure."""
    contract, records = case
    row = data.draw(st.integers(0, len(records) - 1))
    name = data.draw(st.sampled_from([*contract.names, "undeclared"]))
    bad = dict(records[row])
    if name == "undeclared":
        bad[name] = 1
    elif name == contract.entity.version:
        bad[name] = data.draw(st.sampled_from([0, -1, None, 2**63, "1", 1.0]))
    elif name in contract.entity.key:
        bad[name] = data.draw(st.sampled_from([None, *_INVALID[contract.field(name).type.name]]))
    else:
        spec = contract.field(name)
        options = [v for v in _INVALID[spec.type.name] if v is not None]
        if not spec.nullable and not (contract.entity.deleted and bad[contract.entity.deleted]):
            options.append(None)
        bad[name] = data.draw(st.sampled_from(options))
    batch = records[:row] + [bad] + records[row + 1:]
    path = jsonl(tmp_path_factory.mktemp("bad") / "e.jsonl", batch)
    with pytest.raises(InvalidEvent) as exc:
        read_events(path, contract)
    assert exc.value.where.endswith(f"e.jsonl:{row + 1}") and exc.value.field == name, str(exc.value)
    with pytest.raises(InvalidEvent) as exc:
        events_from_records(batch, contract)
    assert exc.value.where.endswith(f"record {row + 1}") and exc.value.field == name, str(exc.value)
