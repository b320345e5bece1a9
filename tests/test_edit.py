"""The one editing API (onnxsurgeon/edit.py): each call changes the proto and feeds the upkeep, so
the kept index equals a fresh build; and no code in onnxsurgeon/surgery/ edits a model but
through it (an AST walk)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon import load
from onnxsurgeon.edit import Edit
from onnxsurgeon.index import GraphIndex, _build_edges
from onnxsurgeon.io import indexed
from onnxsurgeon.session import Session

from . import builders

SURGERY = Path(__file__).resolve().parent.parent / "onnxsurgeon" / "surgery"

# ------------------------------------------------------------------ the enforcing walk
LISTS = {"node", "initializer", "sparse_initializer", "input", "output", "value_info",
         "opset_import", "functions", "attribute"}
"""Repeated fields of a model, graph or node that only the edit API changes."""
NODE_FIELDS = {"name", "op_type", "domain", "overload", "doc_string", "ir_version"}
MUTATORS = {"append", "extend", "insert", "remove", "pop", "add", "clear", "MergeFrom", "CopyFrom"}
DIRECT = {"keep_only", "replace_all", "rename_scoped", "rename_tensors", "set_default_opset"}
"""Proto-editing helpers a verb calls through the edit API, never directly."""


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _makes_new(value: ast.AST, new: set[str]) -> bool:
    """A proto made here (``onnx.NodeProto()``, ``helper.make_node(...)``), or part of one."""
    if isinstance(value, ast.Call):
        f = value.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        return name.endswith("Proto") or name.startswith("make_")
    return isinstance(value, ast.Attribute | ast.Subscript) and _root(value) in new


def _is_list(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in LISTS


def direct_edits(source: str) -> list[tuple[int, str]]:
    """(line, what) of every statement editing a model directly: assigning a node field,
    changing a repeated field (node, initializer, input, output, value_info, opset_import,
    functions...), deleting from one, or calling a proto-editing helper. Protos made in the same
    function (``onnx.ValueInfoProto()``, ``helper.make_node``) and what hangs off them are free."""
    found: set[tuple[int, str]] = set()
    tree = ast.parse(source)
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)] + [tree]
    for scope in scopes:
        new: set[str] = set()
        for node in ast.walk(scope):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name) and _makes_new(node.value, new)):
                new.add(node.targets[0].id)
        for node in ast.walk(scope):
            targets: list[ast.AST] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign):
                targets = [node.target]
            for t in targets:
                if _root(t) in new:
                    continue
                if isinstance(t, ast.Attribute) and t.attr in NODE_FIELDS:
                    found.add((node.lineno, f"assigns .{t.attr}"))
                elif isinstance(t, ast.Subscript) and (
                        _is_list(t.value) or isinstance(t.slice, ast.Slice)):
                    found.add((node.lineno, "assigns into a repeated field"))
            if isinstance(node, ast.Delete):
                for t in node.targets:
                    if isinstance(t, ast.Subscript) and _is_list(t.value) and _root(t) not in new:
                        found.add((node.lineno, "deletes from a repeated field"))
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name) and f.id in DIRECT:
                    found.add((node.lineno, f"calls {f.id}"))
                if (isinstance(f, ast.Attribute) and f.attr in MUTATORS and _root(f) not in new
                        and (_is_list(f.value) or (isinstance(f.value, ast.Subscript)
                                                   and _is_list(f.value.value)))):
                    found.add((node.lineno, f"calls .{f.attr} on a repeated field"))
    return sorted(found)


def test_the_walk_finds_each_kind_of_direct_edit():
    source = """
def verb(model, index, vi):
    g = model.graph
    g.node[3].input[1] = "x"
    g.node.append(vi)
    g.output[0].CopyFrom(vi)
    del g.initializer[2:]
    node = g.node[0]
    node.name = "n"
    ins = node.input
    ins[:] = ["a"]
    keep_only(g.value_info, [0])
    model.opset_import.extend([])
    fresh = onnx.ValueInfoProto()
    fresh.name = "allowed"
    light = onnx.ModelProto()
    light.graph.node.extend([])
"""
    assert [line for line, _ in direct_edits(source)] == [4, 5, 6, 7, 9, 11, 12, 13]


def test_no_code_in_surgery_edits_a_model_but_through_the_edit_api():
    bad = [f"{path.name}:{line}: {what}" for path in sorted(SURGERY.glob("*.py"))
           for line, what in direct_edits(path.read_text())]
    assert not bad, "edit through onnxsurgeon.edit.Edit instead:\n" + "\n".join(bad)


HOOK = re.compile(r"\.(input|output)\s*\[[^]]*\]\s*=[^=]|"
                  r"\.(node|initializer|value_info)\.(append|extend|insert|remove|pop)\(")


def test_public_verb_modules_pass_the_repository_grep():
    public = [p for p in SURGERY.glob("*.py") if not p.name.startswith("_")]
    assert len(public) >= 13  # the verb modules (more verbs join: issues 28, 30, 31)
    hits = [f"{p.name}: {line.strip()}" for p in public for line in p.read_text().splitlines()
            if HOOK.search(line)]
    assert not hits


# ------------------------------------------------------------------ each call keeps the index true
def _chain(tmp_path: Path, n: int = 6, ir: int | None = None):
    model = builders.chain(n)
    if ir is not None:
        model.ir_version = ir
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return load(path)


def _fresh_equal(model, upkeep, *, check: bool = True) -> None:
    """The upkeep's producer map and int graph are a fresh build's (same ids, same order)."""
    state = upkeep.result()
    assert state is not None, "the upkeep gave up"
    producer, edges = state
    assert list(producer.items()) == list(GraphIndex(model.proto).producer.items())
    assert edges == _build_edges(model.proto.graph)
    if check:
        onnx.checker.check_model(model.proto)


def _index(m):
    index = indexed(m)
    assert index.int_graph() is not None
    return index


def test_insert_nodes_then_rewire_keeps_the_index(tmp_path):
    m = _chain(tmp_path)
    index = _index(m)
    at = "relu2"
    uses = index.uses_of(at)
    readers = [index.node_label(u.node) for u in uses]
    e = Edit(index)
    labels = e.rewire(uses, "scaled")
    e.add_initializers([helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])], made=True)
    pos = index.producer[at] + 1
    e.insert_nodes(pos, [helper.make_node("Mul", [at, "two"], ["scaled"], name="scale")])
    upkeep = e.finish()
    assert labels == readers
    assert m.proto.graph.node[pos].name == "scale"
    assert [n for n in m.proto.graph.node if "scaled" in n.input]  # the readers moved
    _fresh_equal(m, upkeep)
    assert upkeep.touched() == [pos, *sorted(u.node + 1 for u in uses)]
    assert [t.name for t in upkeep.fresh_tensors] == ["two"]


def test_copy_nodes_and_name_nodes_keep_the_index(tmp_path):
    m = _chain(tmp_path)
    index = _index(m)
    edges = index.int_graph()
    sources = [index.producer["relu1"]]
    node = m.proto.graph.node[sources[0]]
    e = Edit(index)
    e.name_nodes({0: "first"})
    e.copy_nodes(sources, ["again"], [list(node.input)], [["relu1_again"]],
                 ops=[edges.ops[sources[0]]])
    e.add_outputs([helper.make_tensor_value_info("relu1_again", TensorProto.FLOAT, [1, 4])])
    upkeep = e.finish()
    assert m.proto.graph.node[0].name == "first"
    assert m.proto.graph.node[-1].name == "again"
    _fresh_equal(m, upkeep)
    assert upkeep.to_read == 0 and upkeep.appended() == range(0)  # said, then applied
    assert upkeep.touched() == [len(m.proto.graph.node) - 1]


def test_keep_nodes_inputs_and_initializers_keep_the_index(tmp_path):
    """An extract by hand: cut after relu3, relu1 becomes a graph input."""
    m = _chain(tmp_path)
    index = _index(m)
    g = m.proto.graph
    kept = [i for i in range(index.producer["relu3"] + 1) if i > index.producer["relu1"]]
    reads = {t for i in kept for t in g.node[i].input}
    e = Edit(index)
    e.rewire([u for u in index.uses_of("relu1") if u.node in kept], "relu1")
    e.keep_nodes(kept)
    e.keep_initializers([k for k, t in enumerate(g.initializer) if t.name in reads])
    e.set_inputs([helper.make_tensor_value_info("relu1", TensorProto.FLOAT, [1, 4])])
    e.set_outputs([helper.make_tensor_value_info("relu3", TensorProto.FLOAT, [1, 4])])
    e.drop_value_info([vi.name for vi in g.value_info])
    upkeep = e.finish()
    assert len(g.node) == len(kept)
    _fresh_equal(m, upkeep)
    assert upkeep.touched() == [0]  # the first kept node reads the new input


def test_rename_tensors_and_outputs_keep_the_index(tmp_path):
    m = _chain(tmp_path)
    index = _index(m)
    e = Edit(index)
    e.rename_tensors({"relu1": "one", "x": "input"})
    upkeep = e.finish()
    names = {t for n in m.proto.graph.node for t in (*n.input, *n.output)}
    assert {"one", "input"} <= names and not {"relu1", "x"} & names
    assert m.proto.graph.input[0].name == "input"
    _fresh_equal(m, upkeep)


def test_ir3_initializers_listed_as_inputs_renumber_the_leaves(tmp_path):
    m = _chain(tmp_path, ir=3)
    for t in list(m.proto.graph.initializer):  # IR 3: every initializer is an input too
        m.proto.graph.input.append(helper.make_tensor_value_info(
            t.name, t.data_type, list(t.dims)))
    index = GraphIndex(m.proto)
    index.int_graph()
    w = helper.make_tensor("w", TensorProto.FLOAT, [], [3.0])
    e = Edit(index)
    e.add_initializers([w])
    e.add_inputs([helper.make_tensor_value_info("w", TensorProto.FLOAT, [])])
    e.insert_nodes(len(m.proto.graph.node), [helper.make_node("Mul", ["y", "w"], ["y3"])])
    _fresh_equal(m, e.finish(), check=False)  # (the checker wants IR >= 7 for this opset)


def test_moving_nodes_or_two_node_edits_make_the_upkeep_give_up(tmp_path):
    m = _chain(tmp_path)
    index = _index(m)
    e = Edit(index)
    e.insert_nodes(0, [helper.make_node("Identity", ["x"], ["x2"])])
    e.keep_nodes(list(range(len(m.proto.graph.node))))  # nothing dropped: no edit said
    e.insert_nodes(1, [helper.make_node("Identity", ["x"], ["x3"])])
    assert e.finish().result() is None  # the next verb rebuilds: never a stale index


def test_an_edit_of_a_private_proto_records_nothing():
    block = builders.chain(2)
    e = Edit.of(block)
    e.name_every_node([block.graph], lambda node: "b/" + (node.name or node.op_type))
    assert e.finish() is None
    assert all(n.name.startswith("b/") for n in block.graph.node)


@pytest.mark.parametrize("follow", [True, False])
def test_hand_on_gives_the_journal_to_the_next_verb_only_when_followed(tmp_path, follow):
    with Session(_chain(tmp_path), loaded=True) as session:
        m = session.model
        e = Edit(session.index(), follow=follow)
        e.name_nodes({1: "named"})
        e.hand_on(m)
        assert (session.journal is not None) == follow
        assert session.handed == 1
