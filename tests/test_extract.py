"""Matching semantics: each rule of docs/metric-definitions.md pinned by a test."""

from __future__ import annotations

import io
import math
import random
import re
import time

import pytest

from trainmon.parsing.definitions import validate_definitions
from trainmon.parsing.engines import TIME_LIMIT_REASON
from trainmon.parsing.extract import Extractor, required_literal, scan_stream
from trainmon.parsing.framing import Mode
from trainmon.parsing.literals import ENGINES

XGB = r".*\[[0-9]+\].*#011validation-rmse:([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?).*"


def points(log: bytes, defs: list[tuple[str, str]], mode: Mode = Mode.TERMINAL, block: int = 1 << 20,
           engine: str | None = None):
    extractor = Extractor(validate_definitions([{"Name": n, "Regex": r} for n, r in defs]), mode, engine)
    return [(p.line, p.offset, p.name, p.value) for p in scan_stream(io.BytesIO(log), extractor, block)], extractor


def naive(log: bytes, defs: list[tuple[str, str]], mode: Mode) -> list[tuple[int, int, str, float]]:
    """An independent reference: split, escape, and run every regex on every record."""
    breaks = rb"\r\n|\r|\n" if mode is not Mode.SAGEMAKER else rb"\n"
    result, offset = [], 0
    pieces = re.split(b"(" + breaks + b")", log)
    records = []
    for i in range(0, len(pieces), 2):
        body = pieces[i]
        sep = pieces[i + 1] if i + 1 < len(pieces) else b""
        if body or sep:
            records.append((offset, body))
        offset += len(body) + len(sep)
    for line, (start, body) in enumerate(records, start=1):
        text = body.decode("utf-8", "replace")
        if mode is not Mode.RAW:
            text = "".join(f"#{ord(c):03o}" if ord(c) < 32 else c for c in text)
        for name, regex in defs:
            m = re.search(regex, text)
            if not m or m.group(1) is None or not m.group(1).strip():
                continue
            try:
                result.append((line, start, name, float(m.group(1).strip())))
            except ValueError:
                pass
    return result


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        x[:3] == y[:3] and (x[3] == y[3] or (math.isnan(x[3]) and math.isnan(y[3]))) for x, y in zip(a, b, strict=False)
    )


@pytest.mark.parametrize(
    ("log", "mode", "expected_lines"),
    [
        (b"a=1\nb\na=2", Mode.TERMINAL, [1, 3]),            # text after the last break is a record
        (b"a=1\n", Mode.TERMINAL, [1]),                      # a final break adds no empty record
        (b"a=1\r\na=2\ra=3\na=4", Mode.TERMINAL, [1, 2, 3, 4]),  # \r\n, lone \r and \n all end records
        (b"a=1\r\na=2\ra=3\na=4", Mode.RAW, [1, 2, 3, 4]),
        (b"a=1\r\na=2\ra=3\na=4", Mode.SAGEMAKER, [1, 2, 3]),     # only \n: "a=2\ra=3" is one record
        (b"\n\na=1\n\n", Mode.TERMINAL, [3]),                # empty records count as lines
    ],
)
def test_record_splitting(log: bytes, mode: Mode, expected_lines: list[int]) -> None:
    found, _ = points(log, [("a", r"a=(\d)")], mode)
    assert [p[0] for p in found] == expected_lines


def test_sagemaker_mode_escapes_cr_as_015() -> None:
    found, _ = points(b"x 10%\rx 20%\n", [("p", r"#015x (\d+)%")], Mode.SAGEMAKER)
    assert [(p[0], p[3]) for p in found] == [(1, 20.0)]
    found, _ = points(b"x 10%\rx 20%\n", [("p", r"x (\d+)%")], Mode.TERMINAL)
    assert [(p[0], p[3]) for p in found] == [(1, 10.0), (2, 20.0)]


def test_builtin_xgboost_definition_works_unchanged_on_tab_separated_output() -> None:
    log = b"[0]\ttrain-rmse:0.5\tvalidation-rmse:0.75\n[1]\ttrain-rmse:0.4\tvalidation-rmse:0.6e-1\n"
    found, _ = points(log, [("validation:rmse", XGB)])
    assert [(p[0], p[3]) for p in found] == [(1, 0.75), (2, 0.06)]
    raw, _ = points(log, [("validation:rmse", XGB)], Mode.RAW)
    assert raw == []  # raw mode does no escaping, so '#011' is never there


@pytest.mark.parametrize(
    ("code", "escaped"), [(b"\t", "#011"), (b"\x08", "#010"), (b"\x1b", "#033"), (b"\x00", "#000")]
)
def test_control_characters_become_hash_octal(code: bytes, escaped: str) -> None:
    found, _ = points(b"v" + code + b"=7\n", [("v", "v" + escaped + r"=(\d)")])
    assert [p[3] for p in found] == [7.0]


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    found, _ = points(b"\xff\xfe loss=0.5 \xc3\n", [("loss", r"\ufffd\ufffd loss=(\S+)")])
    assert [p[3] for p in found] == [0.5]


def test_one_record_yields_a_point_per_definition_and_search_finds_first_match() -> None:
    found, _ = points(b"loss=1 loss=2 acc=0.9\n", [("loss", r"loss=(\d)"), ("acc", r"acc=(\S+)")])
    assert [(p[2], p[3]) for p in found] == [("loss", 1.0), ("acc", 0.9)]


def test_definitions_sharing_a_name_each_feed_the_metric_and_keep_their_own_diagnostics() -> None:
    # AWS's example: one regex for ms/step, one for s/step. A record both match gives a point from each,
    # in the definitions' order; what each matched and missed stays its own.
    log = b"step 1 latency=250ms/step\nstep 2 latency=0.3s/step\nlatency=5ms/step latency=0.1s/step\nlatency=fast\n"
    defs = [("latency", r"latency=([0-9.]+)ms/step"), ("latency", r"latency=([0-9.]+)s/step")]
    found, extractor = points(log, defs)
    assert [(p[0], p[2], p[3]) for p in found] == [
        (1, "latency", 250.0), (2, "latency", 0.3), (3, "latency", 5.0), (3, "latency", 0.1)]
    assert same(found, naive(log, defs, Mode.TERMINAL))
    first, second = extractor.stats
    assert first.literal == second.literal == "latency="  # one prefilter search serves both
    assert (first.matches, second.matches) == (2, 2)
    assert first.unmatched_examples == ["step 2 latency=0.3s/step", "latency=fast"]
    assert second.unmatched_examples == ["step 1 latency=250ms/step", "latency=fast"]


def test_definitions_sharing_a_name_each_get_their_own_bounded_engine() -> None:
    # the same metric from a cheap regex (re up to 1,024 characters) and a costly one (re up to 4, RE2 beyond)
    defs = [("loss", r"loss=(\d+);"), ("loss", r"loss=a*a*a*a*a*a*a*a*(\d)")]
    extractor = Extractor(validate_definitions([{"Name": n, "Regex": r} for n, r in defs]))
    assert [m.python_chars for m in extractor._matchers] == [1024, 4]
    start = time.thread_time()  # CPU time: the match's cost, not the machine's load
    found, extractor = points(b"loss=12;\nloss=" + b"a" * 60 + b"7\n", defs)
    assert time.thread_time() - start < 5
    assert [(p[0], p[3]) for p in found] == [(1, 12.0), (1, 1.0), (2, 7.0)]  # both match record 1
    assert [s.matches for s in extractor.stats] == [1, 2]


def test_an_exact_repeat_gives_two_equal_points_per_record() -> None:
    found, extractor = points(b"loss=0.5\nloss=0.25\n", [("loss", r"loss=(\S+)"), ("loss", r"loss=(\S+)")])
    assert [(p[0], p[3]) for p in found] == [(1, 0.5), (1, 0.5), (2, 0.25), (2, 0.25)]
    assert [s.to_json() for s in extractor.stats][0] == [s.to_json() for s in extractor.stats][1]


def test_capture_is_stripped_and_rejections_are_counted_with_reasons() -> None:
    log = b"e= 0.5 ;\ne=;\ne=abc;\ne=   ;\n"
    found, extractor = points(log, [("e", r"e=(.*?);")])
    assert [p[3] for p in found] == [0.5]
    stats = extractor.stats[0]
    assert stats.matches == 1
    assert stats.rejected == {"empty capture": 2, "capture is not a number": 1}
    assert "abc" in stats.rejected_examples


def test_nan_and_infinity_are_points_but_counted_as_nonfinite() -> None:
    found, extractor = points(b"l=nan\nl=inf\nl=-inf\nl=1\n", [("l", r"l=(\S+)")])
    values = [p[3] for p in found]
    assert math.isnan(values[0]) and values[1:] == [math.inf, -math.inf, 1.0]
    assert extractor.stats[0].nonfinite == 3


def test_optional_group_that_did_not_participate_is_rejected() -> None:
    found, extractor = points(b"loss\n", [("l", r"loss(=\d)?")])
    assert found == []
    assert extractor.stats[0].rejected == {"capture group 1 did not take part in the match": 1}


def test_byte_offsets_count_bytes_not_characters() -> None:
    log = "héllo wörld\nloss=2\n".encode()
    found, _ = points(log, [("loss", r"loss=(\d)")])
    assert found == [(2, len("héllo wörld\n".encode()), "loss", 2.0)]


def test_misspelled_regex_reports_near_misses() -> None:
    log = b"epoch 1 Train_eror=0.5;\nepoch 2 Train_eror=0.4;\n"
    _, extractor = points(log, [("train:error", r"Train_error=(.*?);"), ("x", r"Train_eror=(\d+);")])
    first, second = extractor.stats
    assert first.matches == 0 and first.literal == "Train_error=" and first.unmatched_examples == []
    assert second.matches == 0
    assert second.unmatched_examples == ["epoch 1 Train_eror=0.5;", "epoch 2 Train_eror=0.4;"]


@pytest.mark.parametrize(
    ("regex", "mode", "literal"),
    [
        (r"Train_error=(.*?);", Mode.TERMINAL, "Train_error="),
        (XGB, Mode.TERMINAL, "validation-rmse:"),
        (XGB, Mode.RAW, "#011validation-rmse:"),
        (r"(?i)loss=(\S+)", Mode.TERMINAL, None),
        (r"(\d+)", Mode.TERMINAL, None),
        (r"(?:lo|ac)ss=(\S+)", Mode.TERMINAL, "ss="),
    ],
)
def test_required_literal(regex: str, mode: Mode, literal: str | None) -> None:
    assert required_literal(regex, mode) == literal


def _random_log(rng: random.Random, lines: int) -> bytes:
    parts = []
    for _ in range(lines):
        kind = rng.random()
        if kind < 0.1:
            parts.append(f"epoch {rng.randint(1, 9)} Train_error={rng.random():.4f}; Valid_error={rng.random():.3f};")
        elif kind < 0.15:
            parts.append(f"[{rng.randint(0, 99)}]\ttrain-rmse:{rng.random():.5f}\tvalidation-rmse:{rng.random():.5f}")
        elif kind < 0.2:
            parts.append(f"{rng.randint(0, 100)}%|####   | loss={rng.choice(['nan', 'inf', str(rng.random())])}")
        elif kind < 0.25:
            parts.append("".join(chr(rng.randint(0, 0x2FF)) for _ in range(rng.randint(0, 30))))
        else:
            parts.append("noise " * rng.randint(0, 8))
        parts.append(rng.choice(["\n", "\n", "\n", "\r", "\r\n"]))
    data = "".join(parts).encode("utf-8", "surrogatepass")
    if rng.random() < 0.5:
        data += bytes(rng.randint(0, 255) for _ in range(20))
    return data


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("small_blocks", [32 << 10, 0], ids=["small-blocks-by-loop", "every-block-vectorised"])
@pytest.mark.parametrize("literals_only", [False, True])
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("sparse_bytes", [0, 1 << 40], ids=["every-record-bounded", "only-candidates-bounded"])
def test_fast_extractor_equals_the_naive_loop(seed: int, mode: Mode, small_blocks: int, literals_only: bool,
                                              engine: str, sparse_bytes: int, monkeypatch) -> None:
    import trainmon.parsing.extract as extract

    monkeypatch.setattr(extract, "SMALL_BLOCK_BYTES", small_blocks)
    monkeypatch.setattr(extract, "SPARSE_BYTES", sparse_bytes)
    rng = random.Random(seed)
    defs = [
        ("train:error", r"Train_error=(.*?);"),
        ("valid:error", r"Valid_error=(.*?);"),
        ("rmse", XGB),
        ("loss", r"loss=(\S+)"),
        ("pct", r"^(\d+)%"),  # no literal: runs on every record (and the text of every record is taken)
        ("epoch", r"epoch (\d)"),
        ("overlap", r"loss=a*a*a*a*([0-9.]+)"),  # re on records up to 19 characters, RE2 on the others
        ("loss", r"(\d+)%\|"),  # a second definition of a name, without a literal
        ("epoch", r"epoch (\d)"),  # an exact repeat
        ("maybe", r"Valid_error=(x)?"),  # group 1 that often takes no part
    ]
    if literals_only:  # only the records that hold a literal are taken
        defs = [(name, regex) for name, regex in defs if extract.required_literal(regex, mode)]
    log = _random_log(rng, 400)
    found, extractor = points(log, defs, mode, block=rng.choice([64, 1000, 1 << 20]), engine=engine)
    assert extractor.literal_engine == engine
    assert same(found, naive(log, defs, mode))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("small_blocks", [32 << 10, 0], ids=["small-blocks-by-loop", "every-block-vectorised"])
@pytest.mark.parametrize("sparse_bytes", [0, 1 << 40], ids=["every-record-bounded", "only-candidates-bounded"])
def test_parts_matched_together_are_each_given_their_own_records(seed: int, mode: Mode, small_blocks: int,
                                                                   sparse_bytes: int, monkeypatch) -> None:
    """The job writer matches consecutive reads joined into one block, then counts each read's
    records from the bounds (or the breaks) that scan found: the counts are each part's own."""
    import trainmon.parsing.extract as extract

    monkeypatch.setattr(extract, "SMALL_BLOCK_BYTES", small_blocks)
    monkeypatch.setattr(extract, "SPARSE_BYTES", sparse_bytes)
    rng = random.Random(seed)
    log = _random_log(rng, 300)
    breaks = rb"\n" if mode is Mode.SAGEMAKER else rb"\r\n|\r(?!\n)|\n"
    cuts = sorted(rng.sample([m.end() for m in re.finditer(breaks, log)], 12))
    parts = [log[a:b] for a, b in zip([0, *cuts], [*cuts, len(log)], strict=True)]
    parts.insert(rng.randrange(len(parts)), b"")  # a read that completed no record
    definitions = validate_definitions([{"Name": "loss", "Regex": r"loss=(\S+)"}, {"Name": "pct", "Regex": r"^(\d+)%"}])
    extractor, counter = Extractor(definitions, mode), Extractor(definitions, mode)
    joined = b"".join(parts)
    extractor.scan_columns(joined)
    expected = [counter.count_records(part) for part in parts]
    assert extractor.record_counts(joined, parts) == expected
    assert sum(expected) == counter.count_records(joined)
    assert extractor.record_counts(joined, parts) == expected  # counted again, part by part, once the bounds are used


@pytest.mark.parametrize("seed", range(4))
def test_both_block_paths_keep_the_same_diagnostics(seed: int, monkeypatch) -> None:
    """Near misses, rejections with their reasons and examples, matches and non-finite counts are
    the same whether a block is scanned by the loop for a few records or by the vectorised path."""
    import trainmon.parsing.extract as extract

    rng = random.Random(seed)
    log = _random_log(rng, 400)
    defs = [("train:error", r"Train_error=(.*?);"), ("valid", r"Valid_error=([a-z]*)"), ("maybe", r"loss=(x)?"),
            ("rmse", XGB), ("epoch", r"epoch (\d)"), ("near", r"Train_error=(\d+);")]
    stats = []
    for small_blocks in (1 << 30, 0):
        monkeypatch.setattr(extract, "SMALL_BLOCK_BYTES", small_blocks)
        _found, extractor = points(log, defs, block=rng.choice([1000, 1 << 20]))
        stats.append([s.to_json() for s in extractor.stats])
    assert stats[0] == stats[1]
    assert any(s["Rejected"] for s in stats[0]) and any(s["UnmatchedExamples"] for s in stats[0])


def test_five_megabyte_line_with_a_quadratic_regex_is_matched_whole() -> None:
    # Python's re needs hours here; RE2 is linear. The pytest timeout is the guard, not a timing assert.
    line = b"[1]" + b"x" * 5_000_000 + b"validation-rmse:"
    found, extractor = points(line + b"\n[2]\tvalidation-rmse:0.5\n", [("rmse", XGB)])
    assert [(p[0], p[3]) for p in found] == [(2, 0.5)]
    assert extractor.stats[0].unmatched_examples[0].startswith("[1]xxx")


def test_overlapping_repeats_on_a_short_record_are_matched_quickly() -> None:
    # Several repeats in a row, none nested: Python's re takes about 100 s on this 65-character line.
    regex = r"loss=a*a*a*a*a*a*a*a*(\d)"
    start = time.thread_time()  # CPU time: the match's cost, not the machine's load
    found, extractor = points(b"loss=" + b"a" * 60 + b"\nloss=aa5\n", [("loss", regex)])
    assert time.thread_time() - start < 5
    assert [(p[0], p[3]) for p in found] == [(2, 5.0)]
    assert extractor.stats[0].unmatched_examples == ["loss=" + "a" * 60]


def test_long_records_for_backtracking_only_regex_are_matched_under_a_time_limit() -> None:
    lookbehind = r"(?<=loss=)(\d+)x"  # RE2 cannot run it; `regex` with its time limit does past re's bound
    found, extractor = points(b"loss=12x" + b" " * 5000 + b"\nloss=3x\n", [("loss", lookbehind)])
    assert [(p[0], p[3]) for p in found] == [(1, 12.0), (2, 3.0)]
    assert extractor.stats[0].rejected == {}
    runaway = r"(?<=v)a*a*a*a*(\d)"  # polynomial backtracking of a high power: stopped at the limit
    start = time.thread_time()  # CPU time: the match's cost, not the machine's load
    found, extractor = points(b"v" + b"a" * 3000 + b"\nva7\n", [("v", runaway)])
    assert time.thread_time() - start < 5
    assert [(p[0], p[3]) for p in found] == [(2, 7.0)]
    assert extractor.stats[0].rejected == {TIME_LIMIT_REASON: 1}
    assert extractor.stats[0].rejected_examples == ["v" + "a" * 199]


def test_nested_repetition_runs_on_the_linear_engine() -> None:
    line = b"1" * 40 + b"x\n"  # exponential for a backtracking engine; instant for RE2
    found, extractor = points(line + b"22\n", [("n", r"((\d+)+)$")])
    assert [(p[0], p[3]) for p in found] == [(2, 22.0)]
    found, extractor = points(line + b"33\n", [("n", r"((?:\d?\d?)+)$")])  # optional parts repeated: nested too
    assert [(p[0], p[3]) for p in found] == [(2, 33.0)]


@pytest.mark.parametrize("mode", list(Mode))
def test_records_on_either_side_of_a_definitions_python_limit_give_the_naive_loops_points(mode: Mode) -> None:
    # XGBoost's definition goes to re up to about 170 characters and to RE2 beyond; same points either way.
    rng = random.Random(11)
    lines = [f"[{i}]" + "".join(rng.choice("ab [] #:-\t") for _ in range(rng.randint(100, 300)))
             + f"\tvalidation-rmse:{rng.random():.5f}" + rng.choice(["", " [x]", "\tx"]) for i in range(300)]
    log = ("\n".join(lines) + "\n").encode()
    defs = [("rmse", XGB), ("overlap", r"rmse:a*a*a*a*([0-9.]+)")]  # re up to 19 characters
    found, _ = points(log, defs, mode)
    assert len(found) >= 300
    assert same(found, naive(log, defs, mode))


def test_regex_that_no_engine_can_bound_is_refused() -> None:
    from trainmon.errors import ValidationException

    with pytest.raises(ValidationException, match="nested repetition"):
        validate_definitions([{"Name": "n", "Regex": r"(?<=v)((\d+)+)$"}])


def test_record_cutter_keeps_a_leading_cr_from_joining_two_lines() -> None:
    from trainmon.runtime.capture.records import RecordCutter

    cutter = RecordCutter(Mode.TERMINAL)
    blocks = [cutter.feed(b"\repoch 1 [####] 100%"), cutter.feed(b"\nTrain_error=0.5;\n"), cutter.finish()]
    assert b"".join(blocks) == b"\repoch 1 [####] 100%\nTrain_error=0.5;\n"
    cutter = RecordCutter(Mode.TERMINAL)
    assert cutter.feed(b"10%\r") == b"10%\r"
    assert cutter.feed(b"\n20%\n") == b"20%\n"  # the "\n" of a split "\r\n" is not a new record


SCAN_ON_EVERY_CORE = """
import json, sys
import trainmon.parsing.extract as extract
from trainmon.parsing.definitions import validate_definitions
extract.PARALLEL_MIN_BYTES, extract.PARALLEL_CHUNK_BYTES = 1, 4096  # (a small file, cut in many ranges)
definitions, engine, path = json.loads(sys.argv[1])
parallel = extract.Extractor(validate_definitions(definitions), literal_engine=engine)
points = [(p.line, p.offset, p.name, p.value) for p in extract.scan_file(path, parallel, workers=2)]
print(json.dumps({"points": points, "stats": [s.to_json() for s in parallel.stats]}))
"""


@pytest.mark.parametrize("engine", ENGINES)
def test_large_files_scanned_on_every_core_give_the_same_points(tmp_path, engine: str) -> None:
    """A file scanned in ranges by forked workers, in a process of its own as `trainmon parse` scans
    it (this test process holds other tests' threads, a store's maintainer among them: a fork can
    copy a lock one of them holds, and a worker wait on it for good), gives the points and counts
    of one pass over it."""
    import json
    import subprocess
    import sys

    rng = random.Random(7)
    log = _random_log(rng, 3000)
    path = tmp_path / "big.log"
    path.write_bytes(log)
    defs = [("train:error", r"Train_error=(.*?);"), ("rmse", XGB), ("loss", r"loss=(\S+)"), ("pct", r"^(\d+)%"),
            ("loss", r"^(\d+)%")]
    given = [{"Name": n, "Regex": r} for n, r in defs]
    serial = Extractor(validate_definitions(given), literal_engine=engine)
    one = list(scan_stream(io.BytesIO(log), serial))
    done = subprocess.run([sys.executable, "-c", SCAN_ON_EVERY_CORE, json.dumps([given, engine, str(path)])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    parallel = json.loads(done.stdout)
    many = [tuple(point) for point in parallel["points"]]
    assert same(many, [(p.line, p.offset, p.name, p.value) for p in one])
    assert parallel["stats"] == [s.to_json() for s in serial.stats]


@pytest.mark.parametrize("mode", list(Mode))
def test_dense_logs_take_every_records_text_at_once_with_the_same_result(mode: Mode, monkeypatch) -> None:
    rng = random.Random(3)
    lines = [f"step {i} loss={rng.random():.4f}" + ("\tx" if i % 7 == 0 else "") + (" Train_error=0.5;" if i % 3 else "")
             + ("\r50%" if i % 11 == 0 else "") for i in range(20_000)]
    log = ("\n".join(lines) + "\n").encode()
    defs = [("loss", r"loss=(\S+)"), ("err", r"Train_error=(.*?);"), ("tab", r"#011(x)"),
            ("loss", r"Train_error=(.*?);")]  # one name, two literals; one literal, two names
    extractor = Extractor(validate_definitions([{"Name": n, "Regex": r} for n, r in defs]), mode)
    texts_of = []
    texts = extractor._texts
    monkeypatch.setattr(extractor, "_texts", lambda *args: texts_of.append(args[-1]) or texts(*args))
    found = [(p.line, p.offset, p.name, p.value) for p in scan_stream(io.BytesIO(log), extractor)]
    assert texts_of and all(chosen is None for chosen in texts_of)  # every record's text, not the candidates'
    assert same(found, naive(log, defs, mode))
