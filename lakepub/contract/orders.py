"""The orders contract (``catalog/contracts/orders@v1.0.yaml`` as ``lakepub init`` writes it), as a
constant: the default where no dataset's contract is at hand (the ledger layout, its key index,
compaction and the lookups of the orders ledgers)."""

from lakepub.contract.model import Contract, Entity, FieldSpec
from lakepub.contract.types import FieldType

ORDERS_CONTRACT = Contract(
    name="orders",
    version="1.0",
    entity=Entity(key=("order_id",), version="version", deleted="deleted"),
    fields=(
        FieldSpec("order_id", FieldType.parse("string")),
        FieldSpec("version", FieldType.parse("long")),
        FieldSpec("day", FieldType.parse("date")),
        FieldSpec("cents", FieldType.parse("long")),
        FieldSpec("deleted", FieldType.parse("boolean")),
    ),
    extra_fields="ignore",  # the original format: undeclared input fields were always dropped
    primary_key=("order_id", "version"),
    # sha256 of the file's canonical form (contract/canonical.py); a test loads the file and compares
    sha256="2f90119498254ebe2283ea82946c5a5617a6585e75d07acbc2547c78364684a7",
)
