from __future__ import annotations

import json

import pytest

from trainmon.errors import ValidationException
from trainmon.parsing.definitions import (
    MetricDefinition,
    definition_warnings,
    load_definitions,
    parse_short_form,
    validate_definitions,
)


def test_sagemaker_shape_is_accepted() -> None:
    defs = validate_definitions([{"Name": "train:error", "Regex": "Train_error=(.*?);"}])
    assert defs == [MetricDefinition("train:error", "Train_error=(.*?);")]
    assert defs[0].to_api() == {"Name": "train:error", "Regex": "Train_error=(.*?);"}


@pytest.mark.parametrize(
    ("definitions", "message"),
    [
        ([{"Name": "a", "Regex": "a=(\\d+)"}] * 1 + [{"Name": f"m{i}", "Regex": "x(1)"} for i in range(40)],
         "41 metric definitions given; at most 40"),
        ([{"Name": "", "Regex": "x(1)"}], '"Name" must be a non-empty string'),
        ([{"Name": "n" * 256, "Regex": "x(1)"}], "256 characters; at most 255"),
        ([{"Name": "loss", "Regex": "r" * 498 + "(x)"}], "501 characters; at most 500"),
        ([{"Name": "loss", "Regex": ""}], '"Regex" must be a non-empty string'),
        ([{"Name": "loss", "Regex": "loss=(.*"}], "does not compile: missing ), unterminated subpattern at position 5"),
        ([{"Name": "loss", "Regex": "loss=\\S+"}], "no capture group"),
        ([{"Name": "loss", "Regex": "a(1)", "Regexp": "x"}], "unknown field(s) 'Regexp'"),
        (["loss"], 'MetricDefinitions[1] must be an object'),
    ],
)
def test_invalid_definitions_name_position_and_problem(definitions: list, message: str) -> None:
    with pytest.raises(ValidationException) as info:
        validate_definitions(definitions)
    assert message in info.value.message
    assert info.value.code == "ValidationException"


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ValidationException) as info:
        validate_definitions([{"Name": "a", "Regex": "("}, {"Name": "b", "Regex": "no group"}])
    assert "MetricDefinitions[1] ('a')" in info.value.message
    assert "MetricDefinitions[2] ('b')" in info.value.message


def test_load_inline_json_and_file(tmp_path) -> None:
    inline = '[{"Name": "train:error", "Regex": "Train_error=(.*?);"}]'
    assert load_definitions(inline) == json.loads(inline)
    path = tmp_path / "defs.json"
    path.write_text(inline)
    assert load_definitions(str(path)) == json.loads(inline)
    with pytest.raises(ValidationException, match="not valid JSON"):
        load_definitions('[{"Name": }]')
    with pytest.raises(ValidationException, match="neither inline JSON nor a readable file"):
        load_definitions(str(tmp_path / "missing.json"))


def test_short_form_splits_at_first_equals() -> None:
    assert parse_short_form(["train:error=Train_error=(.*?);"]) == [
        {"Name": "train:error", "Regex": "Train_error=(.*?);"}
    ]
    with pytest.raises(ValidationException, match="NAME=REGEX"):
        parse_short_form(["nonsense"])


def test_tab_in_regex_warns_with_the_escaped_form() -> None:
    defs = validate_definitions([{"Name": "rmse", "Regex": "\\tvalidation-rmse:(\\S+)"}])
    (warning,) = definition_warnings(defs, escapes_control=True)
    assert warning.startswith("MetricDefinitions[1] ('rmse'): its regex contains a tab") and "#011" in warning
    assert definition_warnings(defs, escapes_control=False) == []


LATENCY = [{"Name": "latency", "Regex": "latency=([0-9.]+)ms/step"}, {"Name": "latency", "Regex": "latency=([0-9.]+)s/step"}]


def test_definitions_sharing_a_name_are_accepted_in_order_with_one_warning() -> None:
    # AWS's own examples feed one metric from two regexes (ms/step and s/step)
    defs = validate_definitions([*LATENCY, {"Name": "loss", "Regex": r"loss=(\S+)"}])
    assert [d.to_api() for d in defs] == [*LATENCY, {"Name": "loss", "Regex": r"loss=(\S+)"}]
    for escapes in (True, False):
        assert definition_warnings(defs, escapes_control=escapes) == [
            "MetricDefinitions[1] and MetricDefinitions[2] share the name 'latency': each feeds the one metric "
            "'latency' (as on SageMaker), and a record matched by more than one of them gives it a point from each, "
            "with the same timestamp."
        ]


def test_an_exact_repeat_is_kept_with_a_warning_of_its_own() -> None:
    loss = {"Name": "loss", "Regex": r"loss=(\S+)"}
    defs = validate_definitions([loss, {"Name": "acc", "Regex": r"acc=(\S+)"}, loss])
    assert [d.to_api() for d in defs] == [loss, {"Name": "acc", "Regex": r"acc=(\S+)"}, loss]
    assert definition_warnings(defs, escapes_control=True) == [
        "MetricDefinitions[3] ('loss') repeats MetricDefinitions[1] exactly (same Name and Regex): both are kept, "
        "so each record they match gives 'loss' two equal points; remove one of them."
    ]


def test_a_name_three_definitions_share_one_of_them_repeated_gives_both_warnings_in_order() -> None:
    defs = validate_definitions([LATENCY[0], LATENCY[1], {"Name": "x", "Regex": "x(1)"}, LATENCY[0]])
    shared, repeated = definition_warnings(defs, escapes_control=True)
    assert shared.startswith("MetricDefinitions[1], MetricDefinitions[2] and MetricDefinitions[4] share the name")
    assert repeated.startswith("MetricDefinitions[4] ('latency') repeats MetricDefinitions[1] exactly")


def test_definitions_sharing_a_name_are_still_each_validated() -> None:
    with pytest.raises(ValidationException) as info:
        validate_definitions([LATENCY[0], {"Name": "latency", "Regex": "latency=\\S+"}])
    assert info.value.message.endswith("MetricDefinitions[2] ('latency'): regex has no capture group; "
                                       "put the value in parentheses, e.g. 'loss=(\\S+)'.")


@pytest.mark.parametrize(
    "regex",
    [
        r"(?<=v)((\d+)+)$",          # a repeat inside a repeat
        r"(?<=v)((?:\d|\d\d)+)$",    # an alternation inside a repeat
        r"(?<=v)((?:\d?\d?)+)$",     # optional parts inside a repeat: exponential as well
        r"((\w+)+)\2",               # a back-reference keeps RE2 out too
    ],
)
def test_nested_repetition_that_re2_cannot_run_is_refused(regex: str) -> None:
    with pytest.raises(ValidationException, match="nested repetition") as info:
        validate_definitions([{"Name": "n", "Regex": regex}])
    assert "MetricDefinitions[1] ('n')" in info.value.message


@pytest.mark.parametrize(
    "regex",
    [
        r"(?<=v)((?:\d{2}:)+)",      # a fixed count matches one way
        r"(?<=v)((?:(?=\d+)\d)+)$",  # a lookahead is atomic: one way
        r"(?<=v)(\d+)(?:ms|s)?$",    # an alternation repeated at most once
        r"((\d+)+)$",                # nested, but RE2 runs it
    ],
)
def test_repetition_with_one_way_to_match_or_on_re2_is_accepted(regex: str) -> None:
    assert validate_definitions([{"Name": "n", "Regex": regex}]) == [MetricDefinition("n", regex)]
