"""One PutObject for a local file too large for pyarrow's single PUT (key-index runs > 10 MiB).

pyarrow's S3 output stream (``allow_delayed_open``, ``store/s3.py``) sends a file below its part
size (10 MiB, measured on pyarrow 26: 9 MiB went up in one PUT, 12 MiB as CreateMultipartUpload,
two UploadParts, CompleteMultipartUpload) in one request; above it, a multipart upload: three
requests one after another. S3 takes one PutObject up to 5 GiB. A merged key-index run of a
10M-row ledger is 10-40 MiB, and in a 1M-event ``lakepub run`` on S3 its upload was the last
thing before the batch's pointer swap (``uploads_done``): the two extra round trips were on the
critical path of every merging batch (3 of 10; scripts/bench/object_store.py's request log).

``put_file`` uploads such a file with boto3 (already a dependency: the janitor's listing,
``maintenance/filestore.py``, builds its client the same way) from pyiceberg's ``s3.*``
properties. Only the properties it maps are allowed: a FileIO with any other ``s3.*`` or
``client.*`` property (a role to assume, a proxy, a signer, ...) answers False and the caller
uploads through pyarrow as before, so the file always goes up with the credentials and endpoint
the rest of the warehouse uses (read as pyarrow reads them: an endpoint without a scheme is
HTTPS, ``s3.force-virtual-addressing`` any of pyiceberg's booleans). A failed PutObject is an
OSError, as pyarrow's failed upload is (``publish/lookup.runs_after`` then writes no index when
the upload runs in the caller). The upload's outcome is the same either way: PutObject is
atomic (the object appears whole or not at all), and the caller's background-upload barrier
(``store/uploads.py``) still stands between it and any pointer swap naming it.
"""

from __future__ import annotations

import threading
from typing import Any, BinaryIO, Mapping

SINGLE_PUT_FROM = 8 << 20  # pyarrow sends up to its 10 MiB part size in one PUT itself
SINGLE_PUT_MAX = 5 << 30  # S3's largest PutObject
_MAPPED = {"s3.endpoint", "s3.access-key-id", "s3.secret-access-key", "s3.session-token", "s3.region",
           "client.region", "s3.force-virtual-addressing"}
_CLIENTS: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def mapped(properties: Mapping[str, Any]) -> bool:
    """Whether every ``s3.*``/``client.*`` property is one this module passes to boto3."""
    return not any(str(k).startswith(("s3.", "client.")) and k not in _MAPPED for k in properties)


def _as_pyarrow(properties: Mapping[str, Any]) -> dict[str, str] | None:
    """The mapped properties, spelt so that ``S3FileStore.from_properties`` reads them as pyiceberg
    and pyarrow do (None: a value pyiceberg would reject; pyarrow's upload then reports it). An
    endpoint without a scheme is HTTPS to pyarrow (``S3FileSystem(scheme="https")``), and
    ``s3.force-virtual-addressing`` is any of pyiceberg's booleans (``1``, ``yes``, ``on`` ...)."""
    from pyiceberg.types import strtobool

    props = {k: str(v) for k, v in properties.items() if k in _MAPPED}
    endpoint = props.get("s3.endpoint")
    if endpoint and "://" not in endpoint:
        props["s3.endpoint"] = f"https://{endpoint}"
    virtual = props.get("s3.force-virtual-addressing")
    if virtual:
        try:
            props["s3.force-virtual-addressing"] = "true" if strtobool(virtual) else "false"
        except ValueError:
            return None
    return props


def _client(properties: Mapping[str, Any]) -> Any:
    key = tuple(sorted((_as_pyarrow(properties) or {}).items()))
    with _LOCK:  # one client per property set (filestore makes it under its boto3 lock)
        client = _CLIENTS.get(key)
        if client is None:
            from lakepub.maintenance.filestore import S3FileStore

            client = _CLIENTS[key] = S3FileStore.from_properties(dict(key)).client
    return client


def put_file(properties: Mapping[str, Any], location: str, source: BinaryIO, size: int) -> bool:
    """Upload ``source`` (``size`` bytes, at its start) to ``location`` in one PutObject; False
    (nothing done) when pyarrow's own upload is the one to use: a small or > 5 GiB file, not on
    S3, or properties this module does not map."""
    if not (SINGLE_PUT_FROM <= size <= SINGLE_PUT_MAX and location.startswith(("s3://", "s3a://"))
            and mapped(properties)):
        return False
    if _as_pyarrow(properties) is None:
        return False
    bucket, _, key = location.split("://", 1)[1].partition("/")
    try:
        _client(properties).put_object(Bucket=bucket, Key=key, Body=source, ContentLength=size)
    except Exception as exc:
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(exc, (BotoCoreError, ClientError)):  # an OSError, as pyarrow's failed upload is:
            raise OSError(f"PutObject of {location} failed: {exc}") from exc  # callers catch OSError
        raise
    return True
