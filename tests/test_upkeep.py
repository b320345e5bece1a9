"""One index kept across a recipe's steps (issue 12): after every verb the producer map and int
dataflow graph handed to the next step equal a fresh build of the model as the verb left it;
where a verb cannot say what it changed (bodies, nodes moved or pruned, extract's stops, nodes
out of order) nothing is kept and the next step builds its own; either way the recipe's output
is byte-identical to running each verb with an index of its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon import io
from onnxsurgeon.index import GraphIndex, _build_edges
from onnxsurgeon.io import Model, as_model, load
from onnxsurgeon.recipe import STEPS, apply_recipe, load_recipe, parse_recipe
from onnxsurgeon.recipe.apply import stamp
from onnxsurgeon.recipe.spec import StepContext
from onnxsurgeon.session import Session, active
from onnxsurgeon.surgery import copy, insert
from onnxsurgeon.surgery._edgewalk import type_by_edges
from tests import builders
from tests.cli_helpers import cli_main

F = TensorProto.FLOAT


def split_and_late() -> onnx.ModelProto:
    """A Split whose two outputs are read apart, an unnamed node, a dead branch, and a tensor
    ``c`` produced after a reader of ``a`` (rerouting that reader to ``c`` moves Exp up).

    x -> Split -> {a, b};  a -> Relu -> ra;  b -> Mul(b, b) -> bb;  a -> Neg -> dead
    x -> Exp -> c;  Add(ra, bb) -> s;  Add(s, c) -> y
    """
    nodes = [
        helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=1, num_outputs=2),
        helper.make_node("Relu", ["a"], ["ra"]),  # unnamed
        helper.make_node("Mul", ["b", "b"], ["bb"], name="sq"),
        helper.make_node("Neg", ["a"], ["dead"], name="neg"),
        helper.make_node("Sigmoid", ["x"], ["xs"], name="sig"),
        helper.make_node("Slice", ["xs", "st", "en", "ax"], ["c"], name="slice"),
        helper.make_node("Add", ["ra", "bb"], ["s"], name="add"),
        helper.make_node("Add", ["s", "c"], ["y"], name="add2"),
    ]
    ints = [onnx.numpy_helper.from_array(np.array([v], "int64"), n)
            for n, v in (("st", 0), ("en", 2), ("ax", 1))]
    graph = helper.make_graph(
        nodes, "split_and_late",
        [helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info("y", F, [2, 2])], ints,
        value_info=[helper.make_tensor_value_info(n, F, [2, 2]) for n in ("a", "b", "c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def funnel(n: int = 8) -> onnx.ModelProto:
    """A side branch first (x -> MatMul -> side, a graph output), then ``n`` MatMul -> Relu
    blocks whose widths alternate 8, 3, 8, 3, ... (r0 [1,8], r1 [1,3], ...; output y): every
    node's type differs from its neighbours', so a type kept for the wrong node shows."""
    rng = np.random.default_rng(0)
    widths = [4] + [8 if i % 2 == 0 else 3 for i in range(n)]

    def weight(name: str, shape: tuple[int, int]) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype("float32"), name)

    nodes = [helper.make_node("MatMul", ["x", "Ws"], ["side"], name="side_mm")]
    inits = [weight("Ws", (4, 5))]
    prev = "x"
    for i in range(n):
        inits.append(weight(f"W{i}", (widths[i], widths[i + 1])))
        out = "y" if i == n - 1 else f"r{i}"
        nodes += [helper.make_node("MatMul", [prev, f"W{i}"], [f"mm{i}"], name=f"MatMul_{i}"),
                  helper.make_node("Relu", [f"mm{i}"], [out], name=f"Relu_{i}")]
        prev = out
    graph = helper.make_graph(
        nodes, "funnel", [helper.make_tensor_value_info("x", F, [1, 4])],
        [helper.make_tensor_value_info("y", F, [1, widths[n]]),
         helper.make_tensor_value_info("side", F, [1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", builders.OPSET)])


def dead_first() -> onnx.ModelProto:
    """A node nothing reads first (Tanh), then x -> Relu -> a -> Sigmoid -> s (an output),
    x -> Neg -> b -> Exp -> e, Add(e, a) -> y: rerouting Add's ``a`` to ``b`` with prune drops
    Tanh while ``a`` stays alive."""
    nodes = [helper.make_node("Tanh", ["x"], ["t"], name="tanh"),
             helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Neg", ["x"], ["b"], name="neg"),
             helper.make_node("Exp", ["b"], ["e"], name="exp"),
             helper.make_node("Sigmoid", ["a"], ["s"], name="sig"),
             helper.make_node("Add", ["e", "a"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes, "dead_first", [helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info(n, F, [2, 4]) for n in ("y", "s")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", builders.OPSET)])


def out_of_order() -> onnx.ModelProto:
    """The chain with its nodes listed backwards (valid once sorted; never sorted here)."""
    model = builders.chain(4)
    nodes = list(model.graph.node)[::-1]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def block() -> onnx.ModelProto:
    """A one-input one-output block with a weight of its own: Relu(inp * k)."""
    k = onnx.numpy_helper.from_array(np.full([4], 0.5, "float32"), "k")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["inp", "k"], ["m"], name="mul"),
         helper.make_node("Relu", ["m"], ["out"], name="relu")], "block",
        [helper.make_tensor_value_info("inp", F, [1, 4])],
        [helper.make_tensor_value_info("out", F, [1, 4])], [k])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", builders.OPSET)])


CHAIN_STEPS = [  # the benchmark's recipe, shrunk
    {"insert": {"at": "relu5", "op": "scale", "params": {"factor": 2.0}}},
    {"copy": {"outputs": ["relu3"], "prefix": "twin/"}},
    {"reroute": {"from": "relu8", "to": "relu7", "consumers": ["MatMul_9"]}},
    {"rename": {"mapping": {"y": "out"}}},
    {"extract": {"outputs": ["out", "twin/relu3"]}},
    {"insert": {"at": "relu2", "op": "scale", "params": {"factor": 0.5}}},
]

def _inline(text: bytes) -> str:
    from onnxsurgeon.pattern import load_pattern, pattern_bytes

    return pattern_bytes(load_pattern(text))


# replace's sites (issue 28): MatMul -> Add -> Relu, and R the same with Sum and a weight of
# its own (a leaf appended), so the splice removes, inserts and renumbers everywhere
BLOCK_P = _inline(b"g (float[1,4] p, float[4,4] w, float[4] b) => (float[1,4] r) {\n"
                  b" h = MatMul(p, w)\n a = Add(h, b)\n r = Relu(a) }")
BLOCK_R = _inline(b"g (float[1,4] p, float[4,4] w, float[4] b) => (float[1,4] r)"
                  b" <float[1] one = {1.0}> {\n h = MatMul(p, w)\n a = Sum(b, h)\n"
                  b" s = Mul(a, one)\n r = Relu(s) }")
RELU_P = _inline(b"g (float[1,4] p) => (float[1,4] r) { r = Relu(p) }")
RELU_R = _inline(b"g (float[1,4] p) => (float[1,4] r) { q = Identity(p)\n r = Relu(q) }")

# (model, steps, which steps hand an index on)
CASES: dict[str, tuple[Any, list[dict[str, Any]], list[bool]]] = {
    "replace_sites": (lambda: builders.chain(12), [
        {"insert": {"at": "relu2", "op": "scale", "params": {"factor": 2.0}}},
        {"replace": {"pattern": BLOCK_P, "replacement": BLOCK_R}},  # 11 sites (one is in the
        {"copy": {"outputs": ["relu6"], "prefix": "c/"}},          # way of the inserted block)
        {"replace": {"pattern": RELU_P, "replacement": RELU_R}},  # every Relu, copies too
        {"insert": {"at": "relu9", "op": "scale", "params": {"factor": 0.5}}},
    ], [True] * 5),
    "chain": (lambda: builders.chain(12), CHAIN_STEPS, [True] * 6),
    "chain_outputs_inputs_regex": (lambda: builders.chain(12), [
        {"insert": {"at": "y", "op": "l2_normalize", "params": {"axis": 1}}},  # y keeps its name
        {"insert": {"at": "x", "op": "scale", "params": {"factor": 3.0}}},  # at a graph input
        {"rename": {"mapping": {"MatMul_0": "first"}, "nodes": True}},
        {"rename": {"regex": [["^relu", "r"]]}},  # many names at once
        {"copy": {"outputs": ["r4"], "weights": "shared", "prefix": "c/"}},
        {"insert": {"at": "add6", "op": "scale", "params": {"factor": 1.5}, "as_output": True}},
    ], [True] * 6),
    "funnel": (funnel, [
        {"insert": {"at": "r4", "op": "scale", "params": {"factor": 2.0}}},
        {"insert": {"at": "r1", "op": "scale", "params": {"factor": 2.0}}},  # earlier: ids move
        {"copy": {"outputs": ["r5"]}},
        {"reroute": {"from": "r3", "to": "r1", "consumers": ["MatMul_4"]}},
        {"extract": {"outputs": ["y"]}},  # the side branch before everything goes: ids move
        {"insert": {"at": "r6", "op": "scale", "params": {"factor": 2.0}}},
    ], [True] * 6),
    "graph_blocks": (lambda: builders.chain(6), [
        {"insert": {"at": "relu1", "graph": "block.onnx"}},
        {"insert": {"at": "relu1", "graph": "block.onnx"}},  # the same names again: renamed
        {"copy": {"outputs": ["relu3"], "weights": "independent"}},
        {"insert": {"at": "copy/relu3", "graph": "block.onnx", "as_output": True}},
    ], [True] * 4),
    "chain_stops_and_prune": (lambda: builders.chain(12), [
        {"copy": {"outputs": ["relu6"], "replace_inputs": {"relu2": "relu1"}}},
        {"extract": {"outputs": ["relu6", "copy/relu6"], "inputs": ["relu3"]}},  # relu3: input
        {"insert": {"at": "relu5", "op": "scale", "params": {"factor": 2.0}}},
        {"reroute": {"from": "relu4", "to": "relu3", "prune": True}},  # 3 nodes pruned
        {"rename": {"mapping": {"relu6": "six"}}},
        {"copy": {"outputs": ["six"], "prefix": "again/"}},
        {"extract": {"outputs": ["again/six"]}},
    ], [True] * 7),
    "extract_a_prefix": (lambda: builders.chain(12), [
        {"insert": {"at": "relu8", "op": "scale", "params": {"factor": 2.0}}},  # types 0-26
        {"extract": {"outputs": ["relu5"]}},  # nodes 0-17 stay: cut, not renumbered
        {"insert": {"at": "relu3", "op": "scale", "params": {"factor": 0.5}}},
        {"copy": {"outputs": ["relu5"], "prefix": "c/"}},
        {"extract": {"outputs": ["relu2", "relu4"]}},  # a prefix again, two outputs
        {"insert": {"at": "relu1", "op": "scale", "params": {"factor": 3.0}}},
    ], [True] * 6),
    "prune_with_a_live_source": (dead_first, [
        {"reroute": {"from": "a", "to": "b", "consumers": ["add"], "prune": True}},
        {"copy": {"outputs": ["y"]}},
    ], [True, True]),
    "stop_at_one_output": (split_and_late, [
        {"extract": {"outputs": ["y"], "inputs": ["b"]}},  # Split stays for a: b renamed away
        {"insert": {"at": "bb", "op": "scale", "params": {"factor": 2.0}}},
        {"reroute": {"from": "a", "to": "c", "prune": True}},  # moves Slice up: rebuild
        {"copy": {"outputs": ["y"]}},
    ], [True, True, False, True]),
    "fold_fusing_on_loads_index": (lambda: builders.chain(8), [
        {"fold": {}},  # nothing folds: the Gemms are spliced into load's index, unapplied
        {"insert": {"at": "relu2", "op": "scale", "params": {"factor": 2.0}}},
        {"copy": {"outputs": ["relu5"]}},
    ], [True] * 3),
    "a_verb_that_says_nothing": (lambda: builders.chain(8), [
        {"insert": {"at": "relu2", "op": "scale", "params": {"factor": 2.0}}},
        {"bypass": {"nodes": ["Relu_4"]}},  # hands nothing on: the insert's index is stale
        {"copy": {"outputs": ["relu5"]}},
    ], [True, False, True]),
    "tiny_cnn": (builders.tiny_cnn, [
        {"insert": {"at": "act", "op": "l2_normalize", "params": {"axis": 1}}},
        {"copy": {"outputs": ["logits"], "prefix": "t/"}},  # weights copied: new leaves
        {"rename": {"mapping": {"conv5_out": "c5", "fc.weight": "fcw"}}},
        {"extract": {"outputs": ["t/logits", "side_out"]}},
    ], [True] * 4),
    "ir3_inputs": (builders.init_as_input, [
        {"copy": {"outputs": ["y"], "prefix": "k/"}},  # IR 3: copied weights become inputs too
        {"insert": {"at": "h", "op": "scale", "params": {"factor": 2.0}}},
        {"rename": {"mapping": {"W": "weight"}}},
        {"extract": {"outputs": ["k/y"]}},
    ], [True] * 4),
    "split_and_late": (split_and_late, [
        {"rename": {"mapping": {"a": "a2", "b": "b2"}}},  # both outputs of one node
        {"insert": {"at": "b2", "op": "scale", "params": {"factor": 2.0}}},
        {"reroute": {"from": "ra", "to": "dead", "consumers": ["add"]}},
        {"extract": {"outputs": ["y"]}},  # drops Relu: the kept nodes are not a prefix
        {"reroute": {"from": "a2", "to": "c"}},  # c comes too late: its producers move up
        {"copy": {"outputs": ["y"]}},
    ], [True, True, True, True, False, True]),
    "if_capture": (builders.if_capture, [
        {"insert": {"at": "a", "op": "scale", "params": {"factor": 2.0}}},
        {"copy": {"outputs": ["z"]}},
        {"rename": {"mapping": {"a": "a2"}}},
    ], [False] * 3),
    "loop_capture": (builders.loop_capture, [
        {"reroute": {"from": "b", "to": "x"}},
        {"insert": {"at": "y", "op": "scale", "params": {"factor": 2.0}}},
    ], [False] * 2),
}


def _recipe(steps: list[dict[str, Any]], tmp_path: Path) -> Any:
    onnx.save(block(), str(tmp_path / "block.onnx"))
    return parse_recipe({"onnxsurgeon": 1, "steps": steps}, base_dir=tmp_path)


def _apply_checking_each_step(model: Model, recipe: Any, typed: list[int] | None = None, *,
                              loaded: bool = False) -> list[bool]:
    """Run ``recipe`` (``loaded``: in a session opened on the model as loaded, as the CLI
    does; else in the one apply_recipe opens); after each step compare what it handed on with
    a fresh build (``typed`` gets the number of node types carried on, each checked too)."""
    kept: list[bool] = []
    typed = [] if typed is None else typed

    def after_step(done: int, total: int) -> None:
        session = active(model)
        assert session is not None, "the steps share one session"
        assert io.take_loaded_index(model) is None  # load's index went to the first step
        index = session.kept_index()
        edges = _build_edges(model.proto.graph)
        if index is None:
            kept.append(False)
            return
        assert index.edges is not None
        assert list(index.producer.items()) == list(GraphIndex(model.proto).producer.items())
        assert index.edges == edges, f"step {done}: the kept int graph is not the model's"
        typed.append(_check_kept_types(model, index.memo.get("edge_types", {})))
        kept.append(True)

    if loaded:
        with Session(model, loaded=True) as session:
            apply_recipe(model, recipe, progress=after_step, session=session)
            assert active(model) is session  # the caller's session stays open
    else:
        apply_recipe(model, recipe, progress=after_step)
    assert active(model) is None  # the caller owns the proto again
    return kept


def _check_kept_types(model: Model, types: dict[int, Any]) -> int:
    """Every node type carried to the next step equals the type pass on a fresh index; how
    many there are."""
    fresh = GraphIndex(model.proto, _producer=GraphIndex(model.proto).producer,
                       _edges=_build_edges(model.proto.graph))
    for k, (elem, dims) in types.items():
        name = model.proto.graph.node[k].output[0]
        assert type_by_edges(fresh, name) == helper.make_tensor_value_info(name, elem,
                                                                           list(dims)), name
    return len(types)


def _each_verb_on_its_own(proto: onnx.ModelProto, recipe: Any) -> onnx.ModelProto:
    """The same steps, every verb building its index from the proto (a bare proto keeps none)."""
    for step in recipe.steps:
        STEPS[step.verb].run(proto, step.resolved(recipe.base_dir), StepContext())
    stamp(proto, recipe)
    return proto


@pytest.mark.parametrize("case", list(CASES))
def test_the_kept_index_equals_a_fresh_build_after_every_step(case, tmp_path):
    build, steps, expected = CASES[case]
    path = tmp_path / "m.onnx"
    onnx.save(build(), str(path))
    recipe = _recipe(steps, tmp_path)
    model = load(path)
    typed: list[int] = []
    kept = _apply_checking_each_step(model, recipe, typed, loaded=True)
    assert kept == expected  # the fast path is taken where it can be, and only there
    if case == "chain":  # insert typed relu5's closure (nodes 0-17, before its block at 18);
        # copy appends; reroute typed relu8's closure (0-27) and rewired MatMul_9 (28)
        assert typed[:3] == [18, 18, 28]
    if case == "funnel":  # types are carried past every step, and checked
        assert min(typed) > 0
    baseline = _each_verb_on_its_own(load(path).proto, recipe)
    assert model.proto.SerializeToString() == baseline.SerializeToString()


def test_nodes_out_of_order_keep_nothing_and_give_the_same_model(tmp_path):
    recipe = _recipe([
        {"insert": {"at": "relu1", "op": "scale", "params": {"factor": 2.0}}},
        {"copy": {"outputs": ["relu2"]}},
        {"rename": {"mapping": {"y": "out"}}},
    ], tmp_path)
    model = as_model(out_of_order())  # not loaded, so never sorted
    assert _build_edges(model.proto.graph) is None
    assert _apply_checking_each_step(model, recipe) == [False] * 3
    baseline = _each_verb_on_its_own(out_of_order(), recipe)
    assert model.proto.SerializeToString() == baseline.SerializeToString()


def _read_x(proto: onnx.ModelProto) -> None:
    """By hand: MatMul_3 reads the graph input instead of relu2 (a structural change)."""
    node = next(n for n in proto.graph.node if n.name == "MatMul_3")
    node.input[0] = "x"


def test_a_kept_index_is_not_used_once_the_caller_touches_the_proto(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(builders.chain(6), str(path))
    model = load(path)
    insert(model, "relu1", op="scale", params={"factor": 2.0})
    assert active(model) is None  # no session: the journal went nowhere
    _read_x(model.proto)
    result = copy(model, ["relu3"], prefix="c/")
    assert sorted(result.nodes) == ["Add_3", "MatMul_3", "Relu_3"]  # not the stale closure
    by_hand = load(path).proto
    insert(by_hand, "relu1", op="scale", params={"factor": 2.0})
    _read_x(by_hand)
    copy(by_hand, ["relu3"], prefix="c/")
    assert model.proto.SerializeToString() == by_hand.SerializeToString()


@pytest.mark.parametrize(("case", "rename"), [
    ("chain", {"x": "input"}), ("chain_outputs_inputs_regex", {"B": "bias"}),
    ("split_and_late", {"x": "input"})])
def test_apply_from_the_cli_writes_the_model_each_verb_alone_gives(case, rename, tmp_path,
                                                                   capsys):
    """The CLI hands load's index to the first step (rename first too) and every step's index
    to the next: the file equals the verbs run one by one, each with an index of its own."""
    build, steps, _ = CASES[case]
    path, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(build(), str(path))
    steps = [{"rename": {"mapping": rename}}, *steps]
    recipe_path = tmp_path / "r.json"
    recipe_path.write_text(json.dumps({"onnxsurgeon": 1, "steps": steps}))
    code, _, err = cli_main(capsys, "apply", recipe_path, path, "-o", out)
    assert code == 0, err
    baseline = _each_verb_on_its_own(load(path).proto, load_recipe(recipe_path))
    assert load(out).proto.SerializeToString() == baseline.SerializeToString()


@pytest.mark.parametrize("name, kept", [("fresh", True), ("W", False), ("relu1", False),
                                        ("x", False), ("", False)])
def test_appended_initializers_take_the_next_ids_or_the_upkeep_gives_up(tmp_path, name, kept):
    """leaves_appended: a new name takes the next leaf id (as a fresh build numbers it); a name
    some leaf or node output already has, or none, is not a valid graph: rebuild."""
    from onnxsurgeon.upkeep import Upkeep

    path = tmp_path / "m.onnx"
    onnx.save(builders.chain(4), str(path))
    with Session(load(path), loaded=True) as session:
        model = session.model
        upkeep = Upkeep(session.index())
    model.proto.graph.initializer.append(
        onnx.numpy_helper.from_array(np.ones(4, np.float32), name))
    upkeep.leaves_appended([name])
    state = upkeep.result()
    assert (state is not None) == kept
    if state is not None:
        assert state[1] == _build_edges(model.proto.graph)


_LONG_STEPS = [
    {"insert": {"at": "relu3500", "op": "scale", "params": {"factor": 2.0}}},
    {"rename": {"mapping": {"relu5000": "five"}}},
    {"copy": {"outputs": ["relu12"], "prefix": "c/"}},
    {"insert": {"at": "five", "op": "scale", "params": {"factor": 0.5}}},
]
_LONG_CLI = [
    ["insert", "--at", "relu3500", "--op", "scale:factor=2.0"],
    ["rename", "--map", "relu5000=five"],
    ["copy", "--outputs", "relu12", "--prefix", "c/"],
    ["insert", "--at", "five", "--op", "scale:factor=0.5"],
]


def test_a_recipe_on_a_long_chain_builds_its_index_once_and_equals_the_cli_steps(
        tmp_path, capsys, monkeypatch):
    """21,000 nodes, 4 steps in one session: the only full index build is the first step's
    (none at all when load's index is handed to it, as ``apply`` does); every later step starts
    from the index the one before kept. The file equals the four commands run one by one."""
    path = tmp_path / "m.onnx"
    onnx.save(builders.chain(7000), str(path))
    recipe_path = tmp_path / "r.json"
    recipe_path.write_text(json.dumps({"onnxsurgeon": 1, "steps": _LONG_STEPS}))
    builds: list[int] = []
    real = GraphIndex.__init__

    def counted(self, model, *, _producer=None, **handed):
        if _producer is None:
            builds.append(len(model.graph.node))
        real(self, model, _producer=_producer, **handed)

    monkeypatch.setattr(GraphIndex, "__init__", counted)
    bare = as_model(load(path).proto)  # no load map: the first step builds
    result = apply_recipe(bare, load_recipe(recipe_path))
    assert len(result.steps) == 4
    assert builds == [21_000]
    builds.clear()
    out = tmp_path / "out.onnx"
    code, _, err = cli_main(capsys, "apply", recipe_path, path, "-o", out)
    assert code == 0, err
    assert builds == []  # load's index went to the first step, each step's to the next
    monkeypatch.setattr(GraphIndex, "__init__", real)
    step_in = path
    for k, argv in enumerate(_LONG_CLI):
        step_out = tmp_path / f"step{k}.onnx"
        code, _, err = cli_main(capsys, argv[0], step_in, "-o", step_out, *argv[1:])
        assert code == 0, err
        step_in = step_out
    by_cli = load(step_in).proto.SerializeToString()
    assert _without_recipe(load(out).proto) == by_cli
    assert _without_recipe(bare.proto) == by_cli


def _without_recipe(proto: onnx.ModelProto) -> bytes:
    """``proto``'s bytes without the recipe's provenance (the steps run alone have none)."""
    copied = onnx.ModelProto()
    copied.CopyFrom(proto)
    kept = [p for p in copied.metadata_props
            if p.key not in ("onnxsurgeon.recipe", "onnxsurgeon.recipe.sha256")]
    del copied.metadata_props[:]
    copied.metadata_props.extend(kept)
    return copied.SerializeToString()


def test_a_session_has_one_owner_and_a_verb_that_hands_nothing_on_ends_what_was_kept(tmp_path):
    """One session per model at a time; a verb that hands no journal on (or the end of the
    session) leaves nothing kept: the next verb rebuilds, the save checks everything."""
    from onnxsurgeon.errors import UsageError

    path = tmp_path / "m.onnx"
    onnx.save(builders.chain(6), str(path))
    with Session(load(path), loaded=True) as session:
        model = session.model
        with pytest.raises(UsageError, match="already open"):
            Session(model)
        insert(model, "relu1", op="scale", params={"factor": 2.0})
        session.verb_returned()
        assert session.journal is not None and session.kept_index() is not None
        session.verb_returned()  # as after a verb that handed nothing on
        assert session.journal is None and session.kept_index() is None
    assert active(model) is None
    copy(model, ["relu3"], prefix="c/")  # no session: its journal goes nowhere
    assert active(model) is None
