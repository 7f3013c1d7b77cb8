"""Review of issue 16 on moto: a data file kept as written goes up whole and equal to its cache
copy at every size pyarrow's S3 stream treats differently (empty, one PUT, at and above its
10 MiB part size: multipart), written as a Parquet writer writes it (64 KiB at a time) and sent
from its kept parts (``store/s3_streams._drained``)."""

from __future__ import annotations

import os

import pytest

from lakepub.store import uploads
from lakepub.store.cache import CACHE_FOLDER
from lakepub.store.s3 import BACKGROUND_UPLOADS, LakepubFileIO

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("background", ["true", "false"])
def test_data_files_of_every_size_go_up_whole_and_equal_to_their_cache_copy(s3_endpoint, tmp_path, background):
    io = LakepubFileIO({**s3_endpoint.s3_properties(), CACHE_FOLDER: str(tmp_path / "cache"),
                        BACKGROUND_UPLOADS: background})
    client = s3_endpoint.client()
    for size in (0, 1000, (1 << 20) + 7, 10 << 20, (10 << 20) + 1, 25 << 20):
        data = os.urandom(size)
        key = f"review-cold-{background}/t/data/f{size}.parquet"
        with io.new_output(f"s3://{s3_endpoint.bucket}/{key}").create() as stream:
            for i in range(0, size, 1 << 16):
                stream.write(data[i:i + (1 << 16)])
            assert stream.tell() == size
        uploads.uploads_done()
        assert client.get_object(Bucket=s3_endpoint.bucket, Key=key)["Body"].read() == data, size
        assert io.disk.path(f"s3://{s3_endpoint.bucket}/{key}").read_bytes() == data, size
