"""Data contracts: the entity an event stream describes, its typed fields and their roles."""

from lakepub.contract.model import Contract, Entity, FieldSpec, load_contracts
from lakepub.contract.types import FieldType

__all__ = ["Contract", "Entity", "FieldSpec", "FieldType", "load_contracts"]
