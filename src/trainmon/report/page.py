"""The report's HTML (pure): one self-contained page, its sections in the order of SageMaker's report.

The page loads nothing: its style is inline, its charts are inline SVG, it has no script, and its
Content-Security-Policy forbids any request, so it opens the same offline, from a mail attachment
or from an object store. Every piece of text from the job (names, messages, parameters) is escaped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

import numpy as np

from .. import __version__
from . import analysis, views
from .advice import advice
from .charts import PLOT_W, Line, chart
from .gather import TENSOR_REDUCTIONS, JobData, RuleView
from .sources import PROFILE, HostReadings
from .text import UNIT_NAMES, clock, percent, quantity, seconds

SECTIONS = (("summary", "Training job summary"), ("system-usage", "System usage statistics"),
            ("rules", "Rules summary"), ("step-durations", "Step durations"),
            ("rule-charts", "Rules that found issues"), ("gpu-utilization", "GPU utilization"),
            ("bottlenecks", "CPU and I/O bottlenecks"), ("gpu-memory", "GPU memory"), ("metrics", "Metrics"))
NO_GPU = ("no GPU readings: no NVIDIA GPU was visible to the job (CUDA_VISIBLE_DEVICES), or NVML is not installed "
          "(pip install 'trainmon[gpu]')")


def page(data: JobData) -> str:
    """The page. NumPy's warnings are silenced here: hostile readings (overflowing sums, infinities
    that meet) make NaN or an edge of a chart, never a warning on the job's stderr."""
    with np.errstate(all="ignore"):
        return _page(data)


def _page(data: JobData) -> str:
    axis = _axis(data)
    body = [_header(data), _contents(),
            _section("summary", _summary(data)), _section("system-usage", _usage(data)),
            _section("rules", _rules(data)), _section("step-durations", _steps(data, axis)),
            _section("rule-charts", _rule_charts(data, axis)), _section("gpu-utilization", _gpu(data, axis, views.GPU)),
            _section("bottlenecks", _bottlenecks(data, axis)), _section("gpu-memory", _gpu(data, axis, views.GPU_MEMORY)),
            _section("metrics", _metric_charts(data, axis))]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>Profiler report: {escape(data.name)}</title><style>{STYLE}</style></head>"
            f"<body>{''.join(body)}</body></html>\n")


Axis = tuple[int, int]


def _axis(data: JobData) -> Axis:
    """The time axis every chart shares: the job's start to its end (or now), widened to any reading outside it."""
    start, end = int(data.phases.start_s * 1000), int(data.phases.end_s * 1000)
    stamps = [columns[0] for readings in data.readings.values() for columns in readings.metrics.values()]
    stamps += [columns[0] for per_host in data.metrics.values() for columns in per_host.values()]
    stamps = [s for s in stamps if len(s)]
    if stamps:
        start, end = min(start, *(int(s[0]) for s in stamps)), max(end, *(int(s[-1]) for s in stamps))
    return start, max(end, start + 1000)


def _section(key: str, content: str) -> str:
    title = dict(SECTIONS)[key]
    return f'<section id="{key}"><h2>{escape(title)}</h2>{content}</section>'


def _contents() -> str:
    links = "".join(f'<a href="#{key}">{escape(title)}</a>' for key, title in SECTIONS)
    return f'<nav class="contents">{links}</nav>'


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _note(text: str, cls: str = "note") -> str:
    return f'<p class="{cls}">{escape(text)}</p>'


# -- header and summary ---------------------------------------------------------------------------


def _header(data: JobData) -> str:
    profiled = (f"profiled every {data.interval_ms} ms" if data.interval_ms is not None else "not profiled")
    status = data.status if data.secondary in (data.status, "") else f"{data.status} ({data.secondary})"
    parts = [f"<header><h1>Profiler report: {escape(data.name)}</h1>",
             f'<p class="meta">Status <b id="status">{escape(status)}</b>; {escape(profiled)}; '
             f'{len(data.hosts)} host{"s" if len(data.hosts) != 1 else ""}; written {escape(clock(data.generated_s))} '
             f"by trainmon {escape(__version__)}.</p>"]
    if data.running:
        parts.append(_note(f"This job is still running ({data.secondary}): the report shows what was stored until "
                           f"{clock(data.generated_s)}, and its end is that moment. Profiler data arrives a minute at "
                           f"a time (a file per host per minute). Run `trainmon report {data.name}` again for the "
                           "rest.", "banner running"))
    if data.failure:
        parts.append(_note(f"The job failed: {data.failure}", "banner failed"))
    if data.profile_error:
        parts.append(_note(data.profile_error, "banner failed"))
    if data.left_out:
        parts.append(_note("This report was cut short to stay within what a report reads (docs/report.md, "
                           "What it costs); left out: " + "; ".join(data.left_out) + ".", "banner cut"))
    return "".join(parts) + "</header>"


def _summary(data: JobData) -> str:
    p = data.phases
    end = f"{clock(p.end_s)} (now: still running)" if p.running else clock(p.end_s)
    rows = [("Start time", clock(p.start_s), ""), ("End time", end, ""),
            ("Job duration", seconds(p.duration_s), "100%"),
            ("Training loop start", clock(p.first_s), ""), ("Training loop end", clock(p.last_s), ""),
            ("Initialization", seconds(p.initialization_s), percent(p.share(p.initialization_s))),
            ("Training loop", seconds(p.loop_s), percent(p.share(p.loop_s))),
            ("Finalization", seconds(p.finalization_s) if not p.running else "not yet",
             percent(p.share(p.finalization_s)))]
    if data.step_metric is not None:
        basis = (f"The training loop runs from the first to the last point of the step metric "
                 f"{data.step_metric!r}; the job starts when training starts (TrainingStartTime).")
    elif data.metrics:
        basis = ("The job has no step metric (a metric definition named step, global_step, iteration or batch), so "
                 "the training loop runs from its first to its last metric point.")
    else:
        basis = "The job stored no metric point, so its training loop cannot be told from its start and end."
    table = _table(["", "Value", "Share of the job"], ([escape(a), escape(b), escape(c)] for a, b, c in rows),
                   "summary")
    return table + _note(basis)


# -- system usage ------------------------------------------------------------------------------------


def _usage(data: JobData) -> str:
    if not data.readings:
        return _note("No system readings were stored for this job (neither a profile nor CloudWatch system "
                     "metrics)" + (" yet." if data.running else "."))
    rows = []
    for host in data.hosts:
        readings = data.readings.get(host)
        if readings is None:
            continue
        for row in _host_usage(readings):
            rows.append([escape(row.host), escape(row.metric), escape(UNIT_NAMES.get(row.unit, row.unit)),
                         *(escape(quantity(v, row.unit)) for v in (row.maximum, row.p99, row.p95, row.p50,
                                                                   row.minimum)), str(row.samples)])
    sources = {r.source for r in data.readings.values()}
    if sources == {PROFILE}:
        note = (f"From the profile: a reading every {data.interval_ms} ms. CPU (mean of cores) is the mean of the "
                "host's cores; NaN is left out; percentiles are interpolated between the closest ranks.")
    else:
        note = ("From the hosts' CloudWatch system metrics (namespace /aws/sagemaker/TrainingJobs, dimension "
                "Host=<job>/<host>), one datapoint per period: the job ran without the profiler"
                + (", or its profile holds no data yet" if data.interval_ms is not None else "")
                + ". CPUUtilization is summed over cores, GPUUtilization over GPUs.")
    return _note(note) + _table(["Host", "Metric", "Unit", "Max", "p99", "p95", "p50", "Min", "Samples"], rows,
                                "usage")


def _host_usage(readings: HostReadings) -> list[analysis.Usage]:
    metrics = dict(readings.metrics)
    units = dict(readings.units)
    if readings.source == PROFILE:
        total = readings.derived(analysis.CPU_TOTAL, analysis.cpu_total)
        if total is not None:
            metrics[analysis.CPU_TOTAL], units[analysis.CPU_TOTAL] = total, "Percent"
    found = [analysis.usage(readings.host, name, units.get(name, "Count"), metrics[name][1])
             for name in sorted(metrics, key=analysis.metric_order)]
    return [row for row in found if row is not None]


# -- rules ---------------------------------------------------------------------------------------------


def _rules(data: JobData) -> str:
    if not data.rules:
        return _note("The job has no rules. Give some with `trainmon run --rule NAME` (see docs/rules.md); "
                     "ProfilerReport runs the profiler rules.")
    rows = []
    for rule in data.rules:
        fired = rule.count > 0 or rule.status == "IssuesFound"
        said = advice(rule.rule)
        invoked = f"<br><small>{escape(rule.rule)}</small>" if rule.rule != rule.name else ""
        details = "<br>".join(escape(line) for line in rule.details.splitlines())
        rows.append([f"<b>{escape(rule.name)}</b>{invoked}<br><small>{escape(rule.kind)} rule</small>",
                     f'<span class="status {escape(rule.status)}">{escape(rule.status)}</span>'
                     + (f'<div class="details">{details}</div>' if details else ""),
                     '<b class="fired">Yes</b>' if fired else "No", str(rule.count), _parameters(rule.parameters),
                     f"<i>Checks that {escape(said.checks)}.</i><br>"
                     + (escape(said.recommendation) if fired else f'<span class="quiet">{escape(said.recommendation)}</span>')])
    widths = "".join(f'<col style="width:{w}%">' for w in (16, 21, 6, 7, 20, 30))
    table = _table(["Rule", "Status", "Fired", "Findings", "Parameters", "Recommendation"], rows, "rules")
    table = table.replace('<table class="rules">', f'<table class="rules"><colgroup>{widths}</colgroup>', 1)
    return table + _findings(data.rules)


def _parameters(parameters: dict[str, Any]) -> str:
    if not parameters:
        return "-"
    return "<br>".join(f"<code>{escape(str(k))}={escape(str(v))}</code>" for k, v in parameters.items())


def _findings(rules: list[RuleView]) -> str:
    rows = [[escape(clock(float(f["Time"]))), escape(rule.name), escape(str(f.get("Host", "-"))),
             escape(str(f.get("Step", "-"))), escape(str(f.get("Message", "")))]
            for rule in rules for f in rule.findings]
    if not rows:
        return ""
    kept = sum(len(r.findings) for r in rules)
    total = sum(r.count for r in rules)
    note = "" if kept == total else f" (the first and the latest of each rule: {kept} of {total})"
    return f"<h3>Findings{escape(note)}</h3>" + _table(["Time", "Rule", "Host", "Step", "Message"], sorted(rows),
                                                       "findings")


def _rule_charts(data: JobData, axis: Axis) -> str:
    fired = [rule for rule in data.rules if rule.findings]
    if not fired:
        return _note("No rule found issues" + (" so far." if data.running else "."))
    return "".join(_rule_chart(data, rule, axis) for rule in fired)


def _rule_chart(data: JobData, rule: RuleView, axis: Axis) -> str:
    start, end = axis
    title = f"{rule.name}: {rule.count} finding{'s' if rule.count != 1 else ''}"
    if rule.rule in views.PROFILER_VIEWS:
        out = []
        for host in dict.fromkeys(str(f.get("Host", "")) for f in rule.findings):
            readings = data.readings.get(host)
            wanted = views.PROFILER_VIEWS[rule.rule]
            drawn = [pair for what in wanted for pair in (views.series(readings, what) if readings else [])]
            bands = []
            if readings is not None and rule.rule in ("CPUBottleneck", "IOBottleneck"):
                found = views.bottleneck_bands(data, readings, "cpu" if rule.rule == "CPUBottleneck" else "io",
                                               _pixel_ms(axis))
                bands = found[0] if found else []
            out.append(chart(f"{title} ({host})", views.lines(drawn), start_ms=start, end_ms=end, unit="Percent",
                             markers=views.rule_markers(rule, host), bands=bands, kind="rule"))
        return "".join(out)
    if rule.rule == "StepOutlier" and data.steps:
        return chart(title, views.step_lines(data), start_ms=start, end_ms=end, unit="Seconds",
                     markers=views.rule_markers(rule), kind="rule")
    tensors = [(host, name, columns) for (host, name), columns in data.tensors.items()
               if any(f.get("Tensor") == name and f.get("Host") == host for f in rule.findings)]
    if tensors:
        reduction = TENSOR_REDUCTIONS.get(rule.rule, "l2")
        lines = [Line(f"{name} ({host})" if len(data.hosts) > 1 else name, *columns) for host, name, columns in tensors]
        return chart(title, lines, start_ms=start, end_ms=end, markers=views.rule_markers(rule), kind="rule",
                     note=f"The tensors it found issues with, as trainmon.debug recorded them: {reduction} per "
                     "saved step; each flag is a finding.")
    watched = views.watched_metrics(data, rule)
    if watched:
        lines = [Line(f"{name} ({host})" if len(data.hosts) > 1 else name, *columns)
                 for name in watched for host, columns in data.metrics[name].items()]
        markers = [m for name in watched for m in views.metric_markers(data, name, [rule])] or views.rule_markers(rule)
        return chart(title, lines, start_ms=start, end_ms=end, markers=markers, kind="rule",
                     note=f"What {rule.name} read: {', '.join(watched)}; each flag is a finding.")
    return chart(title, [], start_ms=start, end_ms=end, markers=views.rule_markers(rule), kind="rule",
                 note="When it found issues (what it read is not among the job's metrics or system readings).")


def _pixel_ms(axis: Axis) -> int:
    return max(1, (axis[1] - axis[0]) // PLOT_W)


# -- steps -----------------------------------------------------------------------------------------------


def _steps(data: JobData, axis: Axis) -> str:
    if data.step_metric is None:
        return _note("The job has no step metric: name a metric definition step, global_step, iteration or batch "
                     "(or give a rule step_metric) to get step durations.")
    stats = [s for host, (_, per_step, count) in data.steps.items()
             if (s := analysis.step_stats(host, analysis.step_durations(per_step, count))) is not None]
    if not stats:
        return _note(f"The step metric {data.step_metric!r} has fewer than two distinct values" +
                     (" so far." if data.running else "."))
    rows = [[escape(s.host), str(s.steps), *(escape(seconds(v)) for v in (s.mean, s.maximum, s.p99, s.p95, s.p50,
                                                                          s.minimum))] for s in stats]
    table = _table(["Host", "Steps", "Mean", "Max", "p99", "p95", "p50", "Min"], rows, "steps")
    note = (f"From the times of the step metric {data.step_metric!r}'s points (when their log records were read): "
            "an interval over several steps is shared among them.")
    return _note(note) + table + chart("Seconds per step", views.step_lines(data), start_ms=axis[0], end_ms=axis[1],
                                       unit="Seconds", kind="steps")


# -- system charts --------------------------------------------------------------------------------------


def _no_readings(data: JobData) -> str:
    return _note("No system readings were stored for this job" + (" yet." if data.running else "."))


def _gpu(data: JobData, axis: Axis, what: str) -> str:
    if not data.readings:
        return _no_readings(data)
    out = []
    word = "utilization" if what == views.GPU else "memory used"
    for host in data.hosts:
        readings = data.readings.get(host)
        if readings is None:
            continue
        drawn = views.series(readings, what)
        if not drawn:
            out.append(_note(f"{host} shows no GPU chart: {NO_GPU}.", "note no-gpu"))
            continue
        note = "" if readings.source == PROFILE else "Summed over the host's GPUs (per GPU needs the profiler)."
        out.append(chart(f"GPU {word} ({host})", views.lines(drawn), start_ms=axis[0], end_ms=axis[1],
                         unit="Percent", note=note, kind=what))
    return "".join(out)


def _bottlenecks(data: JobData, axis: Axis) -> str:
    if not data.readings:
        return _no_readings(data)
    out = []
    for host in data.hosts:
        readings = data.readings.get(host)
        if readings is None:
            continue
        drawn = views.series(readings, views.CPU) + views.series(readings, views.IOWAIT)
        drawn += views.series(readings, views.BUSIEST_GPU)
        bands, notes = [], []
        for which in ("cpu", "io"):
            found = views.bottleneck_bands(data, readings, which, _pixel_ms(axis))
            if found is not None:
                bands += found[0]
                notes.append(f"{'CPU' if which == 'cpu' else 'I/O'} bottleneck {found[1]:.1f}% of the time")
        if readings.source != PROFILE:
            notes.append("Bottleneck periods need the profiler (each tick's CPU, I/O wait and GPUs): run the job with "
                         "--profiling-interval-ms")
        elif not views.has_gpus(readings):
            notes.append(f"No bottleneck periods: they are when the CPU (or I/O wait) is high while the GPUs are "
                         f"idle, and {host} has {NO_GPU}")
        else:
            t = data.thresholds
            notes.append(f"shaded: the CPU above {t[('CPUBottleneck', 'cpu_threshold')]:g}% while every GPU was "
                         f"below {t[('CPUBottleneck', 'gpu_threshold')]:g}% (CPU bottleneck), the I/O wait above "
                         f"{t[('IOBottleneck', 'io_threshold')]:g}% while every GPU was below "
                         f"{t[('IOBottleneck', 'gpu_threshold')]:g}% (I/O bottleneck)")
        out.append(chart(f"CPU, I/O wait and GPU ({host})", views.lines(drawn), start_ms=axis[0], end_ms=axis[1],
                         unit="Percent", bands=bands, note="; ".join(notes) + ".", kind="bottlenecks"))
    return "".join(out)


def _metric_charts(data: JobData, axis: Axis) -> str:
    if not data.metrics:
        return _note("The job's metric definitions matched nothing" + (" yet." if data.running else "."))
    out = []
    for name, per_host in data.metrics.items():
        lines = [Line(host if len(data.hosts) > 1 else name, *columns) for host, columns in per_host.items()]
        count = sum(len(c[0]) for c in per_host.values())
        out.append(chart(f"{name} ({count} point{'s' if count != 1 else ''})", lines, start_ms=axis[0],
                         end_ms=axis[1], markers=views.metric_markers(data, name), kind="metric"))
    return "".join(out)


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2430;margin:0 auto;max-width:1000px;
padding:16px 24px 48px;background:#fff}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px;padding-top:8px;border-top:1px solid #d8dde6}
h3{font-size:15px;margin:16px 0 6px}.meta{color:#4a5566;margin:0 0 8px}
nav.contents{display:flex;flex-wrap:wrap;gap:4px 14px;margin:8px 0;font-size:13px}nav a{color:#1a5fb4}
.banner{padding:8px 12px;border-radius:4px;margin:8px 0}.running{background:#fff4d6;border:1px solid #e5c35c}
.failed{background:#fde2e1;border:1px solid #e08b87}.cut{background:#eef3fb;border:1px solid #9db6dc}.note{color:#4a5566;margin:6px 0}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}th,td{border:1px solid #d8dde6;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f1f3f7}table.usage td:nth-child(n+4),table.steps td:nth-child(n+2)
{text-align:right;font-variant-numeric:tabular-nums}table.rules{table-layout:fixed;width:100%}
table.rules td{overflow-wrap:anywhere}
code{font-size:12px}.fired{color:#b3261e}.quiet{color:#6b7686}.details{color:#6b7686;font-size:12px}
.status.IssuesFound{color:#b3261e;font-weight:600}.status.NoIssuesFound{color:#1e7b34}.status.Error{color:#8a5a00}
figure.chart{margin:10px 0 18px}figcaption{font-weight:600;margin-bottom:2px}svg.plot{max-width:100%;height:auto}
.frame{fill:none;stroke:#b9c1cd}.grid{stroke:#e6e9ef}.tick{stroke:#8a93a1}.axis{font-size:11px;fill:#4a5566}
.series{fill:none;stroke-width:1.4;stroke-linejoin:round}
.s0{stroke:#1f6fb2;fill:#1f6fb2}.s1{stroke:#d1495b;fill:#d1495b}.s2{stroke:#2a9d3f;fill:#2a9d3f}
.s3{stroke:#e08a00;fill:#e08a00}.s4{stroke:#7b4fb8;fill:#7b4fb8}.s5{stroke:#8c564b;fill:#8c564b}
.s6{stroke:#d45fa8;fill:#d45fa8}.s7{stroke:#139fb0;fill:#139fb0}path.series{fill:none}
.band-cpu{fill:rgba(224,138,0,.22)}.band-io{fill:rgba(123,79,184,.22)}
.finding line{stroke:#b3261e;stroke-width:1.2;stroke-dasharray:4 3}.finding .flag,.hit{fill:#b3261e}
.legend{display:flex;flex-wrap:wrap;gap:2px 16px;font-size:12px;color:#334}.key::before{content:"";display:inline-block;
width:14px;height:3px;margin-right:5px;vertical-align:middle;background:currentColor}
.key.s0{color:#1f6fb2}.key.s1{color:#d1495b}.key.s2{color:#2a9d3f}.key.s3{color:#e08a00}.key.s4{color:#7b4fb8}
.key.s5{color:#8c564b}.key.s6{color:#d45fa8}.key.s7{color:#139fb0}.key.band-cpu::before{height:10px;
background:rgba(224,138,0,.4)}.key.band-io::before{height:10px;background:rgba(123,79,184,.4)}
.key.flag{color:#b3261e}.key.flag::before{height:10px;width:2px}.key{color:#334}
.key.nonfinite::before{width:7px;height:7px;border-radius:50%;background:#4a5566}
@media print{nav.contents{display:none}section{break-inside:avoid-page}}
"""
