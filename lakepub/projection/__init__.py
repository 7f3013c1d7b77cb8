"""Projection kinds: what a dataset publishes from the live states of its entities (see base.py)."""

from lakepub.projection.base import Entity, Kind, OverflowRefused, kind_of, kinds, register
from lakepub.projection.checksum import partition_checksum
from lakepub.projection.partitioning import PartitionBy

__all__ = ["Entity", "Kind", "OverflowRefused", "PartitionBy", "kind_of", "kinds", "partition_checksum", "register"]
