"""Who is asking: STS's GetCallerIdentity, and IAM's GetRole and SimulatePrincipalPolicy, as the
SageMaker Python SDK asks them before a job: the caller's account (the SDK names its default bucket
after it), does the role exist, does it trust SageMaker, may it do what a training job does.

trainmon keeps no IAM: a job's ``RoleArn`` is recorded, never assumed, and whoever holds an access
key may call every operation. So the caller is trainmon's one local account, every role name is a
role of it that trusts SageMaker, and a simulation allows every action, which is what trainmon will
do when the calls come. Nothing here is stored.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from ..errors import TrainmonError
from ..jobs.document import ACCOUNT
from ..shapes import refuse_unknown
from ..store import Store

ROLE_NAME = re.compile(r"[\w+=,.@-]{1,64}")
_PRINCIPAL_ARN = re.compile(r"arn:aws[a-z-]*:(iam|sts)::\d{12}:(role|user|assumed-role|group)/[\w+=,.@/-]+")
CREATED_S = 1_700_000_000.0  # the creation time every role reports: they were always there
_TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"},
                   "Action": "sts:AssumeRole"}],
}


class InvalidInput(TrainmonError):
    """IAM's answer to a parameter it cannot take (HTTP 400)."""

    code = "InvalidInput"
    http_status = 400


def get_role(store: Store, RoleName: str = "", **unsupported: Any) -> dict[str, Any]:
    refuse_unknown(unsupported, InvalidInput)
    if not ROLE_NAME.fullmatch(RoleName):
        raise InvalidInput(f"1 validation error detected: Value '{RoleName}' at 'roleName' failed to satisfy "
                           "constraint: Member must satisfy regular expression pattern: [\\w+=,.@-]+ and have "
                           "length between 1 and 64")
    return {"Role": {
        "Path": "/",
        "RoleName": RoleName,
        "RoleId": "AROA" + hashlib.sha256(RoleName.encode()).hexdigest()[:17].upper(),
        "Arn": f"arn:aws:iam::{ACCOUNT}:role/{RoleName}",
        "CreateDate": CREATED_S,
        "AssumeRolePolicyDocument": quote(json.dumps(_TRUST_POLICY, separators=(",", ":"))),
        "Description": "trainmon keeps no IAM: every role may do everything a training job does",
        "MaxSessionDuration": 3600,
    }}


_TAKEN_AS_GIVEN = ("PolicyInputList", "PermissionsBoundaryPolicyInputList", "ResourcePolicy", "ResourceOwner",
                   "CallerArn", "ContextEntries", "ResourceHandlingOption", "MaxItems", "Marker")


def simulate_principal_policy(store: Store, PolicySourceArn: str = "", ActionNames: list[str] | None = None,
                              ResourceArns: list[str] | None = None, **others: Any) -> dict[str, Any]:
    """Every action allowed, on every resource named (``*`` when none is): trainmon asks no more of a
    caller than its signature. The other members (policies to add, context entries, paging) change
    nothing that could be denied, and are taken as given."""
    refuse_unknown(others, InvalidInput, allowed=_TAKEN_AS_GIVEN)
    if not _PRINCIPAL_ARN.fullmatch(PolicySourceArn):
        raise InvalidInput(f"PolicySourceArn {PolicySourceArn!r} is not the ARN of a user, group or role "
                           "(arn:aws:iam::<account>:role/<name>).")
    if not ActionNames:
        raise InvalidInput("ActionNames must name at least one action (for example sagemaker:CreateTrainingJob).")
    resources = ResourceArns or ["*"]
    results = [{"EvalActionName": action, "EvalResourceName": resource, "EvalDecision": "allowed",
                "MatchedStatements": [], "MissingContextValues": []}
               for action in ActionNames for resource in resources]
    return {"EvaluationResults": results, "IsTruncated": False}



def get_caller_identity(store: Store, **unsupported: Any) -> dict[str, Any]:
    refuse_unknown(unsupported, where="input")
    return {"UserId": "trainmon", "Account": ACCOUNT, "Arn": f"arn:aws:iam::{ACCOUNT}:user/trainmon"}


IAM: dict[str, Callable[..., dict[str, Any]]] = {
    "GetRole": get_role,
    "SimulatePrincipalPolicy": simulate_principal_policy,
}
STS: dict[str, Callable[..., dict[str, Any]]] = {"GetCallerIdentity": get_caller_identity}
