"""CloudWatch Logs' operations over the jobs' log streams: DescribeLogStreams, GetLogEvents,
FilterLogEvents.

Every job's streams are in SageMaker's log group, ``/aws/sagemaker/TrainingJobs``, named
``<job>/algo-N-<epoch seconds>``. Messages come back as CloudWatch Logs holds them: control
characters as ``#ooo`` (a tab is ``#011``), which is what metric definitions match.
"""

from __future__ import annotations

import base64
import heapq
import json
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from ..errors import InvalidParameterException, LogResourceNotFound
from ..jobs.document import ACCOUNT, REGION
from ..parsing.framing import escape, holds_control
from ..shapes import keyset_place, keyset_token, refuse_unknown, request_fingerprint
from ..store import EventRow, Store, StreamRow
from ..store.base import stream_place

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
MAX_EVENTS = 10_000


def describe_log_streams(
    store: Store,
    *,
    logGroupName: Any = None,
    logGroupIdentifier: Any = None,
    logStreamNamePrefix: Any = None,
    orderBy: Any = "LogStreamName",
    descending: Any = False,
    nextToken: Any = None,
    limit: Any = 50,
    **unsupported: Any,
) -> dict[str, Any]:
    refuse_unknown(unsupported, InvalidParameterException)
    _check_group(logGroupName, logGroupIdentifier)
    if orderBy not in ("LogStreamName", "LastEventTime"):
        raise InvalidParameterException("orderBy must be LogStreamName or LastEventTime.")
    if logStreamNamePrefix is not None and not isinstance(logStreamNamePrefix, str):
        raise InvalidParameterException("logStreamNamePrefix must be a string.")
    if logStreamNamePrefix and orderBy == "LastEventTime":
        raise InvalidParameterException("Cannot order by LastEventTime with a logStreamNamePrefix.")
    limit = _limit(limit, 50)
    by_last_event, prefix = orderBy == "LastEventTime", logStreamNamePrefix or None
    fingerprint = request_fingerprint([prefix, by_last_event, bool(descending)])
    place = keyset_place(nextToken, fingerprint, (int, str) if by_last_event else (str,), InvalidParameterException,
                         "nextToken")
    streams = store.streams_after(place, limit + 1, prefix=prefix, by_last_event=by_last_event,
                                  descending=bool(descending))
    result: dict[str, Any] = {"logStreams": [_stream(s) for s in streams[:limit]]}
    if len(streams) > limit:  # only when more remain: the SageMaker SDK loops on a stale token
        result["nextToken"] = keyset_token(stream_place(streams[limit - 1], by_last_event), fingerprint)
    return result


def _stream(stream: StreamRow) -> dict[str, Any]:
    return {
        "logStreamName": stream.name,
        "creationTime": stream.creation_ms,
        "firstEventTimestamp": stream.first_event_ms,
        "lastEventTimestamp": stream.last_event_ms,
        "lastIngestionTime": stream.last_ingestion_ms,
        "arn": f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{LOG_GROUP}:log-stream:{stream.name}",
        "storedBytes": 0,
    }


def get_log_events(
    store: Store,
    *,
    logStreamName: Any = None,
    logGroupName: Any = None,
    logGroupIdentifier: Any = None,
    startTime: Any = None,
    endTime: Any = None,
    nextToken: Any = None,
    limit: Any = MAX_EVENTS,
    startFromHead: Any = False,
    unmask: Any = False,
    **unsupported: Any,
) -> dict[str, Any]:
    refuse_unknown(unsupported, InvalidParameterException)
    _check_group(logGroupName, logGroupIdentifier)
    stream = _named_stream(store, logStreamName)
    limit = _limit(limit, MAX_EVENTS)
    start_ms, end_ms = _time(startTime, "startTime"), _time(endTime, "endTime")
    forward = bool(startFromHead)
    after, before = -1, None
    if nextToken is not None:
        direction, _, number = str(nextToken).partition("/")
        if direction not in ("f", "b") or not number.lstrip("-").isdigit():
            raise InvalidParameterException("The specified nextToken is invalid.")
        forward = direction == "f"
        if forward:
            after = int(number)
        else:
            before = int(number)
    if forward:
        events, seqs = _events_after(store, stream.id, after, start_ms, end_ms, limit)
    else:
        rows = store.events(stream.id, before_seq=before, start_ms=start_ms, end_ms=end_ms, limit=limit,
                            newest_first=True)
        events = [{"timestamp": e.timestamp_ms, "message": escape(e.message), "ingestionTime": e.timestamp_ms}
                  for e in rows]
        seqs = (rows[0].seq, rows[-1].seq) if rows else None
    if seqs is not None:
        backward_token, forward_token = f"b/{seqs[0]}", f"f/{seqs[1]}"
    else:  # at the end, the token passed comes back (never null)
        forward_token = nextToken if nextToken and forward else f"f/{after}"
        backward_token = nextToken if nextToken and not forward else f"b/{before if before is not None else 0}"
    return {"events": events, "nextForwardToken": forward_token, "nextBackwardToken": backward_token}


def _events_after(store: Store, stream_id: int, after: int, start_ms: int | None, end_ms: int | None,
                  limit: int) -> tuple[list[dict[str, Any]], tuple[int, int] | None]:
    """The first ``limit`` events after record ``after``, and the first and last one's record
    numbers; made a chunk of records at a time, escaped only where a chunk holds a control character."""
    events: list[dict[str, Any]] = []
    first_seq = None
    seq = after
    for first, _, stamp, text in store.log_chunks(stream_id, after_seq=after, start_ms=start_ms, end_ms=end_ms):
        skip = max(0, after + 1 - first)
        messages = text.split("\n")[skip:skip + limit - len(events)]
        if not messages:
            continue
        if holds_control(text):
            messages = list(map(escape, messages))
        if first_seq is None:
            first_seq = first + skip
        seq = first + skip + len(messages) - 1
        events.extend([{"timestamp": stamp, "message": message, "ingestionTime": stamp} for message in messages])
        if len(events) >= limit:
            break
    return events, None if first_seq is None else (first_seq, seq)


def filter_log_events(
    store: Store,
    *,
    logGroupName: Any = None,
    logGroupIdentifier: Any = None,
    logStreamNames: Any = None,
    logStreamNamePrefix: Any = None,
    startTime: Any = None,
    endTime: Any = None,
    filterPattern: Any = None,
    nextToken: Any = None,
    limit: Any = MAX_EVENTS,
    interleaved: Any = None,
    unmask: Any = False,
    **unsupported: Any,
) -> dict[str, Any]:
    """Events of several streams in time order, those matching ``filterPattern`` (terms, quoted
    phrases, ``?`` alternatives, ``-`` exclusions, or ``%regex%``), paged by ``nextToken``."""
    refuse_unknown(unsupported, InvalidParameterException)
    _check_group(logGroupName, logGroupIdentifier)
    if logStreamNames is not None and logStreamNamePrefix is not None:
        raise InvalidParameterException("Give logStreamNames or logStreamNamePrefix, not both.")
    limit = _limit(limit, MAX_EVENTS)
    start_ms, end_ms = _time(startTime, "startTime"), _time(endTime, "endTime")
    if end_ms is not None:
        end_ms += 1  # FilterLogEvents includes events at endTime (GetLogEvents does not)
    matches, terms = compile_filter(filterPattern)
    streams = _filtered_streams(store, logStreamNames, logStreamNamePrefix)
    positions = _positions(nextToken, streams)
    sources = [_stream_events(store, s, positions.get(s.id, -1), start_ms, end_ms, terms) for s in streams]
    merged: Iterator[tuple[StreamRow, EventRow]] = sources[0] if len(sources) == 1 else heapq.merge(
        *sources, key=lambda item: (item[1].timestamp_ms, item[0].name, item[1].seq))
    events: list[dict[str, Any]] = []
    more = False
    for stream, event in merged:
        positions[stream.id] = event.seq
        message = escape(event.message)
        if not matches(message):
            continue
        if len(events) == limit:
            positions[stream.id] = event.seq - 1  # this one starts the next page
            more = True
            break
        events.append({"logStreamName": stream.name, "timestamp": event.timestamp_ms, "message": message,
                       "ingestionTime": event.timestamp_ms, "eventId": f"{stream.id:010d}{event.seq:020d}"})
    result: dict[str, Any] = {"events": events, "searchedLogStreams": [
        {"logStreamName": s.name, "searchedCompletely": not more} for s in streams]}
    if more:
        result["nextToken"] = _token(positions)
    return result


def _stream_events(store: Store, stream: StreamRow, after: int, start_ms: int | None, end_ms: int | None,
                   terms: list[str] | None = None) -> Iterator[tuple[StreamRow, EventRow]]:
    """A stream's events from ``after`` on, read a stored chunk at a time as the merge takes them (a
    small limit never costs a read of every stream); with ``terms`` (:class:`LogFilter`'s), only
    those whose escaped message holds one of them, found in the chunk's text at once."""
    for first, _, stamp, text in store.log_chunks(stream.id, after_seq=after, start_ms=start_ms, end_ms=end_ms):
        skip = max(0, after + 1 - first)
        if terms is None:
            for seq, message in enumerate(text.split("\n")[skip:], first + skip):
                yield stream, EventRow(stream.id, seq, stamp, message)
            continue
        if holds_control(text):
            text = "\n".join(map(escape, text.split("\n")))
        for line, message in lines_holding(text, terms):
            if line >= skip:
                yield stream, EventRow(stream.id, first + line, stamp, message)


class LogFilter(NamedTuple):
    """A filter pattern compiled: its predicate on an (escaped) message, and ``terms``, text one
    piece of which every message it matches holds (its longest required term, or its ``?``
    alternatives), for finding candidates a chunk at a time (:func:`lines_holding`); None when there
    is no such list (no pattern, only exclusions, or a regex)."""

    matches: Callable[[str], bool]
    terms: list[str] | None = None


def compile_filter(pattern: Any) -> LogFilter:
    """CloudWatch Logs' text filter pattern, compiled.

    Terms must all appear (case-sensitive); ``"a phrase"`` appears as written; a pattern made of
    ``?term`` items matches when any appears; ``-term`` must not appear; ``%regex%`` searches
    with a regular expression. JSON (``{ $.x = 1 }``) and space-delimited (``[a, b]``) patterns
    are refused.
    """
    if pattern is None or (isinstance(pattern, str) and not pattern.strip()):
        return LogFilter(lambda message: True)
    if not isinstance(pattern, str) or len(pattern) > 1024:
        raise InvalidParameterException("filterPattern must be a string of at most 1024 characters.")
    text = pattern.strip()
    if text.startswith(("{", "[")):
        raise InvalidParameterException("JSON and space-delimited filter patterns are not supported here: use "
                                        "terms, \"quoted phrases\", ?alternatives, -exclusions or %regex%.")
    if len(text) > 1 and text.startswith("%") and text.endswith("%"):
        try:
            regex = re.compile(text[1:-1])
        except re.error as exc:
            raise InvalidParameterException(f"Invalid regex in filterPattern: {exc}.") from None
        return LogFilter(lambda message: regex.search(message) is not None)
    try:
        terms = _terms(text)
    except ValueError as exc:
        raise InvalidParameterException(f"Invalid filterPattern: {exc}.") from None
    wanted = [t for t in terms if not t.startswith(("?", "-"))]
    any_of = [t[1:] for t in terms if t.startswith("?")]
    excluded = [t[1:] for t in terms if t.startswith("-")]

    def matches(message: str) -> bool:
        return (all(t in message for t in wanted) and (not any_of or any(t in message for t in any_of))
                and not any(t in message for t in excluded))

    return LogFilter(matches, [max(wanted, key=len)] if wanted else any_of or None)


def lines_holding(text: str, terms: list[str]) -> list[tuple[int, str]]:
    """The lines of ``text`` (records joined by "\\n") that hold one of ``terms``, each once and in
    order, with their number: a search of the whole text per term, a line found for each
    occurrence, no Python work for a line that holds none."""
    found: dict[int, tuple[int, int]] = {}  # line -> where it starts and ends
    for term in terms:
        line, counted_to = 0, 0
        at = text.find(term)
        while at >= 0:
            line += text.count("\n", counted_to, at)
            end = text.find("\n", at)
            if line not in found:
                found[line] = (text.rfind("\n", 0, at) + 1, len(text) if end < 0 else end)
            if end < 0:
                break
            counted_to = end  # the rest of this line holds no other line's occurrence
            at = text.find(term, end)
    return [(line, text[start:end]) for line, (start, end) in sorted(found.items())]


def _terms(text: str) -> list[str]:
    """The pattern's terms, quoted phrases as one term (with a leading ? or - kept)."""
    terms: list[str] = []
    position = 0
    while position < len(text):
        if text[position].isspace():
            position += 1
            continue
        prefix = text[position] if text[position] in "?-" else ""
        start = position + len(prefix)
        if text[start:start + 1] == '"':
            end = text.find('"', start + 1)
            if end == -1:
                raise ValueError("a quoted phrase is not closed")
            terms.append(prefix + text[start + 1:end])
            position = end + 1
        else:
            end = start
            while end < len(text) and not text[end].isspace():
                end += 1
            terms.append(prefix + text[start:end])
            position = end
    return [t for t in terms if t not in ("", "?", "-")]


def _filtered_streams(store: Store, names: Any, prefix: Any) -> list[StreamRow]:
    if names is not None:
        if not isinstance(names, list) or not 1 <= len(names) <= 100 or not all(isinstance(n, str) for n in names):
            raise InvalidParameterException("logStreamNames must be a list of 1 to 100 stream names.")
        return [_named_stream(store, name) for name in dict.fromkeys(names)]
    if prefix is not None and not isinstance(prefix, str):
        raise InvalidParameterException("logStreamNamePrefix must be a string.")
    return store.streams(prefix=prefix or None)


def _positions(token: Any, streams: list[StreamRow]) -> dict[int, int]:
    """Where each stream's next page starts: the last record number returned or passed over."""
    if token is None:
        return {}
    try:
        data = json.loads(base64.urlsafe_b64decode(str(token).encode()))
        positions = {int(stream): int(seq) for stream, seq in data.items()}
    except (ValueError, TypeError, AttributeError):
        raise InvalidParameterException("The specified nextToken is invalid.") from None
    known = {s.id for s in streams}
    return {stream: seq for stream, seq in positions.items() if stream in known}


def _token(positions: dict[int, int]) -> str:
    return base64.urlsafe_b64encode(json.dumps({str(k): v for k, v in positions.items()}).encode()).decode()


def _named_stream(store: Store, name: Any) -> StreamRow:
    if not isinstance(name, str) or not name:
        raise InvalidParameterException("logStreamName is required: a job's stream, <job>/algo-N-<seconds>.")
    stream = store.stream(name)
    if stream is None:
        raise LogResourceNotFound("The specified log stream does not exist.")
    return stream


def _check_group(name: Any, identifier: Any) -> None:
    if name is not None and identifier is not None:
        raise InvalidParameterException("Give logGroupName or logGroupIdentifier, not both.")
    group = name if name is not None else identifier
    if group != LOG_GROUP:
        raise LogResourceNotFound("The specified log group does not exist.")


def _limit(value: Any, most: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise InvalidParameterException(f"limit must be from 1 to {most}.")
    return value


def _time(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidParameterException(f"{field} must be epoch milliseconds (a non-negative integer).")
    return value


OPERATIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "DescribeLogStreams": describe_log_streams,
    "GetLogEvents": get_log_events,
    "FilterLogEvents": filter_log_events,
}
