"""The tensor rules (trainmon.rules.tensor): each rule firing and not with Debugger's defaults, their
configurations, the runner reading a host's tensor file, and real jobs whose hooked model's gradients
vanish, or do not."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import trainmon
from trainmon import config
from trainmon.api.training_request import job_document
from trainmon.clock import ManualClock
from trainmon.debug import records
from trainmon.errors import ValidationException
from trainmon.rules import Rule, catalog, rule_configs, tensor
from trainmon.rules.tensor import (
    AllZero,
    ExplodingTensor,
    Selection,
    TensorRecord,
    UnchangedTensor,
    VanishingGradient,
    WeightUpdateRatio,
    allclose,
)
from trainmon.runtime.contract import tensors
from trainmon.runtime.watch import tensorfeed
from trainmon.runtime.watch.rulewatch import RuleWatcher
from trainmon.runtime.watch.tensorfeed import TensorFeed, TensorFile
from trainmon.store import Batch, Store

from .conftest import PY, run_cli

Script = Callable[[str], Path]


def rec(step: int, name: str, *collections: str, size: int = 10, **values: Any) -> TensorRecord:
    """A record with plain reductions (a tensor of ones) unless ``values`` say otherwise."""
    base: dict[str, Any] = {"mean": 1.0, "mean_abs": 1.0, "l2": math.sqrt(size), "min": 1.0, "max": 1.0,
                            "zero_fraction": 0.0}
    return TensorRecord(step, name, frozenset(collections or ("default",)), float(step), size, **{**base, **values})


def feed(rule: Any, steps: list[list[TensorRecord]]) -> list[Any]:
    """Each step's records, selected as the runner selects them; every finding."""
    return [f for group in steps for f in rule.observe(group[0].step, tensor.selected(rule, group))]


# -- VanishingGradient -----------------------------------------------------------------------


def test_vanishing_gradient_fires_below_its_default_threshold_once_per_tensor() -> None:
    rule = VanishingGradient()
    steps = [[rec(0, "gradient/w1", "gradients", mean_abs=1e-3), rec(0, "w1", "weights", mean_abs=1e-9)],
             [rec(500, "gradient/w1", "gradients", mean_abs=5e-8), rec(500, "gradient/w2", "gradients", mean_abs=2e-7)],
             [rec(1000, "gradient/w1", "gradients", mean_abs=1e-8)],  # still below: not again
             [rec(1500, "gradient/w1", "gradients", mean_abs=1e-2)],  # recovered
             [rec(2000, "gradient/w1", "gradients", mean_abs=0.0)]]
    found = feed(rule, steps)
    assert [(f.step, f.tensor) for f in found] == [(500, "gradient/w1"), (2000, "gradient/w1")]
    assert found[0].values == {"mean_abs": 5e-8, "tensors": 1.0} and found[0].thresholds == {"threshold": 1e-7}
    assert found[0].message == "gradients vanish below threshold 1e-07 at step 500: gradient/w1 mean |value| 5e-08"


def test_tensors_crossing_at_one_step_are_one_finding_naming_the_worst() -> None:
    group = [rec(3, f"gradient/layer{i}", "gradients", mean_abs=10.0 ** -(8 + i)) for i in range(7)]
    [finding] = VanishingGradient().observe(3, group)
    assert finding.tensor == "gradient/layer6" and finding.values["tensors"] == 7.0
    assert finding.message.endswith("; and 2 more tensors (7 tensors)")


# -- ExplodingTensor -----------------------------------------------------------------------


def test_exploding_tensor_fires_on_nan_and_infinities_in_any_tensor() -> None:
    steps = [[rec(0, "w", "weights"), rec(0, "loss", "losses", size=1)],
             [rec(1, "w", "weights", nan=2, mean=math.nan), rec(1, "loss", "losses", size=1, inf=1, max=math.inf)],
             [rec(2, "w", "weights", nan=2, mean=math.nan)]]
    found = feed(ExplodingTensor(), steps)
    assert [(f.step, f.tensor, f.values["tensors"]) for f in found] == [(1, "loss", 2.0)]  # all its values: the worst
    assert found[0].message == ("NaN or infinite values at step 1: loss is inf; w holds 2 NaN and 0 infinite of 10 "
                                "values (2 tensors)")
    only_nan = feed(ExplodingTensor(only_nan=True), steps)
    assert [(f.step, f.tensor, f.values["tensors"]) for f in only_nan] == [(1, "w", 1.0)]


# -- WeightUpdateRatio ------------------------------------------------------------------------


def test_weight_update_ratio_fires_outside_its_default_bounds() -> None:
    steps = [[rec(0, "w", "weights", l2=10.0)],  # no update yet
             [rec(1, "w", "weights", l2=10.0, update_l2=0.01), rec(1, "g", "gradients", l2=1.0, update_l2=500.0)],
             [rec(2, "w", "weights", l2=10.0, update_l2=200.0)],  # ratio 20 > 10
             [rec(3, "w", "weights", l2=10.0, update_l2=0.01)],
             [rec(4, "w", "weights", l2=10.0, update_l2=0.0)]]  # frozen: 0 < 1e-8
    found = feed(WeightUpdateRatio(), steps)
    assert [(f.step, f.tensor) for f in found] == [(2, "w"), (4, "w")]
    assert found[0].values["ratio"] == pytest.approx(20.0) and "above large_threshold 10" in found[0].message
    assert found[1].values["ratio"] == 0.0 and "below small_threshold 1e-08" in found[1].message
    assert found[0].thresholds == {"large_threshold": 10.0, "small_threshold": 1e-8, "epsilon": 1e-9}
    assert WeightUpdateRatio().observe(0, [rec(0, "w", "weights", l2=0.0, update_l2=1e-12)]) == []  # 1e-12 / 1e-9


def test_weight_update_ratio_num_steps_spaces_its_checks() -> None:
    steps = [[rec(s, "w", "weights", l2=1.0, update_l2=0.0 if s in (1, 2) else 0.01)] for s in range(6)]
    assert [f.step for f in feed(WeightUpdateRatio(), steps)] == [1]  # every step
    assert [f.step for f in feed(WeightUpdateRatio(num_steps=2), steps)] == [2]  # checks 0, 2, 4
    assert feed(WeightUpdateRatio(num_steps=3), steps) == []  # checks 0, 3


# -- AllZero ----------------------------------------------------------------------------------


def test_all_zero_fires_when_threshold_percent_of_values_are_zero() -> None:
    steps = [[rec(0, "a", zero_fraction=0.9), rec(0, "b", zero_fraction=1.0, size=0)],
             [rec(1, "a", zero_fraction=1.0)]]
    found = feed(AllZero(), steps)
    assert [(f.step, f.tensor, f.values["zero_percent"]) for f in found] == [(1, "a", 100.0)]  # empty b: no values
    assert [f.step for f in feed(AllZero(threshold=90), steps)] == [0]


# -- UnchangedTensor --------------------------------------------------------------------------


def test_unchanged_tensor_fires_when_the_reductions_stay_over_num_steps_recorded_steps() -> None:
    same = [[rec(s * 500, "w", "weights")] for s in range(5)]
    found = feed(UnchangedTensor(), same)
    assert [(f.step, f.tensor, f.values["since_step"]) for f in found] == [(1000, "w", 0.0)]
    assert found[0].thresholds == {"num_steps": 3, "rtol": 1e-5, "atol": 1e-8, "equal_nan": False}
    drifting = [[rec(s, "w", mean=1.0 + s * 1e-7)] for s in range(5)]  # within rtol
    assert [f.step for f in feed(UnchangedTensor(), drifting)] == [2]
    moving = [[rec(s, "w", mean=1.0 + s * 1e-3)] for s in range(5)]
    assert feed(UnchangedTensor(), moving) == []
    assert [f.step for f in feed(UnchangedTensor(num_steps=2), moving[:1] + moving[:1])] == []  # one step twice
    nan = [[rec(s, "w", mean=math.nan)] for s in range(4)]
    assert feed(UnchangedTensor(), nan) == [] and [f.step for f in feed(UnchangedTensor(equal_nan=True), nan)] == [2]


@pytest.mark.parametrize(("a", "b", "kwargs"), [
    ((1.0, 2.0), (1.0 + 1e-6, 2.0), {}), ((1.0,), (1.0001,), {}), ((0.0,), (1e-9,), {}), ((0.0,), (1e-7,), {}),
    ((math.inf,), (math.inf,), {}), ((math.inf,), (-math.inf,), {}), ((math.nan,), (math.nan,), {}),
    ((math.nan,), (math.nan,), {"equal_nan": True}), ((1.0,), (1.1,), {"rtol": 0.1}), ((5.0,), (0.0,), {"atol": 5.0}),
])
def test_allclose_is_numpys(a: tuple[float, ...], b: tuple[float, ...], kwargs: dict[str, Any]) -> None:
    options = {"rtol": 1e-5, "atol": 1e-8, "equal_nan": False, **kwargs}
    assert allclose(a, b, **options) == bool(np.allclose(a, b, **options))


# -- configurations -------------------------------------------------------------------------------


def _setup(rule: str, names: tuple[str, ...] = ("train:loss",), **parameters: str) -> catalog.RuleSetup:
    config_ = {"RuleConfigurationName": rule, "RuleEvaluatorImage": "x",
               "RuleParameters": {"rule_to_invoke": rule, **parameters}}
    return catalog.setup(config_, catalog.DEBUG, list(names), "my-job")


@pytest.mark.parametrize(("rule", "defaults", "selection"), [
    ("VanishingGradient", {"threshold": 1e-7}, "collection gradients"),
    ("WeightUpdateRatio", {"large_threshold": 10.0, "small_threshold": 1e-8, "epsilon": 1e-9}, "collection weights"),
    ("AllZero", {"threshold": 100.0}, "every tensor"),
    ("UnchangedTensor", {"num_steps": 3, "rtol": 1e-5, "atol": 1e-8, "equal_nan": False}, "every tensor"),
    ("ExplodingTensor", {"only_nan": False}, "every tensor"),
])
def test_debuggers_defaults_and_selections(rule: str, defaults: dict[str, Any], selection: str) -> None:
    setup = _setup(rule)
    assert setup.issues == [] and setup.evaluated
    assert {key: setup.parameters[key] for key in defaults} == defaults
    assert tensor.selection(rule, setup.parameters).describe() == selection
    assert "num_steps" not in setup.parameters or rule == "UnchangedTensor"  # WeightUpdateRatio: every step


def test_collection_names_and_tensor_regex_select_tensors() -> None:
    setup = _setup("VanishingGradient", collection_names="gradients; weights ,", tensor_regex=r"fc\d\.bias")
    assert setup.issues == [] and setup.parameters["collection_names"] == "gradients,weights"
    selection = tensor.selection("VanishingGradient", setup.parameters)
    assert [selection.selects(rec(0, n, *c)) for n, c in [("a", ("weights",)), ("fc1.bias", ()), ("fc1.biases", ())]] \
        == [True, True, False]
    only_regex = tensor.selection("VanishingGradient", _setup("VanishingGradient", tensor_regex="x").parameters)
    assert only_regex == Selection(frozenset(), only_regex.regex)  # the default collection gives way


def _within(seconds: float, work: Callable[[], Any]) -> Any:
    """``work``'s answer, failing (not hanging) if it has none in ``seconds`` (a generous bound: what
    it guards against blocks forever, or for minutes)."""
    answer: list[Any] = []
    worker = threading.Thread(target=lambda: answer.append(work()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert answer, f"no answer within {seconds} s: blocked"
    return answer[0]


_SELECTS = """
from trainmon.rules import catalog, tensor
from trainmon.rules.tensor import TensorRecord
config = {"RuleConfigurationName": "r", "RuleEvaluatorImage": "x",
          "RuleParameters": {"rule_to_invoke": "AllZero", "tensor_regex": "(a|a)*b"}}
setup = catalog.setup(config, catalog.DEBUG, [], "j")
selection = tensor.selection("AllZero", setup.parameters)
names = ["a" * 40 + "c", "a" * 30 + "b", "a" * 5000 + "b"]
print([selection.selects(TensorRecord(0, name, frozenset(), 0.0, 1)) for name in names])
"""


def test_tensor_regex_runs_in_bounded_time_on_the_jobs_names() -> None:
    # RE2 runs (a|a)*b: it is allowed, and matched by RE2; Python's re takes 2**40 steps on the first name, in C,
    # holding the GIL: hence a process of its own, which the timeout can end
    done = subprocess.run([sys.executable, "-c", _SELECTS], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "[False, True, False]\n", done.stderr
    long_names = tensor.selection("AllZero", _setup("AllZero", tensor_regex="x.*").parameters)
    assert long_names.selects(rec(0, "x" * tensor.MAX_NAME_CHARS)) and not long_names.selects(
        rec(0, "x" * (tensor.MAX_NAME_CHARS + 1)))  # past the cap: by collection only


def test_exploding_tensor_watches_metrics_and_tensors() -> None:
    assert _setup("ExplodingTensor").metrics == ("train:loss",)
    assert _setup("ExplodingTensor", tensor_regex="gradient/.*").metrics == ()  # matches no metric: tensors only
    assert _setup("ExplodingTensor", collection_names="gradients").metrics == ()
    assert _setup("ExplodingTensor", names=()).issues == []  # no metric definitions: the hook's tensors


def _problems(rule: dict[str, Any]) -> str:
    request = {"TrainingJobName": "my-job", "DebugRuleConfigurations": [rule],
               "AlgorithmSpecification": {"ContainerEntrypoint": ["true"]}}
    with pytest.raises(ValidationException) as caught:
        job_document(request, 0.0)
    return caught.value.message


def _config(rule: str, **parameters: str) -> dict[str, Any]:
    return {"RuleConfigurationName": rule, "RuleEvaluatorImage": "any",
            "RuleParameters": {"rule_to_invoke": rule, **parameters}}


@pytest.mark.parametrize(("config_", "words"), [
    (_config("VanishingGradient", threshold="-1"), "Value '-1' at 'debugRuleConfigurations.1.member.ruleParameters."
     "threshold' failed to satisfy constraint: Member must be a number greater than or equal to 0 (rule "
     "VanishingGradient, parameter threshold)"),
    (_config("UnchangedTensor", num_steps="1"), "Member must be an integer greater than or equal to 2"),
    (_config("AllZero", threshold="150"), "less than or equal to 100"),
    (_config("WeightUpdateRatio", epsilon="0"), "Member must be a number greater than 0"),
    (_config("UnchangedTensor", equal_nan="maybe"), "Member must be True or False"),
    (_config("AllZero", collection_names=","), "Member must name tensor collections"),
    (_config("VanishingGradient", tensor_regex="("), "Member must be a regular expression"),
    (_config("AllZero", tensor_regex="(?=a)(a|a)*b"), "ruleParameters.tensor_regex' failed to satisfy constraint: "
     "Member must be a regular expression (Python's re) that matches metric or tensor names, and can be matched in "
     "bounded time (no nested repetition with lookaround or back-references) (rule AllZero, parameter tensor_regex)"),
    (_config("VanishingGradient", loss_metric="loss"), "Member must be a parameter of VanishingGradient"),
])
def test_bad_tensor_rule_configurations_name_rule_and_parameter(config_: dict[str, Any], words: str) -> None:
    assert words in _problems(config_)


def test_rule_configs_for_the_tensor_rules() -> None:
    base = rule_configs.vanishing_gradient(threshold=1e-6, collection_names=["gradients", "weights"])
    assert base["DebugRuleConfiguration"]["RuleParameters"] == {
        "rule_to_invoke": "VanishingGradient", "threshold": "1e-06", "collection_names": "gradients,weights"}
    for make in (rule_configs.vanishing_gradient, rule_configs.weight_update_ratio, rule_configs.all_zero,
                 rule_configs.unchanged_tensor):
        entry = Rule.sagemaker(make()).to_debugger_rule_config_dict()
        assert catalog.setup(entry, catalog.DEBUG, [], "j").issues == []


# -- the runner, on a real store and a real tensor file -------------------------------------------------


def _stored(store: Store, rules: list[dict[str, Any]]) -> tuple[Any, Path]:
    doc = job_document({"TrainingJobName": "hooked", "DebugRuleConfigurations": rules,
                        "AlgorithmSpecification": {"ContainerEntrypoint": ["true"]}}, time.time(), home=store.home)
    row = store.create_job("hooked", doc, time.time())
    store.add_stream(row.id, "algo-1", "hooked/algo-1-1", 0)
    path = config.job_dir(store.home, "hooked") / "algo-1" / "output" / "tensors" / "algo-1.jsonl"
    path.parent.mkdir(parents=True)
    return row, path


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as file:
        file.write(text)


def test_the_runner_feeds_a_hosts_tensor_file_and_names_step_and_tensor(store: Store) -> None:
    rules = [_config("VanishingGradient"), _config("AllZero", collection_names="activations"),
             _config("WeightUpdateRatio")]
    row, path = _stored(store, rules)
    encode = records.Encoder()
    clock = ManualClock(wall_s=time.time())
    watcher = RuleWatcher(store, row, clock=clock)
    clock.start(watcher)  # the first pass: no file yet
    healthy = encode.tensor(0, "gradient/fc1", ("gradients",), 10.0, 4, (0.1, 0.1, 0.2, 0.1, 0.1), 0, 0, 0.0, None)
    vanished = encode.tensor(500, "gradient/fc1", ("gradients",), 11.0, 4, (1e-9, 1e-9, 2e-9, 1e-9, 1e-9), 0, 0,
                             0.0, None)
    _append(path, records.header(1, 500, 9.0) + healthy + vanished[:30])  # the last line not whole yet
    clock.advance(1.0)
    assert watcher.passes == 2 and watcher.findings == []
    _append(path, vanished[30:])
    clock.advance(1.0)
    assert watcher.findings == []  # step 500 waits a pass: more of it could come
    clock.advance(1.0)  # nothing more came: it is fed
    [finding] = watcher.findings
    assert (finding["RuleName"], finding["Host"], finding["Step"], finding["Tensor"]) == (
        "VanishingGradient", "algo-1", 500, "gradient/fc1")
    assert (finding["Time"], finding["Values"]["mean_abs"], finding["Thresholds"]) == (11.0, 1e-9, {"threshold": 1e-7})
    watcher.finish()  # the last pass, then the verdicts
    stored = store.get_job("hooked")
    assert stored is not None
    statuses = {s["RuleConfigurationName"]: s for s in stored.doc["DebugRuleEvaluationStatuses"]}
    assert statuses["VanishingGradient"]["RuleEvaluationStatus"] == "IssuesFound"
    assert statuses["AllZero"]["RuleEvaluationStatus"] == "NoIssuesFound"
    assert statuses["AllZero"]["StatusDetails"].startswith("None of the 2 tensor records is in collection activations")
    assert statuses["WeightUpdateRatio"]["StatusDetails"].startswith("None of the 2 tensor records is in collection "
                                                                     "weights")


def test_a_tensor_rule_over_a_job_that_recorded_nothing_says_so(store: Store) -> None:
    row, _ = _stored(store, [_config("UnchangedTensor")])
    watcher = RuleWatcher(store, row, clock=ManualClock(wall_s=time.time()))
    watcher.finish()
    watcher.run()
    stored = store.get_job("hooked")
    assert stored is not None
    [status] = stored.doc["DebugRuleEvaluationStatuses"]
    assert status["RuleEvaluationStatus"] == "NoIssuesFound"
    assert status["StatusDetails"].startswith("No tensors were recorded: record them with trainmon.debug")


def _lines(*steps: tuple[int, int], update: float | None = None) -> str:
    """(step, tensors) each as the hook's lines: weights t0, t1, ... of ones (with ``update``'s norm)."""
    encode = records.Encoder()
    return "".join(encode.tensor(step, f"t{i}", ("weights",), float(step), 4, (1.0, 1.0, 2.0, 1.0, 1.0), 0, 0, 0.0,
                                 update) for step, count in steps for i in range(count))


def test_the_reader_never_blocks_nor_raises_on_what_the_job_made_of_its_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)  # opened plainly, a FIFO no one writes blocks its reader forever
    feed = TensorFeed({"algo-1": fifo, "algo-2": tmp_path}, [_setup("AllZero")])  # and a directory
    assert _within(30, lambda: feed.evaluate(final=True)) == ([], [])
    assert feed.details()["AllZero"] == ("No tensors were recorded: " + tensors.HOW_TO_RECORD + ". (fifo.jsonl is "
                                         f"not a regular file: not read; {tmp_path.name} is not a regular file: not read)")
    path = tmp_path / "algo-1.jsonl"
    path.write_text(records.header(1, 1, 0.0) + '{"step": 1e400, "name": "x", "size": 1}\n' + "[" * 100_000 + "\n"
                    + '{"step": 0, "name": "x", "size": 1e400}\n' + _lines((0, 1)), encoding="utf-8")
    reader = TensorFile(path)
    assert [r.name for r in reader.read(to_end=True)] == ["t0"] and reader.bad_lines == 3  # overflow, depth


def test_the_first_line_after_an_over_long_one_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tensorfeed, "MAX_LINE_BYTES", 100)
    path = tmp_path / "algo-1.jsonl"
    path.write_text(_lines((0, 1)) + "x" * 500, encoding="utf-8")  # a good line, and a partial one too long
    reader = TensorFile(path)
    assert [r.name for r in reader.read()] == []  # step 0 waits: more of it may come
    _append(path, "x\n" + _lines((1, 1)))
    assert [(r.step, r.name) for r in reader.read(to_end=True)] == [(0, "t0"), (1, "t0")] and reader.bad_lines == 1


def test_a_step_split_between_two_reads_is_fed_once_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _lines((0, 3), (1, 3), update=1e-12)  # every update too small
    monkeypatch.setattr(tensorfeed, "MAX_READ_BYTES", len(_lines((0, 2), update=1e-12)) + 10)  # a read ends in line 3
    path = tmp_path / "algo-1.jsonl"
    path.write_text(text, encoding="utf-8")
    reader = TensorFile(path)
    reads = [reader.read() for _ in range(5)]
    steps = [[r.step for r in read] for read in reads]
    assert [0, 0, 0] in steps and [1, 1, 1] in steps and sum(map(len, steps)) == 6  # each step in one read, once
    feed = TensorFeed({"algo-1": path}, [_setup("WeightUpdateRatio", num_steps="2")])  # step 0 split: checked once
    found = [finding for _ in range(5) for _, _, finding in feed.evaluate()[0]]
    assert [(f.step, f.values["tensors"]) for f in found] == [(0, 3.0)]


def test_the_final_pass_reads_the_backlog_in_chunks_within_its_time(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    line = len(_lines((0, 1)))
    monkeypatch.setattr(tensorfeed, "MAX_READ_BYTES", line * 2)  # two records a chunk
    path = tmp_path / "algo-1.jsonl"
    path.write_text(_lines(*[(step, 2) for step in range(10)]), encoding="utf-8")
    now = [0.0]

    def monotonic() -> float:  # each chunk read takes a second
        now[0] += 1.0
        return now[0]
    feed = TensorFeed({"algo-1": path}, [_setup("AllZero")], monotonic=monotonic, final_read_s=2.5)
    feed.evaluate(final=True)
    assert feed.records == 6  # three chunks, fed as they were read: then the time was up
    assert feed.details()["AllZero"] == (f"Evaluated on part of the tensors only: the final pass stopped reading "
                                         f"algo-1.jsonl with {line * 14} bytes unread (its time was up).")


def test_records_the_hook_dropped_are_in_the_rules_details(tmp_path: Path) -> None:
    path = tmp_path / "algo-1.jsonl"
    path.write_text(records.header(1, 1, 0.0) + _lines((0, 1)) + records.dropped(12, 1.0) + _lines((5, 1)),
                    encoding="utf-8")
    feed = TensorFeed({"algo-1": path}, [_setup("AllZero"), _setup("VanishingGradient")])
    feed.evaluate(final=True)
    details = feed.details()
    assert details["AllZero"] == ("Evaluated on part of the tensors only: the hook dropped 12 records, its writer "
                                  "having fallen behind.")
    assert details["VanishingGradient"].startswith("None of the 2 tensor records is in collection gradients") and \
        details["VanishingGradient"].endswith("(the hook dropped 12 records, its writer having fallen behind)")


class _BrokenFeed(TensorFeed):
    """A feed that fails unforeseen (what the other tests make sure of cannot: a bug of its own)."""

    def evaluate(self, *, final: bool = False, failed: Any = ()) -> Any:
        raise RuntimeError("a bug in the feed")


def test_a_failing_tensor_feed_keeps_the_passs_metric_findings(store: Store, capsys: pytest.CaptureFixture[str]
                                                               ) -> None:
    doc = job_document({"TrainingJobName": "both", "DebugRuleConfigurations": [_config("ExplodingTensor")],
                        "AlgorithmSpecification": {"ContainerEntrypoint": ["true"], "MetricDefinitions": [
                            {"Name": "train:loss", "Regex": "loss=(.*)"}]}}, time.time(), home=store.home)
    row = store.create_job("both", doc, time.time())
    stream = store.add_stream(row.id, "algo-1", "both/algo-1-1", 0)
    store.write_batch(Batch(row.id, chunks=[(stream.id, 0, 1, 1000, "record")],
                            points=[("train:loss", 1000, math.nan, "algo-1", stream.id, 0)],
                            stream_stats={stream.id: (1, 6, 1000)}))
    watcher = RuleWatcher(store, row, clock=ManualClock(wall_s=time.time()))
    watcher.tensors = _BrokenFeed({}, [])
    [finding] = watcher.evaluate(store)
    assert (finding["RuleName"], finding["Metric"]) == ("ExplodingTensor", "train:loss")
    watcher.evaluate(store)
    assert capsys.readouterr().err.count("reading the tensor files failed: RuntimeError('a bug in the feed')") == 1


# -- real jobs ----------------------------------------------------------------------------------------

_VANISHING = """
    import torch
    from trainmon.debug.torch import TorchHook

    torch.manual_seed(0)
    layers = []
    for _ in range(12):  # a deep sigmoid net: each layer shrinks the gradient flowing back through it
        layers += [torch.nn.Linear(16, 16), torch.nn.Sigmoid()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    hook = TorchHook(model, optimizer, save_interval=5)
    x, y = torch.randn(64, 16), torch.randn(64, 1)
    for step in range(12):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        hook.record_scalar("loss", loss)
        optimizer.step()
        print(f"step={step} loss={loss.item():.5f}", flush=True)
"""

_HEALTHY = """
    import numpy as np
    from trainmon.debug import Hook

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8))
    y = x @ rng.normal(size=8) + rng.normal(scale=0.5, size=256)  # noise: the gradient never reaches zero
    w = np.zeros(8)
    hook = Hook(save_interval=5)
    for step in range(40):
        batch = rng.integers(0, 256, size=32)
        error = x[batch] @ w - y[batch]
        gradient = x[batch].T @ error / len(batch)
        hook.record("w", w, "weights")
        hook.record("gradient/w", gradient, "gradients")
        hook.record_scalar("loss", float(np.mean(error ** 2)))
        w = w - 0.05 * gradient
        hook.end_step()
    print("done", flush=True)
"""


def _run(name: str, script: Path, *rules: str) -> tuple[int, dict[str, Any]]:
    args = ["run", "--name", name, "--disable-profiler"]
    for rule in rules:
        args += ["--rule", rule]
    done = run_cli(*args, "--", PY, str(script), timeout=120)
    assert "trainmon: warning: tensor hook" not in done.stderr, done.stderr
    return done.returncode, trainmon.client("trainmon").list_rule_findings(TrainingJobName=name)


def test_a_hooked_model_whose_gradients_vanish_fires_and_a_healthy_one_does_not(home: Path, script: Script) -> None:
    pytest.importorskip("torch")
    code, answer = _run("vanishing", script(_VANISHING), "VanishingGradient")
    assert code == 0
    [rule] = answer["Rules"]
    assert rule["RuleEvaluationStatus"] == "IssuesFound"
    assert rule["StatusDetails"].startswith("RuleEvaluationConditionMet: Evaluation of the rule VanishingGradient at "
                                            "step 0 resulted in the condition being met\n")
    finding = answer["RuleFindings"][0]  # every layer whose gradients vanished at step 0, in one finding
    assert (finding["Host"], finding["Step"], finding["Tensor"]) == ("algo-1", 0, "gradient/0.weight")
    assert finding["Values"]["mean_abs"] < 1e-7 and finding["Values"]["tensors"] >= 2
    assert finding["Thresholds"] == {"threshold": 1e-7} and finding["Message"].startswith(
        "gradients vanish below threshold 1e-07 at step 0: gradient/0.weight mean |value| ")
    assert {f["Step"] % 5 for f in answer["RuleFindings"]} == {0}  # only saved steps (save_interval=5)

    code, answer = _run("healthy", script(_HEALTHY), "VanishingGradient", "WeightUpdateRatio", "ExplodingTensor",
                        "activations:rule_to_invoke=AllZero,collection_names=activations")
    assert code == 0 and answer["RuleFindings"] == []
    statuses = {r["RuleConfigurationName"]: (r["RuleEvaluationStatus"], r.get("StatusDetails", "")) for r in answer["Rules"]}
    assert {name: status for name, (status, _) in statuses.items()} == dict.fromkeys(statuses, "NoIssuesFound")
    assert statuses["VanishingGradient"][1] == "" and statuses["WeightUpdateRatio"][1] == ""
    assert statuses["activations"][1].startswith("None of the 24 tensor records is in collection activations")
    tensors = config.job_dir(home, "healthy") / "algo-1" / "output" / "tensors" / "algo-1.jsonl"
    steps = sorted({r.step for r in map(records.parse, tensors.read_bytes().splitlines()) if isinstance(r, TensorRecord)})
    assert steps == [0, 5, 10, 15, 20, 25, 30, 35]
