"""SageMaker's Search over training jobs, on every backend: generated expressions over generated
jobs give what a plain Python reading of AWS's rules gives (written here, apart from the store's
SQL), in the same order, page after page; nested filters match within one element; bad requests
get AWS's messages. The AWS door (boto3, the AWS CLI) is tested in test_aws.py."""

from __future__ import annotations

import random
import sqlite3
from typing import Any

import pytest

from trainmon.api.sagemaker import search
from trainmon.errors import ValidationException
from trainmon.jobs.searchtext import parse
from trainmon.store import Batch, Store, postgres, sqlite
from trainmon.store import search as store_search

from .conftest import StoreTarget

TEAMS = ("vision", "speech", "Vision-2", "nlp")
OPTIMIZERS = ("adam", "sgd", "adamw")


def add_jobs(store: Store, count: int, seed: int = 7) -> dict[str, dict[str, Any]]:
    """``count`` jobs with hyperparameters, tags, an instance count, channels and (mostly) a final
    loss; returns what each was given, by name, for the reference below."""
    rng = random.Random(seed)
    given: dict[str, dict[str, Any]] = {}
    for n in range(count):
        name = f"run-{rng.randrange(10**6):06d}-{n}"
        created = 1_700_000_000 + rng.randrange(count // 2)
        hyper = {"lr": rng.choice(("0.1", "0.01", "1e-3", "0.001", "0.3")), "optimizer": rng.choice(OPTIMIZERS)}
        if rng.random() < 0.7:
            hyper["batch"] = str(rng.choice((16, 32, 64, 128)))
        if rng.random() < 0.1:
            hyper["batch"] = "auto"  # text among numbers
        tags = [{"Key": "team", "Value": rng.choice(TEAMS)}] if rng.random() < 0.8 else []
        status = rng.choice(("Completed", "Failed", "Stopped", "InProgress"))
        doc = {"TrainingJobName": name, "TrainingJobStatus": status, "SecondaryStatus": status,
               "TrainingJobArn": f"arn:aws:sagemaker:local:000000000000:training-job/{name}",
               "HyperParameters": hyper, "Tags": tags, "CreationTime": float(created),
               "LastModifiedTime": float(created), "ProfilerConfig": {"DisableProfiler": True}, "ResourceConfig": {"InstanceCount": rng.choice((1, 2, 4))},
               "InputDataConfig": [{"ChannelName": channel, "ContentType": rng.choice(("text/csv", "image/png"))}
                                   for channel in ("train", "validation")[:rng.choice((1, 2))]]}
        job = store.create_job(name, doc, float(created))  # type: ignore[arg-type]
        loss = None
        if rng.random() < 0.8:
            loss = round(rng.uniform(0.05, 2.0), 3)
            stream = store.add_stream(job.id, "algo-1", f"{name}/algo-1-1", 1000)
            store.write_batch(Batch(job.id, points=[("loss", 1000, 9.0, "algo-1", stream.id, 0),
                                                     ("loss", 2000, loss, "algo-1", stream.id, 1)]))
        given[name] = {"id": job.id, "doc": doc, "loss": loss}
    return given


# -- the reference: AWS's rules for each operator, read over the jobs' values in plain Python


def number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None and text.strip().lower() not in ("nan", "inf", "-inf") else None
    except ValueError:
        return None


def values(job: dict[str, Any], name: str) -> list[tuple[str | None, float | None]]:
    doc = job["doc"]
    if name == "Metrics.loss":
        return [] if job["loss"] is None else [(None, job["loss"])]
    if name.startswith("HyperParameters."):
        found = doc["HyperParameters"].get(name.split(".", 1)[1])
        return [] if found is None else [(found, number(found))]
    if name.startswith("Tags."):
        return [(tag["Value"], number(tag["Value"])) for tag in doc["Tags"] if tag["Key"] == name[5:]]
    if name in ("CreationTime", "ResourceConfig.InstanceCount"):
        value = doc["CreationTime"] if name == "CreationTime" else doc["ResourceConfig"]["InstanceCount"]
        return [(None, float(value))]
    return [(doc[name], number(doc[name]))]


def holds(job: dict[str, Any], item: dict[str, Any]) -> bool:
    found, operator, value = values(job, item["Name"]), item["Operator"], item.get("Value")
    wanted = number(value) if value is not None else None
    if operator == "Exists":
        return bool(found)
    if operator == "NotExists":
        return not found
    if operator == "NotEquals":
        return not holds(job, {**item, "Operator": "Equals"})
    if operator == "Equals":
        return any(text == value or (wanted is not None and num == wanted) for text, num in found)
    if operator == "Contains":
        return any(text is not None and value.lower() in text.lower() for text, _ in found)
    if operator == "In":
        return any(text in [part.strip() for part in value.split(",")] for text, _ in found)
    compare = {"GreaterThan": float.__gt__, "GreaterThanOrEqualTo": float.__ge__, "LessThan": float.__lt__,
               "LessThanOrEqualTo": float.__le__}[operator]
    return any(num is not None and compare(num, wanted) for _, num in found)


def matches(job: dict[str, Any], expression: dict[str, Any] | None) -> bool:
    if expression is None:
        return True
    parts = [holds(job, item) for item in expression.get("Filters", [])]
    parts += [matches(job, sub) for sub in expression.get("SubExpressions", [])]
    return any(parts) if expression.get("Operator") == "Or" else all(parts)


def ordered(jobs: dict[str, dict[str, Any]], names: list[str], sort_by: str, descending: bool) -> list[str]:
    """Jobs without the property last whichever the order; numbers before text; ids break ties."""
    def key(name: str) -> tuple[Any, ...]:
        job = jobs[name]
        if sort_by == "TrainingJobName":
            found: list[tuple[str | None, float | None]] = [(name, None)]
        else:
            found = values(job, sort_by)
        text, num = found[0] if found else (None, None)
        return (num is not None, num if num is not None else 0.0, text or "", job["id"])

    present = [name for name in names if sort_by == "TrainingJobName" or values(jobs[name], sort_by)]
    missing = [name for name in names if name not in present]
    if descending:
        return sorted(present, key=key, reverse=True) + sorted(missing, key=lambda n: jobs[n]["id"], reverse=True)
    numbers = sorted((n for n in present if key(n)[0]), key=key)
    texts = sorted((n for n in present if not key(n)[0]), key=key)
    return numbers + texts + sorted(missing, key=lambda n: jobs[n]["id"])


# -- generated expressions

NAMES = {
    "HyperParameters.lr": ("0.01", "0.001", "1e-2", "0.3", "0.05"),
    "HyperParameters.batch": ("32", "64", "auto", "100"),
    "HyperParameters.optimizer": OPTIMIZERS + ("ADAM",),
    "Tags.team": TEAMS + ("vis",),
    "TrainingJobStatus": ("Completed", "Failed", "InProgress"),
    "Metrics.loss": ("0.5", "1", "1.5", "0.25"),
    "ResourceConfig.InstanceCount": ("1", "2", "3"),
}
NUMERIC = {"Metrics.loss", "ResourceConfig.InstanceCount"}


def a_filter(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(sorted(NAMES))
    choices = ["Equals", "NotEquals", "Exists", "NotExists"]
    if name in NUMERIC or name in ("HyperParameters.lr", "HyperParameters.batch"):
        choices += ["GreaterThan", "GreaterThanOrEqualTo", "LessThan", "LessThanOrEqualTo"]
    if name not in NUMERIC:
        choices += ["In", "Contains"]
    operator = rng.choice(choices)
    if operator in ("Exists", "NotExists"):
        return {"Name": name, "Operator": operator}
    value = rng.choice(NAMES[name])
    if operator in ("GreaterThan", "GreaterThanOrEqualTo", "LessThan", "LessThanOrEqualTo"):
        value = rng.choice([v for v in NAMES[name] if number(v) is not None])
    if operator == "In":
        value = ",".join(rng.sample(NAMES[name], 2))
    if operator == "Contains":
        value = value[1:3]
    return {"Name": name, "Operator": operator, "Value": value}


def an_expression(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    contains = [0]

    def filters(count: int) -> list[dict[str, Any]]:
        made = []
        while len(made) < count:
            item = a_filter(rng)
            if item["Operator"] == "Contains":
                if contains[0]:
                    continue
                contains[0] += 1
            made.append(item)
        return made

    expression: dict[str, Any] = {"Filters": filters(rng.randint(1, 3))}
    if depth < 1 and rng.random() < 0.5:
        expression["SubExpressions"] = [{"Filters": filters(rng.randint(1, 2)), "Operator": rng.choice(("And", "Or"))}
                                        for _ in range(rng.randint(1, 2))]
    if rng.random() < 0.5:
        expression["Operator"] = "Or"
    return expression


def all_pages(store: Store, size: int, **request: Any) -> tuple[list[str], int]:
    """Every page's names, and TotalHits' Value (the same on every page; a lower bound past COUNTED)."""
    names, token, totals = [], None, set()
    while True:
        answer = search(store, Resource="TrainingJob", MaxResults=size, **request,
                        **({"NextToken": token} if token else {}))
        names += [result["TrainingJob"]["TrainingJobName"] for result in answer["Results"]]
        totals.add(answer["TotalHits"]["Value"])
        token = answer.get("NextToken")
        if token is None:
            assert len(totals) == 1
            total = totals.pop()
            exact = answer["TotalHits"]["Relation"] == "EqualTo"
            assert exact == (len(names) <= store_search.COUNTED) and total == min(len(names), store_search.COUNTED)
            return names, total


@pytest.mark.parametrize("counted", [10_000, 9], ids=["sorted", "walked"])
def test_generated_searches_give_what_awss_rules_give_in_order_page_after_page(
        any_store: Store, counted: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Matches up to COUNTED are sorted; more are read in the sort's order (COUNTED made small here
    to walk 120 jobs), and TotalHits becomes a lower bound."""
    monkeypatch.setattr(store_search, "COUNTED", counted)
    jobs = add_jobs(any_store, 120)
    rng = random.Random(11)
    matched_some = 0
    for attempt in range(60):
        expression = an_expression(rng)
        sort_by = rng.choice(("HyperParameters.lr", "Metrics.loss", "TrainingJobName", "HyperParameters.batch",
                              "Tags.team", "ResourceConfig.InstanceCount"))
        descending = rng.random() < 0.5
        wanted = ordered(jobs, [name for name, job in jobs.items() if matches(job, expression)], sort_by, descending)
        got, total = all_pages(any_store, rng.choice((7, 50, 100)), SearchExpression=expression, SortBy=sort_by,
                               SortOrder="Descending" if descending else "Ascending")
        assert got == wanted, (attempt, expression, sort_by, descending)
        assert total == min(len(wanted), counted)
        matched_some += 0 < len(wanted) < len(jobs)
    assert matched_some > 30  # the expressions narrow the jobs, not all or nothing


def test_no_expression_gives_every_job_by_last_change_newest_first(any_store: Store) -> None:
    jobs = add_jobs(any_store, 30)
    got, total = all_pages(any_store, 8)
    assert total == 30
    assert got == sorted(jobs, key=lambda n: (jobs[n]["doc"]["LastModifiedTime"], jobs[n]["id"]), reverse=True)


def test_a_nested_filter_matches_within_one_element(any_store: Store) -> None:
    jobs = add_jobs(any_store, 60)
    nested = {"NestedFilters": [{"NestedPropertyName": "InputDataConfig", "Filters": [
        {"Name": "InputDataConfig.ChannelName", "Operator": "Equals", "Value": "validation"},
        {"Name": "InputDataConfig.ContentType", "Operator": "Equals", "Value": "text/csv"}]}]}
    wanted = {name for name, job in jobs.items()
              if any(c["ChannelName"] == "validation" and c["ContentType"] == "text/csv"
                     for c in job["doc"]["InputDataConfig"])}
    loose = {name for name, job in jobs.items()
             if any(c["ChannelName"] == "validation" for c in job["doc"]["InputDataConfig"])
             and any(c["ContentType"] == "text/csv" for c in job["doc"]["InputDataConfig"])}
    assert wanted < loose  # the data has jobs whose two channels split the conditions between them
    assert set(all_pages(any_store, 100, SearchExpression=nested)[0]) == wanted
    negated = {"NestedFilters": [{"NestedPropertyName": "InputDataConfig", "Filters": [
        {"Name": "InputDataConfig.ChannelName", "Operator": "Equals", "Value": "train"},
        {"Name": "InputDataConfig.ContentType", "Operator": "NotEquals", "Value": "text/csv"}]}]}
    assert set(all_pages(any_store, 100, SearchExpression=negated)[0]) == {
        name for name, job in jobs.items() if job["doc"]["InputDataConfig"][0]["ContentType"] != "text/csv"}
    metric = {"NestedFilters": [{"NestedPropertyName": "FinalMetricDataList", "Filters": [
        {"Name": "FinalMetricDataList.MetricName", "Operator": "Equals", "Value": "loss"},
        {"Name": "FinalMetricDataList.Value", "Operator": "LessThan", "Value": "0.5"}]}]}
    assert set(all_pages(any_store, 100, SearchExpression=metric)[0]) == {
        name for name, job in jobs.items() if job["loss"] is not None and job["loss"] < 0.5}


def test_properties_follow_the_job_as_it_changes(any_store: Store) -> None:
    jobs = add_jobs(any_store, 10)
    name = next(iter(jobs))

    def retag(row: Any) -> None:
        row.doc["Tags"] = [{"Key": "team", "Value": "moved"}, {"Key": "owner", "Value": "kim"}]
        row.doc["TrainingJobStatus"] = "Stopped"

    any_store.update_job(name, retag)
    found = search(any_store, Resource="TrainingJob", SearchExpression=parse("Tags.team = moved and Tags.owner exists"))
    assert [r["TrainingJob"]["TrainingJobName"] for r in found["Results"]] == [name]
    assert found["Results"][0]["TrainingJob"]["Tags"] == [{"Key": "team", "Value": "moved"},
                                                         {"Key": "owner", "Value": "kim"}]
    any_store.delete_job(name)
    assert search(any_store, Resource="TrainingJob", SearchExpression=parse("Tags.team = moved"))["Results"] == []


def test_jobs_stored_before_search_existed_are_found(store_target: StoreTarget) -> None:
    """The migration that adds the properties fills them in for the jobs already stored."""
    store = store_target.open()
    jobs = add_jobs(store, 20)
    with store._transaction() as sql:  # type: ignore[attr-defined]  # the schema as it was before
        sql.rows("DROP TABLE job_properties")
        for index in ("series_by_final_value", "jobs_by_change_in_order"):
            sql.rows(f"DROP INDEX {index}")
        migrations = sqlite._MIGRATIONS if store_target.backend == "sqlite" else postgres._MIGRATIONS
        before = next(number for number, step in enumerate(migrations)  # those applied before search's
                      if isinstance(step, str) and "CREATE TABLE IF NOT EXISTS job_properties" in step)
        if store_target.backend == "sqlite":
            sql.rows(f"PRAGMA user_version = {before}")
        else:
            sql.rows(f"UPDATE schema_version SET version = {before}")
    store.close()
    store = store_target.open()
    try:
        wanted = sorted(name for name, job in jobs.items() if job["doc"]["HyperParameters"]["optimizer"] == "sgd")
        assert wanted and all_pages(store, 100, SearchExpression=parse("HyperParameters.optimizer = sgd"),
                                    SortBy="TrainingJobName", SortOrder="Ascending")[0] == wanted
    finally:
        store.close()


def test_a_result_is_the_job_with_its_final_metrics(any_store: Store) -> None:
    jobs = add_jobs(any_store, 12)
    name, job = next((n, j) for n, j in jobs.items() if j["loss"] is not None)
    found = search(any_store, Resource="TrainingJob", SearchExpression=parse(f"TrainingJobName = {name}"))
    training_job = found["Results"][0]["TrainingJob"]
    assert training_job["HyperParameters"] == job["doc"]["HyperParameters"]
    assert [(m["MetricName"], m["Value"]) for m in training_job["FinalMetricDataList"]] == [("loss", job["loss"])]
    assert training_job["CreationTime"].timestamp() == job["doc"]["CreationTime"]


BAD = [
    ({"Resource": "Nothing"}, "Member must satisfy enum value set"),
    ({}, "Value null at 'resource'"),
    ({"Resource": "Experiment"}, "trainmon searches training jobs"),
    ({"SearchExpression": {}}, "must contain at least one subexpression, filter, or nested filter"),
    ({"SearchExpression": {"Filters": []}}, "Member must have length between 1 and 20"),
    ({"SearchExpression": {"Filters": [{"Name": "x", "Operator": "Like", "Value": "1"}]}}, "enum value set"),
    ({"SearchExpression": {"Filters": [{"Name": "Metrics.loss", "Operator": "LessThan", "Value": "low"}]}},
     "must be an integer or floating-point decimal"),
    ({"SearchExpression": {"Filters": [{"Name": "CreationTime", "Operator": "LessThan", "Value": "yesterday"}]}},
     "ISO 8601"),
    ({"SearchExpression": {"Filters": [{"Name": "Metrics.loss", "Operator": "Contains", "Value": "1"}]}},
     "only supported for text properties"),
    ({"SearchExpression": {"Filters": [{"Name": "TrainingJobName", "Operator": "GreaterThan", "Value": "b"}]}},
     "compares numbers"),
    ({"SearchExpression": {"Filters": [{"Name": "TrainingJobName", "Operator": "Contains", "Value": "a"},
                                       {"Name": "Tags.team", "Operator": "Contains", "Value": "b"}]}},
     "'CONTAINS' operator usage limit of 1 exceeded."),
    ({"SearchExpression": {"Filters": [{"Name": "Tags.team", "Operator": "Equals"}]}}, "needs a Value"),
    ({"SearchExpression": {"NestedFilters": [{"NestedPropertyName": "InputDataConfig",
                                              "Filters": [{"Name": "Tags.team", "Value": "a"}]}]}},
     "not within the nested property InputDataConfig"),
    ({"SearchExpression": {"SubExpressions": [{"Filters": [{"Name": "a", "Value": "b"}] * 20}] * 3}},
     "at most 50"),
    ({"SortOrder": "Up"}, "Ascending, Descending"),
    ({"MaxResults": 101}, "between 1 and 100"),
    ({"NextToken": "not-a-token"}, "NextToken"),
    ({"SearchExpression": {"Filters": [{"Name": "a", "Value": "b"}], "Joiner": "And"}}, "Unknown parameter"),
]


@pytest.mark.parametrize(("request_", "message"), BAD)
def test_bad_requests_get_awss_messages(store: Store, request_: dict[str, Any], message: str) -> None:
    request = {"Resource": "TrainingJob", **request_} if "Resource" not in request_ and request_ else request_
    with pytest.raises(ValidationException) as raised:
        search(store, **request)
    assert message in str(raised.value)


def test_a_token_belongs_to_its_request(store: Store) -> None:
    add_jobs(store, 15)
    first = search(store, Resource="TrainingJob", MaxResults=5, SearchExpression=parse("Tags.team exists"))
    with pytest.raises(ValidationException, match="NextToken"):
        search(store, Resource="TrainingJob", MaxResults=5, NextToken=first["NextToken"],
               SearchExpression=parse("Tags.team not exists"))


# -- the doors that read the text form: the CLI and the console's route


def test_trainmon_search_shows_the_columns_it_searched_and_sorted_by(store: Store, cli: Any) -> None:
    jobs = add_jobs(store, 40)
    keep = {"Name": "HyperParameters.optimizer", "Operator": "Equals", "Value": "sgd"}
    wanted = ordered(jobs, [name for name, job in jobs.items() if holds(job, keep)], "Metrics.loss", False)[:5]
    shown = cli("search", "HyperParameters.optimizer = sgd", "--sort-by", "Metrics.loss", "--ascending",
                "--limit", "5")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "HyperParameters.optimizer", "Metrics.loss"]
    assert [line.split()[0] for line in lines[1:6]] == wanted
    assert all(line.split()[2] == "sgd" for line in lines[1:6])
    matching = sum(holds(job, keep) for job in jobs.values())
    assert lines[-1].strip() == f"5 of {matching} matching jobs"
    bad = cli("search", "Metrics.loss <")
    assert bad.returncode == 2 and "expected a value at the end" in bad.stderr


def test_the_jobs_route_searches_with_the_text_form(store: Store, server: Any) -> None:
    import httpx

    jobs = add_jobs(store, 40)
    keep = [{"Name": "Tags.team", "Operator": "In", "Value": "vision,nlp"},
            {"Name": "HyperParameters.lr", "Operator": "LessThan", "Value": "0.05"}]
    wanted = ordered(jobs, [name for name, job in jobs.items() if all(holds(job, item) for item in keep)],
                     "HyperParameters.lr", True)
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as http:
        page = http.get("/api/jobs", params={"where": "Tags.team in vision,nlp and HyperParameters.lr < 0.05",
                                             "sort": "HyperParameters.lr", "order": "Descending", "limit": 100}).json()
        assert [job["TrainingJobName"] for job in page["TrainingJobSummaries"]] == wanted
        assert page["TotalHits"] == {"Value": len(wanted), "Relation": "EqualTo"}
        assert all(job["Tags"]["team"] in ("vision", "nlp") for job in page["TrainingJobSummaries"])
        bad = http.get("/api/jobs", params={"where": "Tags.team in"})
        assert bad.status_code == 400 and "expected a value" in bad.json()["error"]["message"]


# -- the text form


def test_the_text_form_reads_into_the_expression_it_stands_for() -> None:
    assert parse("") is None
    assert parse("HyperParameters.lr >= 0.01 and Metrics.validation:error < 0.2") == {"Filters": [
        {"Name": "HyperParameters.lr", "Operator": "GreaterThanOrEqualTo", "Value": "0.01"},
        {"Name": "Metrics.validation:error", "Operator": "LessThan", "Value": "0.2"}]}
    assert parse('(Tags.team = vision OR Tags.team = "speech team") and TrainingJobStatus in Completed,Stopped') == {
        "Filters": [{"Name": "TrainingJobStatus", "Operator": "In", "Value": "Completed,Stopped"}],
        "SubExpressions": [{"Operator": "Or", "Filters": [
            {"Name": "Tags.team", "Operator": "Equals", "Value": "vision"},
            {"Name": "Tags.team", "Operator": "Equals", "Value": "speech team"}]}]}
    assert parse("a exists or b not exists and c != 1") == {"Operator": "Or", "Filters": [
        {"Name": "a", "Operator": "Exists"}], "SubExpressions": [{"Filters": [
            {"Name": "b", "Operator": "NotExists"}, {"Name": "c", "Operator": "NotEquals", "Value": "1"}]}]}
    assert parse('"odd name=1" contains "\\"q\\""') == {"Filters": [
        {"Name": "odd name=1", "Operator": "Contains", "Value": '"q"'}]}


@pytest.mark.parametrize(("text", "message"), [
    ("lr >=", "character 6 (lr >=▸): expected a value at the end"),
    ("lr", "expected an operator at the end"),
    ("(lr = 1", "expected ')' at the end"),
    ("lr = 1 batch = 2", "expected 'and', 'or' or the end, not 'batch'"),
    ("lr ~ 1", "expected an operator after lr"),
    ('lr = "1', "expected a closing quote"),
    ("and = 1", "expected a property name, not 'and'"),
    ("lr not 1", "expected 'exists' after 'not'"),
])
def test_the_text_form_says_where_it_cannot_read(text: str, message: str) -> None:
    with pytest.raises(ValidationException) as raised:
        parse(text)
    assert message in str(raised.value)


def test_a_sorted_search_reads_each_jobs_own_series_and_properties(store: Store) -> None:
    """The join a sort needs reads a job's rows by the index on job and name: left to itself, SQLite
    without statistics read every job's series of the metric for each job (a search over 10,000
    jobs took seconds)."""
    add_jobs(store, 60)
    connection = next(v for v in vars(store).values() if isinstance(v, sqlite3.Connection))
    statements: list[str] = []
    connection.set_trace_callback(statements.append)
    for sort_by in ("Metrics.loss", "HyperParameters.lr"):  # a filter keeping a third: every match sorted
        search(store, Resource="TrainingJob", SortBy=sort_by, SortOrder="Ascending",
               SearchExpression=parse("HyperParameters.optimizer = sgd"))
    connection.set_trace_callback(None)
    joins = {("series" if " LEFT JOIN series " in sql else "job_properties"): sql
             for sql in statements if " LEFT JOIN " in sql}
    assert sorted(joins) == ["job_properties", "series"], statements
    for table, index in (("series", "series_by_job"), ("job_properties", "job_properties_of_job")):
        plan = " | ".join(row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + joins[table]))
        assert f"SEARCH s USING INDEX {index}" in plan or f"SEARCH s USING COVERING INDEX {index}" in plan, plan
