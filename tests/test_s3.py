"""S3 over trainmon's object store: real boto3 and the real AWS CLI against a real server on a
loopback port, and the files they leave where job channels read them (``objects.resolve``)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import os
import subprocess
import sys
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import botocore.auth
import botocore.awsrequest
import botocore.credentials
import httpx
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmon import access_keys
from trainmon.errors import ValidationException
from trainmon.server.aws import bodies
from trainmon.store.objects import resolve

from .conftest import start_server

MiB = 1024 * 1024
SMALL_PARTS = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)


@dataclass(frozen=True)
class Endpoint:
    url: str
    home: Path
    key_id: str
    secret: str


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    """One ``trainmon server`` for the module; each test works in buckets of its own."""
    home = tmp_path_factory.mktemp("s3-home")
    server = start_server(home)
    yield Endpoint(server.url, home, server.key.AccessKeyId, server.key.SecretAccessKey)
    server.stop()


@pytest.fixture
def s3(endpoint: Endpoint) -> Any:
    return boto3.client("s3", endpoint_url=endpoint.url, aws_access_key_id=endpoint.key_id,
                        aws_secret_access_key=endpoint.secret,
                        region_name="us-east-1", config=Config(retries={"max_attempts": 1}))


@pytest.fixture
def bucket(s3: Any, request: pytest.FixtureRequest) -> str:
    name = request.node.name.lower().replace("_", "-")[:40].strip("-") + "-bkt"
    s3.create_bucket(Bucket=name)
    return name


def _code(error: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response = error.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def _crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def _signed(endpoint: Endpoint, method: str, path: str, body: bytes = b"",
            headers: dict[str, str] | None = None) -> httpx.Response:
    """A request signed for S3 by botocore's own signer, sent as it is (for what boto3 does not send)."""
    url = endpoint.url + path
    request = botocore.awsrequest.AWSRequest(method, url, data=body, headers=headers or {})
    credentials = botocore.credentials.Credentials(endpoint.key_id, endpoint.secret)
    botocore.auth.S3SigV4Auth(credentials, "s3", "us-east-1").add_auth(request)
    return httpx.request(method, url, content=body, headers=dict(request.headers.items()))


# -- buckets ----------------------------------------------------------------------------------


def test_buckets_are_created_listed_and_deleted(s3: Any, endpoint: Endpoint) -> None:
    s3.create_bucket(Bucket="first-bucket")
    s3.create_bucket(Bucket="second.bucket", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    assert s3.head_bucket(Bucket="first-bucket")["ResponseMetadata"]["HTTPHeaders"]["x-amz-bucket-region"] == \
        "us-east-1"
    names = [found["Name"] for found in s3.list_buckets()["Buckets"]]
    assert {"first-bucket", "second.bucket"} <= set(names) and names == sorted(names)
    assert s3.get_bucket_location(Bucket="first-bucket")["LocationConstraint"] is None
    assert s3.get_bucket_location(Bucket="second.bucket")["LocationConstraint"] == "eu-west-1"
    assert (endpoint.home / "s3" / "first-bucket").is_dir()
    with pytest.raises(s3.exceptions.BucketAlreadyOwnedByYou) as owned:
        s3.create_bucket(Bucket="first-bucket")
    assert _code(owned) == ("BucketAlreadyOwnedByYou", 409)
    s3.put_object(Bucket="first-bucket", Key="k", Body=b"v")
    with pytest.raises(ClientError) as not_empty:
        s3.delete_bucket(Bucket="first-bucket")
    assert _code(not_empty) == ("BucketNotEmpty", 409)
    s3.delete_object(Bucket="first-bucket", Key="k")
    s3.delete_bucket(Bucket="first-bucket")
    s3.delete_bucket(Bucket="second.bucket")
    with pytest.raises(ClientError) as gone:
        s3.head_bucket(Bucket="first-bucket")
    assert _code(gone) == ("404", 404)  # HEAD answers carry no body, so botocore names the status
    with pytest.raises(s3.exceptions.NoSuchBucket):
        s3.delete_bucket(Bucket="first-bucket")
    with pytest.raises(ClientError) as invalid:
        s3.create_bucket(Bucket="Not_Valid")
    assert _code(invalid) == ("InvalidBucketName", 400)
    assert "first-bucket" not in [found["Name"] for found in s3.list_buckets()["Buckets"]]


# -- objects ----------------------------------------------------------------------------------


def test_put_get_head_delete(s3: Any, bucket: str, endpoint: Endpoint) -> None:
    put = s3.put_object(Bucket=bucket, Key="dir/hello world+é?#%.txt", Body=b"hello world", ContentType="text/plain",
                        Metadata={"owner": "team-a"}, CacheControl="no-cache")
    assert put["ETag"] == f'"{hashlib.md5(b"hello world").hexdigest()}"'
    assert put["ChecksumCRC32"] == _crc32(b"hello world")  # botocore sent one; S3 answers it back
    got = s3.get_object(Bucket=bucket, Key="dir/hello world+é?#%.txt")
    assert got["Body"].read() == b"hello world"
    assert (got["ContentType"], got["Metadata"], got["CacheControl"], got["ContentLength"]) == \
        ("text/plain", {"owner": "team-a"}, "no-cache", 11)
    assert got["ETag"] == put["ETag"] and got["LastModified"].tzinfo is not None
    head = s3.head_object(Bucket=bucket, Key="dir/hello world+é?#%.txt")
    assert (head["ContentLength"], head["ETag"], head["Metadata"]) == (11, put["ETag"], {"owner": "team-a"})
    assert (endpoint.home / "s3" / bucket / "dir" / "hello world+é?#%.txt").read_bytes() == b"hello world"
    s3.delete_object(Bucket=bucket, Key="dir/hello world+é?#%.txt")
    s3.delete_object(Bucket=bucket, Key="dir/hello world+é?#%.txt")  # gone already: S3 answers 204 all the same
    with pytest.raises(s3.exceptions.NoSuchKey) as missing:
        s3.get_object(Bucket=bucket, Key="dir/hello world+é?#%.txt")
    assert _code(missing) == ("NoSuchKey", 404)
    assert missing.value.response["Error"]["Key"] == "dir/hello world+é?#%.txt"
    with pytest.raises(ClientError) as no_head:
        s3.head_object(Bucket=bucket, Key="dir/hello world+é?#%.txt")
    assert _code(no_head) == ("404", 404)
    with pytest.raises(s3.exceptions.NoSuchBucket) as no_bucket:
        s3.get_object(Bucket="no-such-bucket", Key="k")
    assert _code(no_bucket) == ("NoSuchBucket", 404)
    for _ in range(2):  # refused before its body is read: the next request on the connection still parses
        with pytest.raises(s3.exceptions.NoSuchBucket):
            s3.put_object(Bucket="no-such-bucket", Key="k", Body=b"x" * 2 * MiB)
    assert list((endpoint.home / "s3" / bucket).iterdir()) == []


def test_ranged_gets(s3: Any, bucket: str) -> None:
    data = bytes(range(256)) * 4
    s3.put_object(Bucket=bucket, Key="blob", Body=data)
    for header, expected, content_range in [("bytes=10-19", data[10:20], "bytes 10-19/1024"),
                                            ("bytes=1000-", data[1000:], "bytes 1000-1023/1024"),
                                            ("bytes=-24", data[-24:], "bytes 1000-1023/1024"),
                                            ("bytes=1020-5000", data[1020:], "bytes 1020-1023/1024")]:
        got = s3.get_object(Bucket=bucket, Key="blob", Range=header)
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert (got["Body"].read(), got["ContentRange"], got["ContentLength"]) == \
            (expected, content_range, len(expected))
    with pytest.raises(ClientError) as beyond:
        s3.get_object(Bucket=bucket, Key="blob", Range="bytes=1024-")
    assert _code(beyond) == ("InvalidRange", 416)
    assert beyond.value.response["Error"]["ActualObjectSize"] == "1024"


def test_conditional_gets(s3: Any, bucket: str) -> None:
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"v")["ETag"]
    assert s3.get_object(Bucket=bucket, Key="k", IfMatch=etag)["Body"].read() == b"v"
    with pytest.raises(ClientError) as changed:
        s3.get_object(Bucket=bucket, Key="k", IfMatch='"0123"')
    assert _code(changed) == ("PreconditionFailed", 412)
    with pytest.raises(ClientError) as same:
        s3.get_object(Bucket=bucket, Key="k", IfNoneMatch=etag)
    assert _code(same) == ("304", 304)


def test_upload_file_in_parts_and_download_file(s3: Any, bucket: str, tmp_path: Path, endpoint: Endpoint) -> None:
    data = os.urandom(12 * MiB + 12345)
    source, copy = tmp_path / "model.tar.gz", tmp_path / "downloaded"
    source.write_bytes(data)
    s3.upload_file(str(source), bucket, "models/model.tar.gz", Config=SMALL_PARTS,
                   ExtraArgs={"ContentType": "application/gzip"})
    head = s3.head_object(Bucket=bucket, Key="models/model.tar.gz")
    parts = [data[at:at + 5 * MiB] for at in range(0, len(data), 5 * MiB)]
    digests = b"".join(hashlib.md5(part).digest() for part in parts)
    assert head["ETag"] == f'"{hashlib.md5(digests).hexdigest()}-3"'  # S3's form for a multipart upload
    assert (head["ContentLength"], head["ContentType"]) == (len(data), "application/gzip")
    s3.download_file(bucket, "models/model.tar.gz", str(copy), Config=SMALL_PARTS)
    assert copy.read_bytes() == data
    assert (endpoint.home / "s3" / bucket / "models" / "model.tar.gz").read_bytes() == data
    assert list((endpoint.home / "s3" / ".uploads").iterdir()) == []


def test_multipart_errors(s3: Any, bucket: str) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    etag = s3.upload_part(Bucket=bucket, Key="k", UploadId=upload, PartNumber=1, Body=b"part")["ETag"]
    assert etag == f'"{hashlib.md5(b"part").hexdigest()}"'
    assert [found["Key"] for found in s3.list_multipart_uploads(Bucket=bucket)["Uploads"]] == ["k"]
    with pytest.raises(ClientError) as wrong:
        s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=upload, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": '"00000000000000000000000000000000"'}]})
    assert _code(wrong) == ("InvalidPart", 400)
    s3.abort_multipart_upload(Bucket=bucket, Key="k", UploadId=upload)
    with pytest.raises(s3.exceptions.NoSuchUpload) as aborted:
        s3.upload_part(Bucket=bucket, Key="k", UploadId=upload, PartNumber=2, Body=b"late")
    assert _code(aborted) == ("NoSuchUpload", 404)
    with pytest.raises(s3.exceptions.NoSuchUpload):
        s3.abort_multipart_upload(Bucket=bucket, Key="k", UploadId=upload)
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket=bucket, Key="k")


def test_list_objects_v2_pages_with_common_prefixes(s3: Any, bucket: str) -> None:
    keys = [f"logs/{index:02d} run+é.txt" for index in range(11)] + ["logs/a/1", "logs/a/2", "logs/b/1", "other"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    pages = list(s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="logs/", Delimiter="/", PaginationConfig={"PageSize": 4}))
    assert len(pages) == 4 and all(page["KeyCount"] <= 4 for page in pages)
    assert [page["IsTruncated"] for page in pages] == [True, True, True, False]
    listed = [found["Key"] for page in pages for found in page.get("Contents", [])]
    prefixes = [found["Prefix"] for page in pages for found in page.get("CommonPrefixes", [])]
    assert listed == keys[:11] and prefixes == ["logs/a/", "logs/b/"]
    everything = s3.list_objects_v2(Bucket=bucket)
    assert [found["Key"] for found in everything["Contents"]] == sorted(keys, key=str.encode)
    assert everything["Contents"][0]["Size"] == len(keys[0].encode())
    after = s3.list_objects_v2(Bucket=bucket, StartAfter="logs/b/1")
    assert [found["Key"] for found in after["Contents"]] == ["other"]
    v1 = list(s3.get_paginator("list_objects").paginate(Bucket=bucket, Delimiter="/",
                                                        PaginationConfig={"PageSize": 1}))
    assert [found["Prefix"] for page in v1 for found in page.get("CommonPrefixes", [])] == ["logs/"]
    assert [found["Key"] for page in v1 for found in page.get("Contents", [])] == ["other"]


def test_copy_and_delete_many(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="a", Body=b"A", ContentType="text/x-a", Metadata={"m": "1"})
    s3.copy_object(Bucket=bucket, Key="b?", CopySource={"Bucket": bucket, "Key": "a"})
    s3.copy_object(Bucket=bucket, Key="b", CopySource={"Bucket": bucket, "Key": "b?"})
    copied = s3.get_object(Bucket=bucket, Key="b")
    assert (copied["Body"].read(), copied["ContentType"], copied["Metadata"]) == (b"A", "text/x-a", {"m": "1"})
    deleted = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": key} for key in ("a", "b", "b?", "c")]})
    assert sorted(found["Key"] for found in deleted["Deleted"]) == ["a", "b", "b?", "c"]
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_digests_that_do_not_match_are_refused(s3: Any, bucket: str, endpoint: Endpoint) -> None:
    with pytest.raises(ClientError) as md5:
        s3.put_object(Bucket=bucket, Key="k", Body=b"data", ContentMD5=base64.b64encode(b"0" * 16).decode())
    assert _code(md5) == ("BadDigest", 400)
    with pytest.raises(ClientError) as crc:
        s3.put_object(Bucket=bucket, Key="k", Body=b"data", ChecksumCRC32=_crc32(b"other"))
    assert _code(crc) == ("BadDigest", 400)
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    assert list((endpoint.home / "s3" / ".tmp").iterdir()) == []


def test_a_checksum_is_answered_on_get_and_checked_by_botocore(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"checked", ChecksumAlgorithm="SHA256")
    got = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert got["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(b"checked").digest()).decode()
    assert got["Body"].read() == b"checked"  # botocore compares as it reads


# -- aws-chunked bodies -----------------------------------------------------------------------


def _trailing_checksums(client: Any) -> None:
    """Have botocore send its checksum in an aws-chunked trailer, as it does over HTTPS."""
    def over_tls(params: dict[str, Any], **_: Any) -> None:
        algorithm = params["context"].get("checksum", {}).get("request_algorithm")
        if isinstance(algorithm, dict):
            algorithm["in"] = "trailer"

    for operation in ("PutObject", "UploadPart"):
        client.meta.events.register(f"before-call.s3.{operation}", over_tls)


def test_aws_chunked_bodies_with_a_trailer_are_stored_decoded(s3: Any, bucket: str, tmp_path: Path,
                                                              endpoint: Endpoint) -> None:
    _trailing_checksums(s3)
    seen: list[dict[str, str]] = []
    s3.meta.events.register("before-send.s3.*", lambda request, **_: seen.append(
        {name: value.decode() if isinstance(value, bytes) else value for name, value in request.headers.items()}))
    data = os.urandom(3 * MiB + 7)
    put = s3.put_object(Bucket=bucket, Key="chunked.bin", Body=data)
    assert seen[-1]["X-Amz-Content-SHA256"] == "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
    assert seen[-1]["Content-Encoding"] == "aws-chunked"
    assert put["ChecksumCRC32"] == _crc32(data)
    assert (endpoint.home / "s3" / bucket / "chunked.bin").read_bytes() == data
    assert "ContentEncoding" not in s3.head_object(Bucket=bucket, Key="chunked.bin")
    big = os.urandom(11 * MiB)
    (tmp_path / "big").write_bytes(big)
    s3.upload_file(str(tmp_path / "big"), bucket, "big.bin", Config=SMALL_PARTS)
    assert (endpoint.home / "s3" / bucket / "big.bin").read_bytes() == big


class _StreamingSigner(botocore.auth.S3SigV4Auth):
    """botocore's S3 signer, signing what a chunk-signed body declares instead of the body's hash."""

    def payload(self, request: Any) -> str:
        return "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"


def _chunk_signed(endpoint: Endpoint, path: str, pieces: list[bytes], *, forge: int | None = None,
                  cut: int = 0) -> httpx.Response:
    """A PUT of ``pieces`` as a STREAMING-AWS4-HMAC-SHA256-PAYLOAD body, each chunk signed as AWS's
    signature pages lay out (the chunk ``forge`` signed over other bytes), its last ``cut`` bytes
    left off."""
    import hmac

    data = b"".join(pieces)
    url = endpoint.url + path
    moment = dt.datetime.now(dt.UTC)
    headers = {"X-Amz-Content-SHA256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "Content-Encoding": "aws-chunked",
               "X-Amz-Decoded-Content-Length": str(len(data)), "X-Amz-Date": f"{moment:%Y%m%dT%H%M%SZ}"}
    request = botocore.awsrequest.AWSRequest("PUT", url, headers=headers)
    _StreamingSigner(botocore.credentials.Credentials(endpoint.key_id, endpoint.secret), "s3",
                     "us-east-1").add_auth(request)
    previous = request.headers["Authorization"].rsplit("Signature=", 1)[1]
    scope = f"{moment:%Y%m%d}/us-east-1/s3/aws4_request"
    key = f"AWS4{endpoint.secret}".encode()
    for part in scope.split("/"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    body = b""
    for index, piece in enumerate([*pieces, b""]):
        signed_bytes = piece + b"!" if index == forge else piece
        to_sign = "\n".join(("AWS4-HMAC-SHA256-PAYLOAD", headers["X-Amz-Date"], scope, previous,
                             hashlib.sha256(b"").hexdigest(), hashlib.sha256(signed_bytes).hexdigest()))
        previous = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        body += b"%x;chunk-signature=%s\r\n%s\r\n" % (len(piece), previous.encode(), piece)
    body = body[:len(body) - cut]
    return httpx.put(url, content=body, headers=dict(request.headers.items()), timeout=60)


def test_signed_aws_chunked_bodies_are_checked_chunk_by_chunk_and_stored_decoded(bucket: str,
                                                                                  endpoint: Endpoint) -> None:
    data = os.urandom(200_000)
    pieces = [data[at:at + 65536] for at in range(0, len(data), 65536)]
    reply = _chunk_signed(endpoint, f"/{bucket}/signed.bin", pieces)
    assert reply.status_code == 200, reply.text
    assert reply.headers["etag"] == f'"{hashlib.md5(data).hexdigest()}"'
    assert (endpoint.home / "s3" / bucket / "signed.bin").read_bytes() == data
    short = _chunk_signed(endpoint, f"/{bucket}/short.bin", pieces, cut=5)
    assert (short.status_code, "<Code>IncompleteBody</Code>" in short.text) == (400, True)
    for forged in (0, 2, 4):  # the first chunk, a middle one, the last one (of no bytes)
        swapped = _chunk_signed(endpoint, f"/{bucket}/forged.bin", pieces, forge=forged)
        assert swapped.status_code == 403 and "<Code>SignatureDoesNotMatch</Code>" in swapped.text, forged
    assert not (endpoint.home / "s3" / bucket / "forged.bin").exists()


def test_a_body_other_than_the_one_signed_is_refused(bucket: str, endpoint: Endpoint) -> None:
    signed_for = b"the source that was signed"
    request = botocore.awsrequest.AWSRequest("PUT", f"{endpoint.url}/{bucket}/source.tar.gz", data=signed_for)
    botocore.auth.S3SigV4Auth(botocore.credentials.Credentials(endpoint.key_id, endpoint.secret), "s3",
                              "us-east-1").add_auth(request)
    headers = dict(request.headers.items())
    assert headers["X-Amz-Content-SHA256"] == hashlib.sha256(signed_for).hexdigest()
    swapped = httpx.put(f"{endpoint.url}/{bucket}/source.tar.gz", content=b"another body, the same length",
                        headers=headers, timeout=60)
    assert swapped.status_code == 400 and "<Code>XAmzContentSHA256Mismatch</Code>" in swapped.text
    assert not (endpoint.home / "s3" / bucket / "source.tar.gz").exists()
    kept = httpx.put(f"{endpoint.url}/{bucket}/source.tar.gz", content=signed_for, headers=headers, timeout=60)
    assert kept.status_code == 200
    unnamed = {name: value for name, value in headers.items() if name != "X-Amz-Content-SHA256"}
    missing = httpx.put(f"{endpoint.url}/{bucket}/other", content=signed_for, headers=unnamed, timeout=60)
    assert missing.status_code == 400 and "x-amz-content-sha256" in missing.text
    delete = b"<Delete><Object><Key>source.tar.gz</Key></Object></Delete>"
    request = botocore.awsrequest.AWSRequest("POST", f"{endpoint.url}/{bucket}?delete", data=delete,
                                             headers={"Content-MD5": base64.b64encode(hashlib.md5(delete).digest())
                                                      .decode()})
    botocore.auth.S3SigV4Auth(botocore.credentials.Credentials(endpoint.key_id, endpoint.secret), "s3",
                              "us-east-1").add_auth(request)
    other = delete.replace(b"source.tar.gz", b"sourcX.tar.gz")
    refused = httpx.post(f"{endpoint.url}/{bucket}?delete", content=other, timeout=60,
                         headers=dict(request.headers.items()))
    assert refused.status_code == 400 and "XAmzContentSHA256Mismatch" in refused.text
    assert (endpoint.home / "s3" / bucket / "source.tar.gz").exists()


def test_a_presigned_url_lives_a_week_at_most(s3: Any, bucket: str, endpoint: Endpoint) -> None:
    s3.put_object(Bucket=bucket, Key="shared", Body=b"shared")
    for version in ("s3", "s3v4"):
        signer = boto3.client("s3", endpoint_url=endpoint.url, aws_access_key_id=endpoint.key_id,
                              aws_secret_access_key=endpoint.secret, region_name="us-east-1",
                              config=Config(signature_version=version))
        week = signer.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "shared"},
                                             ExpiresIn=7 * 86_400)
        assert httpx.get(week).content == b"shared", version
        decade = signer.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "shared"},
                                               ExpiresIn=10 * 365 * 86_400)
        refused = httpx.get(decade)
        assert refused.status_code in (400, 403) and b"shared" not in refused.content, version
        assert "a week" in refused.text, version


def test_objects_that_a_browser_would_show_as_pages_are_downloads_in_a_sandbox(s3: Any, bucket: str,
                                                                             endpoint: Endpoint) -> None:
    for key, content_type in (("page.html", "text/html"), ("image.svg", "image/svg+xml"), ("a.xhtml",
                              "application/xhtml+xml; charset=utf-8"), ("data.csv", "text/csv")):
        s3.put_object(Bucket=bucket, Key=key, Body=b"<script>alert(1)</script>", ContentType=content_type)
        url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key})
        answer = httpx.get(url)
        assert answer.headers["content-security-policy"] == "default-src 'none'; sandbox", key
        assert answer.headers["x-content-type-options"] == "nosniff", key
        assert answer.headers.get("content-disposition") == (None if key == "data.csv" else "attachment"), key
    overridden = s3.generate_presigned_url("get_object", Params={
        "Bucket": bucket, "Key": "data.csv", "ResponseContentType": "text/html", "ResponseContentDisposition": "inline"})
    answer = httpx.get(overridden)
    assert answer.headers["content-type"] == "text/html" and answer.headers["content-disposition"] == "attachment"
    assert s3.get_object(Bucket=bucket, Key="page.html")["ContentDisposition"] == "attachment"


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=3000), chunk_bytes=st.integers(min_value=1, max_value=700),
       cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12), signed=st.booleans(),
       trailer=st.booleans())
def test_aws_chunked_framing_comes_off_wherever_the_pieces_break(data: bytes, chunk_bytes: int, cuts: list[int],
                                                                  signed: bool, trailer: bool) -> None:
    extension = b";chunk-signature=" + b"f" * 64 if signed else b""
    chunks = [data[at:at + chunk_bytes] for at in range(0, len(data), chunk_bytes)] + [b""]
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(chunk), extension, chunk) for chunk in chunks[:-1])
    body += b"0%s\r\n" % extension + (b"x-amz-checksum-crc32:" + _crc32(data).encode() + b"\r\n" if trailer else b"")
    body += b"\r\n"
    decoder = bodies.AwsChunked()
    edges = sorted({0, len(body), *(cut for cut in cuts if cut < len(body))})
    decoded = b"".join(b"".join(decoder.feed(body[start:end])) for start, end in zip(edges, edges[1:], strict=False))
    assert decoded == data
    assert decoder.finish() == ({"x-amz-checksum-crc32": _crc32(data)} if trailer else {})


# -- what is not served, presigned URLs -------------------------------------------------------


def test_operations_not_served_are_named(s3: Any, bucket: str, endpoint: Endpoint) -> None:
    with pytest.raises(ClientError) as tagging:
        s3.get_bucket_tagging(Bucket=bucket)
    assert _code(tagging) == ("NotImplemented", 501)
    assert "GetBucketTagging" in tagging.value.response["Error"]["Message"]
    reply = _signed(endpoint, "POST", f"/{bucket}/key")
    assert reply.status_code == 405 and "<Code>MethodNotAllowed</Code>" in reply.text
    assert reply.headers["x-amz-request-id"] in reply.text


def test_a_presigned_url_gets_the_object(s3: Any, bucket: str, endpoint: Endpoint) -> None:
    s3.put_object(Bucket=bucket, Key="shared/file.txt", Body=b"shared")
    signer = boto3.client("s3", endpoint_url=endpoint.url, aws_access_key_id=endpoint.key_id,
                          aws_secret_access_key=endpoint.secret,
                          region_name="us-east-1", config=Config(signature_version="s3v4"))
    url = signer.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "shared/file.txt"})
    assert "X-Amz-Credential=" in url
    reply = httpx.get(url)
    assert (reply.status_code, reply.content) == (200, b"shared")


def test_with_an_issued_key_every_s3_request_is_verified(home: Path, tmp_path: Path) -> None:
    key = access_keys.create(home, "tests")
    server = start_server(home)
    try:
        def client(secret: str) -> Any:
            return boto3.client("s3", endpoint_url=server.url, aws_access_key_id=key.AccessKeyId,
                                aws_secret_access_key=secret, region_name="us-east-1",
                                config=Config(retries={"max_attempts": 1}))

        signed = client(key.SecretAccessKey)
        signed.create_bucket(Bucket="verified")
        signed.put_object(Bucket="verified", Key="plain", Body=b"signed payload")
        _trailing_checksums(signed)
        signed.put_object(Bucket="verified", Key="chunked", Body=b"unsigned payload, checksum trailer")
        data = os.urandom(6 * MiB)
        (tmp_path / "parts").write_bytes(data)
        signed.upload_file(str(tmp_path / "parts"), "verified", "parts", Config=SMALL_PARTS)
        assert signed.get_object(Bucket="verified", Key="parts")["Body"].read() == data
        assert (home / "s3" / "verified" / "chunked").read_bytes() == b"unsigned payload, checksum trailer"
        with pytest.raises(ClientError) as forged:
            client("not-the-secret").put_object(Bucket="verified", Key="forged", Body=b"x")
        assert _code(forged) == ("SignatureDoesNotMatch", 403)
        assert not (home / "s3" / "verified" / "forged").exists()

        for version in ("s3", "s3v4"):  # boto3's default presigned URL for S3 (Signature Version 2), and 4
            def presigned(secret: str, expires: int = 60, version: str = version) -> str:
                signer = boto3.client("s3", endpoint_url=server.url, aws_access_key_id=key.AccessKeyId,
                                      aws_secret_access_key=secret, region_name="us-east-1",
                                      config=Config(signature_version=version))
                return str(signer.generate_presigned_url("get_object", Params={"Bucket": "verified", "Key": "plain"},
                                                         ExpiresIn=expires))

            good = httpx.get(presigned(key.SecretAccessKey))
            assert (good.status_code, good.content) == (200, b"signed payload"), version
            wrong = httpx.get(presigned("not-the-secret"))
            assert wrong.status_code == 403 and "<Code>SignatureDoesNotMatch</Code>" in wrong.text, version
            expired = httpx.get(presigned(key.SecretAccessKey, expires=-10))
            if version == "s3":  # an Expires in the past
                assert expired.status_code == 403 and "<Code>AccessDenied</Code>" in expired.text
            else:  # an X-Amz-Expires below 1
                assert expired.status_code == 400 and "<Code>AuthorizationQueryParametersError</Code>" in expired.text
        import botocore.auth as signing

        an_hour_ago = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(hours=1)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(signing, "get_current_datetime", lambda: an_hour_ago)
            stale = presigned(key.SecretAccessKey, expires=60, version="s3v4")
        expired = httpx.get(stale)
        assert expired.status_code == 403 and "<Code>AccessDenied</Code>" in expired.text
    finally:
        server.stop()


# -- the AWS CLI ------------------------------------------------------------------------------


def _aws(endpoint: Endpoint, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "aws-config"
    config.write_text("[default]\nregion = us-east-1\ns3 =\n  multipart_threshold = 5MB\n"
                      "  multipart_chunksize = 5MB\n")
    environment = {**os.environ, "AWS_ACCESS_KEY_ID": endpoint.key_id, "AWS_SECRET_ACCESS_KEY": endpoint.secret,
                   "AWS_CONFIG_FILE": str(config), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    result = subprocess.run([sys.executable, "-m", "awscli", "--endpoint-url", endpoint.url, *args],
                            capture_output=True, text=True, timeout=120, env=environment)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_aws_s3_cp_and_ls(endpoint: Endpoint, tmp_path: Path) -> None:
    _aws(endpoint, tmp_path, "s3", "mb", "s3://cli-bucket")
    small, large = tmp_path / "train.csv", tmp_path / "weights.bin"
    small.write_bytes(b"x,y\n1,2\n")
    large.write_bytes(os.urandom(11 * MiB))
    _aws(endpoint, tmp_path, "s3", "cp", str(small), "s3://cli-bucket/data/train/train.csv")
    _aws(endpoint, tmp_path, "s3", "cp", str(large), "s3://cli-bucket/data/weights.bin")
    assert "cli-bucket" in _aws(endpoint, tmp_path, "s3", "ls").stdout
    top = _aws(endpoint, tmp_path, "s3", "ls", "s3://cli-bucket/data/").stdout.splitlines()
    assert top[0].split() == ["PRE", "train/"] and top[1].split()[-2:] == [str(11 * MiB), "weights.bin"]
    recursive = _aws(endpoint, tmp_path, "s3", "ls", "--recursive", "s3://cli-bucket").stdout
    assert [line.split()[-1] for line in recursive.splitlines()] == ["data/train/train.csv", "data/weights.bin"]
    _aws(endpoint, tmp_path, "s3", "cp", "s3://cli-bucket/data/weights.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == large.read_bytes()
    _aws(endpoint, tmp_path, "s3", "cp", "--recursive", "s3://cli-bucket/data/", str(tmp_path / "tree"))
    assert (tmp_path / "tree" / "train" / "train.csv").read_bytes() == small.read_bytes()
    _aws(endpoint, tmp_path, "s3", "rm", "--recursive", "s3://cli-bucket/data/")
    _aws(endpoint, tmp_path, "s3", "rb", "s3://cli-bucket")
    assert not (endpoint.home / "s3" / "cli-bucket").exists()


_SAGEMAKER_SCRIPT = """
import sys, boto3, sagemaker
from sagemaker.fw_utils import tar_and_upload_dir
from sagemaker.s3 import S3Downloader, S3Uploader

source, bucket = sys.argv[1], sys.argv[2]
session = sagemaker.Session(boto_session=boto3.Session(region_name="us-east-1"), default_bucket=bucket)
print(session.upload_data(f"{source}/data.csv", bucket=bucket, key_prefix="data/train"))
S3Uploader.upload_string_as_file_body("note", f"s3://{bucket}/notes/n.txt", sagemaker_session=session)
print(S3Downloader.list(f"s3://{bucket}/data", sagemaker_session=session))
print(S3Downloader.read_file(f"s3://{bucket}/notes/n.txt", sagemaker_session=session))
print(tar_and_upload_dir(session.boto_session, bucket, "job/source", "train.py", source).s3_prefix)
"""


def test_the_sagemaker_sdk_uploads_and_reads(endpoint: Endpoint, s3: Any, bucket: str, tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("1,2\n")
    (tmp_path / "train.py").write_text("print('training')\n")
    environment = {**os.environ, "AWS_ENDPOINT_URL": endpoint.url, "AWS_ACCESS_KEY_ID": endpoint.key_id,
                   "AWS_SECRET_ACCESS_KEY": endpoint.secret, "AWS_DEFAULT_REGION": "us-east-1",
                   "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                   "SAGEMAKER_SUPPRESS_V2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-c", _SAGEMAKER_SCRIPT, str(tmp_path), bucket], capture_output=True,
                            text=True, timeout=300, env=environment)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-4:] == [f"s3://{bucket}/data/train/data.csv", f"['s3://{bucket}/data/train/data.csv']", "note",
                          f"s3://{bucket}/job/source/sourcedir.tar.gz"]
    assert resolve(endpoint.home, f"s3://{bucket}/data/train/").joinpath("data.csv").read_text() == "1,2\n"
    with tarfile.open(resolve(endpoint.home, f"s3://{bucket}/job/source/sourcedir.tar.gz")) as archive:
        assert sorted(archive.getnames()) == ["data.csv", "train.py"]  # the whole source directory


# -- channels read what was uploaded ----------------------------------------------------------


def test_resolve_finds_uploaded_prefixes_and_objects(s3: Any, bucket: str, endpoint: Endpoint) -> None:
    for name in ("a.csv", "b.csv"):
        s3.put_object(Bucket=bucket, Key=f"channels/train/{name}", Body=name.encode())
    s3.put_object(Bucket=bucket, Key="code/sourcedir.tar.gz", Body=b"tar bytes")
    train = resolve(endpoint.home, f"s3://{bucket}/channels/train/")
    assert sorted(path.name for path in train.iterdir()) == ["a.csv", "b.csv"]
    assert (train / "a.csv").read_bytes() == b"a.csv"
    assert resolve(endpoint.home, f"s3://{bucket}/code/sourcedir.tar.gz").read_bytes() == b"tar bytes"
    with pytest.raises(ValidationException, match="No S3 object or prefix"):
        resolve(endpoint.home, f"s3://{bucket}/channels/test/")
