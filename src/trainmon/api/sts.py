"""STS's GetCallerIdentity: who the caller is. The SageMaker SDK asks it for the account its
default bucket is named after; trainmon answers with its one local account."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..jobs.document import ACCOUNT
from ..shapes import refuse_unknown
from ..store import Store


def get_caller_identity(store: Store, **unsupported: Any) -> dict[str, Any]:
    refuse_unknown(unsupported, where="input")
    return {"UserId": "trainmon", "Account": ACCOUNT, "Arn": f"arn:aws:iam::{ACCOUNT}:user/trainmon"}


OPERATIONS: dict[str, Callable[..., dict[str, Any]]] = {"GetCallerIdentity": get_caller_identity}
