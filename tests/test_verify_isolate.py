"""Issue 4 leftovers: .npz datasets streamed with bounded memory, and isolated runs (a child
process with a wall-time and an address-space limit) for untrusted models."""

from __future__ import annotations

import gc
import json
import subprocess
import weakref
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import SurgeryError, UsageError
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.verify import (
    ModelMemoryError,
    ModelTimeoutError,
    NpzSamples,
    compare,
    run_model,
    verify_log,
)
from onnxsurgeon.verify import inputs as inputs_mod

from . import builders
from .cli_helpers import cli as run_cli

ROOT = Path(__file__).resolve().parent.parent
F = TensorProto.FLOAT


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=120)


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def scaled_cnn(factor: float = 1 + 1e-3) -> onnx.ModelProto:
    """tiny_cnn with fc.weight scaled: logits differ, the first differing tensor is 'logits'."""
    model = builders.tiny_cnn()
    init = next(i for i in model.graph.initializer if i.name == "fc.weight")
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(factor),
                                          "fc.weight"))
    return model


def spin_model() -> onnx.ModelProto:
    """A Loop of 10**15 cheap Adds: runs for days unless stopped."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "one"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", F, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, [1])],
        [numpy_helper.from_array(np.ones(1, np.float32), "one")])
    return _model(helper.make_graph(
        [helper.make_node("Loop", ["trip", "cond", "x"], ["y"], body=body, name="spin")], "spin",
        [helper.make_tensor_value_info("x", F, [1])], [helper.make_tensor_value_info("y", F, [1])],
        [numpy_helper.from_array(np.array(10**15, np.int64), "trip"),
         numpy_helper.from_array(np.array(True), "cond")]))


def bomb_model() -> onnx.ModelProto:
    """Expand of one float to 2**16 x 2**15: an 8 GiB output."""
    return _model(helper.make_graph(
        [helper.make_node("Expand", ["x", "shape"], ["y"], name="bomb")], "bomb",
        [helper.make_tensor_value_info("x", F, [1])], [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.array([1 << 16, 1 << 15], np.int64), "shape")]))


def sequence_model() -> onnx.ModelProto:
    """x -> [x, Relu(x)] as a sequence output, plus a plain tensor output."""
    return _model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("SequenceConstruct", ["x", "r"], ["seq"], name="seq")], "seq",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_sequence_value_info("seq", F, None),
         helper.make_tensor_value_info("r", F, [2, 3])]))


def _dataset(folder: Path, n: int) -> list[dict[str, np.ndarray]]:
    folder.mkdir()
    rng = np.random.default_rng(11)
    samples = []
    for i in range(n):
        x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32) * (i + 1)
        np.savez(folder / f"s{i:02d}.npz", x=x)
        samples.append({"x": x})
    return samples


# -------------------------------------------------------------------------------- streaming
def test_npz_folder_report_equals_the_same_arrays_in_memory(tmp_path):
    samples = _dataset(tmp_path / "set", 5)
    ref, cand = builders.tiny_cnn(), scaled_cnn()
    seen: list[tuple[int, int]] = []
    streamed = compare(ref, cand, inputs=tmp_path / "set", progress=lambda i, n: seen.append((i, n)))
    in_memory = compare(ref, cand, inputs=samples)
    assert not streamed.ok and streamed.samples == 5
    assert streamed.divergence is not None and streamed.divergence.tensor == "logits"
    a, b = streamed.to_json(), in_memory.to_json()
    assert a.pop("inputs") == {"x": f"from {tmp_path / 'set'}"}
    assert b.pop("inputs") == {"x": "from the given arrays"}
    assert a == b
    assert seen == [(i, 5) for i in range(1, 6)]
    same = compare(ref, ref, inputs=tmp_path / "set")
    a, b = same.to_json(), compare(ref, ref, inputs=samples).to_json()
    assert same.ok and a.pop("inputs") != b.pop("inputs") and a == b


def test_npz_folder_is_streamed_one_sample_alive_at_a_time(tmp_path, monkeypatch):
    _dataset(tmp_path / "set", 6)
    real = inputs_mod._read_npz
    alive: list[weakref.ref[np.ndarray]] = []
    loads: list[int] = []

    def counting_reader(path: Path) -> dict[str, np.ndarray]:
        gc.collect()
        loads.append(sum(r() is not None for r in alive))  # earlier samples still alive
        arrays = real(path)
        alive.extend(weakref.ref(a) for a in arrays.values())
        return arrays

    monkeypatch.setattr(inputs_mod, "_read_npz", counting_reader)
    report = compare(builders.tiny_cnn(), scaled_cnn(), inputs=tmp_path / "set")
    assert not report.ok and report.samples == 6
    # six loads while streaming, one more to locate the divergence on the worst sample
    assert len(loads) == 7 and loads == [0] * 7
    specs = inputs_mod.input_specs(GraphIndex(builders.tiny_cnn()))
    lazy = inputs_mod.stream_samples(tmp_path / "set", specs)
    assert isinstance(lazy, NpzSamples) and len(lazy) == 6 and len(loads) == 7  # nothing read


def test_npz_folder_names_are_checked_before_anything_runs(tmp_path):
    samples = _dataset(tmp_path / "set", 3)
    np.savez(tmp_path / "set" / "s99.npz", y=samples[0]["x"])
    with pytest.raises(UsageError, match="s99.npz.*not inputs of the model"):
        compare(builders.tiny_cnn(), builders.tiny_cnn(), inputs=tmp_path / "set")


# -------------------------------------------------------------------------------- isolation
def test_isolated_compare_gives_the_same_report_as_in_process(tmp_path):
    ref, cand = builders.tiny_cnn(), scaled_cnn()
    isolated = compare(ref, cand, isolate=True)
    assert not isolated.ok and isolated.divergence is not None
    assert isolated.to_json() == compare(ref, cand).to_json()
    seq = sequence_model()
    assert compare(seq, seq, isolate=True).to_json() == compare(seq, seq).to_json()
    feed = {"x": np.arange(-3, 3, dtype=np.float32).reshape(2, 3)}
    got = run_model(seq, feed, outputs=["seq", "r"], isolate=True)
    assert [a.tolist() for a in got["seq"]] == [feed["x"].tolist(), np.maximum(feed["x"], 0).tolist()]


def test_isolated_rewrite_verification_matches_in_process():
    from onnxsurgeon.io import Model
    from onnxsurgeon.surgery import insert

    original = builders.tiny_cnn()
    rewritten = Model(builders.tiny_cnn())
    insert(rewritten, "act", op="l2_normalize", params={"axis": 1})
    isolated = verify_log(original, rewritten, timeout=20)
    assert isolated.ok and isolated.to_json() == verify_log(original, rewritten).to_json()


def test_timeout_stops_a_long_loop_with_a_clean_error():
    with pytest.raises(ModelTimeoutError, match=r"longer than 0\.5 s.*raise --timeout") as err:
        compare(spin_model(), spin_model(), timeout=0.5)
    assert isinstance(err.value, SurgeryError) and "\n" not in str(err.value)


def test_memory_limit_stops_a_huge_expand_with_a_clean_error():
    with pytest.raises(ModelMemoryError, match=r"more than 1024 MB.*raise --memory-limit"):
        run_model(bomb_model(), {"x": np.ones(1, np.float32)}, memory_limit=1024)


def test_cli_verify_timeout_and_memory_limit_exit_2_with_one_line(tmp_path):
    spin = tmp_path / "spin.onnx"
    bomb = tmp_path / "bomb.onnx"
    onnx.save(spin_model(), spin)
    onnx.save(bomb_model(), bomb)
    proc = cli("verify", spin, spin, "--isolate", "--timeout", "1")
    assert proc.returncode == 2 and proc.stdout == ""
    # On a loaded machine the child may already overrun while loading the session: either phase
    # must give the same one-line error naming the limit and the fix.
    assert proc.stderr.count("\n") == 1 and "longer than 1 s" in proc.stderr
    assert "raise --timeout" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli("verify", bomb, bomb, "--isolate", "--memory-limit", "1024")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "more than 1024 MB" in proc.stderr and "raise --memory-limit" in proc.stderr


def test_cli_isolated_verify_json_equals_in_process_and_rewrite_verify(tmp_path):
    cnn, cand = tmp_path / "cnn.onnx", tmp_path / "cand.onnx"
    onnx.save(builders.tiny_cnn(), cnn)
    onnx.save(scaled_cnn(), cand)
    plain = cli("verify", cnn, cand, "--json")
    isolated = cli("verify", cnn, cand, "--json", "--isolate", "--timeout", "30",
                   "--memory-limit", "2048")
    assert plain.returncode == isolated.returncode == 1
    assert json.loads(isolated.stdout) == json.loads(plain.stdout)
    out = tmp_path / "l2.onnx"
    proc = cli("insert", cnn, "-o", out, "--at", "act", "--op", "l2_normalize:axis=1", "--verify",
               "--isolate", "--timeout", "20")
    assert proc.returncode == 0, proc.stderr
    assert "ok: 5/5 pairs agree" in proc.stdout
    proc = cli("extract", cnn, "-o", tmp_path / "e.onnx", "--outputs", "act", "--timeout", "5")
    assert proc.returncode == 2 and "go with --verify" in proc.stderr
    assert not (tmp_path / "e.onnx").exists()
