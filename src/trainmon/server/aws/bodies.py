"""What an S3 request body carries besides its bytes: the ``aws-chunked`` framing botocore wraps
it in (with trailer checksums), and the checksums and Content-MD5 to check it against."""

from __future__ import annotations

import base64
import binascii
import hashlib
import zlib
from collections.abc import Mapping

from starlette.requests import Request

from ...errors import BadDigest, S3Error
from ...store.objects import StagedFile
from .sigv4 import ChunkSignatures, SignatureError

CHUNK_LINE_MOST_BYTES = 4096


class Checksum:
    """The x-amz-checksum-* a client sent (in a header or an aws-chunked trailer), taken again over the
    bytes as they arrive where the algorithm is at hand (CRC32, SHA1, SHA256; CRC32C and CRC64NVME
    are kept as sent)."""

    def __init__(self, algorithm: str | None) -> None:
        self.algorithm = algorithm
        self.sent: str | None = None
        self._crc32 = 0
        self._hash = hashlib.new(algorithm.lower()) if algorithm in ("SHA1", "SHA256") else None

    @classmethod
    def of(cls, request: Request) -> Checksum:
        names = [name for name in request.headers if name.startswith("x-amz-checksum-")
                 and name not in ("x-amz-checksum-mode", "x-amz-checksum-type", "x-amz-checksum-algorithm")]
        trailer = request.headers.get("x-amz-trailer", "").strip().lower()
        named = names[0] if names else trailer if trailer.startswith("x-amz-checksum-") else None
        checksum = cls(named.removeprefix("x-amz-checksum-").upper() if named else None)
        if names:
            checksum.sent = request.headers[names[0]]
        return checksum

    def update(self, data: bytes) -> None:
        if self.algorithm == "CRC32":
            self._crc32 = zlib.crc32(data, self._crc32)
        elif self._hash is not None:
            self._hash.update(data)

    def computed(self) -> str | None:
        if self.algorithm == "CRC32":
            return base64.b64encode(self._crc32.to_bytes(4, "big")).decode()
        return base64.b64encode(self._hash.digest()).decode() if self._hash is not None else None

    def verify(self, trailers: Mapping[str, str]) -> None:
        if self.algorithm is None:
            return
        self.sent = trailers.get(f"x-amz-checksum-{self.algorithm.lower()}", self.sent)
        computed = self.computed()
        if self.sent is not None and computed is not None and self.sent != computed:
            raise BadDigest(f"The {self.algorithm} you specified did not match the calculated checksum.")

    def value(self) -> str | None:
        return self.computed() or self.sent if self.algorithm else None

    def stored(self) -> dict[str, str]:
        value = self.value()
        return {self.algorithm: value} if self.algorithm and value else {}

    def reply(self) -> dict[str, str]:
        return {f"x-amz-checksum-{name.lower()}": value for name, value in self.stored().items()}


class Payload:
    """What a body must be, as its signature says: ``x-amz-content-sha256``'s SHA-256 (taken again over
    the bytes as they arrive), ``UNSIGNED-PAYLOAD``, or aws-chunked with each chunk signed
    (``signatures``; None where the server takes any signer)."""

    def __init__(self, declared: str, signatures: ChunkSignatures | None = None) -> None:
        self.declared = declared
        self.signatures = signatures
        self._hash = hashlib.sha256() if len(declared) == 64 else None

    @property
    def chunked(self) -> bool:
        return self.declared.startswith("STREAMING-")

    def update(self, raw: bytes) -> None:
        if self._hash is not None:
            self._hash.update(raw)

    def verify(self) -> None:
        if self._hash is not None and self._hash.hexdigest() != self.declared:
            raise S3Error("The provided 'x-amz-content-sha256' header does not match what was computed.",
                          code="XAmzContentSHA256Mismatch", details={"ClientComputedContentSHA256": self.declared,
                                                                     "S3ComputedContentSHA256":
                                                                         self._hash.hexdigest()})


def _mismatch(exc: SignatureError) -> S3Error:
    return S3Error(exc.message, code="SignatureDoesNotMatch", http_status=403)


class AwsChunked:
    """The framing of an ``aws-chunked`` body taken off as it arrives: chunks of
    ``hex-size[;chunk-signature=...]\\r\\n`` then the bytes and ``\\r\\n``, a chunk of size 0, then
    trailer lines (``x-amz-checksum-crc32:...``) and an empty line. With ``signatures``, every
    chunk's signature (and the trailer's, ``x-amz-trailer-signature``) is checked as it ends."""

    def __init__(self, signatures: ChunkSignatures | None = None) -> None:
        self._buffer = bytearray()
        self._state = "size"
        self._left = 0
        self.trailers: dict[str, str] = {}
        self._signatures = signatures
        self._chunk_signature = ""
        self._chunk_hash = hashlib.sha256()
        self._trailer_lines: list[str] = []

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        out: list[bytes] = []
        while self._step(out):
            pass
        return out

    def finish(self) -> dict[str, str]:
        if self._state == "trailer" and self._buffer.strip():
            self._trailer_line(bytes(self._buffer))  # a last trailer line without its line break
        elif self._state not in ("trailer", "done"):
            raise incomplete("the aws-chunked body ended inside a chunk")
        if self._signatures is not None and self._signatures.trailer_expected:
            given = self.trailers.pop("x-amz-trailer-signature", None)
            if given is None:
                raise _mismatch(SignatureError("mismatch", "the trailer carries no x-amz-trailer-signature"))
            try:
                self._signatures.check_trailer(given, "".join(self._trailer_lines))
            except SignatureError as exc:
                raise _mismatch(exc) from None
        return self.trailers

    def _step(self, out: list[bytes]) -> bool:
        if self._state == "data":
            if not self._buffer:
                return False
            taken = bytes(self._buffer[:self._left])
            del self._buffer[:len(taken)]
            self._left -= len(taken)
            out.append(taken)
            if self._signatures is not None:
                self._chunk_hash.update(taken)
            if self._left == 0:
                self._state = "end"
                self._chunk_signed()
            return True
        if self._state == "end":
            if len(self._buffer) < 2:
                return False
            if self._buffer[:2] != b"\r\n":
                raise incomplete("an aws-chunked chunk is longer than its size says")
            del self._buffer[:2]
            self._state = "size"
            return True
        if self._state == "done":
            self._buffer.clear()
            return False
        line = self._line()
        if line is None:
            return False
        if self._state == "size":
            self._size_line(line)
        elif not line:
            self._state = "done"
        else:
            self._trailer_line(line)
        return True

    def _line(self) -> bytes | None:
        end = self._buffer.find(b"\r\n")
        if end < 0:
            if len(self._buffer) > CHUNK_LINE_MOST_BYTES:
                raise incomplete("an aws-chunked line is too long")
            return None
        line = bytes(self._buffer[:end])
        del self._buffer[:end + 2]
        return line

    def _size_line(self, line: bytes) -> None:
        size_text, _, extension = line.partition(b";")
        try:
            size = int(size_text.strip(), 16)
        except ValueError:
            raise incomplete(f"an aws-chunked chunk size is not hexadecimal: {line[:40]!r}") from None
        name, _, signature = extension.decode("latin-1").partition("=")
        self._chunk_signature = signature.strip() if name.strip() == "chunk-signature" else ""
        self._left = size
        self._state = "data" if size else "trailer"
        if not size:
            self._chunk_signed()  # the last chunk, of no bytes, is signed too

    def _chunk_signed(self) -> None:
        if self._signatures is None:
            return
        try:
            self._signatures.check_chunk(self._chunk_signature, self._chunk_hash.hexdigest())
        except SignatureError as exc:
            raise _mismatch(exc) from None
        self._chunk_hash = hashlib.sha256()

    def _trailer_line(self, line: bytes) -> None:
        name, _, value = line.decode("latin-1").partition(":")
        self.trailers[name.strip().lower()] = value.strip()
        if name.strip().lower() != "x-amz-trailer-signature":
            self._trailer_lines.append(f"{name.strip().lower()}:{value.strip()}\n")


def incomplete(why: str) -> S3Error:
    return S3Error(f"You did not provide the number of bytes specified by the Content-Length HTTP header: {why}.",
                   code="IncompleteBody")


def check_md5(sent: str | None, staged: StagedFile) -> None:
    if sent is None:
        return
    try:
        expected = base64.b64decode(sent, validate=True).hex()
    except binascii.Error:
        raise S3Error("The Content-MD5 you specified was invalid.", code="InvalidDigest") from None
    if expected != staged.md5_hex:
        raise BadDigest("The Content-MD5 you specified did not match what we received.")
