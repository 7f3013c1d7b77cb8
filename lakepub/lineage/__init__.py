"""Lineage of published data: which publishes and which input events changed a partition
(``explain``), what changed between two snapshots (``diff``), and the ``lakepub explain``/``diff``
commands (``cli``). Everything here reads: the published tables' snapshot records
(``store/record.py``) and the entity's ledger, never writing either."""
