"""The selector core (issue 28): ``glob:``, ``re:`` and ``op:`` selectors found by
``Selector.find`` against ONNX names, framework names, module paths and nested bodies, in node
order, each site once; a plain name keeps ``resolve``'s meaning; nothing found is one line."""

from __future__ import annotations

import json
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import NotFoundError, UsageError
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.select import NAME_MAP_KEY, Selector, Site, is_selector

F = TensorProto.FLOAT


def _branch(tag: str, op: str) -> onnx.GraphProto:
    nodes = [helper.make_node(op, ["b"], [f"{tag}_y"], name=f"{tag}_node"),
             helper.make_node("Identity", [f"{tag}_y"], [f"{tag}_out"])]
    return helper.make_graph(nodes, tag, [], [helper.make_tensor_value_info(f"{tag}_out", F, [2, 4])])


def patterned_model() -> onnx.ModelProto:
    """x -> /stem/Mul -> a:0 -> /act/Relu -> b -> Dropout(drop1) -> c -> /head/Neg -> d ->
    If_0 (then: Dropout; else: Neg) -> out; b -> /side/Abs -> s.v1. Module paths 'stem', 'act',
    'head', 'side'; the name map sends enc.layer.0.out / enc.layer.1.out to c / d."""
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["a:0"], name="/stem/Mul"),
        helper.make_node("Relu", ["a:0"], ["b"], name="/act/Relu"),
        helper.make_node("Dropout", ["b"], ["c"], name="drop1"),
        helper.make_node("Neg", ["c"], ["d"], name="/head/Neg"),
        helper.make_node("Abs", ["b"], ["s.v1"], name="/side/Abs"),
        helper.make_node("ReduceMax", ["d"], ["m"], keepdims=0),
        helper.make_node("Greater", ["m", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["out"], name="If_0", then_branch=_branch("then", "Dropout"),
                         else_branch=_branch("else", "Neg")),
    ]
    inits = [numpy_helper.from_array(np.ones((1, 4), np.float32), "w"),
             numpy_helper.from_array(np.zeros((), np.float32), "zero")]
    graph = helper.make_graph(nodes, "patterned", [helper.make_tensor_value_info("x", F, [2, 4])],
                              [helper.make_tensor_value_info("out", F, [2, 4]),
                               helper.make_tensor_value_info("s.v1", F, [2, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    entry = model.metadata_props.add()
    entry.key, entry.value = NAME_MAP_KEY, json.dumps({"enc.layer.0.out": "c", "enc.layer.1.out": "d",
                                                        "enc.gone": "nowhere"})
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.fixture(scope="module")
def selector() -> Selector:
    return Selector(GraphIndex(patterned_model()))


def _tensors(sites: list[Site]) -> list[tuple[str | None, str]]:
    return [(s.tensor, s.graph) for s in sites]


def test_is_selector():
    assert [is_selector(t) for t in ("glob:*", "re:a", "op:Relu", "b", "globby", "/stem/Mul")] == \
        [True, True, True, False, False, False]


def test_glob_matches_slash_and_dot(selector):
    # '*' crosses '/' (node names) and '.' (framework names): not path-aware
    assert _tensors(selector.find("glob:/*Relu")) == [("b", "")]
    assert [(s.tensor, s.matched) for s in selector.find("glob:enc*out")] == \
        [("c", "enc.layer.0.out"), ("d", "enc.layer.1.out")]
    assert [s.tensor for s in selector.find("glob:?.v?")] == ["s.v1"]
    assert [s.tensor for s in selector.find("glob:enc.layer.?.out")] == ["c", "d"]


def test_re_is_a_full_match(selector):
    assert [s.tensor for s in selector.find("re:[bc]")] == ["b", "c"]
    with pytest.raises(NotFoundError):
        selector.find("re:dro")  # 'drop1' and the bodies' names only contain it
    assert [s.node for s in selector.find("re:dro.*", "node")] == ["drop1"]


def test_op_lists_outputs_in_node_order(selector):
    sites = selector.find("op:Neg,Relu")
    assert _tensors(sites) == [("b", ""), ("d", ""), ("else_y", "If_0/else_branch")]
    assert [s.matched for s in sites] == ["Relu", "Neg", "Neg"]
    assert [(s.node, s.graph) for s in selector.find("op:Dropout", "node")] == \
        [("drop1", ""), ("then_node", "If_0/then_branch")]


def test_module_paths_mean_the_tensor_handed_on(selector):
    sites = selector.find("glob:si?e")
    assert [(s.tensor, s.matched, s.node) for s in sites] == [("s.v1", "side", "/side/Abs")]
    assert [(s.tensor, s.matched) for s in selector.find("re:st.m|act")] == [
        ("a:0", "stem"), ("b", "act")]


def test_bodies_order_and_each_site_once(selector):
    sites = selector.find("glob:*")
    keys = [(s.graph, s.tensor) for s in sites]
    assert len(keys) == len(set(keys))
    main = [s.tensor for s in sites if not s.graph]
    assert main == ["x", "w", "zero", "a:0", "b", "c", "d", "s.v1", "m", "cond", "out"]
    # bodies in the order of the node's attributes (onnx.helper sorts them: else, then)
    assert [(s.graph, s.tensor) for s in sites if s.graph] == [
        ("If_0/else_branch", "else_y"), ("If_0/else_branch", "else_out"),
        ("If_0/then_branch", "then_y"), ("If_0/then_branch", "then_out")]
    # the tensor's own name wins over its node's name, framework names and module paths
    assert {s.tensor: s.matched for s in sites}["c"] == "c"


def test_plain_name_keeps_its_meaning(selector):
    assert selector.find("enc.layer.0.out") == [Site("c", "drop1", "", "enc.layer.0.out")]
    assert selector.find("head") == [Site("d", "/head/Neg", "", "head")]
    assert selector.find("b", "node") == [Site(None, "/act/Relu", "", "b")]
    assert selector.find_nodes("op:Abs,Relu") == [1, 4]


def test_main_graph_verbs_refuse_body_sites(selector):
    with pytest.raises(UsageError, match="inside the body 'If_0/then_branch'"):
        selector.find_nodes("op:Dropout")
    assert selector.find_tensors("op:Relu") == ["b"]


@pytest.mark.parametrize("text, words", [
    ("glob:enc.layer.*.outt", ["'glob:enc.layer.*.outt' matches no", "did you mean", "enc.layer"]),
    ("re:hed", ["'re:hed' matches no", "'head'"]),
    ("op:Dropot", ["'op:Dropot' matches no node", "'Dropout'"]),
])
def test_zero_matches_name_the_selector_and_nearest_names(selector, text, words):
    with pytest.raises(NotFoundError) as info:
        selector.find(text)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word.strip("'") in message


@pytest.mark.parametrize("text", ["re:(", "glob:", "op: ,", "re:"])
def test_malformed_selectors_are_one_line(selector, text):
    with pytest.raises(UsageError) as info:
        selector.find(text)
    assert text in str(info.value) and "\n" not in str(info.value)


def test_one_pass_on_a_long_chain():
    n = 60_000
    nodes = [helper.make_node("Relu" if i % 3 else "Neg", [f"t{i}"], [f"t{i + 1}"], name=f"n{i}")
             for i in range(n)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", F, [1])],
                              [helper.make_tensor_value_info(f"t{n}", F, [1])])
    selector = Selector(GraphIndex(helper.make_model(graph)))
    start = time.perf_counter()
    assert len(selector.find("op:Neg")) == n // 3
    assert len(selector.find("glob:t*7")) == n // 10
    assert len(selector.find_nodes("re:n1[0-9]*")) == 11111
    assert time.perf_counter() - start < 3.0  # quadratic work would take minutes
