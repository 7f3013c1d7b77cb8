"""Derived datasets (``projection: {kind: sql}``): SQL over published datasets, kept correct
partition by partition (issue 14, Minerva-style).

- ``model.py``: the YAML of a derived dataset and the graph of datasets it forms (cycles, unknown
  inputs, tables the query reads, partition expressions), checked when the workspace loads;
- ``schema.py``: each derived dataset's output columns and the upstream columns its query reads
  (DuckDB types, sqlglot column lineage), resolved in graph order;
- ``version.py``: data versions, per dataset and per column, chained through the graph;
- ``state.py``: desired vs actual per output partition, and the plan of windows;
- ``compute.py``: one window computed by DuckDB over the upstreams' published snapshots and
  committed through the atomic commit;
- ``cli.py``: ``lakepub plan`` and ``lakepub reconcile``.
"""
