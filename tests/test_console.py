"""The web console in a real headless Chromium, over a real ``trainmon server`` running real jobs.

Every wait is on a condition (Playwright's expect and wait_for_function), never a sleep, so the
tests hold on a slow machine; the jobs run until the test lets them end (a stop file)."""

from __future__ import annotations

import json
import os
import re
import shlex
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import PY, ServerProcess

sync_api = pytest.importorskip("playwright.sync_api", reason="the console tests need Playwright for Python")
expect = sync_api.expect

CHROMIUM = os.environ.get("TRAINMON_TEST_CHROMIUM", "/usr/bin/chromium")
WAIT_MS = 60_000
SCREENSHOT = Path("/tmp/console-job.png")

if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (set TRAINMON_TEST_CHROMIUM)", allow_module_level=True)

expect.set_options(timeout=WAIT_MS)

# A job that prints a step, a loss and an accuracy every 0.15 s until its stop file exists (or, so
# that nothing outlives a broken test, five minutes pass); a progress bar between the lines.
TRAIN = """
import os, sys, time
stop = {stop!r}
print("starting", flush=True)
for step in range(2000):
    if os.path.exists(stop):
        break
    print(f"step={{step}} loss={{1 / (step + 1):.5f}} acc={{step / 2000:.4f}}", flush=True)
    if step == 3:
        print("loss=nan", flush=True)
    sys.stdout.write("\\rbatch: 50%|#####     | 1/2")
    sys.stdout.write("\\rbatch: 100%|##########| 2/2\\n")
    sys.stdout.flush()
    time.sleep(0.15)
print("done", flush=True)
"""

# A short job: ``count`` lines, then it ends.
SHORT = """
import time
for step in range({count}):
    print(f"step={{step}} loss={{{scale} / (step + 1):.5f}}", flush=True)
    time.sleep(0.02)
"""

DEFINITIONS = [{"Name": "loss", "Regex": r"loss=(\S+)"}, {"Name": "step", "Regex": r"step=(\d+)"}]


def call(server: ServerProcess, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **server.headers})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def create_job(server: ServerProcess, name: str, path: Path, *, definitions: list[dict[str, str]] = DEFINITIONS,
               hyperparameters: dict[str, str] | None = None) -> None:
    call(server, "POST", "/api/jobs", {
        "TrainingJobName": name,
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": [PY, str(path)],
                                   "MetricDefinitions": definitions},
        "HyperParameters": hyperparameters or {},
    })


def wait_status(server: ServerProcess, name: str, wanted: set[str], page: Any) -> dict[str, Any]:
    """Poll the API (with the page's clock, not a sleep) until the job's status is one of ``wanted``."""
    for _ in range(600):
        job: dict[str, Any] = call(server, "GET", f"/api/jobs/{name}")["Job"]
        if job["TrainingJobStatus"] in wanted:
            return job
        page.wait_for_timeout(100)
    raise AssertionError(f"{name} is still {job['TrainingJobStatus']}, not {wanted}")


def chart_points(page: Any, metric: str) -> int:
    return int(page.locator(f'section.chart[data-metric="{metric}"]').get_attribute("data-points") or 0)


def wait_points(page: Any, metric: str, more_than: int) -> int:
    page.wait_for_function(
        "([m, n]) => { const s = [...document.querySelectorAll('section.chart')].find(e => e.dataset.metric === m);"
        " return s && Number(s.dataset.points) > n && s.dataset.loading === '0'; }",
        arg=[metric, more_than], timeout=WAIT_MS)
    return chart_points(page, metric)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, server: ServerProcess) -> Iterator[Any]:
    """A tab signed in to the server's console, as `trainmon console`'s link signs one in."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    tab = context.new_page()
    tab.goto(server.sign_in_url())
    assert tab.url == server.url + "/", tab.url
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert not errors, f"the page raised: {errors}"


@pytest.fixture
def stop_file(tmp_path: Path) -> Iterator[Path]:
    """The file that ends the TRAIN jobs; made at the end whatever happens, so no job runs on."""
    path = tmp_path / "stop"
    yield path
    path.touch()


@pytest.fixture
def train(script: Callable[[str], Path], stop_file: Path) -> Path:
    return script(TRAIN.format(stop=str(stop_file)))


def test_create_job_and_follow_its_chart(server: ServerProcess, page: Any, train: Path, stop_file: Path,
                                         tmp_path: Path) -> None:
    # the form, with two metric definitions tried on pasted sample output
    page.goto(server.url + "/new")
    # the command line is split as a shell splits it
    line = r"""python3 'my dir/train.py' --note "a \"b\" c" plain\ space ''"""
    words = page.evaluate('async (line) => (await import("/static/create.js")).splitCommand(line)', line)
    assert words == shlex.split(line) == ["python3", "my dir/train.py", "--note", 'a "b" c', "plain space", ""]
    # and a job's page shows a command with its quoting, as shlex.join writes it
    joined = page.evaluate('async (words) => (await import("/static/dom.js")).shellJoin(words)', [*words, "it's"])
    assert joined == shlex.join([*words, "it's"])
    page.fill("input[name=name]", "not a name!")
    page.fill("input[name=command]", f"{shlex.quote(PY)} {shlex.quote(train.name)}")  # run where it lives
    page.fill("input[name=directory]", str(train.parent))
    page.click("button[name=add-hyperparameter]")
    page.fill("[data-row=hyperparameter] input[name=key]", "lr")
    page.fill("[data-row=hyperparameter] input[name=value]", "0.1")
    page.fill("input[name=max-runtime]", "600")
    page.fill("[data-row=metric] input[name=Name]", "loss")
    page.fill("[data-row=metric] input[name=Regex]", r"loss=(\S+)")
    page.click("button[name=add-metric]")
    page.locator("[data-row=metric]").nth(1).locator("input[name=Name]").fill("step")
    page.locator("[data-row=metric]").nth(1).locator("input[name=Regex]").fill(r"step=(\d+)")
    page.fill("textarea[name=sample]", "step=1 loss=0.5\nstep=2 loss=oops\nstep=3 loss=0.25\n")
    loss_row = page.locator(".tester-def[data-name=loss]")
    expect(loss_row.locator("[data-matches]")).to_have_attribute("data-matches", "2")
    expect(loss_row).to_contain_text("0.5, 0.25")
    expect(loss_row).to_contain_text("not a number")  # the rejected "oops"
    expect(page.locator(".tester-def[data-name=step] [data-matches]")).to_have_attribute("data-matches", "3")
    # an invalid regex marks its own row with the API's message; the other keeps its results
    page.locator("[data-row=metric]").nth(1).locator("input[name=Regex]").fill("step=(")
    expect(page.locator(".tester-problem[data-position='2']")).to_contain_text("does not compile")
    expect(page.locator("[data-row=metric]").nth(1)).to_have_class(re.compile("invalid"))
    expect(loss_row.locator("[data-matches]")).to_have_attribute("data-matches", "2")
    page.locator("[data-row=metric]").nth(1).locator("input[name=Regex]").fill(r"step=(\d+)")
    expect(page.locator(".tester-def[data-name=step] [data-matches]")).to_have_attribute("data-matches", "3")
    expect(page.locator("[data-row=metric]").nth(1)).not_to_have_class(re.compile("invalid"))

    (tmp_path / "data").mkdir()
    page.click("button[name=add-channel]")
    page.fill("[data-row=channel] input[name=channel]", "train")
    page.fill("[data-row=channel] input[name=path]", str(tmp_path / "data"))

    # the API's refusal shows in the form; once mended, the job starts and its page opens
    page.click("button[name=create]")
    expect(page.locator(".form-error")).to_contain_text("ValidationException")
    expect(page.locator(".form-error")).to_contain_text("not a name!")
    page.fill("input[name=name]", "chart-job")
    page.click("button[name=create]")
    page.wait_for_url("**/jobs/chart-job")
    job = call(server, "GET", "/api/jobs/chart-job")["Job"]
    assert job["AlgorithmSpecification"]["MetricDefinitions"] == DEFINITIONS
    assert job["AlgorithmSpecification"]["ContainerEntrypoint"] == [PY, train.name]
    facts = page.locator("dl.facts")
    expect(facts).to_contain_text(f"Directory{train.parent}")
    expect(facts).to_contain_text(f"Command{shlex.join([PY, train.name])}")
    assert job["HyperParameters"] == {"lr": "0.1"}
    assert job["StoppingCondition"]["MaxRuntimeInSeconds"] == 600
    assert [(c["ChannelName"], c["DataSource"]["S3DataSource"]["S3Uri"]) for c in job["InputDataConfig"]] == [
        ("train", str(tmp_path / "data"))]
    expect(page.locator(".hyperparameters")).to_contain_text("lr")
    expect(page.locator("tr[data-definition=loss]")).to_contain_text(r"loss=(\S+)")
    # below the charts, folded: every definition matched, nothing to see until it is opened
    expect(page.locator("details.definitions-panel")).not_to_have_attribute("open", "")

    # the chart grows while the job runs
    chart = page.locator('section.chart[data-metric="loss"]')
    first = wait_points(page, "loss", 5)
    second = wait_points(page, "loss", first)
    assert second > first
    expect(page.locator(".log-lines[data-view=live] .line", has_text="step=3 loss=").first).to_be_visible()
    # the progress bar's redraws are one line, as a terminal shows them
    expect(page.locator(".line[data-progress][data-redraws]").first).to_contain_text("batch: 100%")
    # (a 50% redraw may be the last line for a moment, until its 100% comes; never one before another line)
    assert page.evaluate("() => [...document.querySelectorAll('.log-lines[data-view=live] .line')]"
                         ".filter(l => l.textContent.includes('batch: 50%') && l.nextElementSibling).length") == 0
    # the NaN the job printed is counted, and drawn as a marker
    expect(chart.locator(".chart-note")).to_contain_text("1 non-finite")

    # zoom: drag over the middle of the plot; a new request for that time range, a narrower x range
    wait_points(page, "loss", 20)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/metrics/loss/points" in r.url else None)
    chart.locator(".u-over").scroll_into_view_if_needed()  # mouse events land only inside the viewport
    box = chart.locator(".u-over").bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.2, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.4, y, steps=5)
    page.mouse.move(box["x"] + box["width"] * 0.6, y, steps=5)
    # the range the drag selects in: the live chart widens as the job prints, during a slow drag too
    before = float(chart.get_attribute("data-x-max")) - float(chart.get_attribute("data-x-min"))
    page.mouse.up()
    expect(chart).to_have_attribute("data-zoomed", "1")
    page.wait_for_function("() => window.trainmonCharts.loss.requests > 1 && "
                           "document.querySelector('section.chart[data-metric=loss]').dataset.loading === '0'")
    zoomed = [url for url in requests if "start=" in url and "end=" in url]
    assert zoomed, requests
    after = float(chart.get_attribute("data-x-max")) - float(chart.get_attribute("data-x-min"))
    assert after < before * 0.6, (before, after)
    asked_range = dict(re.findall(r"[?&](start|end)=(\d+)", zoomed[-1]))
    assert 0 < int(asked_range["end"]) - int(asked_range["start"]) < before * 1000

    # click a point (the zoomed view holds still while the job goes on): its log record opens
    point = page.evaluate("() => { const c = window.trainmonCharts.loss; for (let i = 0; i < c.points; i++) {"
                          " const p = c.pointAt(i); if (p && !p.kind && p.x > 0) return p; } return null; }")
    assert point is not None
    page.mouse.move(point["x"], point["y"])  # hovering shows the point's value in the legend
    expect(chart.locator(".u-legend .u-series").nth(1).locator(".u-value")).to_have_text(re.compile(r"^\d"))
    page.mouse.click(point["x"], point["y"])
    target = page.locator("#record-view .line.target")
    expect(target).to_have_attribute("data-record", str(point["record"]))
    record = call(server, "GET",
                  f"/api/jobs/chart-job/record?stream={point['stream']}&record={point['record']}&context=0")
    message = record["Records"][0]["Message"]
    assert message.startswith("step=") and "loss=" in message
    expect(target.locator(".msg")).to_have_text(message)
    assert page.locator("#record-view .line").count() > 1  # with the records around it

    # pan: shift-drag to the right shows earlier times, fetched anew
    x_min = float(chart.get_attribute("data-x-min"))
    asked = page.evaluate("() => window.trainmonCharts.loss.requests")
    chart.scroll_into_view_if_needed()
    chart.locator(".u-over").scroll_into_view_if_needed()  # mouse events land only inside the viewport
    box = chart.locator(".u-over").bounding_box()  # the record's opening scrolled the page
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.keyboard.down("Shift")
    page.mouse.move(box["x"] + box["width"] * 0.3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=5)
    page.mouse.up()
    page.keyboard.up("Shift")
    page.wait_for_function("([n]) => window.trainmonCharts.loss.requests > n && "
                           "document.querySelector('section.chart[data-metric=loss]').dataset.loading === '0'",
                           arg=[asked])
    assert float(chart.get_attribute("data-x-min")) < x_min
    assert chart.get_attribute("data-zoomed") == "1"

    # a statistic per period instead of the raw points
    chart.locator("select[name=stat]").select_option("Maximum")
    page.wait_for_function("() => window.trainmonCharts.loss.stat === 'Maximum'"
                           " && window.trainmonCharts.loss.points > 0")
    expect(chart.locator(".chart-note")).to_contain_text("Maximum per period")
    chart.locator("select[name=stat]").select_option("raw")

    # x as the step metric's value: a range of steps, not of epoch seconds
    chart.locator("button[name=reset]").click()
    expect(chart).to_have_attribute("data-zoomed", "0")
    chart.locator("select[name=x]").select_option("metric:step")
    expect(chart).to_have_attribute("data-x-mode", "metric:step")
    page.wait_for_function("() => { const c = window.trainmonCharts.loss; return c.x === 'metric:step' && c.points > 0"
                           " && c.xMax !== null && c.xMax < 100000; }")
    x_min, x_max = float(chart.get_attribute("data-x-min")), float(chart.get_attribute("data-x-max"))
    steps = call(server, "GET", "/api/jobs/chart-job/metrics/step/points")  # after: the job prints on
    assert 0 <= x_min < x_max <= max(steps["Values"]) + 2

    # log y and smoothing keep the chart drawn
    chart.locator("select[name=y]").select_option("log")
    chart.locator("input[name=smooth]").fill("0.6")
    page.wait_for_function("() => window.trainmonCharts.loss.log && window.trainmonCharts.loss.smooth === 0.6"
                           " && window.trainmonCharts.loss.points > 0")
    chart.locator("select[name=y]").select_option("linear")
    page.screenshot(path=str(SCREENSHOT), full_page=True)

    stop_file.touch()
    expect(page.locator(".job-head .status")).to_have_text("Completed")
    assert call(server, "GET", "/api/jobs/chart-job")["Job"]["TrainingJobStatus"] == "Completed"


def test_compare_two_jobs(server: ServerProcess, page: Any, script: Callable[[str], Path]) -> None:
    create_job(server, "compare-a", script(SHORT.format(count=30, scale=1)),
               hyperparameters={"lr": "0.1", "seed": "1"})
    create_job(server, "compare-b", script(SHORT.format(count=20, scale=2)),
               hyperparameters={"lr": "0.3", "seed": "1"})
    for name in ("compare-a", "compare-b"):
        wait_status(server, name, {"Completed"}, page)

    page.goto(server.url + "/")
    # sort by a header, filter by name
    expect(page.locator("tr[data-job]")).to_have_count(2)
    page.click("th[data-sort=name]")
    expect(page.locator("tr[data-job]").first).to_have_attribute("data-job", "compare-a")
    expect(page.locator("th[data-sort=name]")).to_have_attribute("aria-sort", "ascending")
    page.click("th[data-sort=name]")
    expect(page.locator("tr[data-job]").first).to_have_attribute("data-job", "compare-b")
    page.fill("input[name=filter-name]", "-b")
    expect(page.locator("tr[data-job]")).to_have_count(1)
    page.fill("input[name=filter-name]", "")
    expect(page.locator("tr[data-job]")).to_have_count(2)
    for name in ("compare-a", "compare-b"):
        row = page.locator(f'tr[data-job="{name}"]')
        expect(row.locator(".status")).to_have_text("Completed")
        row.locator("input[name=select]").check()
    page.click("button[name=compare]")
    page.wait_for_url(re.compile(r".*/compare\?jobs=compare-(a,compare-b|b,compare-a)$"))
    page.wait_for_function("() => { const c = window.trainmonCharts.compare; return c && c.series.length === 2"
                           " && c.series.every(s => s.points > 0); }")
    counts = {s["label"]: s["points"] for s in page.evaluate("() => window.trainmonCharts.compare.series")}
    assert counts == {"compare-a": 30, "compare-b": 20}
    # x is the time since each job's start: both series start near 0
    assert page.evaluate("() => window.trainmonCharts.compare.xMin") < 5
    # every metric as a small chart, a line per job in the chips' colours
    page.wait_for_function("() => ['loss', 'step'].every(m => { const c = window.trainmonCharts['compare:' + m];"
                           " return c && c.series.length === 2 && c.series.every(s => s.points > 0); })")
    small = {s["label"]: s["points"] for s in page.evaluate("() => window.trainmonCharts['compare:loss'].series")}
    assert small == {"compare-a": 30, "compare-b": 20}
    # the hyperparameters that differ (lr) against a metric's final value: a line and a point per job
    parallel = page.locator(".parallel svg")
    expect(parallel).to_have_attribute("data-lines", "2")
    expect(parallel).to_have_attribute("data-axes", "2")  # lr, and the metric
    expect(parallel.locator("polyline[data-job]")).to_have_count(2)
    expect(page.locator(".scatter svg circle[data-job]")).to_have_count(2)
    page.select_option("select[name=relation-metric]", "step")
    expect(page.locator(".parallel svg text.metric")).to_have_text("step")
    page.screenshot(path=str(SCREENSHOT.with_name("console-compare.png")), full_page=True)
    expect(page.locator('tr[data-hyperparameter="lr"]')).to_contain_text("0.3")
    assert page.locator('tr[data-hyperparameter="seed"]').count() == 0  # the same in both
    finals = call(server, "GET", "/api/jobs/compare-a")["Job"]["FinalMetricDataList"]
    loss_a = next(m["Value"] for m in finals if m["MetricName"] == "loss")
    assert loss_a == pytest.approx(1 / 30, abs=1e-5)
    expect(page.locator('.compare-finals tr[data-job="compare-a"]')).to_contain_text(str(loss_a))

    # the x axis as the step metric
    page.locator("section.chart select[name=x]").select_option("metric:step")
    page.wait_for_function("() => { const c = window.trainmonCharts.compare; return c.x === 'metric:step'"
                           " && c.series.every(s => s.points > 0) && c.xMax <= 29; }")

    # a job that is not there is named with its error, the others compared; the field for another
    # job offers the jobs not compared, and adds one
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url.removeprefix(server.url)))
    page.goto(server.url + "/compare?jobs=compare-a,no-such-job")
    expect(page.locator("p.error")).to_contain_text("no-such-job: ")
    expect(page.locator(".legend-jobs .job-chip")).to_have_count(1)
    page.wait_for_function("() => window.trainmonCharts.compare.points > 0")
    paths = [url.split("?")[0] for url in asked if url.startswith("/api/")]
    assert paths[0] == "/api/descriptions" and paths.count("/api/descriptions") == 1, asked  # both jobs in one
    assert "/api/jobs" not in paths, asked  # the jobs to add: not asked for until the field is used
    page.focus("input[name=add-job]")
    expect(page.locator("#compare-job-names option")).to_have_count(1)
    expect(page.locator("#compare-job-names option")).to_have_attribute("value", "compare-b")
    page.fill("input[name=add-job]", "compare-b")
    page.click("form.add-job button[type=submit]")
    page.wait_for_url(re.compile(r".*/compare\?jobs=compare-a,no-such-job,compare-b$"))
    expect(page.locator(".legend-jobs .job-chip")).to_have_count(2)


def test_compare_opens_on_the_metric_the_jobs_define_first(server: ServerProcess, page: Any,
                                                          script: Callable[[str], Path]) -> None:
    """The chart compares the metric the jobs define first (the one a user writes first, as the job
    page shows it first) of those every job has, not the first by name; the metric menu and the final
    metrics follow the same order, a metric only one job has after those every job has. A job's page
    lists its final metrics in its own definitions' order."""
    first = [{"Name": "train:loss", "Regex": r"loss=(\S+)"}, {"Name": "epoch", "Regex": r"step=(\d+)"}]
    create_job(server, "order-a", script(SHORT.format(count=5, scale=1)), definitions=first)
    create_job(server, "order-b", script(SHORT.format(count=5, scale=1)),
               definitions=[{"Name": "a:step", "Regex": r"step=(\d+)"}, *first])
    for name in ("order-a", "order-b"):
        wait_status(server, name, {"Completed"}, page)
    page.goto(server.url + "/compare?jobs=order-b,order-a")  # order-b's definitions first: a:step, only its own
    page.wait_for_function("() => { const c = window.trainmonCharts.compare; return c && c.points > 0; }")
    expect(page.locator(".compare-chart section.chart")).to_have_attribute("data-metric", "train:loss")
    assert page.locator("select[name=metric] option").evaluate_all("options => options.map(o => o.value)") == [
        "train:loss", "epoch", "a:step"]
    assert page.locator(".compare-finals th").all_inner_texts()[1:] == ["train:loss", "epoch", "a:step"]
    page.goto(server.url + "/jobs/order-b")
    expect(page.locator(".final-metrics tbody tr")).to_have_count(3)
    assert [row.split("\t")[0] for row in page.locator(".final-metrics tbody tr").all_inner_texts()] == [
        "a:step", "train:loss", "epoch"]


@pytest.mark.parametrize("path, held", [
    ("/jobs/gone-job", "/api/jobs/gone-job"),
    ("/compare?jobs=gone-a,gone-b", "/api/descriptions"),
    ("/tuning/gone-tuning", "/api/sagemaker/ListTrainingJobsForHyperParameterTuningJob"),
])
def test_a_page_left_while_it_loads_draws_nothing_over_the_next(server: ServerProcess, page: Any, path: str,
                                                                 held: str) -> None:
    """What a page waits for (here the error of a job that is not there) comes back after the user
    went on to another page: the page they went to stays as it is."""
    def is_held(url: str) -> bool:
        return url.removeprefix(server.url).startswith(held)

    waiting: list[Any] = []
    page.route(is_held, lambda route: waiting.append(route))
    with page.expect_request(lambda request: is_held(request.url)):
        page.goto(server.url + path)
    expect(page.locator("main")).to_contain_text("Loading")
    page.click(".topbar nav a[href='/alarms']")  # the console's own navigation: no page load
    expect(page.locator("main h1")).to_have_text("Alarms")
    assert len(waiting) == 1
    with page.expect_response(lambda response: is_held(response.url)):
        waiting[0].continue_()
    page.evaluate("() => new Promise((resolve) => setTimeout(resolve, 0))")  # the left page's handlers have run
    expect(page.locator("main h1")).to_have_text("Alarms")
    assert page.locator("main p.error:visible").count() == 0, page.locator("main").inner_text()
    assert page.url == server.url + "/alarms"


LATENCY = [{"Name": "latency", "Regex": r"latency=([0-9.]+)ms/step"},
           {"Name": "latency", "Regex": r"latency=([0-9.]+)s/step"}]


def test_definitions_sharing_a_name_show_their_warning_and_their_own_rows(
        server: ServerProcess, page: Any, script: Callable[[str], Path]) -> None:
    # the tester: each row has its own definition's values, and the warning is above them
    page.goto(server.url + "/new")
    page.fill("[data-row=metric] input[name=Name]", "latency")
    page.fill("[data-row=metric] input[name=Regex]", LATENCY[0]["Regex"])
    page.click("button[name=add-metric]")
    page.locator("[data-row=metric]").nth(1).locator("input[name=Name]").fill("latency")
    page.locator("[data-row=metric]").nth(1).locator("input[name=Regex]").fill(LATENCY[1]["Regex"])
    page.fill("textarea[name=sample]", "latency=250ms/step\nlatency=0.3s/step\nlatency=0.5s/step\n")
    rows = page.locator(".tester-def[data-name=latency]")
    expect(rows.nth(1).locator("[data-matches]")).to_have_attribute("data-matches", "2")
    expect(rows.nth(0).locator(".values")).to_have_text("250")
    expect(rows.nth(1).locator(".values")).to_have_text("0.3, 0.5")
    expect(page.locator(".definition-warnings")).to_contain_text(
        "MetricDefinitions[1] and MetricDefinitions[2] share the name 'latency'")

    # the job page: one chart for the metric, each definition's diagnostics in its own row
    create_job(server, "latency", script('print("latency=250ms/step")\nprint("latency=0.3s/step")\n'
                                         'print("latency=7ms/step")\nprint("latency=5ms/step latency=0.1s/step")\n'),
               definitions=LATENCY)
    wait_status(server, "latency", {"Completed"}, page)
    page.goto(server.url + "/jobs/latency")
    expect(page.locator(".definition-warnings")).to_contain_text("share the name 'latency'")
    definitions = page.locator("tr[data-definition=latency]")
    expect(definitions.nth(0)).to_contain_text(LATENCY[0]["Regex"])
    expect(definitions.nth(0).locator("td.num")).to_have_text("3")
    expect(definitions.nth(1)).to_contain_text(LATENCY[1]["Regex"])
    expect(definitions.nth(1).locator("td.num")).to_have_text("2")
    expect(page.locator("section.chart[data-metric=latency]")).to_have_count(1)
    expect(page.locator("section.chart[data-metric=latency]")).to_have_attribute("data-points", "5")


def test_stop_a_job(server: ServerProcess, page: Any, train: Path) -> None:
    create_job(server, "stop-me", train)
    # a jobs page open meanwhile sees the status change live
    watcher = page.context.new_page()
    watcher.goto(server.url + "/")
    expect(watcher.locator('tr[data-job="stop-me"] .status')).to_have_text("InProgress")

    page.goto(server.url + "/jobs/stop-me")
    expect(page.locator(".job-head .secondary")).to_have_text("Training")
    page.click("button[name=stop]")
    dialog = page.locator("dialog#stop-dialog")
    expect(dialog).to_be_visible()
    dialog.locator("button[name=cancel]").click()
    expect(dialog).to_be_hidden()
    assert call(server, "GET", "/api/jobs/stop-me")["Job"]["TrainingJobStatus"] == "InProgress"
    page.click("button[name=stop]")
    dialog.locator("button[name=confirm]").click()
    expect(dialog).to_be_hidden()
    assert call(server, "GET", "/api/jobs/stop-me")["Job"]["TrainingJobStatus"] in {"Stopping", "Stopped"}
    expect(page.locator(".job-head .status")).to_have_text(re.compile("Stopping|Stopped"))
    job = wait_status(server, "stop-me", {"Stopped"}, page)
    assert job["SecondaryStatus"] == "Stopped"
    expect(page.locator(".job-head .status")).to_have_text("Stopped")
    expect(page.locator("button[name=stop]")).to_have_count(0)
    expect(watcher.locator('tr[data-job="stop-me"] .status')).to_have_text("Stopped")


XSS_SCRIPT = """
print("<script>window.__xss=1</script>", flush=True)
print('<img src=x onerror="window.__xss=2">', flush=True)
for i in range(5):
    print(f"xss={i}", flush=True)
"""
XSS_METRIC = '<img src=x onerror="window.__xss=4">'
XSS_VALUE = "<script>window.__xss=3</script>"


def test_job_output_is_text_not_markup(server: ServerProcess, page: Any, script: Callable[[str], Path]) -> None:
    create_job(server, "xss", script(XSS_SCRIPT), definitions=[{"Name": XSS_METRIC, "Regex": r"xss=(\S+)"}],
               hyperparameters={"<b>name</b>": XSS_VALUE})
    wait_status(server, "xss", {"Completed"}, page)
    job = call(server, "GET", "/api/jobs/xss")
    assert job["Job"]["AlgorithmSpecification"]["MetricDefinitions"][0]["Name"] == XSS_METRIC

    # one window throughout (the console's own navigation), so any script that ran would have left its mark
    page.goto(server.url + "/")
    expect(page.locator('tr[data-job="xss"] .status')).to_have_text("Completed")
    expect(page.locator("table.jobs thead")).to_contain_text(XSS_METRIC)
    page.click('tr[data-job="xss"] a')
    page.wait_for_url("**/jobs/xss")
    log = page.locator(".log-lines[data-view=live]")
    expect(log).to_contain_text("<script>window.__xss=1</script>")
    expect(log).to_contain_text('<img src=x onerror="window.__xss=2">')
    expect(page.locator(".hyperparameters")).to_contain_text("<b>name</b>")
    expect(page.locator(".hyperparameters")).to_contain_text(XSS_VALUE)
    expect(page.locator("tr[data-definition]")).to_contain_text(XSS_METRIC)
    chart = page.locator("section.chart").first
    expect(chart.locator("h3")).to_have_text(XSS_METRIC)
    expect(chart.locator(".u-legend")).to_contain_text(XSS_METRIC)
    expect(chart).to_have_attribute("data-points", "5")
    # a search shows the same text
    page.fill("input[name=log-search]", "onerror")
    page.press("input[name=log-search]", "Enter")
    found = page.locator(".log-lines[data-view=search] .line").filter(has_text="onerror").first
    expect(found).to_contain_text('<img src=x onerror="window.__xss=2">')
    # its number opens it with the records around it, as text too
    found.locator(".ln").click()
    target = page.locator("#record-view .line.target")
    expect(target).to_contain_text('<img src=x onerror="window.__xss=2">')
    expect(target).to_have_attribute("data-record", found.get_attribute("data-record"))
    # and the compare page
    page.click("a.button:has-text('Compare')")
    page.wait_for_url("**/compare?jobs=xss")
    expect(page.locator("section.chart h3")).to_have_text(XSS_METRIC)
    assert page.evaluate("() => window.__xss") is None
    # the page's Content-Security-Policy would stop those scripts anyway: that no element was made
    # of the job's text is what shows it was set as text
    assert page.locator("main img, main script").count() == 0


def test_system_metrics_and_the_profile_are_charted(server: Any, page: Any) -> None:
    """A profiled job's page: a chart per system metric and per profiler metric, each holding the
    samples the API has."""
    call(server, "POST", "/api/jobs", {
        "TrainingJobName": "profiled",
        "AlgorithmSpecification": {"TrainingInputMode": "File",
                                   "ContainerEntrypoint": [PY, "-c", "import time; time.sleep(1.5)"]},
        "ProfilerConfig": {"ProfilingIntervalInMilliseconds": 100}})
    page.goto(f"{server.url}/jobs/profiled")
    wait_status(server, "profiled", {"Completed"}, page)
    page.reload()
    cpu = page.locator('section.chart[data-profile="job_cpu_pct"]')
    expect(cpu).to_have_attribute("data-loading", "0", timeout=WAIT_MS)
    samples = call(server, "GET", "/api/jobs/profiled/profile/algo-1/job_cpu_pct/points")["Count"]
    assert samples > 5 and int(cpu.get_attribute("data-points")) == samples
    assert page.locator("section.chart[data-system]").count() > 0
    # units as the CLI writes them: in each chart's title, its y ticks, and the profile's table
    expect(cpu.locator("h3 .unit")).to_have_text(" (%)")
    resident = page.locator('section.chart[data-system="ResidentMemory"]')
    expect(resident.locator("h3 .unit")).to_have_text(" (bytes)")
    row = page.locator("table.profile-table tr", has_text="job_cpu_pct").first
    expect(row).to_contain_text("%")
    memory = page.locator("table.profile-table tr", has_text="job_resident_bytes").first
    expect(memory).to_contain_text("MiB")
    assert page.evaluate('async () => { const d = await import("/static/dom.js"); return [d.fmtUnit(1.5 * 2 ** 30, '
                         '"Bytes"), d.fmtUnit(3.25 * 2 ** 20, "Bytes/Second"), d.fmtUnit(42.5, "Percent"), '
                         'd.fmtUnit(12, "Milliseconds"), d.fmtUnit(7, "Count")]; }') == [
        "1.5 GiB", "3.25 MiB/s", "42.5 %", "12 ms", "7"]
    page.locator("details.panel.profile").evaluate("d => d.open = true")
    page.screenshot(path=str(SCREENSHOT.with_name("console-system.png")), full_page=True)


NAN_LOSS = """
import time
for step in range(8):
    print(f"step={step} loss={'nan' if step == 5 else 1 / (step + 1)}", flush=True)
    time.sleep(0.02)
"""


def test_rules_and_alarms(server: ServerProcess, page: Any, script: Callable[[str], Path], tmp_path: Path) -> None:
    call(server, "POST", "/api/jobs", {
        "TrainingJobName": "ruled",
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": [PY, str(script(NAN_LOSS))],
                                   "MetricDefinitions": DEFINITIONS},
        "DebugRuleConfigurations": [
            {"RuleConfigurationName": "nan-watch", "RuleEvaluatorImage": "any",
             "RuleParameters": {"rule_to_invoke": "ExplodingTensor", "tensor_regex": "loss"}},
            {"RuleConfigurationName": "LossNotDecreasing", "RuleEvaluatorImage": "any",
             "RuleParameters": {"rule_to_invoke": "LossNotDecreasing", "num_steps": "100"}}],
    })
    wait_status(server, "ruled", {"Completed"}, page)
    page.goto(server.url + "/jobs/ruled")
    rules = page.locator(".rules")
    expect(rules.locator('tr[data-rule="nan-watch"] .rule-status')).to_have_text("IssuesFound")
    expect(rules.locator("details.rules-panel")).to_have_attribute("open", "")  # a rule found something: open
    expect(rules.locator("details.rules-panel summary")).to_contain_text("2 rules, 1 found issues")
    expect(rules.locator('tr[data-rule="nan-watch"]')).to_contain_text("ExplodingTensor")
    expect(rules.locator('tr[data-rule="LossNotDecreasing"] .rule-status')).to_have_text("NoIssuesFound")
    finding = rules.locator("table.rule-findings tbody tr")
    expect(finding).to_have_count(1)
    expect(finding).to_contain_text("nan-watch")
    expect(finding).to_contain_text("algo-1")
    expect(finding).to_contain_text("NaN")
    # a finding wraps between its words, never inside one
    assert finding.evaluate("tr => getComputedStyle(tr.querySelector('td:last-child')).overflowWrap") in (
        "break-word", "normal")
    rules.screenshot(path=str(SCREENSHOT.with_name("console-rules.png")))

    # an alarm on the job's loss, made with the form; missing data breaches, so the server's first
    # evaluation raises it (the job's points are long past) and runs its action
    raised = tmp_path / "raised.json"
    page.click(".topbar a[href='/alarms']")
    page.wait_for_url("**/alarms")
    expect(page.locator(".empty")).to_have_text("No alarms yet.")
    page.click("details.new-alarm summary")
    form = page.locator("form.alarm-form")
    form.locator("input[name=alarm-name]").fill("loss-high")
    form.locator("input[name=job]").fill("ruled")
    # the form offers what exists: the jobs, then the chosen job's metrics and hosts
    expect(page.locator("datalist#alarm-jobs option[value=ruled]")).to_have_count(1)
    expect(page.locator("datalist#alarm-metrics option[value=loss]")).to_have_count(1)
    expect(page.locator("datalist#alarm-hosts option[value=algo-1]")).to_have_count(1)
    form.locator("input[name=metric]").fill("loss")
    form.locator("input[name=threshold]").fill("not a number")
    form.locator("button[name=create-alarm]").click()
    expect(form.locator(".form-error")).to_contain_text("Threshold")  # the operation's own error, shown
    form.locator("input[name=threshold]").fill("0.5")
    form.locator("select[name=treat-missing-data]").select_option("breaching")
    keep = f"import sys; open({str(raised)!r}, 'wb').write(sys.stdin.buffer.read())"
    form.locator("input[name=alarm-action]").fill(f"exec:{shlex.quote(PY)} -c {shlex.quote(keep)}")
    form.locator("button[name=create-alarm]").click()
    row = page.locator('tr[data-alarm="loss-high"]')
    expect(row).to_contain_text("Maximum > 0.5 for 1 of 1 period of 60 s")
    expect(row).to_contain_text("TrainingJobName=ruled")
    expect(row.locator(".alarm-state")).to_have_text("ALARM")
    row.locator("a").click()
    page.wait_for_url("**/alarms/loss-high")
    history = page.locator("table.alarm-history")
    expect(history).to_contain_text("Alarm updated from INSUFFICIENT_DATA to ALARM")
    expect(history).to_contain_text("Successfully executed action exec:")
    assert json.loads(raised.read_text())["NewStateValue"] == "ALARM"
    # the metric over the alarm's recent windows, the threshold, and the change to ALARM marked
    graph = page.locator(".alarm-graph")
    expect(graph).to_have_attribute("data-threshold", "0.5")
    expect(graph).to_have_attribute("data-changes", "1")
    expect(graph.locator("canvas")).to_be_visible()
    assert int(graph.get_attribute("data-points") or 0) >= 1  # the job's loss, a Maximum per minute
    page.screenshot(path=str(SCREENSHOT.with_name("console-alarm.png")), full_page=True)
    page.click("button[name=toggle-actions]")
    expect(page.locator("button[name=toggle-actions]")).to_have_text("Enable actions")
    assert call(server, "POST", "/api/cloudwatch/DescribeAlarms", {})["MetricAlarms"][0]["ActionsEnabled"] is False
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[name=delete]")
    page.wait_for_url(re.compile(r".*/alarms$"))
    expect(page.locator(".empty")).to_have_text("No alarms yet.")


def test_a_job_of_your_own_algorithm_container(server: ServerProcess, page: Any, tmp_path: Path) -> None:
    """The new-job form's image choice: the images on this machine offered, the job run as a container."""
    from . import containers

    image = containers.algo_image()
    page.goto(server.url + "/new")
    page.select_option("select[name=run-kind]", "image")
    expect(page.locator(f"#local-images option[value='{image}']")).to_have_count(1)
    page.fill("input[name=name]", "console-image")
    page.fill("input[name=command]", image)
    page.fill("[data-row=metric] input[name=Name]", "train:error")
    page.fill("[data-row=metric] input[name=Regex]", "Train_error=(.*?);")
    page.click("button[name=add-hyperparameter]")
    page.fill("[data-row=hyperparameter] input[name=key]", "epochs")
    page.fill("[data-row=hyperparameter] input[name=value]", "2")
    page.click("button[name=create]")
    page.wait_for_url("**/jobs/console-image")
    job = call(server, "GET", "/api/jobs/console-image")["Job"]
    assert job["AlgorithmSpecification"]["TrainingImage"] == image
    assert "ContainerEntrypoint" not in job["AlgorithmSpecification"]
    expect(page.locator(".log-lines .line", has_text="epoch 1 Train_error=0.5000;").first).to_be_visible(
        timeout=60_000)
    expect(page.locator("dl.facts")).to_contain_text(image)  # what the job runs in


def edit_team_tag(page: Any, server: ServerProcess, job: str, value: str) -> tuple[Any, str]:
    """Edit the job's team tag in its cell of the runs table; the job has it (ListTags): the cell
    and the job's ARN."""
    cell = page.locator(f'tr[data-job="{job}"] td[data-property="Tags.team"]')
    cell.locator("button[name=edit-tag]").click()
    cell.locator("input[name=tag-value]").fill(value)
    cell.locator("input[name=tag-value]").press("Enter")
    expect(cell).to_contain_text(value)
    arn = f"arn:aws:sagemaker:local:000000000000:training-job/{job}"
    assert call(server, "POST", "/api/sagemaker/ListTags", {"ResourceArn": arn})["Tags"] == [
        {"Key": "team", "Value": value}]
    return cell, arn


def test_the_runs_table_searches_chooses_columns_and_keeps_the_search_in_its_address(
        server: ServerProcess, page: Any, store: Any) -> None:
    """200 jobs with hyperparameters, tags and final losses: the text form narrows them as Search
    does, the address carries it (a page opened there shows the same), a clicked tag narrows
    further, columns are chosen and remembered, a metric's header sorts every job by the server."""
    from .test_search import add_jobs, holds, ordered

    jobs = add_jobs(store, 200)
    keep = [{"Name": "HyperParameters.optimizer", "Operator": "Equals", "Value": "adam"},
            {"Name": "Metrics.loss", "Operator": "LessThan", "Value": "1"}]
    wanted = ordered(jobs, [name for name, job in jobs.items() if all(holds(job, item) for item in keep)],
                     "Metrics.loss", False)
    assert 10 < len(wanted) < 100
    page.goto(server.url + "/")
    expect(page.locator("tr[data-job]")).to_have_count(100)  # a page of the newest
    page.evaluate("() => window.scrollTo(0, document.body.scrollHeight)")  # the next page comes near the end
    expect(page.locator("tr[data-job]")).to_have_count(200)
    assert len(set(page.locator("tr[data-job]").evaluate_all("rows => rows.map(r => r.dataset.job)"))) == 200
    page.evaluate("() => window.scrollTo(0, 0)")
    page.fill("input[name=where]", "HyperParameters.optimizer = adam and Metrics.loss < 1")
    expect(page.locator(".toolbar .count")).to_have_text(f"{len(wanted)} of {len(wanted)} matching jobs")
    page.locator('th[data-sort="metric:loss"]').click()  # a new column sorts ascending first
    expect(page.locator('th[data-sort="metric:loss"]')).to_have_attribute("aria-sort", "ascending")
    rows = page.locator("tr[data-job]")
    expect(rows).to_have_count(len(wanted))
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.job)") == wanted
    assert "where=HyperParameters.optimizer" in page.url and "sort=metric%3Aloss" in page.url, page.url
    # the address opens the same view
    page.goto(page.url)
    expect(page.locator("input[name=where]")).to_have_value("HyperParameters.optimizer = adam and Metrics.loss < 1")
    expect(rows).to_have_count(len(wanted))
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.job)") == wanted
    # a tag's cell narrows the search to its value
    team = page.locator('tr[data-job] td[data-property="Tags.team"] button[name=narrow]').first
    value = team.inner_text()
    team.click()
    expect(page.locator("input[name=where]")).to_have_value(
        f"HyperParameters.optimizer = adam and Metrics.loss < 1 and Tags.team = {value}")
    narrowed = [n for n in wanted if any(t["Value"] == value for t in jobs[n]["doc"]["Tags"])]
    expect(rows).to_have_count(len(narrowed))
    # columns: hyperparameters that differ are shown; one unchosen stays hidden after a reload
    expect(page.locator('th[data-sort="hyper:lr"]')).to_be_visible()
    page.locator("details.columns > summary").click()
    page.locator('details.columns input[value="hyper:lr"]').uncheck()
    expect(page.locator('th[data-sort="hyper:lr"]')).to_have_count(0)
    page.reload()
    expect(rows).to_have_count(len(narrowed))
    expect(page.locator('th[data-sort="hyper:lr"]')).to_have_count(0)
    expect(page.locator('th[data-sort="hyper:batch"]')).to_have_count(1)  # (it differs)
    page.fill("input[name=where]", "Metrics.loss < 1")  # the tag differs again: its column comes back
    expect(page.locator('th[data-sort="tag:team"]')).to_have_count(1)
    expect(page.locator('th[data-sort="hyper:lr"]')).to_have_count(0)
    page.locator("details.columns > summary").click()
    page.locator("button[name=columns-default]").click()
    expect(page.locator('th[data-sort="hyper:lr"]')).to_have_count(1)
    # a metric's least and greatest value as columns too (each job printed 9.0, then its final loss)
    page.locator("details.columns").evaluate("d => d.open = true")
    page.locator('details.columns input[value="min:loss"]').check()
    page.locator('details.columns input[value="max:loss"]').check()
    expect(page.locator('th[data-sort="max:loss"]')).to_contain_text("loss (max)")
    name = page.locator("tr[data-job]").first.get_attribute("data-job")
    expect(page.locator(f'tr[data-job="{name}"] td[data-max=loss]')).to_have_text("9")
    expect(page.locator(f'tr[data-job="{name}"] td[data-min=loss]')).to_have_text(f"{jobs[name]['loss']:g}")
    page.locator("details.columns").evaluate("d => d.open = false")
    # grouped by team: a header per team, in the order of each group's best, the best first in each
    page.fill("input[name=where]", "HyperParameters.optimizer = adam and Metrics.loss < 1")
    expect(rows).to_have_count(len(wanted))
    page.select_option("select[name=group-by]", "tag:team")
    teams = list(dict.fromkeys(next((t["Value"] for t in jobs[n]["doc"]["Tags"]), "(none)") for n in wanted))
    headers = page.locator("tr.group")
    expect(headers).to_have_count(len(teams))
    assert headers.evaluate_all("trs => trs.map(t => t.dataset.group)") == teams
    first = [n for n in wanted if next((t["Value"] for t in jobs[n]["doc"]["Tags"]), "(none)") == teams[0]][0]
    expect(headers.first).to_contain_text(f"best loss {jobs[first]['loss']:g} ({first})")
    page.screenshot(path=str(SCREENSHOT.with_name("console-runs-grouped.png")))
    page.select_option("select[name=group-by]", "")
    expect(headers).to_have_count(0)
    # a tag edited in its cell is the job's (AddTags), and emptied is gone (DeleteTags)
    cell, arn = edit_team_tag(page, server, wanted[0], "platform")
    cell.locator("button[name=edit-tag]").click()
    cell.locator("input[name=tag-value]").fill("")
    cell.locator("input[name=tag-value]").press("Enter")
    expect(cell).to_contain_text("–")
    assert call(server, "POST", "/api/sagemaker/ListTags", {"ResourceArn": arn})["Tags"] == []
    # a search that cannot be read says where, and keeps the rows
    page.fill("input[name=where]", "Metrics.loss <")
    expect(page.locator("p.error")).to_contain_text("expected a value at the end")
    expect(page.locator("input[name=where]")).to_have_class(re.compile("invalid"))
    for width in (1400, 900):
        page.set_viewport_size({"width": width, "height": 900})
        page.fill("input[name=where]", "HyperParameters.optimizer = adam and Metrics.loss < 1")
        expect(rows).to_have_count(len(wanted))
        page.screenshot(path=str(SCREENSHOT.with_name(f"console-runs-{width}.png")))
        # no header breaks inside a word: each line of a header's text ends where its label allows
        broken = page.locator("table.jobs th").evaluate_all("""ths => ths.filter(th => {
            const range = document.createRange(); range.selectNodeContents(th);
            const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
            return lines.size > 1 && !th.querySelector('wbr') && !/\\s/.test(th.textContent.trim());
        }).map(th => th.textContent)""")
        assert broken == []


# The rows of the runs table in the view: each row's job, its place in the table (aria-rowindex:
# 2 for the first job) and its top and bottom; whether they cover the table's part of the view
# without a gap (no spacer in sight); every drawn row's job and place; the headers' widths.
IN_VIEW = """() => {
  const body = document.querySelector("table.jobs tbody"), box = body.getBoundingClientRect();
  const drawn = [...body.querySelectorAll("tr[data-job]")];
  const seen = drawn.map((tr) => [tr.dataset.job, Number(tr.ariaRowIndex), tr.getBoundingClientRect()])
    .filter(([, , r]) => r.bottom > 0 && r.top < innerHeight);
  const gapless = seen.every(([, , r], i) => i === 0 || Math.abs(r.top - seen[i - 1][2].bottom) < 1.5) &&
    seen.length > 0 && seen[0][2].top <= Math.max(0, box.top) + 1.5 &&
    seen[seen.length - 1][2].bottom >= Math.min(innerHeight, box.bottom) - 1.5;
  return {
    seen: seen.map(([job, place, r]) => [job, place, r.top - box.top, r.height]),
    gapless,
    drawn: drawn.map((tr) => [tr.dataset.job, Number(tr.ariaRowIndex)]),
    widths: [...document.querySelectorAll("table.jobs thead th")].map((th) => th.getBoundingClientRect().width),
  };
}"""
FRAMES = "() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"


def test_a_view_taller_than_a_page_of_runs_loads_pages_until_it_is_filled(server: ServerProcess, page: Any,
                                                                         store: Any) -> None:
    """In a view taller than several pages of rows, the table loads the next page as long as its end
    is near, without a scroll: an observer tells only of changes, and the end that stayed in view
    when a page was drawn left the table at two pages of four."""
    from .test_search import add_jobs

    add_jobs(store, 350, seed=3)
    page.set_viewport_size({"width": 1400, "height": 14000})
    page.goto(server.url + "/")
    expect(page.locator("table.jobs")).to_have_attribute("data-rows", "350")
    assert page.locator("button[name=more]").is_hidden()  # the last page: nothing more to ask for


def test_the_runs_table_of_hundreds_draws_the_rows_in_view_in_order_and_keeps_its_columns(
        server: ServerProcess, page: Any, store: Any) -> None:
    """600 jobs, sorted by their final loss: scrolling loads every page, the table draws only the rows
    near the view (spacers keep the page's height), the rows in view are the right ones in the sorted
    order wherever it is scrolled to, the last rows show at the end, the columns keep their widths,
    and a row reached by scrolling is selected for Compare and has its tag edited in place."""
    from .test_search import add_jobs, ordered

    jobs = add_jobs(store, 600, seed=11)
    expected = ordered(jobs, list(jobs), "Metrics.loss", False)
    table = page.locator("table.jobs")
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(server.url + "/?sort=metric%3Aloss&order=ascending")
    expect(table).to_have_attribute("data-rows", "100")
    for loaded in range(100, 600, 100):  # a page at a time, as scrolling near the end asks for it
        page.evaluate("() => window.scrollTo(0, document.body.scrollHeight)")
        expect(table).to_have_attribute("data-rows", str(loaded + 100))
    page.evaluate("() => window.scrollTo(0, 0)")
    page.evaluate(FRAMES)

    def view() -> dict[str, Any]:
        """The view once drawn: its rows are the jobs at their places in the order, gaplessly, each
        where the rows above it put it; every drawn row is at its place."""
        page.evaluate(FRAMES)
        now: dict[str, Any] = page.evaluate(IN_VIEW)
        assert now["gapless"], now["seen"]
        assert now["seen"] and all(expected[place - 2] == job for job, place, _, _ in now["seen"]), now["seen"]
        places = [place for _, place, _, _ in now["seen"]]
        assert places == list(range(places[0], places[0] + len(places)))
        height = now["seen"][0][3]
        for _, place, top, _ in now["seen"]:  # (every row is as tall: the spacers hold the rows not drawn)
            assert abs(top - (place - 2) * height) < 2, (place, top, height)
        assert [job for job, _ in now["drawn"]] == [expected[place - 2] for _, place in now["drawn"]]
        return now

    top = view()
    assert top["seen"][0][:2] == [expected[0], 2]
    assert len(top["drawn"]) < 150, len(top["drawn"])  # near the view only, not 600
    widths = top["widths"]
    # through the whole table a screen at a time, then to its end: the last rows, the same widths
    height = page.evaluate("() => document.scrollingElement.scrollHeight")
    for y in range(0, height, 850):
        page.evaluate("(y) => window.scrollTo(0, y)", y)
        now = view()
        assert now["widths"] == widths, (y, now["widths"], widths)
    page.evaluate("() => window.scrollTo(0, document.body.scrollHeight)")
    end = view()
    assert end["seen"][-1][:2] == [expected[-1], 601]
    assert end["widths"] == widths
    expect(page.locator(f'tr[data-job="{expected[-1]}"]')).to_be_in_viewport()
    # the middle: a row reached by scrolling is selected, and keeps its tick when drawn again
    page.evaluate("() => window.scrollTo(0, document.scrollingElement.scrollHeight / 2 - innerHeight / 2)")
    middle = view()
    picked = middle["seen"][len(middle["seen"]) // 2][0]
    assert expected.index(picked) > 200
    page.locator(f'tr[data-job="{picked}"] input[name=select]').check()
    expect(page.locator("button[name=compare]")).to_have_text("Compare (1)")
    page.screenshot(path=str(SCREENSHOT.with_name("console-runs-scrolled-1400.png")))
    # a tag edited in place there (AddTags)
    tagged = next(job for job, _, _, _ in middle["seen"] if jobs[job]["doc"]["Tags"] and job != picked)
    cell, _ = edit_team_tag(page, server, tagged, "platform")
    widths = view()["widths"]  # (the team column as wide as its new widest value, "platform")
    page.evaluate("() => window.scrollTo(0, 0)")
    assert view()["widths"] == widths
    expect(page.locator(f'tr[data-job="{picked}"]')).to_have_count(0)  # (no longer drawn)
    page.evaluate("() => window.scrollTo(0, document.scrollingElement.scrollHeight / 2 - innerHeight / 2)")
    assert view()["widths"] == widths
    expect(page.locator(f'tr[data-job="{picked}"] input[name=select]')).to_be_checked()
    expect(cell).to_contain_text("platform")
    # the foot that keeps the widths holds nothing to find, follow or click
    assert page.locator("tfoot.sizer a, tfoot.sizer [name], tfoot.sizer [data-job]").count() == 0
    # at 900 px: the rows measured again, the view still right
    page.set_viewport_size({"width": 900, "height": 900})
    page.wait_for_function("() => document.querySelector('table.jobs thead th').getBoundingClientRect().width > 0")
    page.evaluate("() => window.scrollTo(0, document.scrollingElement.scrollHeight / 2 - innerHeight / 2)")
    narrow_view = view()
    page.screenshot(path=str(SCREENSHOT.with_name("console-runs-scrolled-900.png")))
    page.evaluate("(y) => window.scrollBy(0, y)", 5_000)
    assert view()["widths"] == narrow_view["widths"]
    # and Compare takes the job selected far down the table with one selected near its top
    page.evaluate("() => window.scrollTo(0, 0)")
    view()
    page.locator(f'tr[data-job="{expected[0]}"] input[name=select]').check()
    expect(page.locator("button[name=compare]")).to_have_text("Compare (2)")
    page.locator("button[name=compare]").click()
    page.wait_for_url("**/compare?jobs=*")
    assert set(page.url.split("jobs=")[1].split(",")) == {picked, expected[0]}


def test_the_tester_numbers_rows_as_the_api_hints_near_misses_and_warns_of_a_definition_that_matched_nothing(
        server: ServerProcess, page: Any, train: Path) -> None:
    page.goto(server.url + "/new")
    page.fill("input[name=name]", "tested-job")
    page.fill("input[name=command]", f"{shlex.quote(PY)} {shlex.quote(str(train))}")
    rows = page.locator("[data-row=metric]")
    rows.nth(0).locator("input[name=Name]").fill("loss")
    rows.nth(0).locator("input[name=Regex]").fill(r"loss=(\S+)")
    for name, regex in (("", ""), ("bad", "x=("), ("acc", r"acc=(\S+)"), ("f1", r"f1=(\S+)")):
        page.click("button[name=add-metric]")
        rows.last.locator("input[name=Name]").fill(name)
        rows.last.locator("input[name=Regex]").fill(regex)
    page.fill("textarea[name=sample]", "loss=0.5 Acc=0.9\nloss=0.4 f1:0.7\n")
    # the empty row is skipped, as the API numbers what it is given: loss 1, bad 2, acc 3, f1 4
    bad = page.locator(".tester-problem[data-position='2']")
    expect(bad).to_contain_text("MetricDefinitions[2] ('bad'): regex does not compile")
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.position)") == ["1", "", "2", "3", "4"]
    expect(rows.nth(2)).to_have_class(re.compile("invalid"))
    expect(page.locator(".tester-def[data-name=loss] [data-matches]")).to_have_attribute("data-matches", "2")
    expect(page.locator(".tester-def[data-name=acc] .hint")).to_contain_text("'Acc=', 'acc=' in another case")
    expect(page.locator(".tester-def[data-name=f1] .hint")).to_contain_text("'f1:' where the regex needs 'f1='")
    page.screenshot(path=str(SCREENSHOT.with_name("console-tester.png")), full_page=True)
    # the bad row removed: the others are numbered again, and none is marked
    rows.nth(2).locator("button.remove").click()
    expect(page.locator(".tester-def[data-name=acc]")).to_have_attribute("data-position", "2")
    expect(page.locator("[data-row=metric].invalid")).to_have_count(0)
    # acc and f1 matched nothing in the sample: said once, then a second click creates the job
    page.click("button[name=create]")
    expect(page.locator(".form-error")).to_contain_text("acc, f1 matched nothing in the sample")
    page.click("button[name=create]")
    page.wait_for_url("**/jobs/tested-job")
    page.screenshot(path=str(SCREENSHOT.with_name("console-tested-job.png")))


def test_a_jobs_artifacts_are_browsed_and_downloaded(server: ServerProcess, page: Any,
                                                    job_with_artifacts: tuple[str, Path, Path, Path]) -> None:
    name, _data, _kept, out = job_with_artifacts
    page.goto(f"{server.url}/jobs/{name}")
    page.locator("details.artifacts > summary").click()
    model = page.locator('tr[data-artifact="model.tar.gz"]')
    expect(model).to_contain_text("Model")
    expect(page.locator('tr[data-artifact="channels/train/sub/b.csv"]')).to_contain_text("Channel train")
    expect(page.locator('tr[data-artifact="checkpoints/epoch-1.ckpt"]')).to_contain_text("3 B")
    with page.expect_download() as downloading:
        model.locator("a[name=download]").click()
    saved = downloading.value.path()
    assert Path(saved).read_bytes() == next(out.rglob("model.tar.gz")).read_bytes()
    assert downloading.value.suggested_filename == "model.tar.gz"
    model.locator("button[name=browse]").click()
    expect(model.locator("li[data-member]")).to_have_count(4)
    with page.expect_download() as member:
        model.locator('li[data-member="extra/note.txt"] a').click()
    assert Path(member.value.path()).read_bytes() == b"n" and member.value.suggested_filename == "note.txt"
    # the log: each record's time on demand, and the whole of it as a download
    expect(page.locator(".log-box .line .ts").first).to_be_hidden()
    page.check("input[name=log-times]")
    expect(page.locator(".log-box .line .ts").first).to_have_text(re.compile(r"\d\d:\d\d:\d\d"))
    with page.expect_download() as log:
        page.click("a[name=log-download]")
    assert Path(log.value.path()).read_text() == "read 3 training files\n"
    page.screenshot(path=str(SCREENSHOT.with_name("console-artifacts.png")), full_page=True)


def test_train_and_validation_metrics_share_a_chart(server: ServerProcess, page: Any,
                                                    script: Callable[[str], Path]) -> None:
    train = script("""
        for epoch in range(1, 13):
            print(f"epoch {epoch} train_loss={1 / epoch:.4f} val_loss={1.2 / epoch:.4f} acc={epoch / 12:.3f}")
            if epoch % 3 == 0:
                print(f"validation:error={0.5 / epoch:.4f} train:error={0.4 / epoch:.4f}")
        """)
    definitions = [{"Name": "train_loss", "Regex": r"train_loss=(\S+)"}, {"Name": "val_loss", "Regex": r"val_loss=(\S+)"},
                   {"Name": "acc", "Regex": r"acc=(\S+)"}, {"Name": "train:error", "Regex": r"train:error=(\S+)"},
                   {"Name": "validation:error", "Regex": r"validation:error=(\S+)"}]
    create_job(server, "paired", train, definitions=definitions)
    wait_status(server, "paired", {"Completed"}, page)
    page.goto(server.url + "/jobs/paired")
    page.wait_for_function("() => ['overlay:loss', 'overlay:error'].every(k => { const c = window.trainmonCharts[k];"
                           " return c && c.series.length === 2 && c.series.every(s => s.points > 0); })")
    counts = {s["label"]: s["points"] for s in page.evaluate("() => window.trainmonCharts['overlay:loss'].series")}
    assert counts == {"train_loss": 12, "val_loss": 12}
    counts = {s["label"]: s["points"] for s in page.evaluate("() => window.trainmonCharts['overlay:error'].series")}
    assert counts == {"train:error": 4, "validation:error": 4}
    # the pairs come first, then a chart per metric (acc pairs with nothing)
    order = page.locator(".charts > section.chart").evaluate_all(
        "els => els.map(e => e.dataset.overlay ? 'overlay:' + e.dataset.overlay : e.dataset.metric)")
    assert order[:2] == ["overlay:loss", "overlay:error"] and "acc" in order and "overlay:acc" not in order
    base = page.evaluate('async (names) => { const m = await import("/static/job.js");'
                         ' return names.map(n => m.metricBase(n)); }',
                         ["train:loss", "validation:loss", "val_loss", "loss/valid", "epoch:progress", "trainer:x"])
    assert base == ["loss", "loss", "loss", "loss", "epoch:progress", "trainer:x"]
    page.locator('section.chart[data-overlay="loss"]').screenshot(path=str(SCREENSHOT.with_name("console-pair.png")))
    # any metrics chosen freely go on one chart too, which can be closed
    page.select_option("select[name=overlay-metrics]", ["acc", "train_loss"])
    page.click("button[name=overlay]")
    page.wait_for_function("() => { const c = window.trainmonCharts['overlay:train_loss+acc'];"
                           " return c && c.series.length === 2 && c.series.every(s => s.points === 12); }")
    chosen = page.locator('section.chart[data-overlay="train_loss+acc"]')
    page.screenshot(path=str(SCREENSHOT.with_name("console-overlays.png")))
    chosen.locator("button[name=close-overlay]").click()
    expect(chosen).to_have_count(0)


def test_a_folded_panel_follows_what_it_shows_until_the_user_opens_or_closes_it(server: ServerProcess,
                                                                               page: Any) -> None:
    """A panel drawn open for something to see folds again, redrawn, once that is gone (the browser's
    toggle event, fired when the page opens it, is no choice of the user's); once the user closes or
    opens it by its summary, redraws keep that."""
    page.goto(server.url + "/alarms")
    states = page.evaluate("""async () => {
        const {foldedPanel} = await import("/static/dom.js");
        const choices = {};
        const draw = async (open) => {
            const panel = foldedPanel(choices, "p", open, {class: "panel"}, "Title", "body");
            document.body.append(panel);
            await new Promise((done) => setTimeout(done, 50));  // (the toggle event comes after)
            panel.remove();
            return panel.open;
        };
        const seen = [await draw(true), await draw(false)];
        const panel = foldedPanel(choices, "p", true, {}, "Title", "body");
        document.body.append(panel);
        await new Promise((done) => setTimeout(done, 50));
        panel.querySelector("summary").click();  // the user closes it
        await new Promise((done) => setTimeout(done, 50));
        panel.remove();
        seen.push(await draw(true), await draw(false));
        return seen;
    }""")
    assert states == [True, False, False, False]
