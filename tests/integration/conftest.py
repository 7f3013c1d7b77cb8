"""Fixtures for the integration tests: a throw-away PostgreSQL database, a local S3/Glue endpoint
(moto's server mode) and workspaces whose ``catalog:`` mapping points at them.

* ``pg_url`` (in tests/conftest.py): a fresh PostgreSQL database per test, dropped afterwards.
* ``s3_endpoint``: one moto server per session on a free port with one bucket; fake credentials.
* ``make_workspace``: ``make_workspace(catalog_mapping, name="ws", namespace=None) -> Path`` runs
  ``lakepub init`` into a temporary folder and rewrites the ``catalog:`` mapping (and optionally the
  Iceberg ``namespace:``) of its lakepub.yaml. Catalogs shared by the session (Glue on the moto
  server) need a unique namespace per test.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import yaml

from lakepub.config import CONFIG_FILE
from lakepub.init import init_workspace


FAKE_KEY_ID = "lakepub-test-key"
FAKE_SECRET = "lakepub-test-secret"
REGION = "us-east-1"


# --- S3 and Glue on moto's server mode ------------------------------------------------------


@dataclass(frozen=True)
class S3Endpoint:
    url: str  # http://127.0.0.1:<port>
    bucket: str
    access_key_id: str = FAKE_KEY_ID
    secret_access_key: str = FAKE_SECRET
    region: str = REGION

    def s3_properties(self) -> dict[str, str]:
        """pyiceberg's ``s3.*`` FileIO properties for this endpoint."""
        return {
            "s3.endpoint": self.url,
            "s3.access-key-id": self.access_key_id,
            "s3.secret-access-key": self.secret_access_key,
            "s3.region": self.region,
        }

    def client(self, service: str = "s3"):
        import boto3

        return boto3.client(
            service, endpoint_url=self.url, region_name=self.region,
            aws_access_key_id=self.access_key_id, aws_secret_access_key=self.secret_access_key,
        )

    def keys(self, prefix: str) -> list[str]:
        """Every object key under ``prefix``, through the list_objects_v2 paginator."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [obj["Key"] for page in pages for obj in page.get("Contents", [])]


@pytest.fixture(scope="session")
def s3_endpoint() -> S3Endpoint:
    """A moto server (S3 + Glue) on a free local port with one bucket, for the whole session."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:  # pragma: no cover - moto[server] is a test dependency
        pytest.skip(f"moto[server] is not installed: {exc}")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one INFO line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = S3Endpoint(url=f"http://{host}:{port}", bucket=f"lakepub-it-{uuid.uuid4().hex[:8]}")
        endpoint.client().create_bucket(Bucket=endpoint.bucket)
        yield endpoint
    finally:
        server.stop()


# --- workspaces -----------------------------------------------------------------------------


@pytest.fixture
def make_workspace(tmp_path: Path) -> Callable[..., Path]:
    """``make_workspace(catalog, name="ws")``: an initialised workspace whose catalog mapping is replaced."""

    def make(catalog: dict[str, str], name: str = "ws", namespace: str | None = None) -> Path:
        root = tmp_path / name
        init_workspace(root)
        config_path = root / CONFIG_FILE
        config = yaml.safe_load(config_path.read_text())
        config["catalog"] = dict(catalog)
        if namespace is not None:
            config["namespace"] = namespace
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        return root

    return make
