"""The tensor hook (trainmon.debug): reductions exact on known arrays, the file's lines, save_interval,
the update of weights, a no-op outside a job, failures that never reach the script, the reader that
takes whole lines only, and the PyTorch adapter against real torch (CPU) on a tiny model's backward pass."""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainmon.debug import Hook, hook, records
from trainmon.debug.reductions import reduce
from trainmon.rules.tensor import TensorRecord
from trainmon.runtime.contract.tensors import prepare_host
from trainmon.runtime.watch.tensorfeed import TensorFile


@pytest.fixture(autouse=True)
def _outside_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """No job's variables from the shell; each test says where the hook writes."""
    for name in (records.ENV_TENSOR_DIR, "SM_INPUT_CONFIG_DIR", "SM_CURRENT_HOST", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    hook._warned.clear()


def lines(path: Path) -> list[dict[str, Any]]:
    """The file's lines as JSON, strictly (a bare NaN would fail)."""
    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} is not strict JSON")
    return [json.loads(line, parse_constant=refuse) for line in path.read_text(encoding="utf-8").splitlines()]


def recorded(path: Path) -> list[TensorRecord]:
    return [r for r in (records.parse(line) for line in path.read_bytes().splitlines()) if isinstance(r, TensorRecord)]


# -- reductions -------------------------------------------------------------------------------


def test_reductions_are_exact_on_known_arrays() -> None:
    found = reduce(np.array([[3.0, -4.0], [0.0, 0.0]]))
    assert found.size == 4 and found.reductions == (-0.25, 1.75, 5.0, -4.0, 3.0)
    assert (found.nan, found.inf, found.zero_fraction, found.update_l2) == (0, 0, 0.5, None)
    ints = reduce([1, 2, 3, 4], previous=np.array([1.0, 2.0, 3.0, 1.0]))
    assert ints.reductions == (2.5, 2.5, math.sqrt(30), 1.0, 4.0) and ints.update_l2 == 3.0
    assert reduce(np.array([True, False])).reductions[:2] == (0.5, 0.5)
    assert reduce(np.float32(2.0)).size == 1


def test_nan_and_infinities_are_counted_and_make_the_reductions_nan() -> None:
    found = reduce(np.array([1.0, np.nan, np.inf, -np.inf, 0.0], dtype=np.float32))
    assert (found.size, found.nan, found.inf, found.zero_fraction) == (5, 1, 2, 0.2)
    assert all(math.isnan(value) for value in found.reductions if value is not None)
    only_inf = reduce(np.array([np.inf, 1.0]))
    assert only_inf.reductions[3:] == (1.0, math.inf) and math.isinf(only_inf.reductions[2] or 0)


def test_an_empty_array_has_a_size_and_no_reductions() -> None:
    found = reduce(np.zeros((0, 3)))
    assert (found.size, found.reductions, found.zero_fraction) == (0, (None,) * 5, None)


# -- the file -----------------------------------------------------------------------------------


def test_lines_hold_the_reductions_in_strict_json(tmp_path: Path) -> None:
    with Hook(tensor_dir=tmp_path, host="algo-1") as h:
        h.record("fc1.weight", np.array([3.0, -4.0, 0.0, 0.0]), "weights")
        h.record("gradient/fc1.weight", np.array([np.nan, 1.0]), "gradients")
        h.record_scalar("loss", 0.25)
        h.record_scalar("accuracy", np.float64(0.5))
        h.record("empty", np.zeros(0))
    head, weight, gradient, loss, accuracy, empty = lines(tmp_path / "algo-1.jsonl")
    assert head["hook"] == "trainmon.debug" and head["save_interval"] == 500 and head["pid"] == os.getpid()
    assert {k: v for k, v in weight.items() if k != "time"} == {
        "step": 0, "name": "fc1.weight", "collections": ["weights"], "size": 4, "mean": -0.25, "mean_abs": 1.75,
        "l2": 5.0, "min": -4.0, "max": 3.0, "nan": 0, "inf": 0, "zero_fraction": 0.5}
    assert (gradient["mean"], gradient["nan"], gradient["collections"]) == ("NaN", 1, ["gradients"])
    assert (loss["value"], loss["collections"]) == (0.25, ["losses"])  # a name with "loss" is a loss
    assert (accuracy["value"], accuracy["collections"]) == (0.5, ["scalars"])
    assert (empty["size"], empty["mean"], empty["collections"]) == (0, None, ["default"])
    back = recorded(tmp_path / "algo-1.jsonl")
    assert [r.name for r in back] == ["fc1.weight", "gradient/fc1.weight", "loss", "accuracy", "empty"]
    assert back[2] == TensorRecord(0, "loss", frozenset({"losses"}), back[2].timestamp_s, 1, 0.25, 0.25, 0.25, 0.25,
                                   0.25, 0, 0, 0.0)  # a scalar reads as a tensor of one value
    assert math.isnan(back[1].mean or 0) and back[1].nan == 1


def test_save_interval_and_the_weights_update(tmp_path: Path) -> None:
    h = Hook(3, save_intervals={"gradients": 2}, tensor_dir=tmp_path, host="h")
    weight = np.array([1.0, 2.0])
    for _step in range(7):
        assert h.is_due("weights") == (h.step % 3 == 0)
        h.record("w", weight, "weights")
        h.record("g", weight / 10, "gradients")
        weight = weight + np.array([0.3, 0.4])  # an update of norm 0.5 a step
        h.end_step()
    h.close()
    found = recorded(tmp_path / "h.jsonl")
    assert [(r.step, r.name) for r in found] == [(0, "w"), (0, "g"), (2, "g"), (3, "w"), (4, "g"), (6, "w"), (6, "g")]
    updates = [r.update_l2 for r in found if r.name == "w"]
    assert updates[0] is None and updates[1:] == [pytest.approx(0.5), pytest.approx(0.5)]  # from steps 2 and 5


def test_steps_moved_by_set_step_are_planned_again(tmp_path: Path) -> None:
    h = Hook(5, tensor_dir=tmp_path, host="h")
    weight = np.array([3.0, 4.0])
    for step in (0, 1, 7, 9, 10, 4, 5):  # past saved step 5 unrecorded, then back to it
        h.set_step(step)
        h.record("w", weight * step, "weights")
        h.record_scalar("loss", float(step))
    h.close()
    found = recorded(tmp_path / "h.jsonl")
    assert [(r.step, r.name) for r in found] == [(0, "w"), (0, "loss"), (10, "w"), (10, "loss"), (5, "w"), (5, "loss")]
    assert [r.update_l2 for r in found if r.name == "w"] == [None, pytest.approx(5.0), pytest.approx(5.0)]


def test_the_jobs_debug_hook_config_sets_intervals_and_the_script_wins(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    config_dir, host_root = tmp_path / "input" / "config", tmp_path
    config_dir.mkdir(parents=True)
    env = prepare_host(host_root, config_dir, {"S3OutputPath": "s3://b/p", "HookParameters": {"save_interval": "4"},
                                              "CollectionConfigurations": [{"CollectionName": "gradients",
                                                                            "CollectionParameters": {"save_interval": "2"}}]})
    assert env == {"TRAINMON_TENSOR_DIR": str(tmp_path / "output" / "tensors")}
    assert json.loads((config_dir / "debughookconfig.json").read_text())["LocalPath"] == env["TRAINMON_TENSOR_DIR"]
    monkeypatch.setenv("SM_INPUT_CONFIG_DIR", str(config_dir))
    monkeypatch.setenv("TRAINMON_TENSOR_DIR", env["TRAINMON_TENSOR_DIR"])
    monkeypatch.setenv("SM_CURRENT_HOST", "algo-2")
    from_job = Hook()
    assert (from_job.save_interval, from_job.save_intervals) == (4, {"gradients": 2})
    assert from_job.path == tmp_path / "output" / "tensors" / "algo-2.jsonl"
    assert Hook(10, save_intervals={"gradients": 5}).save_intervals == {"gradients": 5}
    assert Hook(10).save_interval == 10


def test_outside_a_job_the_hook_records_nothing_after_one_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    first, second = Hook(), Hook(1)
    for h in (first, second):
        h.record("w", np.ones(3), "weights")
        h.record_scalar("loss", 1.0)
        h.end_step()
        h.close()
    assert not first.active and first.path is None and list(tmp_path.iterdir()) == []
    warned = capsys.readouterr().err
    assert warned.count("trainmon: warning: tensor hook: not in a trainmon job") == 1


def test_another_rank_of_the_host_records_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    h = Hook(1, tensor_dir=tmp_path)
    h.record("w", np.ones(2))
    h.close()
    assert not h.active and list(tmp_path.iterdir()) == []


def test_what_cannot_be_reduced_is_skipped_with_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Hook(1, tensor_dir=tmp_path, host="h") as h:
        h.record("words", ["a", "b"])
        h.record("words", ["a", "b"])
        h.record("complex", np.array([1j]))
        h.record_scalar("loss", "high")
        h.record("fine", [1.0])
    assert [r.name for r in recorded(tmp_path / "h.jsonl")] == ["fine"]
    warned = capsys.readouterr().err
    assert warned.count("'words' is not recorded") == 1 and "'complex' is not recorded" in warned
    assert "'loss' is not recorded" in warned


def test_a_write_failure_is_one_warning_then_recording_stops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    full = tmp_path / "full"
    full.mkdir()
    (full / "h.jsonl").symlink_to("/dev/full")  # every write: ENOSPC, a full disk
    h = Hook(1, tensor_dir=full, host="h")
    for step in range(50):
        h.record("w", np.ones(1000) * step, "weights")
        h.end_step()
    h.close()  # waits for the writer, which failed
    assert not h.active
    assert capsys.readouterr().err.count("No space left on device; recording stops (the training goes on)") == 1

    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    h = Hook(1, tensor_dir=blocked, host="h")
    h.record("w", np.ones(3))
    h.end_step()
    h.close()
    assert not h.active and "cannot write" in capsys.readouterr().err


def test_a_writer_that_falls_behind_drops_lines_and_the_training_never_waits(tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "h.jsonl")  # a file no one reads yet: the writer's open blocks, as a hung disk would
    h = Hook(1, tensor_dir=tmp_path, host="h")
    name = "w" * 100_000  # 100 kB a line: 8 MiB behind after about 84 steps
    for _step in range(120):
        h.record(name, np.ones(2))
        h.end_step()  # returns at once: the writer is stuck, the training is not
    assert capsys.readouterr().err.count("MiB behind; records are dropped until it catches up") == 1
    reader = os.open(tmp_path / "h.jsonl", os.O_RDONLY | os.O_NONBLOCK)  # the disk is back
    os.set_blocking(reader, True)
    received: list[bytes] = []

    def read_to_the_end() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            chunk = os.read(reader, 1 << 20)
            if chunk:
                received.append(chunk)
            elif received:
                return  # the writer wrote and closed its end
            else:
                time.sleep(0.01)  # no writer yet: its open, woken by ours, has not returned (a FIFO reads as ended)

    drain = threading.Thread(target=read_to_the_end)
    drain.start()
    h.close()  # the writer writes what it kept, then ends: the drain reads to the end
    drain.join(60)
    os.close(reader)
    saved = [json.loads(line) for line in b"".join(received).splitlines()]
    kept = [line for line in saved if "step" in line]  # each with its step's end (a steps line)
    assert saved[0]["hook"] == "trainmon.debug" and 70 < len(kept) < 120  # whole lines, the first steps
    assert [line["step"] for line in kept] == list(range(len(kept)))
    assert saved[-1]["dropped"] == 120 - len(kept)  # the records dropped are counted in the file


def test_a_step_bigger_than_the_writers_limit_is_written_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hook, "FLUSH_BYTES", 64 << 20)  # the step goes as one batch (not in parts a slow writer
    h = Hook(1, tensor_dir=tmp_path, host="h")  # may fall behind on): taken whole, as the writer holds nothing else
    for index in range(100):  # 10 MB in one step, more than the writer may hold: it holds nothing else
        h.record(f"{index:03d}" + "w" * 100_000, np.ones(2))
    h.end_step()
    h.close()
    assert len(recorded(tmp_path / "h.jsonl")) == 100


def test_what_the_hook_keeps_in_the_training_process_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    h = Hook(1, tensor_dir=tmp_path, host="h")
    for index in range(3000):  # a script that never ends its step: its lines go to the writer as they pile up
        h.record(f"{index:04d}" + "n" * 1000, np.ones(2))
        assert sum(map(len, h._lines)) <= hook.FLUSH_BYTES + 2000
    h.close()
    assert len(recorded(tmp_path / "h.jsonl")) == 3000

    monkeypatch.setattr(hook, "MAX_NAMES", 10)
    monkeypatch.setattr(records, "MAX_CACHED", 10)
    monkeypatch.setattr(hook, "MAX_WARNINGS", 5)
    h = Hook(2, tensor_dir=tmp_path, host="names")
    h.end_step()  # step 1: the weights are kept for step 2's update
    for index in range(50):  # names without end
        h.record(f"w{index}", np.ones(3), "weights")
    assert len(h._kept) == 10
    h.end_step()  # step 2, saved
    for index in range(50):
        h.record(f"w{index}", np.ones(3), "weights")
        h.record(f"bad{index}", "text")
    assert len(h._encoder._names) <= 10 and len(hook._warned) <= 6
    err = capsys.readouterr().err
    assert "more than 10 weights recorded" in err and err.count("more than 5 warnings: no more are shown") == 1
    h.close()
    gone = weakref.ref(h)
    del h
    gc.collect()
    assert gone() is None  # closed: not kept alive (by atexit) until the interpreter exits


def test_a_script_under_minus_w_error_is_not_stopped(tmp_path: Path) -> None:
    script = ("import numpy as np\nfrom trainmon.debug import Hook\nh = Hook(1)\n"
              "for s in range(3):\n    h.record('w', np.ones(2)); h.record('x', 'text'); h.end_step()\nprint('done')\n")
    done = subprocess.run([sys.executable, "-W", "error", "-c", script], capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != records.ENV_TENSOR_DIR}, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr
    assert done.stderr.count("trainmon: warning: tensor hook:") == 1  # outside a job: nothing else is tried


# -- the reader ------------------------------------------------------------------------------------


def test_the_reader_takes_whole_lines_only_and_goes_on_from_its_offset(tmp_path: Path) -> None:
    path = tmp_path / "algo-1.jsonl"
    reader = TensorFile(path)
    assert reader.read() == []  # not there yet
    line = records.Encoder().scalar(7, "loss", ("losses",), 1.0, 0.5).encode()
    with open(path, "ab") as file:
        file.write(records.header(1, 500, 0.0).encode() + line[:20])
    assert reader.read() == [] and reader.hooked
    with open(path, "ab") as file:
        file.write(line[20:] + b"not json\n" + b'{"step": 8, "name": "x"}\n' + line)
    assert reader.read() == []  # step 7 waits: more of it could come
    found = reader.read()  # nothing did: it is whole
    assert [(r.step, r.name, r.mean) for r in found] == [(7, "loss", 0.5), (7, "loss", 0.5)]
    assert reader.bad_lines == 2 and reader.read() == []


def test_the_hook_writes_when_each_step_ended_and_the_reader_takes_them(tmp_path: Path) -> None:
    before = time.time()
    with Hook(2, tensor_dir=tmp_path, host="algo-1") as recording:
        for step in range(5):
            recording.record_scalar("loss", float(step))
            recording.end_step()
        recording.set_step(10)  # a loop that counts its own steps: a run of its own
        recording.end_step()
    after = time.time()
    path = tmp_path / "algo-1.jsonl"
    written = [(line["steps"]["first"], len(line["steps"]["ends"])) for line in lines(path) if "steps" in line]
    assert written == [(0, 1), (1, 2), (3, 2), (10, 1)]  # the first at once, then with saved steps 2 and 4, at close
    reader = TensorFile(path, keep_steps=True)
    reader.read(to_end=True)
    ends = reader.take_steps()
    assert [step for step, _ in ends] == [0, 1, 2, 3, 4, 10] and reader.take_steps() == []
    times = [at for _, at in ends]
    assert before <= times[0] and times == sorted(times) and times[-1] <= after
    with open(path, "ab") as file:  # malformed steps lines: counted, skipped
        file.write(b'{"hook": "trainmon.debug", "steps": {"first": "1", "ends": []}}\n'
                   b'{"hook": "trainmon.debug", "steps": {"first": 1, "ends": [1, NaN]}}\n'
                   + records.step_ends(20, [5.0, 6.5]).encode())
    reader.read(to_end=True)
    assert reader.take_steps() == [(20, 5.0), (21, 6.5)] and reader.bad_lines == 2


def test_the_step_ends_held_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "MAX_STEP_ENDS", 3)
    with Hook(1000, tensor_dir=tmp_path, host="algo-1") as recording:  # only step 0 saved: no lines to go with
        for _ in range(7):
            recording.end_step()
        assert len(recording._ends) <= 3
    written = [(line["steps"]["first"], len(line["steps"]["ends"])) for line in lines(tmp_path / "algo-1.jsonl")
               if "steps" in line]
    assert written == [(0, 1), (1, 3), (4, 3)]


def test_outside_a_job_no_step_end_is_kept() -> None:
    outside = Hook(2)
    for _ in range(3):
        outside.end_step()
    assert outside._ends == [] and outside.step == 3


# -- PyTorch ----------------------------------------------------------------------------------------


def test_the_torch_adapter_records_a_tiny_models_weights_and_gradients(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from trainmon.debug.torch import TorchHook

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = TorchHook(model, optimizer, save_interval=2, tensor_dir=tmp_path, host="algo-1")
    expected: dict[tuple[int, str], tuple[float, float, float | None]] = {}
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    for step in range(4):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(torch.randn(8, 3)), torch.randn(8, 1))
        loss.backward()
        hook.record_scalar("loss", loss)
        optimizer.step()  # ends the hook's step: the gradients of this step, the weights after it
        for name, p in model.named_parameters():
            update = float(torch.linalg.vector_norm(p.detach() - before[name]))
            expected[(step, name)] = (float(p.detach().abs().mean()), float(torch.linalg.vector_norm(p.detach())), update)
            expected[(step, f"gradient/{name}")] = (float(p.grad.abs().mean()), float(p.grad.mean()), None)
            before[name] = p.detach().clone()
    assert hook.step == 4
    hook.close()
    found = recorded(tmp_path / "algo-1.jsonl")
    assert sorted({r.step for r in found}) == [0, 2]
    ended = TensorFile(tmp_path / "algo-1.jsonl", keep_steps=True)
    ended.read(to_end=True)
    assert [step for step, _ in ended.take_steps()] == [0, 1, 2, 3]  # each optimizer.step() ended one
    by_key = {(r.step, r.name): r for r in found}
    assert set(by_key) == {(s, n) for s in (0, 2) for n in ("loss", "0.weight", "0.bias", "2.weight", "2.bias",
                                                          "gradient/0.weight", "gradient/0.bias",
                                                          "gradient/2.weight", "gradient/2.bias")}
    assert by_key[(0, "0.bias")].collections == {"biases"} and by_key[(0, "gradient/0.bias")].collections == {"gradients"}
    for (step, name), (first, second, update) in expected.items():
        if step % 2:
            continue
        record = by_key[(step, name)]
        if name.startswith("gradient/"):
            assert (record.mean_abs, record.mean) == (pytest.approx(first), pytest.approx(second, abs=1e-7))
        else:
            assert (record.mean_abs, record.l2) == (pytest.approx(first), pytest.approx(second))
            assert record.update_l2 == pytest.approx(update)  # step 0's too: the weights before it were copied
        assert record.size == dict(model.named_parameters())[name.removeprefix("gradient/")].numel()


def test_the_torch_adapter_copies_the_weights_only_across_optimizer_step(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from trainmon.debug.torch import TorchHook

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to(torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    hook = TorchHook(model, optimizer, save_interval=3, tensor_dir=tmp_path, host="h")
    copies: list[int] = []  # what the hook holds as the optimizer steps (this runs after the hook's pre-hook)
    optimizer.register_step_pre_hook(lambda *_: copies.append(len(hook._before)))
    held = []
    for _ in range(7):
        optimizer.zero_grad()
        model(torch.randn(2, 4, dtype=torch.bfloat16)).float().sum().backward()
        before = model.weight.detach().float().clone()
        optimizer.step()
        held.append((len(hook._before), len(hook._kept)))  # through the next forward and backward pass
        update = float(torch.linalg.vector_norm(model.weight.detach().float() - before))
    hook.close()
    assert copies == [2, 0, 0, 2, 0, 0, 2] and held == [(0, 0)] * 7  # steps 0, 3, 6: copied, then let go
    weight = {r.step: r for r in recorded(tmp_path / "h.jsonl") if r.name == "weight"}
    assert sorted(weight) == [0, 3, 6] and weight[6].update_l2 == pytest.approx(update, rel=1e-6)
    exact = model.weight.detach().float()
    assert (weight[6].l2, weight[6].mean_abs) == (pytest.approx(float(torch.linalg.vector_norm(exact)), rel=1e-6),
                                                  pytest.approx(float(exact.abs().mean()), rel=1e-6))


def test_the_torch_adapter_without_an_optimizer_and_torch_tensors_in_record(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from trainmon.debug.torch import TorchHook

    model = torch.nn.Linear(2, 1)
    torch.nn.init.zeros_(model.weight)
    hook = TorchHook(model, save_interval=1, tensor_dir=tmp_path, host="h", gradients=False)
    hook.record("activation", torch.tensor([[1.0, float("nan")]], requires_grad=True))  # reduced by torch
    hook.end_step()  # the loop ends its steps itself
    assert {kept.device.type for _, kept in hook._kept.values()} == {"cpu"}  # the copies for step 1: in host memory
    with torch.no_grad():
        model.weight += 3.0
    hook.end_step()
    hook.close()
    assert [r.update_l2 for r in recorded(tmp_path / "h.jsonl") if r.name == "weight" and r.step == 1] == [
        pytest.approx(math.sqrt(18))]
    found = {r.name: r for r in recorded(tmp_path / "h.jsonl") if r.step == 0}
    assert set(found) == {"activation", "weight", "bias"}
    assert (found["activation"].nan, found["activation"].size) == (1, 2)
    assert found["weight"].zero_fraction == 1.0 and found["weight"].collections == {"weights"}
