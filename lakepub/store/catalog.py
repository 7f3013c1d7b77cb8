"""Opening the catalog and creating namespaces and tables, safely when many writers start at once.

On a brand-new workspace every writer finds the catalog empty and creates the same things: the
SQL catalog's own tables (pyiceberg's ``SqlCatalog`` runs ``CREATE TABLE iceberg_tables ...`` when
it is opened and finds none), the namespace and the dataset's tables. pyiceberg checks and then
creates, so a writer that loses the race gets "already exists" in one of several forms: SQLite's
``table ... already exists`` (OperationalError), PostgreSQL's unique violation on its type catalog
or ``relation ... already exists`` (IntegrityError / ProgrammingError), an IntegrityError on the
namespace's property row, or pyiceberg's own ``*AlreadyExistsError``. Each of these means "someone
else created it": open or load it again, a bounded number of times.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Mapping, TypeVar

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.table import Table
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from lakepub.errors import ConfigError
from lakepub.failures import classify
from lakepub.store import s3

if TYPE_CHECKING:
    from lakepub.store.cache import FileCache

ATTEMPTS = 5
T = TypeVar("T")


def open_catalog(name: str, properties: Mapping[str, str], *, attempts: int = ATTEMPTS,
                 cache: "FileCache | None" = None) -> Catalog:
    """``load_catalog``, retried while a concurrent writer is creating the catalog's own tables.
    An S3 warehouse gets lakepub's FileIO (``store/s3.py``), reading Parquet through ``cache``.

    A locked SQLite catalog (after its busy timeout) is a ``CatalogBusy`` (retryable); any other
    failure is a configuration error naming the catalog.
    """
    for attempt in range(1, attempts + 1):
        try:
            return load_catalog(name, **s3.configure(properties, cache))
        except Exception as exc:  # pyiceberg raises many types for a bad catalog configuration
            if attempt < attempts and created_concurrently(exc):
                time.sleep(0.02 * attempt)
                continue
            known = classify(exc)
            if known is not None:
                raise known from exc
            raise ConfigError(f"cannot open catalog '{name}': {' '.join(str(exc).split())}") from exc
    raise AssertionError("unreachable")


def created_concurrently(exc: BaseException) -> bool:
    """Whether ``exc`` says that what we were creating was created meanwhile by another writer."""
    if isinstance(exc, (NamespaceAlreadyExistsError, TableAlreadyExistsError, IntegrityError)):
        return True
    return isinstance(exc, SQLAlchemyError) and "already exists" in str(exc).lower()


def ensure_namespace(catalog: Catalog, namespace: str) -> None:
    """Create the namespace unless it exists (or another writer creates it meanwhile)."""
    _retry(lambda: _create_namespace(catalog, namespace))


def create_or_load(catalog: Catalog, ident: tuple[str, str], create: Callable[[], Table]) -> Table:
    """Load the table; create it with ``create()`` if it does not exist, or load the one that a
    concurrent writer created first."""

    def once() -> Table:
        try:
            return catalog.load_table(ident)
        except NoSuchTableError:
            return create()

    return _retry(once)


def _create_namespace(catalog: Catalog, namespace: str) -> None:
    if catalog.namespace_exists(namespace):
        return
    try:
        catalog.create_namespace(namespace)
    except NamespaceAlreadyExistsError:
        pass


def _retry(fn: Callable[[], T], attempts: int = ATTEMPTS) -> T:
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == attempts or not created_concurrently(exc):
                raise
            time.sleep(0.01 * attempt)
    raise AssertionError("unreachable")
