"""Iceberg storage: table layouts, snapshot summary records, the atomic multi-table commit."""
