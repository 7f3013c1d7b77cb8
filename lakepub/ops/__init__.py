"""Operability and outside readers: ``lakepub metrics``, ``lakepub tables`` and
``lakepub catalog-config`` (``cli.py`` registers them on the main group).

- ``data_version.py``: one sha256 naming what a dataset's published rows mean;
- ``metrics.py``: per-dataset figures read from the published snapshots, the audit table and the
  landing folder, rendered as Prometheus text (prometheus_client) or JSON;
- ``tables.py``: every published table (datasets and entity ledgers) with its metadata location;
- ``catalog_config.py``: the resolved pyiceberg catalog configuration, usable from any folder.

Everything here only reads; nothing in it writes to the catalog or the warehouse.
"""
