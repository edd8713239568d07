"""SageMaker's Search, for training jobs: which runs match a SearchExpression (hyperparameters,
final metrics, tags, any field of the job), in any property's order, a page at a time.

The expression is checked and read by :mod:`trainmon.jobs.search`, and run by the store as one
query (:mod:`trainmon.store.search`); each result is the job as Search answers it: its
DescribeTrainingJob fields, its final metrics and its tags.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ValidationException
from ..jobs.search import read_request
from ..runtime.job import orphans
from ..shapes import keyset_place, keyset_token, refuse_unknown, request_fingerprint
from ..store import JobRow, Store
from ..store import search as store_search
from .sagemaker import describe
from .times import as_datetimes


def search(store: Store, *, Resource: Any = None, SearchExpression: Any = None, SortBy: Any = None,
           SortOrder: Any = None, NextToken: Any = None, MaxResults: Any = None, CrossAccountFilterOption: Any = None,
           VisibilityConditions: Any = None, **unsupported: Any) -> dict[str, Any]:
    refuse_unknown(unsupported, where="input")
    page, total, token = search_rows(store, Resource=Resource, SearchExpression=SearchExpression, SortBy=SortBy,
                                     SortOrder=SortOrder, NextToken=NextToken, MaxResults=MaxResults)
    finals = store.final_metrics_of([row.id for row in page])  # one read for the page
    result: dict[str, Any] = {"Results": [{"TrainingJob": training_job(store, row, finals.get(row.id, []))}
                                          for row in page],
                              "TotalHits": total_hits(total)}
    if token is not None:
        result["NextToken"] = token
    del CrossAccountFilterOption, VisibilityConditions  # (one account: nothing is shared from another)
    return result


def search_rows(store: Store, *, Resource: Any = "TrainingJob", SearchExpression: Any = None, SortBy: Any = None,
                SortOrder: Any = None, NextToken: Any = None,
                MaxResults: Any = None) -> tuple[list[JobRow], int, str | None]:
    """A Search's page as the jobs' rows, how many match (the store's count: beyond COUNTED, more
    than COUNTED), and the NextToken (None: the last page)."""
    request = read_request(Resource, SearchExpression, SortBy, SortOrder)
    size = 10 if MaxResults is None else MaxResults
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= 100:
        raise ValidationException(f"1 validation error detected: Value '{MaxResults}' at 'maxResults' failed to "
                                  "satisfy constraint: Member must have value between 1 and 100")
    fingerprint = request_fingerprint([Resource, SearchExpression, request.sort_by, request.descending])
    place = keyset_place(NextToken, fingerprint, (int,))
    offset = place[0] if place else 0
    orphans.reap_orphans(store)
    rows, total = store.search_jobs(request, offset, size + 1)  # (and one more: whether any remain)
    page = rows[:size]
    return page, total, keyset_token([offset + size], fingerprint) if len(rows) > size else None


def total_hits(total: int) -> dict[str, Any]:
    """TotalHits of a count the store made: exact up to COUNTED, a lower bound beyond."""
    if total > store_search.COUNTED:
        return {"Value": store_search.COUNTED, "Relation": "GreaterThanOrEqualTo"}
    return {"Value": total, "Relation": "EqualTo"}


def training_job(store: Store, row: JobRow, finals: list[tuple[str, float, int]]) -> dict[str, Any]:
    """A job as Search's TrainingJob: its description with its final metrics (read for the page)
    and its tags."""
    answer = as_datetimes(describe(store, row, finals))
    answer.pop("ProfilingStatus", None)  # (not a member of Search's TrainingJob)
    answer.setdefault("Tags", [])
    return answer


OPERATIONS: dict[str, Callable[..., dict[str, Any]]] = {"Search": search}
