"""The object store (store/objects.py) on real files: where bytes and sidecars go, the keys it
refuses, S3's listing order and paging (against a plain model, on generated keys), multipart
uploads, and ``resolve`` for job channels."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainmon.errors import (
    BucketAlreadyOwnedByYou,
    BucketNotEmpty,
    InvalidBucketName,
    InvalidObjectKey,
    InvalidPart,
    NoSuchBucket,
    NoSuchKey,
    NoSuchUpload,
    ValidationException,
)
from trainmon.store.objects import PART_LEAST_BYTES, ObjectStore, resolve


@pytest.fixture
def objects(tmp_path: Path) -> ObjectStore:
    store = ObjectStore(tmp_path / "home")
    store.create_bucket("data")
    return store


def _keys(store: ObjectStore, bucket: str = "data") -> list[str]:
    return [info.key for info in store.iter_objects(bucket)]


def test_bytes_sit_at_the_path_the_key_names(objects: ObjectStore) -> None:
    info = objects.put_object("data", "train/part-0.csv", b"1,2\n", content_type="text/csv", metadata={"owner": "me"})
    assert (objects.home / "s3" / "data" / "train" / "part-0.csv").read_bytes() == b"1,2\n"
    assert info.etag == '"' + hashlib.md5(b"1,2\n").hexdigest() + '"'
    head = objects.head_object("data", "train/part-0.csv")
    assert (head.size_bytes, head.content_type, dict(head.metadata)) == (4, "text/csv", {"owner": "me"})
    assert sorted(path.name for path in (objects.home / "s3" / "data").rglob("*")) == ["part-0.csv", "train"]


def test_a_file_put_there_by_hand_is_an_object_with_its_md5(objects: ObjectStore) -> None:
    objects.put_object("data", "a.txt", b"old", content_type="text/plain")
    (objects.home / "s3" / "data" / "a.txt").write_bytes(b"changed by hand")
    (objects.home / "s3" / "data" / "b.txt").write_bytes(b"new")
    a, b = objects.head_object("data", "a.txt"), objects.head_object("data", "b.txt")
    assert a.etag == f'"{hashlib.md5(b"changed by hand").hexdigest()}"' and a.content_type == "binary/octet-stream"
    assert b.etag == f'"{hashlib.md5(b"new").hexdigest()}"' and _keys(objects) == ["a.txt", "b.txt"]


def test_a_reader_keeps_the_whole_object_it_opened_while_a_put_replaces_it(objects: ObjectStore) -> None:
    objects.put_object("data", "model.bin", b"A" * 100_000)
    handle, info = objects.open_object("data", "model.bin")
    objects.put_object("data", "model.bin", b"B" * 10)
    with handle:
        assert handle.read() == b"A" * 100_000 and info.size_bytes == 100_000
    assert objects.head_object("data", "model.bin").size_bytes == 10
    assert list((objects.home / "s3" / ".tmp").iterdir()) == []


@pytest.mark.parametrize("key, why", [
    ("a/../b", "'..' segment"),
    ("./b", "'.' segment"),
    ("a//b", "empty segment"),
    ("/a", "empty segment"),
    ("a\0b", "NUL"),
    ("x" * 1025, "too long"),
    ("a/" + "y" * 256, "over 255 bytes"),
])
def test_keys_that_cannot_be_a_path_are_refused(objects: ObjectStore, key: str, why: str) -> None:
    with pytest.raises(InvalidObjectKey, match=why):
        objects.put_object("data", key, b"x")
    assert list((objects.home / "s3" / "data").iterdir()) == []


def test_a_key_cannot_be_a_file_and_a_folder(objects: ObjectStore) -> None:
    objects.put_object("data", "a/b", b"1")
    with pytest.raises(InvalidObjectKey, match="'a/b' is an object"):
        objects.put_object("data", "a/b/c", b"2")
    with pytest.raises(InvalidObjectKey, match="folder of that name"):
        objects.put_object("data", "a", b"3")
    assert _keys(objects) == ["a/b"] and list((objects.home / "s3" / ".tmp").iterdir()) == []


def test_folder_markers_are_objects_and_keep_their_folder(objects: ObjectStore) -> None:
    objects.put_object("data", "logs/", b"")
    objects.put_object("data", "logs/1.txt", b"one")
    assert _keys(objects) == ["logs/", "logs/1.txt"]
    objects.delete_object("data", "logs/1.txt")
    assert _keys(objects) == ["logs/"] and (objects.home / "s3" / "data" / "logs").is_dir()
    objects.delete_object("data", "logs/")
    assert _keys(objects) == [] and list((objects.home / "s3" / "data").iterdir()) == []


def test_deletes_remove_the_folders_they_empty(objects: ObjectStore) -> None:
    objects.put_object("data", "a/b/c/d.txt", b"x")
    objects.put_object("data", "a/e.txt", b"y")
    objects.delete_object("data", "a/b/c/d.txt")
    objects.delete_object("data", "never/there")  # S3 answers the same for a key that is not there
    assert [path.name for path in (objects.home / "s3" / "data" / "a").iterdir()] == ["e.txt"]


def test_buckets(objects: ObjectStore) -> None:
    objects.create_bucket("models.v2")
    assert [bucket.name for bucket in objects.list_buckets()] == ["data", "models.v2"]
    with pytest.raises(BucketAlreadyOwnedByYou):
        objects.create_bucket("data")
    for name in ("ab", "Upper", "-dash", "a..b", "192.168.1.1", "x" * 64, "under_score"):
        with pytest.raises(InvalidBucketName):
            objects.create_bucket(name)
    objects.put_object("data", "k", b"v")
    with pytest.raises(BucketNotEmpty):
        objects.delete_bucket("data")
    objects.delete_object("data", "k")
    objects.delete_bucket("data")
    with pytest.raises(NoSuchBucket):
        objects.head_bucket("data")
    with pytest.raises(NoSuchBucket):
        objects.put_object("data", "k", b"v")
    assert [bucket.name for bucket in objects.list_buckets()] == ["models.v2"]


def test_missing_keys_and_buckets(objects: ObjectStore) -> None:
    with pytest.raises(NoSuchKey):
        objects.head_object("data", "missing")
    with pytest.raises(NoSuchKey):
        objects.open_object("data", "missing")
    with pytest.raises(NoSuchBucket):
        objects.head_object("nothing-here", "missing")


def test_listing_is_in_utf8_byte_order_with_common_prefixes(objects: ObjectStore) -> None:
    for key in ("a/b/c", "a-c", "a0", "a/x", "z", "é", "a/b2", "A"):
        objects.put_object("data", key, key.encode())
    assert _keys(objects) == sorted(_keys(objects), key=str.encode)
    assert _keys(objects) == ["A", "a-c", "a/b/c", "a/b2", "a/x", "a0", "z", "é"]
    top = objects.list_objects("data", delimiter="/")
    assert [info.key for info in top.contents] == ["A", "a-c", "a0", "z", "é"] and top.common_prefixes == ["a/"]
    inner = objects.list_objects("data", prefix="a/", delimiter="/")
    assert [info.key for info in inner.contents] == ["a/b2", "a/x"] and inner.common_prefixes == ["a/b/"]
    partial = objects.list_objects("data", prefix="a/b")
    assert [info.key for info in partial.contents] == ["a/b/c", "a/b2"]


_SEGMENTS = st.sampled_from(["a", "b", "a-", "a0", "é", "ab", "b.c", "Z"])
_KEYS = st.lists(st.lists(_SEGMENTS, min_size=1, max_size=4).map("/".join), min_size=0, max_size=25, unique=True)


def _model_pages(keys: list[str], prefix: str, delimiter: str) -> list[str]:
    """S3's listing, written plainly: the matching keys in UTF-8 byte order, rolled up at the delimiter."""
    entries: list[str] = []
    for key in sorted((key for key in keys if key.startswith(prefix)), key=str.encode):
        at = key.find(delimiter, len(prefix)) if delimiter else -1
        entry = key[:at + len(delimiter)] if at >= 0 else key
        if not entries or entries[-1] != entry:
            entries.append(entry)
    return entries


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=_KEYS, prefix=st.sampled_from(["", "a", "a/", "a/b", "é", "b.c/"]),
       delimiter=st.sampled_from(["", "/", "-", "b"]), page=st.integers(min_value=1, max_value=6))
def test_paging_through_a_listing_gives_s3s_answer(keys: list[str], prefix: str, delimiter: str, page: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = ObjectStore(Path(directory))
        store.create_bucket("data")
        stored = []
        for key in keys:
            try:
                store.put_object("data", key, b"")
                stored.append(key)
            except InvalidObjectKey:  # a file where another key needs a folder
                pass
        seen: list[str] = []
        after = ""
        while True:
            listing = store.list_objects("data", prefix=prefix, delimiter=delimiter, after=after, max_keys=page)
            items = sorted([info.key for info in listing.contents] + listing.common_prefixes, key=str.encode)
            assert len(items) <= page
            seen += items
            if not listing.is_truncated:
                break
            assert listing.last == items[-1]
            after = listing.last
        assert seen == _model_pages(stored, prefix, delimiter)


def test_multipart_upload_joins_its_parts_with_s3s_etag(objects: ObjectStore) -> None:
    first, second = b"1" * PART_LEAST_BYTES, b"2" * 1000
    upload = objects.create_multipart_upload("data", "big.bin", content_type="application/x-tar")
    etags = []
    for number, part in ((1, first), (2, second)):
        with objects.staging() as staged:
            staged.write(part)
            etags.append(objects.upload_part("data", "big.bin", upload, number, staged))
    assert [upload_info.key for upload_info in objects.list_uploads("data")] == ["big.bin"]
    info = objects.complete_multipart_upload("data", "big.bin", upload, [(1, etags[0]), (2, etags[1])])
    digests = hashlib.md5(first).digest() + hashlib.md5(second).digest()
    assert info.etag == f'"{hashlib.md5(digests).hexdigest()}-2"' and info.content_type == "application/x-tar"
    assert (objects.home / "s3" / "data" / "big.bin").read_bytes() == first + second
    assert objects.list_uploads("data") == [] and list((objects.home / "s3" / ".uploads").iterdir()) == []
    with pytest.raises(NoSuchUpload):
        objects.complete_multipart_upload("data", "big.bin", upload, [(1, etags[0])])


def test_multipart_upload_refuses_what_s3_refuses(objects: ObjectStore) -> None:
    upload = objects.create_multipart_upload("data", "k")
    etags = {}
    for number, size in ((1, 10), (2, 10)):
        with objects.staging() as staged:
            staged.write(b"x" * size)
            etags[number] = objects.upload_part("data", "k", upload, number, staged)
    with pytest.raises(InvalidPart, match="could not be found"):
        objects.complete_multipart_upload("data", "k", upload, [(1, '"' + "0" * 32 + '"')])
    with pytest.raises(InvalidPart, match="could not be found"):
        objects.complete_multipart_upload("data", "k", upload, [(3, etags[1])])
    with pytest.raises(InvalidPart, match="ascending") as order:
        objects.complete_multipart_upload("data", "k", upload, [(2, etags[2]), (1, etags[1])])
    assert order.value.code == "InvalidPartOrder"
    with pytest.raises(InvalidPart, match="smaller than the minimum") as small:
        objects.complete_multipart_upload("data", "k", upload, [(1, etags[1]), (2, etags[2])])
    assert small.value.code == "EntityTooSmall"
    with pytest.raises(NoSuchUpload):
        objects.abort_multipart_upload("data", "other-key", upload)
    objects.abort_multipart_upload("data", "k", upload)
    with pytest.raises(NoSuchUpload):
        objects.abort_multipart_upload("data", "k", upload)
    with pytest.raises(NoSuchUpload):
        objects.abort_multipart_upload("data", "k", "../../etc")
    assert _keys(objects) == []


def test_resolve_gives_a_channel_its_folder_or_file(objects: ObjectStore) -> None:
    objects.put_object("data", "train/a.csv", b"a")
    objects.put_object("data", "train/b.csv", b"b")
    objects.put_object("data", "code/sourcedir.tar.gz", b"tar")
    root = objects.home / "s3" / "data"
    assert resolve(objects.home, "s3://data/train") == root / "train"
    assert resolve(objects.home, "s3://data/train/") == root / "train"
    assert resolve(objects.home, "s3://data/code/sourcedir.tar.gz").read_bytes() == b"tar"
    assert resolve(objects.home, "s3://data") == root
    for uri, message in [("s3://missing/train", "No S3 bucket 'missing'"), ("s3://data/test/", "No S3 object"),
                         ("s3://data/tr", "not a folder"), ("s3://data/a/../b", "'..' segment"),
                         ("data/train", "not an S3 URI")]:
        with pytest.raises(ValidationException, match=message):
            resolve(objects.home, uri)
