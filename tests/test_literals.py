"""The prefilter's literal search: NumPy's and Hyperscan's engines find the same records."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest

from trainmon.errors import ValidationException
from trainmon.parsing.definitions import validate_definitions
from trainmon.parsing.extract import Extractor
from trainmon.parsing.literals import (
    HyperscanSearch,
    LiteralSearch,
    NumpySearch,
    hyperscan_available,
    literal_search,
    records_of,
)

# Overlapping occurrences ("aa" in "aaaa"), one literal inside another, bytes past ASCII, a break inside.
LITERALS = [b"aa", b"aba", b"loss=", b"val_loss=", "\u00e9t\u00e9=".encode(), b"x\ny", b"\xff", b"=", b"zzzzzzzz"]


def _block(rng: random.Random) -> bytes:
    pieces = [rng.choice([b"a", b"b", b"aa", b"loss=", b"val_", b"\xc3\xa9t\xc3\xa9=", b"\n", b"x", b"y", b"\xff",
                          b"=", b" ", b"noise "]) for _ in range(rng.randint(0, 3000))]
    return b"".join(pieces)


def _holding(search: LiteralSearch, block: bytes) -> list[list[int]]:
    data = np.frombuffer(block, np.uint8)
    ends = np.append(np.flatnonzero(data == 10), len(block))
    return [records_of(found, ends).tolist() for found in search.positions(block, data, np.empty(len(block), bool))]


def _reference(block: bytes) -> list[list[int]]:
    """Each literal's records, by looking at every position: the record a start lies in."""
    answer = []
    for literal in LITERALS:
        records = set()
        start = block.find(literal)
        while start >= 0:
            records.add(block.count(b"\n", 0, start))
            start = block.find(literal, start + 1)
        answer.append(sorted(records))
    return answer


@pytest.mark.parametrize("seed", range(40))
def test_both_engines_find_every_record_that_holds_a_literal(seed: int) -> None:
    rng = random.Random(seed)
    block = _block(rng)
    expected = _reference(block)
    assert _holding(NumpySearch(LITERALS), block) == expected
    assert _holding(HyperscanSearch(LITERALS), block) == expected
    if seed == 0:
        assert any(len(records) > 1 for records in expected)  # the blocks are not all empty of literals


def test_literals_at_the_block_edges_are_found() -> None:
    block = b"aba\n\nloss=\xff"
    searches: list[LiteralSearch] = [NumpySearch(LITERALS), HyperscanSearch(LITERALS)]
    for search in searches:
        assert _holding(search, block) == _reference(block)
        assert _holding(search, b"") == [[]] * len(LITERALS)


def test_the_fastest_installed_engine_is_the_default_and_numpy_is_there_without_hyperscan(monkeypatch: pytest.MonkeyPatch) -> None:
    assert hyperscan_available()  # installed with the tests' extra, so that both engines are tested
    assert literal_search([b"loss="]).engine == "hyperscan"
    assert literal_search([b"loss="], "numpy").engine == "numpy"
    with pytest.raises(ValidationException, match="unknown literal search engine 're2'"):
        literal_search([b"loss="], "re2")
    monkeypatch.setenv("TRAINMON_LITERAL_ENGINE", "numpy")  # NumPy's, though Hyperscan is installed
    assert literal_search([b"loss="]).engine == "numpy"
    assert literal_search([b"loss="], "hyperscan").engine == "hyperscan"  # an engine asked for comes first
    monkeypatch.setenv("TRAINMON_LITERAL_ENGINE", "hyper")
    with pytest.raises(ValidationException, match="unknown literal search engine 'hyper': TRAINMON_LITERAL_ENGINE"):
        literal_search([b"loss="])
    monkeypatch.delenv("TRAINMON_LITERAL_ENGINE")
    monkeypatch.setitem(sys.modules, "hyperscan", None)  # as if not installed
    assert not hyperscan_available()
    assert literal_search([b"loss="]).engine == "numpy"
    with pytest.raises(ValidationException, match=r"cannot run here \(.*hyperscan.*\): install trainmon\[hyperscan\]"):
        literal_search([b"loss="], "hyperscan")
    definitions = validate_definitions([{"Name": "loss", "Regex": r"loss=(\S+)"}])
    extractor = Extractor(definitions)
    assert extractor.literal_engine == "numpy"
    assert extractor.scan(b"loss=0.5\n" * 5000)[-1] == (4999, 9 * 4999, 0, 0.5)


def test_a_literal_engine_setting_that_cannot_be_honoured_refuses_the_job_before_it_exists(tmp_path) -> None:
    import os
    import subprocess

    env = {**os.environ, "TRAINMON_HOME": str(tmp_path), "TRAINMON_LITERAL_ENGINE": "hyper"}
    run = subprocess.run([sys.executable, "-m", "trainmon", "run", "--name", "refused", "--metric", "loss=loss=(\\S+)",
                          "--", "echo", "loss=1"], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 2
    assert "unknown literal search engine 'hyper': TRAINMON_LITERAL_ENGINE is one of" in run.stderr
    assert "started" not in run.stderr
    listed = subprocess.run([sys.executable, "-m", "trainmon", "list"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert "refused" not in listed.stdout
