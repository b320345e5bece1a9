"""The matcher's int-graph fast path (pattern/intmatch.py) finds exactly what the name-based
matcher finds, and is the one that runs on a loaded model; the name allocator's claims stay
cheap (issue 28's speed targets)."""

from __future__ import annotations

import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxsurgeon.pattern.match as match_mod
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.names import _PROBES, NameAllocator
from onnxsurgeon.pattern import find_matches, load_pattern
from onnxsurgeon.pattern.intmatch import ASK, NO, ONLY, IntMatcher, Sweep

PATTERNS = {
    "add_relu_const": b"""<ir_version: 8, opset_import: ["" : 17]>
        g (float[4] p) => (float[4] r) <float[4] c = {1.0, 1.0, 1.0, 1.0}> {
            s = Add(p, c)
            r = Relu(s)
        }""",
    "mul_add_same": b"""g (float[4] p, float[4] q) => (float[4] r) {
            m = Mul(p, q)
            r = Add(m, p)
        }""",
    "softmax_attr": b"""g (float[4] p) => (float[4] r) {
            s = Softmax<axis = 0>(p)
            r = Relu(s)
        }""",
}


def _graph(seed: int) -> onnx.ModelProto:
    """A random chain of Add/Mul/Relu/Softmax/Split-Concat nodes over [4] tensors: constants
    (initializers, Constant nodes, one shared), commutative order both ways, outside readers,
    graph outputs in the middle, multi-output nodes on the way."""
    rng = random.Random(seed)
    one = numpy_helper.from_array(np.ones(4, np.float32), "one")
    two = numpy_helper.from_array(np.full(4, 2.0, np.float32), "two")
    nodes: list[onnx.NodeProto] = []
    live = ["x"]
    outputs: list[str] = []
    for k in range(120):
        a = rng.choice(live[-3:])
        b = rng.choice(live[-4:])
        t = f"t{k}"
        kind = rng.randrange(9)
        if kind == 0:
            nodes.append(helper.make_node("Add", [a, "one"] if rng.random() < .5 else ["one", a],
                                          [t]))
        elif kind == 1:
            c = f"c{k}"
            nodes.append(helper.make_node("Constant", [], [c], value=one if rng.random() < .7
                                          else two))
            nodes.append(helper.make_node("Add", [a, c], [t]))
        elif kind == 2:
            nodes.append(helper.make_node("Mul", [a, b], [t]))
        elif kind == 3:
            nodes.append(helper.make_node("Add", [b, a], [t]))
        elif kind == 4:
            nodes.append(helper.make_node("Softmax", [a], [t], axis=rng.choice([0, -1])))
        elif kind == 5:
            nodes.append(helper.make_node("Split", [a], [f"{t}a", f"{t}b"], axis=0,
                                          num_outputs=2))
            nodes.append(helper.make_node("Concat", [f"{t}b", f"{t}a"], [t], axis=0))
        else:
            nodes.append(helper.make_node("Relu", [a], [t]))
        live.append(t)
        if rng.random() < .05:
            outputs.append(t)
    outputs.append(live[-1])
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [4]) for o in dict.fromkeys(outputs)],
        [one])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("seed", range(8))
def test_int_graph_matches_equal_the_name_based_ones(seed, monkeypatch):
    m = _graph(seed)
    onnx.checker.check_model(m)
    calls = []
    at = IntMatcher.at
    monkeypatch.setattr(IntMatcher, "at", lambda self, *a: calls.append(1) or at(self, *a))
    total = 0
    for name, text in PATTERNS.items():
        pattern = load_pattern(text)
        fast = find_matches(GraphIndex(m), pattern)
        with monkeypatch.context() as names_only:
            names_only.setattr(match_mod, "plan_ok", lambda p: False)
            slow = find_matches(GraphIndex(m), pattern)
        assert fast.matches == slow.matches, name
        assert fast.candidates == slow.candidates
        total += len(fast.matches)
    assert calls, "the int-graph matcher never ran"
    assert total > 0


TREES = {  # tree-shaped: each decided by the arrays (intmatch.Sweep) unless it must ask the walk
    "mul_add": b"""g (float[4] p, float[4] q, float[4] r) => (float[4] y) {
            m = Mul(p, q)
            y = Add(m, r)
        }""",
    "relu_pair": b"""g (float[4] p, float[4] q) => (float[4] y) {
            a = Relu(p)
            b = Relu(q)
            y = Add(a, b)
        }""",
    "adds_mul": b"""g (float[4] p, float[4] q, float[4] r, float[4] s) => (float[4] y) {
            a = Add(p, q)
            b = Add(r, s)
            y = Mul(b, a)
        }""",
    "relu_chain": b"""g (float[4] p) => (float[4] y) {
            a = Relu(p)
            b = Add(a, p2)
            y = Relu(b)
        }""".replace(b"(float[4] p)", b"(float[4] p, float[4] p2)"),
}


def test_the_array_sweep_finds_what_the_walk_finds(monkeypatch):
    """Commutative orders both ways, a node read by both inputs (bound twice), outside
    readers, graph outputs and multi-output nodes on the way: the same matches, in the same
    order, as the int walk alone and as the name-based matcher; the arrays decide most
    anchors, the walk the ones they ask about."""
    answers = []
    run = Sweep.run
    monkeypatch.setattr(Sweep, "run", lambda self, a: answers.extend(run(self, a)) or
                        answers[len(answers) - len(a):])
    total = 0
    for seed in range(12):
        m = _graph(seed)
        for name, text in TREES.items():
            pattern = load_pattern(text)
            swept = find_matches(GraphIndex(m), pattern)
            with monkeypatch.context() as walk_only:
                walk_only.setattr(Sweep, "fits", staticmethod(lambda fast: False))
                walked = find_matches(GraphIndex(m), pattern)
            with monkeypatch.context() as names_only:
                names_only.setattr(match_mod, "plan_ok", lambda p: False)
                named = find_matches(GraphIndex(m), pattern)
            assert swept.matches == walked.matches == named.matches, (seed, name)
            assert swept.candidates == walked.candidates
            total += len(swept.matches)
    assert total > 20
    assert {NO, ONLY, ASK} <= set(answers)


def test_many_claims_merge_into_one_set():
    names = NameAllocator({"a", "b"})
    names._pending.append({"c"})
    for k in range(3 * _PROBES):
        assert names.claim([f"n{k}", f"m{k}"])
    assert len(names._pending) <= _PROBES
    assert not names.claim(["n5"]) and not names.claim(["c"]) and names.claim(["z"])
    assert names.fresh("n5") == "n5__1"


@pytest.mark.parametrize(("text", "want"), [
    (b"""g (float[2] p) => (float[2] y) { y = Relu(p) }""",
     [({"p": "s0"}, {"y": "r0"}), ({"p": "s1"}, {"y": "r1"})]),
    (b"""g (float[2] p, float[2] q) => (float[2] y) {
            a = Relu(p)
            y = Add(a, q)
        }""", [({"p": "s1", "q": "s0"}, {"y": "a1"})]),
    (b"""g (float[2] p) => (float[2] y) { y = Add(p, p) }""", []),
])
def test_a_pattern_input_bound_to_a_second_output_names_that_output(text, want):
    """Split -> two branches: a pattern input read from the Split's second output is bound
    to that output's name (not the first one's), and one pattern input read twice never
    binds two different outputs of the same node (the int graph has one id per node)."""
    nodes = [helper.make_node("Split", ["x"], ["s0", "s1"], axis=0, num_outputs=2),
             helper.make_node("Relu", ["s0"], ["r0"]),
             helper.make_node("Relu", ["s1"], ["r1"]),
             helper.make_node("Add", ["r1", "s0"], ["a1"]),
             helper.make_node("Add", ["s0", "s1"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2]) for o in ("r0", "a1", "y")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(m)
    pattern = load_pattern(text)
    fast = find_matches(GraphIndex(m), pattern)
    with pytest.MonkeyPatch.context() as names_only:
        names_only.setattr(match_mod, "plan_ok", lambda p: False)
        named = find_matches(GraphIndex(m), pattern)
    assert [(mt.inputs, mt.outputs) for mt in fast.matches] == want
    assert fast.matches == named.matches


def test_the_anchor_candidates_include_other_domains_and_multi_output_nodes():
    """The anchors come from the int graph's op list, which leaves out a node of another domain
    and one with several outputs: those are read from the protos, so the candidates tried are
    every node of the anchor's op type (an independent count), in node order."""
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["a"]),
         helper.make_node("Add", ["a", "y"], ["b"], domain="com.example"),
         helper.make_node("Add", ["b", "y"], ["c", "c2"], domain="com.example"),
         helper.make_node("Relu", ["c"], ["d"]),
         helper.make_node("Add", ["d", "y"], ["e"])],
        "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "xy"],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("e", "c2")]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    index = GraphIndex(m)
    assert index.int_graph() is not None
    p = load_pattern(b"g (p, q) => (r) { r = Add(p, q) }")
    found = find_matches(index, p, explain=True)
    assert found.candidates == sum(n.op_type == "Add" for n in m.graph.node) == 4
    assert [line.split(":")[0] for line in found.misses] == ["Add#1", "Add#2"]
    assert [s.nodes for s in find_matches(index, p).matches] == [(0,), (4,)]
