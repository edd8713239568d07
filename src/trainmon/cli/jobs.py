"""``trainmon run``, ``describe``, ``rules``, ``list``, ``stop``, ``delete``, ``demo`` and ``images``:
training jobs, and the images they can run in; ``tune`` and ``tuning``: hyperparameter tuning jobs."""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import config
from ..api import sagemaker, trainmon, tuning
from ..api.training_request import DEFAULT_MAX_RUNTIME_S, DEFAULT_STOP_GRACE_S, with_profiler_report
from ..errors import ValidationException
from ..jobs import searchtext
from ..jobs.status import TERMINAL
from ..parsing.definitions import MetricDefinition, definition_warnings, validate_definitions
from ..parsing.framing import Mode
from ..rules import catalog
from ..runtime.job import orphans
from ..runtime.launchers import registry
from ..store import Store
from . import render
from .common import (
    EXIT_FAILED,
    Commands,
    every_page,
    exit_status,
    handled,
    pairs,
    print_json,
    read_text,
    store,
    warn,
)
from .definitions import add_definition_options, definitions_given


def register(commands: Commands) -> None:
    add_run_options(commands.add("run", cmd_run, "Run a training job in the foreground, capturing its output and "
                                 "metrics."))

    describe = commands.add("describe", cmd_describe, "Show a job: status, transitions, final metrics, definition "
                            "diagnostics.")
    describe.add_argument("name")
    describe.add_argument("--json", action="store_true", help="the DescribeTrainingJob document")

    rules = commands.add("rules", cmd_rules, "Show a job's rules: their status, parameters and actions, and what "
                         "they found.")
    rules.add_argument("name")
    rules.add_argument("--rule", metavar="NAME", help="only this rule configuration")
    rules.add_argument("--json", action="store_true", help="ListRuleFindings' answer")

    listing = commands.add("list", cmd_list, "List jobs, newest first.")
    listing.add_argument("--status", choices=sagemaker.STATUSES)
    listing.add_argument("--name-contains", metavar="TEXT")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true", help="ListTrainingJobs' summaries")

    found = commands.add("search", cmd_search, "Find jobs by hyperparameters, final metrics, tags or any field of "
                         "the job (SageMaker's Search), in any property's order.")
    found.add_argument("where", nargs="?", default="", help="e.g. 'HyperParameters.lr < 0.01 and Tags.team = vision': "
                       "= != < <= > >= contains in exists 'not exists', and, or, parentheses, \"quotes\"")
    found.add_argument("--sort-by", metavar="NAME", default="LastModifiedTime",
                       help="any property: Metrics.validation:error, HyperParameters.lr, CreationTime (default: "
                            "LastModifiedTime)")
    found.add_argument("--ascending", action="store_true", help="smallest first (default: largest first)")
    found.add_argument("--limit", type=int, default=20)
    found.add_argument("--json", action="store_true", help="Search's results")

    stop = commands.add("stop", cmd_stop, "Stop a running job (SIGTERM, then SIGKILL after the grace period).")
    stop.add_argument("name")
    stop.add_argument("--wait", action="store_true", help="return when the job has stopped")

    delete = commands.add("delete", cmd_delete, "Delete a finished job with its logs and metrics; frees the name.")
    delete.add_argument("name")

    demo = commands.add("demo", cmd_demo, "Run the bundled demo training job with live metrics, then describe it.")
    demo.add_argument("--name", help="job name (default: demo-<time>)")
    demo.add_argument("--epochs", type=int, default=12)

    tune = commands.add("tune", cmd_tune, "Start a hyperparameter tuning job from a CreateHyperParameterTuningJob "
                        "request (JSON) and follow its trials to the best one.")
    tune.add_argument("request", help="the request as a JSON file, or - for standard input")
    tune.add_argument("--name", help="the tuning job's name, instead of the request's HyperParameterTuningJobName")
    tune.add_argument("--detach", action="store_true", help="return once it has started")

    tunings = commands.add("tuning", cmd_tuning, "List hyperparameter tuning jobs, or show one with its trials.")
    tunings.add_argument("name", nargs="?")
    action = tunings.add_mutually_exclusive_group()
    action.add_argument("--stop", action="store_true", help="stop it: its running trials are stopped")
    action.add_argument("--delete", action="store_true", help="forget it (its trials stay, as training jobs)")
    tunings.add_argument("--json", action="store_true", help="the operation's answer")

    images = commands.add("images", cmd_images, "List the container images on this machine that a job can run in "
                          "(--image, TrainingImage).")
    images.add_argument("--json", action="store_true", help="as a list of objects")


def add_run_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("--name", help="job name, 1-63 letters, digits and hyphens (default: job-<time>)")
    add_definition_options(run)
    run.add_argument("--hyperparameters", metavar="JSON", help="JSON object (or a file holding one)")
    run.add_argument("-H", "--hyperparameter", action="append", metavar="KEY=VALUE", help="one hyperparameter (repeatable)")
    run.add_argument("--channel", action="append", metavar="NAME=PATH", help="input channel (repeatable)")
    run.add_argument("--instance-count", type=int, default=1, metavar="N", help="hosts algo-1..algo-N (default 1)")
    run.add_argument("--instance-type", default="local", metavar="TYPE",
                     help="ResourceConfig.InstanceType; on Ray, what each host takes (ml.g5.xlarge: 4 CPUs, 1 GPU; "
                     "see docs/cluster.md; default local: 1 CPU)")
    run.add_argument("--launcher", choices=tuple(registry.KINDS), default=registry.DEFAULT,
                     help="; ".join(f"{kind.name}: {kind.about}" + (" (default)" if kind.name == registry.DEFAULT else "")
                                    for kind in registry.KINDS.values()))
    for kind in registry.KINDS.values():
        kind.options(run)
    run.add_argument("--max-runtime-seconds", type=int, default=DEFAULT_MAX_RUNTIME_S, metavar="S",
                     help="stop the job after S seconds (MaxRuntimeExceeded; default one day)")
    run.add_argument("--environment", action="append", metavar="KEY=VALUE", help="environment variable (repeatable)")
    run.add_argument("--stop-grace-seconds", type=float, default=DEFAULT_STOP_GRACE_S, metavar="S",
                     help="SIGKILL this long after SIGTERM when stopping (default 120, as SageMaker)")
    run.add_argument("--store-wait-seconds", type=float, default=None, metavar="S",
                     help="once the job has ended, wait this long for a store that refuses writes, then leave the "
                          "rest of its output for the next command to store (default 60)")
    run.add_argument("--output-path", metavar="PATH", help="where model.tar.gz goes: a directory, or an s3:// URI (default: <home>/output)")
    run.add_argument("--live-metrics", action=argparse.BooleanOptionalAction, default=None,
                     help="print each metric point as it is extracted (default: when stdout is a terminal)")
    run.add_argument("--detach", action="store_true", help="run in the background and return at once")
    run.add_argument("--system-metrics-interval", type=int, default=60, metavar="S",
                     help="seconds between the hosts' CPU/memory/disk/GPU metrics, 1 to 60 (default 60)")
    run.add_argument("--profiling-interval-ms", type=int, metavar="MS",
                     help="profiler interval: 100, 200, 500, 1000, 5000 or 60000 (default 500)")
    run.add_argument("--profile-output", metavar="LOCATION",
                     help="directory or URL (s3://...) for profiler data (default: <home>/profiles)")
    run.add_argument("--disable-profiler", action="store_true", help="no profiler data for this job")
    run.add_argument("--rule", action="append", metavar="NAME[:PARAM=VALUE,...]",
                     help="a rule that watches the job (repeatable): LossNotDecreasing, Overfit, Overtraining, "
                     "ExplodingTensor, StalledTrainingRule or a profiler rule (CPUBottleneck, LowGPUUtilization, "
                     "ProfilerReport, ...), with parameters, e.g. LossNotDecreasing:num_steps=20,"
                     "stop_training_on_fire=True (see docs/rules.md); a profiled job gets ProfilerReport unless "
                     "profiler rules are given")
    run.add_argument("--image", metavar="IMAGE", help="run each host as a container of this image (name:tag, "
                     "registry/name@sha256:..., an ECR URI), under SageMaker's container contract; what follows '--' "
                     "is the container's arguments (default: train)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...] (with --image: -- [ARGS...])")


# -- run -------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    request, definitions = run_request(args)
    for warning in definition_warnings(definitions, escapes_control=Mode(args.mode).escapes):
        warn(warning)
    for warning in catalog.warnings(request):
        warn(warning)
    name = request["TrainingJobName"]
    from ..runtime.processes.sessions import release_stop_signals, supervise_in_a_session_of_its_own

    if registry.kind(args.launcher).submit is not None and not args.detach:
        release_stop_signals()  # this process supervises nothing: Ctrl-C is Python's again
        return _run_elsewhere(store(args), request, registry.kind(args.launcher).elsewhere)
    if args.detach:
        release_stop_signals()
        sagemaker.create_training_job(store(args), **request)
        print(f"trainmon: job {name} started in the background; follow it with: trainmon logs {name} --follow")
        return 0
    return supervise_in_a_session_of_its_own(lambda: handled(args, lambda: _supervise(args, request)))


def _supervise(args: argparse.Namespace, request: dict[str, Any]) -> int:
    """The job in the foreground: this process its supervisor, its output echoed."""
    name = request["TrainingJobName"]
    db = store(args)
    sagemaker.register_job(db, request, supervisor=orphans.identity())
    live = sys.stdout.isatty() if args.live_metrics is None else args.live_metrics
    print(f"trainmon: job {name} started ({args.instance_count} host{'s' if args.instance_count > 1 else ''}); "
          f"stop it with Ctrl-C or `trainmon stop {name}`", file=sys.stderr)
    # capture, monitor, sampler: only a command that runs a job loads them
    from ..report import write_job_report
    from ..runtime.job.supervisor import JobLeft, Supervisor

    try:
        job = Supervisor(db, name, hosts=registry.job_hosts, report=write_job_report, echo=True,
                         live_metrics=live).run()
    except JobLeft as exc:
        print(f"\ntrainmon: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    print()
    print(describe_text(db, job.name))
    unstored = job.doc.get("UnstoredOutput")
    if unstored:
        warn(f"{unstored['Records']} log records and {unstored['Points']} metric points of job {name} could not be "
             f"stored: {unstored['Reason']}")
        return EXIT_FAILED
    return exit_status(job.status)


def _run_elsewhere(db: Store, request: dict[str, Any], elsewhere: str) -> int:
    """A job handed over to a supervisor elsewhere (a Ray job's, in its cluster), in the foreground:
    this follows its output from the store until it ends. Ctrl-C asks it to stop (a second one leaves it stopping)."""
    from .logs import follow

    name = request["TrainingJobName"]
    sagemaker.create_training_job(db, **request)
    count = request["ResourceConfig"]["InstanceCount"]
    print(f"trainmon: job {name} submitted to {elsewhere} ({count} host{'s' if count > 1 else ''}); stop it with "
          f"Ctrl-C or `trainmon stop {name}`", file=sys.stderr)
    stopping = False
    while True:
        try:
            follow(db, name)
            break
        except KeyboardInterrupt:
            if stopping:
                print(f"\ntrainmon: job {name} goes on stopping in {elsewhere}", file=sys.stderr)
                return EXIT_FAILED
            stopping = True
            sagemaker.stop_training_job(db, TrainingJobName=name)
            print(f"\ntrainmon: stopping job {name} (Ctrl-C again to stop following it)", file=sys.stderr)
    print()
    print(describe_text(db, name))
    job = db.get_job(name)
    return exit_status(job.status) if job is not None else EXIT_FAILED


def run_request(args: argparse.Namespace) -> tuple[dict[str, Any], list[MetricDefinition]]:
    """The CreateTrainingJob request that ``trainmon run``'s options stand for, and its metric
    definitions (validated, once)."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    definitions = validate_definitions(definitions_given(args))
    request: dict[str, Any] = {
        "TrainingJobName": args.name if args.name is not None else datetime.now(UTC).strftime("job-%Y%m%d-%H%M%S"),
        "AlgorithmSpecification": {"TrainingInputMode": "File", **_what_runs(getattr(args, "image", None), command),
                                   "MetricDefinitions": [d.to_api() for d in definitions]},
        "HyperParameters": _hyperparameters(args),
        "ResourceConfig": {"InstanceType": args.instance_type, "InstanceCount": args.instance_count,
                           "VolumeSizeInGB": 0},
        "StoppingCondition": {"MaxRuntimeInSeconds": args.max_runtime_seconds},
        "Environment": pairs(args.environment, "--environment"),
        "InputDataConfig": [
            {"ChannelName": channel, "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix", "S3Uri": str(Path(path).expanduser().resolve()),
                "S3DataDistributionType": "FullyReplicated"}}}
            for channel, path in pairs(args.channel, "--channel").items()
        ] or None,
        "TrainmonConfig": {"RecordMode": args.mode, "StopGraceSeconds": args.stop_grace_seconds,
                           **({} if args.store_wait_seconds is None else {"StoreWaitSeconds": args.store_wait_seconds}),
                           "SystemMetricsIntervalSeconds": args.system_metrics_interval, **_launcher_settings(args)},
    }
    if args.disable_profiler:
        request["ProfilerConfig"] = {"DisableProfiler": True}
    else:  # the flags given; the operations layer fills in SageMaker's defaults
        given = {"ProfilingIntervalInMilliseconds": args.profiling_interval_ms, "S3OutputPath": args.profile_output}
        if any(value is not None for value in given.values()):
            request["ProfilerConfig"] = {key: value for key, value in given.items() if value is not None}
    if args.output_path:
        output = args.output_path if "://" in args.output_path else str(Path(args.output_path).expanduser().resolve())
        request["OutputDataConfig"] = {"S3OutputPath": output}
    for text in getattr(args, "rule", None) or []:
        try:
            field, rule = catalog.from_option(text)
        except ValueError as exc:
            raise ValidationException(str(exc)) from None
        request.setdefault(field, []).append(rule)
    request = with_profiler_report(request, time.time())  # as the SageMaker SDK does, unless profiler rules are given
    return {key: value for key, value in request.items() if value is not None}, definitions


def _what_runs(image: str | None, command: list[str]) -> dict[str, Any]:
    """AlgorithmSpecification's members for ``--image`` and what follows ``--``."""
    if image is None:
        if not command:
            raise ValidationException("no command to run: put it after '--', e.g. trainmon run --name my-job -- "
                                      "python train.py (or give --image IMAGE)")
        return {"ContainerEntrypoint": command}
    from ..runtime.containers.image import named_image

    if named_image(image) is None:
        raise ValidationException(f"--image {image!r} does not name a container image: give name:tag (my-algo:latest), "
                                  "registry/name@sha256:... or an ECR URI; a command goes after '--' instead")
    return {"TrainingImage": image, **({"ContainerArguments": command} if command else {})}


def _launcher_settings(args: argparse.Namespace) -> dict[str, Any]:
    """TrainmonConfig's members of the launcher chosen; a flag of another launcher's is refused."""
    chosen = registry.kind(args.launcher)
    for kind in registry.KINDS.values():
        given = kind.given(args) if kind is not chosen else []
        if given:
            raise ValidationException(f"{given[0]} is for {kind.where or 'a ' + kind.name + ' job'}: add --launcher "
                                      f"{kind.name}.")
    if chosen.name == registry.DEFAULT:
        return {}
    return {"Launcher": chosen.name, **chosen.from_options(args)}


def _hyperparameters(args: argparse.Namespace) -> dict[str, str]:
    result: dict[str, str] = {}
    if args.hyperparameters:
        text = args.hyperparameters
        if not text.lstrip().startswith("{"):
            text = read_text(text, "--hyperparameters")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationException(f"--hyperparameters is not valid JSON: {exc.msg} at column {exc.colno}.") from None
        if not isinstance(data, dict):
            raise ValidationException("--hyperparameters must be a JSON object of names to values.")
        # SageMaker passes every value as a string; non-strings are written as JSON, as its SDK does.
        result.update({str(k): v if isinstance(v, str) else json.dumps(v) for k, v in data.items()})
    result.update(pairs(args.hyperparameter, "-H"))
    return result


# -- reading jobs ----------------------------------------------------------------------------


def describe_text(db: Store, name: str) -> str:
    return render.describe(*trainmon.describe_with_metrics(db, name))


def cmd_describe(args: argparse.Namespace) -> int:
    db = store(args)
    if args.json:
        print_json(sagemaker.describe_training_job(db, TrainingJobName=args.name))
    else:
        print(describe_text(db, args.name))
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    request = {"TrainingJobName": args.name, "RuleConfigurationName": args.rule}
    answer = trainmon.list_rule_findings(store(args), **{k: v for k, v in request.items() if v is not None})
    if args.json:
        print_json(answer)
    else:
        print(render.rules(answer, args.name))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise ValidationException("--limit must be a positive number of jobs.")
    summaries = _summaries(store(args), args.status, args.name_contains, args.limit)
    if args.json:
        print_json(summaries)
    elif summaries:
        print(render.job_list(summaries, time.time()))
    else:
        print("no training jobs" + (" match" if args.status or args.name_contains else " yet: try `trainmon demo`"))
    return 0


def _summaries(db: Store, status: str | None, name_contains: str | None, limit: int) -> list[dict[str, Any]]:
    """ListTrainingJobs' summaries, newest first, every page up to ``limit``."""
    request: dict[str, Any] = {"SortOrder": "Descending", "StatusEquals": status, "NameContains": name_contains}
    request = {key: value for key, value in request.items() if value is not None}
    found: list[dict[str, Any]] = []
    while len(found) < limit:
        page = sagemaker.list_training_jobs(db, **request, MaxResults=min(100, limit - len(found)))
        found.extend(page["TrainingJobSummaries"])
        if "NextToken" not in page:
            break
        request["NextToken"] = page["NextToken"]
    return found


def cmd_search(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise ValidationException("--limit must be a positive number of jobs.")
    db = store(args)
    expression = searchtext.parse(args.where)
    request: dict[str, Any] = {"Resource": "TrainingJob", "SortBy": args.sort_by,
                               "SortOrder": "Ascending" if args.ascending else "Descending"}
    if expression:
        request["SearchExpression"] = expression
    results: list[dict[str, Any]] = []
    while True:
        page = sagemaker.search(db, **request, MaxResults=min(100, args.limit - len(results)))
        results += [result["TrainingJob"] for result in page["Results"]]
        if "NextToken" not in page or len(results) >= args.limit:
            break
        request["NextToken"] = page["NextToken"]
    if args.json:
        print_json(results)
        return 0
    if not results:
        print("no training job matches")
        return 0
    print(render.search_results(results, searchtext.names(expression) + [args.sort_by], page["TotalHits"]))
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    db = store(args)
    sagemaker.stop_training_job(db, TrainingJobName=args.name)
    if not args.wait:
        print(f"job {args.name}: Stopping (its processes get SIGTERM, then SIGKILL after the grace period)")
        return 0
    while (status := sagemaker.describe_training_job(db, TrainingJobName=args.name)["TrainingJobStatus"]) \
            not in TERMINAL:
        time.sleep(0.2)
    print(f"job {args.name}: {status}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    sagemaker.delete_training_job(store(args), TrainingJobName=args.name)
    print(f"job {args.name} deleted with its logs and metrics")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import demo_arguments

    parser = argparse.ArgumentParser(prog="trainmon run")
    add_run_options(parser)
    run_args = parser.parse_args(demo_arguments(config.home(), args.name, args.epochs))  # what a user would type
    run_args.home, run_args.debug = args.home, args.debug
    return cmd_run(run_args)


def cmd_images(args: argparse.Namespace) -> int:
    found = trainmon.list_images()
    if args.json:
        print_json(found["Images"])
        return 0
    if not found["Images"]:
        print(f"no images in {found['Engine']} yet: build one (`{found['Engine']} build -t my-algo:latest .`), then "
              "`trainmon run --image my-algo:latest`")
        return 0
    print(render.table(["IMAGE", "ID", "SIZE", "CREATED"],
                       [[i["Name"], i["Id"][:12], i["Size"], i["Created"]] for i in found["Images"]]))
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    try:
        request = json.loads(read_text(args.request, "request"))
    except json.JSONDecodeError as exc:
        raise ValidationException(f"{args.request} is not JSON: {exc}") from None
    if not isinstance(request, dict):
        raise ValidationException(f"{args.request} must hold a JSON object: a CreateHyperParameterTuningJob request.")
    if args.name:
        request["HyperParameterTuningJobName"] = args.name
    db = store(args)
    answer = tuning.create_hyper_parameter_tuning_job(db, **request)
    name = request["HyperParameterTuningJobName"]
    print(f"tuning job {name} started ({answer['HyperParameterTuningJobArn']})")
    if args.detach:
        return 0
    shown: set[str] = set()
    try:
        while True:
            described, trials = _tuning_now(db, name)
            for trial in trials:
                if trial["TrainingJobStatus"] in TERMINAL and trial["TrainingJobName"] not in shown:
                    shown.add(trial["TrainingJobName"])
                    print(render.trial_line(trial))
            if described["HyperParameterTuningJobStatus"] not in ("InProgress", "Stopping"):
                break
            time.sleep(0.5)
    except KeyboardInterrupt:
        print(f"\ntuning job {name} goes on; `trainmon tuning {name}` shows it, `--stop` stops it", file=sys.stderr)
        return 130
    print(render.tuning(described, trials))
    return exit_status(described["HyperParameterTuningJobStatus"])


def _tuning_now(db: Store, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A tuning job's description and its trials' summaries (times as epoch seconds), read once."""
    row = tuning.tuning_job(db, name)
    trials = tuning.trial_summaries(db, row)
    return tuning.described(row, trials), trials


def cmd_tuning(args: argparse.Namespace) -> int:
    db = store(args)
    if args.name is None:
        if args.stop or args.delete:
            raise ValidationException("--stop and --delete need the tuning job's name.")
        found = every_page(functools.partial(tuning.list_hyper_parameter_tuning_jobs, db, SortBy="CreationTime",
                                             SortOrder="Descending"), "HyperParameterTuningJobSummaries")
        if args.json:
            print_json(found)
        elif found:
            print(render.tuning_list(found))
        else:
            print("no hyperparameter tuning jobs yet: `trainmon tune REQUEST.json` starts one (see docs/tuning.md)")
        return 0
    if args.stop:
        tuning.stop_hyper_parameter_tuning_job(db, HyperParameterTuningJobName=args.name)
        print(f"tuning job {args.name}: Stopping (its running trials are stopped)")
        return 0
    if args.delete:
        tuning.delete_hyper_parameter_tuning_job(db, HyperParameterTuningJobName=args.name)
        print(f"tuning job {args.name} deleted (its trials stay, as training jobs)")
        return 0
    if args.json:  # the operations' answers, from one read of the trials
        row = tuning.tuning_job(db, args.name)
        print_json(tuning.answered(row, tuning.trial_summaries(db, row)))
    else:
        print(render.tuning(*_tuning_now(db, args.name)))
    return 0
