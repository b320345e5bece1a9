"""verify's light loading: heavy inline weights stay in the model file (issue 29)."""

from __future__ import annotations

import contextlib
import io
import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.cli import main
from onnxsurgeon.external import is_external, read_tensor
from onnxsurgeon.io import load
from onnxsurgeon.verify import compare
from onnxsurgeon.verify import light as light_mod
from onnxsurgeon.verify import rewrite as rewrite_mod
from onnxsurgeon.verify import run as run_mod
from onnxsurgeon.verify.light import load_light, referencing

F = TensorProto.FLOAT
WIDTH = 48  # 48x48 float32 = 9216 bytes: heavy (>= 4096)


def _chain(scale_layer: int | None = None, depth: int = 4) -> onnx.ModelProto:
    """x -> (MatMul W_k -> Relu) x depth -> y, a small bias inline; W_scale_layer perturbed."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for k in range(depth):
        w = rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) / 7
        if k == scale_layer:
            w = w * 1.01 + 1e-3
        inits.append(numpy_helper.from_array(w, f"W{k}"))
        nodes.append(helper.make_node("MatMul", [prev, f"W{k}"], [f"mm{k}"], name=f"mm{k}"))
        nodes.append(helper.make_node("Relu", [f"mm{k}"], [f"r{k}"], name=f"relu{k}"))
        prev = f"r{k}"
    inits.append(numpy_helper.from_array(np.full((WIDTH,), 0.5, np.float32), "b"))
    nodes.append(helper.make_node("Add", [prev, "b"], ["y"], name="bias"))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                            [1, WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def light_everything(monkeypatch):
    monkeypatch.setattr(light_mod, "LIGHT_MIN_BYTES", 1)


def test_light_load_leaves_heavy_weights_in_the_file(tmp_path, light_everything):
    path = tmp_path / "m.onnx"
    onnx.save(_chain(), str(path))
    full = onnx.load(str(path))
    model = load_light(path)
    assert model.proto.ByteSize() < full.ByteSize() // 4
    inits = {t.name: t for t in model.proto.graph.initializer}
    for t in full.graph.initializer:
        light = inits[t.name]
        heavy = len(t.raw_data) >= light_mod.HEAVY_RAW_BYTES
        assert is_external(light) == heavy
        if heavy:
            assert {e.key: e.value for e in light.external_data}["location"] == "m.onnx"
        assert np.array_equal(read_tensor(light, model.base_dir), numpy_helper.to_array(t))
    assert [n.name for n in model.proto.graph.node] == [n.name for n in full.graph.node]


def test_compare_of_light_models_reports_what_full_loads_report(tmp_path, light_everything,
                                                                 monkeypatch):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(_chain(), str(a))
    onnx.save(_chain(scale_layer=2), str(b))
    light = compare(a, b)
    full = compare(load(a), load(b))
    assert not light.ok and light.divergence is not None
    assert light.divergence.node == "mm2"
    assert light.divergence.differing_weights == ("W2",)
    assert light.to_json() == full.to_json()
    assert compare(a, a).ok


def test_a_hard_linked_model_file_is_loaded_whole(tmp_path, light_everything):
    path = tmp_path / "m.onnx"
    onnx.save(_chain(), str(path))
    os.link(path, tmp_path / "twin.onnx")  # external data may not name a hard-linked file
    model = load_light(path)
    assert not any(is_external(t) for t in model.proto.graph.initializer)


def test_referencing_points_unchanged_weights_into_the_file_and_keeps_changed_ones(
        tmp_path, light_everything):
    """A verb's output whose weights are the input file's: each heavy weight the file holds with
    the same bytes (under its name, or renamed at its position) becomes a reference into it (no
    copy); a changed one stays inline."""
    path = tmp_path / "m.onnx"
    onnx.save(_chain(), str(path))
    changed = _chain(scale_layer=2)  # W2 differs from the file's
    changed.graph.initializer[1].name = "V1"  # renamed (its readers too)
    changed.graph.node[2].input[1] = "V1"
    light = referencing(changed, path)
    assert light is not None
    inits = {t.name: t for t in light.graph.initializer}
    assert [name for name, t in inits.items() if is_external(t)] == ["W0", "V1", "W3"]
    assert inits["W2"].raw_data and not is_external(inits["W2"])
    for t in changed.graph.initializer:
        assert np.array_equal(read_tensor(inits[t.name], tmp_path), numpy_helper.to_array(t))
    assert light.graph.node == changed.graph.node
    assert light.ByteSize() < changed.ByteSize() // 2
    os.link(path, tmp_path / "twin.onnx")  # a hard-linked file is never named
    assert referencing(changed, path) is None


def test_insert_verify_runs_sessions_on_references_with_the_same_report(tmp_path, monkeypatch,
                                                                       light_everything):
    """``insert --verify`` on a model heavier than the in-memory limit: the original, the
    rewritten model and the cut model reach onnxruntime as light bytes whose weights are read
    from the input file (nothing staged on disk), all their sessions given the same values of
    those weights (one copy, over the file's bytes), and the report is the one staging copies
    gives."""
    path = tmp_path / "m.onnx"
    onnx.save(_chain(), str(path))
    monkeypatch.setattr(run_mod, "SESSION_BYTES_LIMIT", 16 * 1024)  # the file (37 KB) is heavy
    given: list[tuple[int, object]] = []
    shared: list[dict] = []
    real_session = run_mod.new_session

    def counted(model, **kwargs):
        given.append((len(model) if isinstance(model, bytes) else -1, kwargs.get("folder")))
        if kwargs.get("folder") is not None:
            shared.append({k: id(v) for k, v in (kwargs.get("initializers") or {}).items()})
        return real_session(model, **kwargs)

    monkeypatch.setattr(run_mod, "new_session", counted)

    def report(out: str) -> dict:
        argv = ["insert", str(path), "--at", "r1", "--op", "l2_normalize", "-o",
                str(tmp_path / out), "--verify", "--json"]
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(argv) == 0
        return json.loads(buf.getvalue())["verify"]

    light = report("a.onnx")
    # every session from bytes (none from a staged file) holding no weight (9216 bytes each)
    assert given and all(0 < n < 4 * WIDTH * WIDTH for n, _ in given)
    referenced = [f for n, f in given if f is not None]
    assert len(referenced) >= 3 and set(referenced) == {tmp_path.resolve()}
    assert sorted(shared[0]) == ["W0", "W1", "W2", "W3"] and all(s == shared[0] for s in shared)
    given.clear()
    monkeypatch.setattr(rewrite_mod, "referencing", lambda *a, **k: None)
    monkeypatch.setattr(light_mod, "referencing", lambda *a, **k: None)
    copied = report("b.onnx")
    assert not [f for _, f in given if f is not None]  # staged as copies this time
    assert light == copied and light["ok"]
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


def test_a_session_for_early_tensors_runs_only_the_nodes_they_need():
    """Early tensors of a long model (a deep batch): the session's model keeps only the nodes
    up to the last one computing them, and they are its only outputs; their values are the whole
    model's, bit for bit. Tensors needing nearly every node keep the model whole."""
    from onnxsurgeon.io import Model

    model = _chain(depth=10)
    feed = {"x": np.random.default_rng(0).standard_normal((1, WIDTH)).astype(np.float32)}
    with run_mod.Workspace() as ws:
        staged = run_mod.Staged(Model(model), ws, "m")
        variant, read_as = staged._variant(["mm1", "r2"], typed=False)
        assert isinstance(variant, bytes)
        small = onnx.ModelProto.FromString(variant)
        assert [n.name for n in small.graph.node] == ["mm0", "relu0", "mm1", "relu1", "mm2",
                                                       "relu2"]
        assert [o.name for o in small.graph.output] == ["mm1", "r2"] and set(read_as) == {"mm1", "r2"}
        with staged.session(["mm1", "r2"]) as runner:
            early = runner.run(feed)
        whole, _ = staged._variant(["mm1", "r2", "r9"], typed=False)
        assert len(onnx.ModelProto.FromString(whole).graph.node) == len(model.graph.node)
        with staged.session(["mm1", "r2", "r9"]) as runner:
            full = runner.run(feed)
    for name in ("mm1", "r2"):
        assert np.array_equal(early[name].view(np.uint32), full[name].view(np.uint32))


def test_a_large_deep_batch_runs_in_parts_with_the_same_result(monkeypatch):
    """A batch whose values exceed RUN_BYTES is computed by several runs of about equal size
    (each of the model up to its last tensor): more sessions, the same deep comparison and
    report as one run of the whole batch."""
    import importlib

    from onnxsurgeon.verify import deep as deep_mod

    compare_mod = importlib.import_module("onnxsurgeon.verify.compare")
    monkeypatch.setattr(compare_mod, "KEPT_BYTES", 0)  # the deep batch runs its own sessions
    runs = {"n": 0}
    real = run_mod.Runner.run

    def counted(self, feeds):
        runs["n"] += 1
        return real(self, feeds)

    monkeypatch.setattr(run_mod.Runner, "run", counted)
    ref, cand = _chain(depth=12), _chain(7, depth=12)
    whole = compare(ref, cand, deep=True)
    one, runs["n"] = runs["n"], 0
    monkeypatch.setattr(deep_mod, "RUN_BYTES", 5 * WIDTH * 4)  # five tensors' values per run
    parts = compare(ref, cand, deep=True)
    assert runs["n"] >= one + 2 * 2 * 4  # 2 samples x 2 models x (5 parts - 1) more runs
    assert whole.verdict == parts.verdict == "fail"
    assert parts.deep is not None and parts.deep.first_difference is not None
    assert parts.deep.first_difference.tensor == "mm7"
    assert whole.to_json() == parts.to_json()


def test_deep_keeps_its_last_batch_from_the_comparing_runs(monkeypatch):
    """``--deep`` on a model whose pair does not saturate: the sessions comparing the pairs
    compute the deep comparison's last batch (here all of it) and keep it, so the deep
    comparison runs no sample again (before: only the frontier was kept and the batch ran both
    samples a second time); the report is the one of running it."""
    import importlib

    compare_mod = importlib.import_module("onnxsurgeon.verify.compare")
    runs = {"settling": 0}
    real_run, real_settle = run_mod.Runner.run, compare_mod.settle
    busy = []

    def counted(self, feeds):
        runs["settling"] += bool(busy)
        return real_run(self, feeds)

    def settle(*args, **kwargs):
        busy.append(1)
        try:
            return real_settle(*args, **kwargs)
        finally:
            busy.pop()

    monkeypatch.setattr(run_mod.Runner, "run", counted)
    monkeypatch.setattr(compare_mod, "settle", settle)
    ref, cand = _chain(depth=6), _chain(4, depth=6)
    kept = compare(ref, cand, deep=True)
    assert runs["settling"] == 0
    assert kept.deep is not None and kept.deep.forced and kept.deep.first_difference is not None
    assert kept.deep.first_difference.tensor == "mm4" and len(kept.deep.tensors) == 13
    monkeypatch.setattr(compare_mod, "KEPT_BYTES", 0)
    assert compare(ref, cand, deep=True).to_json() == kept.to_json()
    assert runs["settling"] == 2 * 2  # without room to keep: two samples through each again


def test_weights_of_light_models_are_compared_a_chunk_at_a_time(tmp_path, light_everything,
                                                                 monkeypatch):
    import importlib

    locate_mod = importlib.import_module("onnxsurgeon.verify.locate")  # not the function
    monkeypatch.setattr(locate_mod, "_CHUNK", 1000)  # 9216 bytes: ten chunks, the last partial
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(_chain(), str(a))
    model = _chain(scale_layer=2)
    w3 = numpy_helper.to_array(model.graph.initializer[3]).copy()
    w3[-1, -1] += 1.0  # the very last element differs: the last (partial) chunk tells
    model.graph.initializer[3].CopyFrom(numpy_helper.from_array(w3, "W3"))
    onnx.save(model, str(b))
    ra, rb = load_light(a), load_light(b)
    with run_mod.Workspace() as ws:
        ref = run_mod.Staged(ra, ws, "reference")
        cand = run_mod.Staged(rb, ws, "candidate")
        got = {}
        for t, u in zip(ra.proto.graph.initializer, rb.proto.graph.initializer, strict=True):
            assert is_external(t) == is_external(u) == (t.name != "b")
            want = (read_tensor(t, ra.base_dir).tobytes() == read_tensor(u, rb.base_dir).tobytes())
            assert locate_mod._same_external_bytes(t, u, ra.base_dir, rb.base_dir) == (
                want if is_external(t) else None)
            got[t.name] = locate_mod.same_initializer(ref, cand, t.name, u.name)
            assert got[t.name] == want
    assert got == {"W0": True, "W1": True, "W2": False, "W3": False, "b": True}
