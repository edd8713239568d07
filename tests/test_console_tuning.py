"""The console's hyperparameter tuning pages in a real headless Chromium, over a real ``trainmon
server`` running a real tuning job: its tuner, and trials that are real training jobs printing their
objective.

Every wait is on a condition (Playwright's expect and wait_for_function, or the API polled with the
page's clock against a deadline), never a sleep; the trials run until the test lets them end (a
release file)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from . import test_console as console
from .conftest import PY, ServerProcess

# the console tests' Chromium, and a tab of it signed in to the server
browser, page = console.browser, console.page
call, expect = console.call, console.sync_api.expect
SHOTS = Path("/tmp/tuning-shots")

# A trial: its objective from its hyperparameters (SM_HPS, as SageMaker's containers get them), one
# value an epoch, then it waits for the release file (or, so that nothing outlives a broken test,
# five minutes) and ends.
OBJECTIVE = """
import json, os, time
hps = json.loads(os.environ["SM_HPS"])
lr, depth = float(hps["lr"]), int(hps["depth"])
for epoch in range(1, 4):
    loss = (lr - 0.3) ** 2 + abs(depth - 4) / 10 + 1.0 / epoch
    print(f"epoch {{epoch}} validation:loss={{loss:.6f}};", flush=True)
    time.sleep(0.05)  # (an epoch's points apart in time, as a real job's are)
deadline = time.monotonic() + 300
while not os.path.exists({release!r}) and time.monotonic() < deadline:
    time.sleep(0.05)
"""

METRIC = "validation:loss"


@pytest.fixture
def release(tmp_path: Path) -> Iterator[Path]:
    """The file that lets the trials end; made at the end whatever happens, so no trial runs on."""
    path = tmp_path / "release"
    yield path
    path.touch()


@pytest.fixture
def objective(script: Callable[[str], Path], release: Path) -> Path:
    return script(OBJECTIVE.format(release=str(release)))


def sagemaker(server: ServerProcess, operation: str, **request: Any) -> Any:
    """An operation through the server's generic route, as the console calls it."""
    return call(server, "POST", f"/api/sagemaker/{operation}", request)


def create_tuning_job(server: ServerProcess, name: str, objective: Path, tmp_path: Path) -> None:
    sagemaker(server, "CreateHyperParameterTuningJob", HyperParameterTuningJobName=name, HyperParameterTuningJobConfig={
        "Strategy": "Random", "RandomSeed": 1,
        "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": METRIC},
        "ResourceLimits": {"MaxNumberOfTrainingJobs": 4, "MaxParallelTrainingJobs": 2},
        "ParameterRanges": {"ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0.001", "MaxValue": "1"}],
                            "IntegerParameterRanges": [{"Name": "depth", "MinValue": "1", "MaxValue": "10"}]},
    }, TrainingJobDefinition={
        "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": f"{shlex.quote(PY)} {objective}",
                                   "MetricDefinitions": [{"Name": METRIC, "Regex": r"validation:loss=([0-9.]+);"}]},
        "RoleArn": "arn:aws:iam::000000000000:role/trainmon",
        "OutputDataConfig": {"S3OutputPath": str(tmp_path / "out")},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    })


def wait_tuning(server: ServerProcess, name: str, wanted: set[str], page: Any) -> dict[str, Any]:
    """Poll DescribeHyperParameterTuningJob (with the page's clock, not a sleep) until its status is
    one of ``wanted``."""
    for _ in range(1200):
        described: dict[str, Any] = sagemaker(server, "DescribeHyperParameterTuningJob",
                                              HyperParameterTuningJobName=name)
        if described["HyperParameterTuningJobStatus"] in wanted:
            return described
        page.wait_for_timeout(100)
    raise AssertionError(f"{name} is still {described['HyperParameterTuningJobStatus']}, not {wanted}")


def trials(server: ServerProcess, name: str) -> list[dict[str, Any]]:
    found = sagemaker(server, "ListTrainingJobsForHyperParameterTuningJob", HyperParameterTuningJobName=name,
                      MaxResults=100)
    assert "NextToken" not in found
    summaries: list[dict[str, Any]] = found["TrainingJobSummaries"]
    return summaries


def open_tuning(page: Any, server: ServerProcess) -> None:
    """The tuning jobs' list, through the console's navigation."""
    page.goto(server.url + "/")
    page.locator(".topbar nav a", has_text="Tuning").click()
    page.wait_for_url("**/tuning")
    expect(page.locator(".topbar nav a.active")).to_have_text("Tuning")


def headers_broken_inside_a_word(page: Any, selector: str) -> list[str]:
    """The headers whose text breaks onto another line where their label does not allow it."""
    found: list[str] = page.locator(selector).evaluate_all("""ths => ths.filter(th => {
        const range = document.createRange(); range.selectNodeContents(th);
        const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        return lines.size > 1 && !th.querySelector('wbr') && !/\\s/.test(th.textContent.trim());
    }).map(th => th.textContent)""")
    return found


def overflowing(page: Any) -> int:
    """How far (px) the page is wider than the window: nothing may stick out of it."""
    width: int = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    return width


def rows_of(page: Any) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = page.locator("table.trials tbody tr[data-trial]").evaluate_all(
        "rows => rows.map(r => [r.dataset.trial, r.dataset.objective])")
    return found


def test_a_tuning_job_live_its_trials_charts_and_links(server: ServerProcess, page: Any, objective: Path,
                                                      release: Path, tmp_path: Path) -> None:
    name = "Console-Tune"  # a name with capitals: the ARN lower-cases it, the pages keep it
    create_tuning_job(server, name, objective, tmp_path)

    # the list shows it while it runs, and opens its page
    open_tuning(page, server)
    row = page.locator(f'tr[data-tuning-job="{name}"]')
    expect(row.locator(".status")).to_have_text("InProgress")
    expect(row.locator("[data-col=strategy]")).to_have_text("Random")
    expect(row.locator("[data-col=objective]")).to_have_text(f"Minimize {METRIC}")
    row.locator("a").first.click()
    page.wait_for_url(f"**/tuning/{name}")

    # live: two trials at a time, their objective lines drawn as they print it
    expect(page.locator(".status-line .status")).to_have_text("InProgress")
    expect(page.locator("button[name=stop]")).to_be_visible()
    expect(page.locator("table.trials tbody tr[data-trial]")).to_have_count(2)
    page.wait_for_function("() => { const c = window.trainmonCharts['tuning:objective'];"
                           " return c && c.series.length === 2 && c.series.every(s => s.points === 3); }")
    expect(page.locator('dd[data-fact="Training jobs"]')).to_contain_text("2 in progress")

    # the trials end, two more run and end: the page follows to the end without a reload
    release.touch()
    described = wait_tuning(server, name, {"Completed"}, page)
    expect(page.locator(".status-line .status")).to_have_text("Completed")
    expect(page.locator("button[name=stop]")).to_have_count(0)
    rows = page.locator("table.trials tbody tr[data-trial]")
    expect(rows).to_have_count(4)
    expect(page.locator('dd[data-fact="Training jobs"]')).to_have_text("4 of 4: 4 completed")
    expect(page.locator('dd[data-fact="Objectives"]')).to_have_text("4 succeeded")

    # the best trial, as DescribeHyperParameterTuningJob names it, highlighted and linked
    best = described["BestTrainingJob"]["TrainingJobName"]
    value = described["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
    expect(page.locator("a[name=best-trial]")).to_have_text(best)
    expect(page.locator(".best-trial .best-value")).to_have_text(f"{METRIC} {value:g}")
    expect(page.locator("table.trials tr.best")).to_have_count(1)
    expect(page.locator("table.trials tr.best")).to_have_attribute("data-trial", best)

    # the charts: a line per trial (3 points each), and each final objective by number with the best so far
    page.wait_for_function("() => { const c = window.trainmonCharts['tuning:objective'];"
                           " return c.series.length === 4 && c.series.every(s => s.points === 3); }")
    known = trials(server, name)
    assert sorted(s["label"] for s in page.evaluate("() => window.trainmonCharts['tuning:objective'].series")) == \
        sorted(t["TrainingJobName"] for t in known)
    expect(page.locator('section[data-tuning-chart="objective"] canvas')).to_have_count(1)
    expect(page.locator('section[data-tuning-chart="finals"] canvas')).to_have_count(1)
    finals = page.evaluate("() => window.trainmonCharts['tuning:finals'].series")
    assert [s["points"] for s in finals] == [4, 4], finals
    # (uPlot draws the lines: its series are the x and a series per trial)
    assert page.evaluate("() => document.querySelector('section[data-tuning-chart=objective] .uplot')"
                         " && window.trainmonCharts['tuning:objective'].points") == 12

    # sorted by the objective: the best first, then turned; by a hyperparameter, as numbers
    values = {t["TrainingJobName"]: t["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] for t in known}
    expect(page.locator('th[data-sort="objective"]')).to_have_attribute("aria-sort", "ascending")
    assert [n for n, _ in rows_of(page)] == sorted(values, key=lambda n: values[n])
    assert rows_of(page)[0][0] == best
    page.locator('th[data-sort="objective"]').click()
    expect(page.locator('th[data-sort="objective"]')).to_have_attribute("aria-sort", "descending")
    shown = rows_of(page)
    assert [float(v) for _, v in shown] == sorted(values.values(), reverse=True)
    assert [n for n, _ in shown] == sorted(values, key=lambda n: -values[n])
    depth = {t["TrainingJobName"]: int(t["TunedHyperParameters"]["depth"]) for t in known}
    page.locator('th[data-sort="hyper:depth"]').click()
    expect(page.locator('th[data-sort="hyper:depth"]')).to_have_attribute("aria-sort", "ascending")
    assert [depth[n] for n, _ in rows_of(page)] == sorted(depth.values())

    # hyperparameters against the objective: a line per trial over depth, lr and the objective
    parallel = page.locator(".parallel svg")
    expect(parallel).to_have_attribute("data-lines", "4")
    expect(parallel).to_have_attribute("data-axes", "3")
    expect(parallel.locator("polyline[data-job]")).to_have_count(4)
    expect(parallel.locator("text.metric")).to_have_text(METRIC)
    expect(page.locator(".scatter svg circle[data-job]")).to_have_count(4)

    # at 1400 and 900 px: nothing sticks out of the window, no header breaks inside a word
    SHOTS.mkdir(exist_ok=True)
    for width in (1400, 900):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_function("(w) => window.innerWidth === w", arg=width)
        page.locator("table.trials").scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / f"tuning-job-{width}.png"), full_page=True)
        assert overflowing(page) <= 0
        assert headers_broken_inside_a_word(page, "table.trials th") == []

    # a trial's link opens its job's page, which links back to its tuning job
    trial = known[0]["TrainingJobName"]
    page.locator(f'tr[data-trial="{trial}"] a[name=trial]').click()
    page.wait_for_url(f"**/jobs/{trial}")
    back = page.locator("a[name=tuning-job]")
    expect(back).to_have_text(name)
    assert call(server, "GET", f"/api/jobs/{trial}")["Job"]["TuningJobArn"].endswith(f"/{name.lower()}")
    page.screenshot(path=str(SHOTS / "tuning-trial-900.png"))
    back.click()
    page.wait_for_url(f"**/tuning/{name}")
    expect(page.locator("table.trials tbody tr[data-trial]")).to_have_count(4)
    page.goto(f"{server.url}/tuning/{name}")  # the page's own address, opened afresh (a link shared, a reload)
    expect(page.locator("table.trials tbody tr[data-trial]")).to_have_count(4)
    page.goto(server.url + "/")  # the runs table names each trial's tuning job, a link to its page
    expect(page.locator("td .tuning-of a", has_text=name)).to_have_count(4)
    page.screenshot(path=str(SHOTS / "runs-with-trials.png"))
    page.locator("td .tuning-of a").first.click()
    page.wait_for_url(f"**/tuning/{name}")
    expect(page.locator("table.trials tbody tr[data-trial]")).to_have_count(4)

    # the list: ended, with its counters and its best objective
    for width in (1400, 900):
        page.set_viewport_size({"width": width, "height": 900})
        open_tuning(page, server)
        expect(row.locator(".status")).to_have_text("Completed")
        expect(row.locator("[data-col=counters]")).to_have_text("4 of 4: 4 completed")
        expect(row.locator("[data-col=best]")).to_have_text(f"{value:g}")
        page.screenshot(path=str(SHOTS / f"tuning-list-{width}.png"), full_page=True)
        assert overflowing(page) <= 0
        assert headers_broken_inside_a_word(page, "table.tuning-jobs th") == []


def test_stopping_a_tuning_job_from_its_page(server: ServerProcess, page: Any, objective: Path,
                                             tmp_path: Path) -> None:
    name = "stop-tune"
    create_tuning_job(server, name, objective, tmp_path)
    open_tuning(page, server)
    page.locator(f'tr[data-tuning-job="{name}"] a').first.click()
    page.wait_for_url(f"**/tuning/{name}")
    expect(page.locator("table.trials tbody tr[data-trial] .status", has_text="InProgress")).to_have_count(2)
    page.wait_for_function("() => { const c = window.trainmonCharts['tuning:objective'];"
                           " return c && c.series.length === 2 && c.series.every(s => s.points === 3); }")
    page.click("button[name=stop]")
    page.click("#stop-dialog button[name=confirm]")
    # its running trials are stopped; the page follows it to Stopped, each trial marked
    described = wait_tuning(server, name, {"Stopped"}, page)
    expect(page.locator(".status-line .status")).to_have_text("Stopped")
    expect(page.locator("button[name=stop]")).to_have_count(0)
    stopped = [t["TrainingJobName"] for t in trials(server, name) if t["TrainingJobStatus"] == "Stopped"]
    assert stopped and described["TrainingJobStatusCounters"]["Stopped"] == len(stopped)
    marked = page.locator("table.trials tr.stopped")
    expect(marked).to_have_count(len(stopped))
    assert sorted(marked.evaluate_all("rows => rows.map(r => r.dataset.trial)")) == sorted(stopped)
    # (stopped with the tuning job, not early)
    expect(page.locator(".stopped-mark[data-stopped=stopped]")).to_have_count(len(stopped))
    expect(page.locator(".stopped-mark").first).to_have_text(re.compile(r"^stopped$"))
    page.screenshot(path=str(SHOTS.joinpath("tuning-stopped-1280.png")), full_page=True)
