"""Listing and deleting the files under a table location: local folders and S3 buckets.

A ``FileStore`` does two things: ``list(prefix)`` yields every file under a location with its size
and modification time, and ``delete(paths)`` removes files (in batches where the backend has a
batch call). For superseded table folders (``superseded``) it also lists the folders in a folder
(``folders``), removes emptied folders (``prune``) and writes a marker file (``touch``).
Locations are compared in one normal form (``normalize``) so that ``file:/x``, ``file:///x`` and
``/x`` are the same file, and so are ``s3://``, ``s3a://`` and ``s3n://``.
"""

from __future__ import annotations

import builtins
import os
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence
from urllib.parse import urlparse

from lakepub.errors import ConfigError

_BOTO3_LOCK = threading.Lock()

S3_SCHEMES = ("s3", "s3a", "s3n")
S3_DELETE_LIMIT = 1000  # DeleteObjects accepts at most 1000 keys per request


@dataclass(frozen=True)
class FileInfo:
    """One listed file: its location (in the store's scheme), size in bytes and mtime (epoch s)."""

    path: str
    size: int
    mtime: float


@dataclass(frozen=True)
class Location:
    """A location split into comparable parts: scheme (``file``, ``s3``, ...), authority and path."""

    scheme: str
    authority: str
    path: str

    def __str__(self) -> str:
        return f"{self.scheme}://{self.authority}{self.path}"

    def is_under(self, folder: "Location") -> bool:
        """True if this location is strictly inside ``folder`` (same scheme and authority)."""
        prefix = folder.path.rstrip("/") + "/"
        return (self.scheme, self.authority) == (folder.scheme, folder.authority) and self.path.startswith(prefix)


def split_location(location: str) -> Location:
    """Parse a location into its normal form; a bare path is a local file.

    Hand-rolled rather than ``urlsplit``: it runs for every listed file (100,000s), and object
    keys may contain ``?`` or ``#``, which are part of the name, not a query or fragment.
    """
    head, sep, rest = location.partition("://")
    if not sep:
        return Location("file", "", location[len("file:"):] if location.startswith("file:") else location)
    scheme = head.lower()
    if scheme in S3_SCHEMES:
        scheme = "s3"
    slash = rest.find("/")
    authority, path = (rest, "/") if slash < 0 else (rest[:slash], rest[slash:])
    if scheme == "file" and authority.lower() == "localhost":
        authority = ""
    return Location(scheme, authority, path)


def normalize(location: str) -> str:
    """The normal form of a location as a string: ``file:///x``, ``s3://bucket/key``."""
    return str(split_location(location))


class FileStore(Protocol):
    """What the janitor needs from a storage backend."""

    def list(self, prefix: str) -> Iterator[FileInfo]:
        """Every file under the folder ``prefix`` (recursively)."""
        ...

    def delete(self, paths: Sequence[str]) -> builtins.list[str]:
        """Delete files; return the ones that could not be deleted (missing files count as deleted)."""
        ...

    def folders(self, prefix: str) -> builtins.list[str]:
        """The names of the folders directly inside the folder ``prefix`` (not recursive)."""
        ...

    def prune(self, prefix: str) -> None:
        """Remove the empty folders left under ``prefix`` (and it, if empty); object stores have none."""
        ...

    def touch(self, path: str) -> None:
        """Write an empty file at ``path`` (a marker; its modification time is what matters)."""
        ...


class LocalFileStore:
    """A local filesystem: ``os.walk`` and ``os.remove``; paths are returned as ``file://`` URIs."""

    def list(self, prefix: str) -> Iterator[FileInfo]:
        root = split_location(prefix).path
        for folder, _dirs, names in os.walk(root):
            for name in names:
                full = os.path.join(folder, name)
                try:
                    st = os.stat(full)
                except FileNotFoundError:  # deleted while listing
                    continue
                yield FileInfo(f"file://{full}", st.st_size, st.st_mtime)

    def delete(self, paths: Sequence[str]) -> builtins.list[str]:
        failed = []
        for path in paths:
            try:
                os.remove(split_location(path).path)
            except FileNotFoundError:
                pass
            except OSError:
                failed.append(path)
        return failed

    def folders(self, prefix: str) -> builtins.list[str]:
        try:
            with os.scandir(split_location(prefix).path) as entries:
                return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return []

    def prune(self, prefix: str) -> None:
        root = split_location(prefix).path
        for folder, _dirs, _names in sorted(os.walk(root), key=lambda w: -len(w[0])):  # deepest first
            try:
                os.rmdir(folder)  # only succeeds when empty: a file written meanwhile keeps its folder
            except OSError:
                pass

    def touch(self, path: str) -> None:
        with open(split_location(path).path, "wb"):
            pass


class S3FileStore:
    """An S3 (or S3-compatible) bucket through boto3: paginated listing, batched DeleteObjects."""

    def __init__(self, client: Any, *, page_size: int = 1000, delete_batch: int = S3_DELETE_LIMIT):
        if not 1 <= delete_batch <= S3_DELETE_LIMIT:
            raise ValueError(f"delete_batch must be within 1..{S3_DELETE_LIMIT}")
        self.client, self.page_size, self.delete_batch = client, page_size, delete_batch

    @classmethod
    def from_properties(cls, props: Mapping[str, str], **kwargs: Any) -> "S3FileStore":
        """A store whose client uses pyiceberg's ``s3.*`` catalog properties (endpoint, keys, region)."""
        import boto3
        from botocore.config import Config

        endpoint = props.get("s3.endpoint")
        if endpoint and "://" not in endpoint:
            endpoint = f"https://{endpoint}"  # as pyarrow, which writes the files the janitor lists
        path_style = bool(endpoint) and str(props.get("s3.force-virtual-addressing", "false")).lower() != "true"
        with _BOTO3_LOCK:  # boto3's default session is not thread-safe (its clients are)
            client = boto3.client(
                "s3",
                endpoint_url=endpoint or None,
                aws_access_key_id=props.get("s3.access-key-id") or None,
                aws_secret_access_key=props.get("s3.secret-access-key") or None,
                aws_session_token=props.get("s3.session-token") or None,
                region_name=props.get("s3.region") or props.get("client.region") or None,
                # the endpoint is s3.endpoint's or AWS's, as pyarrow's (which ignores AWS_ENDPOINT_URL*
                # and a profile's endpoint_url): never another store than the warehouse's files
                config=Config(s3={"addressing_style": "path"} if path_style else None, ignore_configured_endpoint_urls=True,
                              **_checksums(endpoint)),
            )
        return cls(client, **kwargs)

    def list(self, prefix: str) -> Iterator[FileInfo]:
        loc = split_location(prefix)
        key_prefix = loc.path.lstrip("/").rstrip("/") + "/"
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=loc.authority, Prefix=key_prefix, PaginationConfig={"PageSize": self.page_size}
        )
        for page in pages:
            for obj in page.get("Contents", []):
                yield FileInfo(f"s3://{loc.authority}/{obj['Key']}", int(obj["Size"]), obj["LastModified"].timestamp())

    def delete(self, paths: Sequence[str]) -> builtins.list[str]:
        by_bucket: dict[str, builtins.list[str]] = {}
        for path in paths:
            loc = split_location(path)
            by_bucket.setdefault(loc.authority, []).append(loc.path.lstrip("/"))
        failed = []
        for bucket, keys in by_bucket.items():
            for batch in _batches(keys, self.delete_batch):
                response = self.client.delete_objects(
                    Bucket=bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
                )
                failed += [f"s3://{bucket}/{err['Key']}" for err in response.get("Errors", [])]
        return failed

    def folders(self, prefix: str) -> builtins.list[str]:
        loc = split_location(prefix)
        key_prefix = loc.path.lstrip("/").rstrip("/") + "/"
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=loc.authority, Prefix=key_prefix, Delimiter="/", PaginationConfig={"PageSize": self.page_size}
        )
        names = {p["Prefix"][len(key_prefix):].rstrip("/") for page in pages for p in page.get("CommonPrefixes", [])}
        return sorted(n for n in names if n)

    def prune(self, prefix: str) -> None:
        return None  # an object store has no folders: deleting the last key removes the prefix

    def touch(self, path: str) -> None:
        loc = split_location(path)
        self.client.put_object(Bucket=loc.authority, Key=loc.path.lstrip("/"), Body=b"")


def _batches(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def filestore_for(location: str, properties: Mapping[str, str], cache: dict[str, FileStore] | None = None) -> FileStore:
    """The store able to list ``location``: local for ``file:``/bare paths, boto3 for ``s3://``."""
    scheme = split_location(location).scheme
    if cache is not None and scheme in cache:
        return cache[scheme]
    store: FileStore
    if scheme == "file":
        store = LocalFileStore()
    elif scheme == "s3":
        store = S3FileStore.from_properties(properties)
    else:
        raise ConfigError(f"janitor cannot list {scheme}:// locations ({location}); supported: local folders and s3://")
    if cache is not None:
        cache[scheme] = store
    return store


def _checksums(endpoint: str | None) -> dict[str, str]:
    """boto3 (>= 1.36) adds CRC32 checksums to every upload it can, as trailers of an aws-chunked
    body, which S3-compatible stores released before 2025 (MinIO, Ceph RGW and others) reject. On
    an ``s3.endpoint`` other than AWS's, send checksums only where the API requires one (as pyarrow,
    which writes the same warehouse, does), unless the environment chooses
    (``AWS_REQUEST_CHECKSUM_CALCULATION`` / ``AWS_RESPONSE_CHECKSUM_VALIDATION``)."""
    if not endpoint or (urlparse(endpoint).hostname or "").endswith(".amazonaws.com"):
        return {}
    return {key: "when_required" for key, env in (("request_checksum_calculation", "AWS_REQUEST_CHECKSUM_CALCULATION"),
                                                  ("response_checksum_validation", "AWS_RESPONSE_CHECKSUM_VALIDATION"))
            if not os.environ.get(env)}
