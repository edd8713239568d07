"""The access keys AWS clients sign their requests with: issued by ``trainmon credentials create``,
kept in the data directory (``access-keys.json``, mode 0600), checked by the server's AWS endpoint.

A key is an id (``AKIA`` and 16 capitals or digits, as AWS's look) and a secret (40 characters).
The secret is kept as given to the user, since Signature Version 4 needs it to recompute each
request's signature; the file's mode is what protects it, as ``~/.aws/credentials`` is protected.
"""

from __future__ import annotations

import json
import secrets
import string
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import config
from .errors import StoreError, ValidationException

KEYS_FILE = "access-keys.json"
_ID_ALPHABET = string.ascii_uppercase + string.digits


@dataclass(frozen=True)
class AccessKey:
    AccessKeyId: str
    SecretAccessKey: str
    CreateDate: float  # epoch seconds
    Description: str = ""


def path(home: Path) -> Path:
    return home / KEYS_FILE


def load(home: Path) -> dict[str, AccessKey]:
    """The issued keys by id (none when no key was ever issued). A key file that others may read,
    or that is not ours to trust, is refused."""
    file = path(home)
    try:
        mode = file.stat().st_mode
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise StoreError(f"cannot read the access keys in {file}: {exc.strerror or exc}") from None
    if mode & 0o077:
        raise StoreError(f"the access keys in {file} may be read by other users (mode {mode & 0o777:o}): "
                         f"chmod 600 {file}")
    try:
        return {item["AccessKeyId"]: AccessKey(**item) for item in json.loads(text)}
    except (ValueError, TypeError, KeyError) as exc:
        raise StoreError(f"the access keys file {file} is damaged ({exc}); move it away and issue new keys") from None


def oldest(home: Path) -> AccessKey | None:
    """The first key issued (the one the server made on its first start, unless it was revoked)."""
    return min(load(home).values(), key=lambda key: key.CreateDate, default=None)


def create(home: Path, description: str = "") -> AccessKey:
    key = AccessKey(
        AccessKeyId="AKIA" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(16)),
        SecretAccessKey=secrets.token_urlsafe(30)[:40],
        CreateDate=time.time(),
        Description=description,
    )
    keys = load(home)
    keys[key.AccessKeyId] = key
    _save(home, keys)
    return key


def delete(home: Path, access_key_id: str) -> None:
    keys = load(home)
    if access_key_id not in keys:
        raise ValidationException(f"there is no access key {access_key_id!r}; `trainmon credentials list` shows them.")
    del keys[access_key_id]
    _save(home, keys)


def _save(home: Path, keys: dict[str, AccessKey]) -> None:
    config.write_private(path(home), json.dumps([asdict(key) for key in keys.values()], indent=1))
