"""Structural patterns (onnxsurgeon.pattern): each matching rule on a hand-built graph, match
counts against an independent count, near misses explained, and ``match`` through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import helper

from onnxsurgeon.errors import InvalidModelError, NotFoundError
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.pattern import find_matches, load_pattern
from tests.cli_helpers import cli_main, replace_cli

ADD_RELU = b"g (float[A,B] p, float[A,B] q) => (float[A,B] r) { s = Add(p, q)\n r = Relu(s) }"


def model(text: str, opset: int = 17) -> onnx.ModelProto:
    return onnx.parser.parse_model(f'<ir_version: 8, opset_import: ["" : {opset}]>\n{text}')


def found(m: onnx.ModelProto, pattern: bytes | str, **kw):
    return find_matches(GraphIndex(m), load_pattern(
        pattern.encode() if isinstance(pattern, str) else pattern, **kw), explain=True)


def test_commutative_inputs_match_in_either_order_and_one_input_binds_one_tensor():
    m = model("""g (float[2] x, float[2] y) => (float[2] a, float[2] b, float[2] c) {
        s1 = Add(x, y)
        a = Relu(s1)
        s2 = Add(y, x)
        b = Relu(s2)
        s3 = Sub(x, y)
        c = Relu(s3)
    }""")
    res = found(m, ADD_RELU)
    assert [s.labels for s in res.matches] == [("Add#0", "Relu#1"), ("Add#2", "Relu#3")]
    assert res.matches[1].inputs == {"p": "y", "q": "x"}
    assert any("Sub; the pattern wants Add" in line for line in res.misses)
    same = found(m, "g (float[2] p) => (float[2] r) { s = Add(p, p)\n r = Relu(s) }")
    assert not same.matches  # p is one tensor: Add(x, y) is not Add(p, p)
    twice = model("""g (float[2] x) => (float[2] a) { s = Add(x, x)
        a = Relu(s) }""")
    assert len(found(twice, "g (float[2] p) => (float[2] r) { s = Add(p, p)\n r = Relu(s) }")
               .matches) == 1


def test_overlapping_candidates_first_wins_in_node_order():
    m = model("""g (float[2] x) => (float[2] y) {
        a = Relu(x)
        b = Relu(a)
        c = Relu(b)
        y = Relu(c)
    }""")
    res = found(m, "g (float[2] p) => (float[2] r) { s = Relu(p)\n r = Relu(s) }")
    assert [s.nodes for s in res.matches] == [(0, 1), (2, 3)]  # not (1, 2): no overlap
    three = model("""g (float[2] x) => (float[2] y) { a = Relu(x)
        b = Relu(a)
        y = Relu(b) }""")
    res = found(three, "g (float[2] p) => (float[2] r) { s = Relu(p)\n r = Relu(s) }")
    assert [s.nodes for s in res.matches] == [(0, 1)]
    assert any("in another match" in line for line in res.misses)


def test_inner_tensor_read_outside_or_a_graph_output_is_no_match_and_is_explained():
    m = model("""g (float[2] x, float[2] y) => (float[2] a, float[2] w) {
        s = Add(x, y)
        a = Relu(s)
        w = Mul(s, x)
    }""")
    res = found(m, ADD_RELU)
    assert not res.matches
    assert res.misses == ["Relu#1: 's' is also read by node 'Mul#2' outside the match"]
    out = model("""g (float[2] x, float[2] y) => (float[2] a, float[2] s) {
        s = Add(x, y)
        a = Relu(s)
    }""")
    res = found(out, ADD_RELU)
    assert not res.matches and "'s' is a graph output" in res.misses[0]


def test_constants_match_by_value_and_any_constant_by_shape_class():
    m = model("""g (float[2] x) => (float[2] a, float[2] b, float[2] c, float[2] d) <float two = {2.0},
                 float three = {3.0}> {
        a = Mul(x, two)
        k = Constant <value = float {2.0}> ()
        b = Mul(k, x)
        c = Mul(x, three)
        d = Mul(x, x)
    }""")
    pat = "g (float[2] p) => (float[2] r) <float c = {2.0}> { r = Mul(p, c) }"
    res = found(m, pat)
    assert [s.labels for s in res.matches] == [("Mul#0",), ("Mul#2",)]
    assert res.matches[1].dead_constants == (1,)  # the Constant only this match reads
    assert any("constant of another value" in line for line in res.misses)
    assert any("is a graph input; the pattern wants a constant" in line for line in res.misses)
    res = found(m, pat, any_constant=["c"])
    assert [s.labels for s in res.matches] == [("Mul#0",), ("Mul#2",), ("Mul#3",)]
    with pytest.raises(NotFoundError, match="not a constant"):
        load_pattern(pat.encode(), any_constant=["nope"])


def test_a_near_miss_on_a_matrix_constant_is_one_line_and_any_constant_names_its_class():
    """The reason quoted a 2x3 constant as numpy prints it, over two lines (an --explain line
    broken in two, '\\x0a' inside the one-line error); an --any-constant miss quoted a value
    where any value of its dtype and rank would do."""
    m = model("""g (float[2,3] x) => (float[2,3] a, double[2,3] b) <float[2,3] one = {1,1,1,1,1,1},
                 double[2,3] dbl = {1,2,3,4,5,6}> {
        a = Add(x, one)
        xd = Cast <to = 11> (x)
        b = Add(xd, dbl)
    }""")
    pat = "g (float[2,3] p) => (float[2,3] r) <float[2,3] k = {1,2,3,4,5,6}> { r = Add(p, k) }"
    misses = found(m, pat).misses
    assert misses[0] == ("Add#0: Add input 1 'one' is a constant of another value; the pattern "
                         "wants [[1. 2. 3.] [4. 5. 6.]]")
    assert all("\n" not in line for line in misses)
    res = found(m, pat, any_constant=["k"])
    assert [s.labels for s in res.matches] == [("Add#0",)]  # k: any float32 matrix
    assert res.misses == ["Add#2: Add input 1 'dbl' is a constant of another value; the pattern "
                          "wants any float32 constant of rank 2"]


def test_attributes_set_must_be_equal_left_out_match_anything_defaults_count():
    m = model("""g (float[2,3] x) => (float[2,3] a, float[2,3] b, float[2,3] c) {
        a = Softmax <axis = 0> (x)
        b = Softmax <axis = -1> (x)
        c = Softmax (x)
    }""")
    res = found(m, "g (float[A,B] p) => (float[A,B] r) { r = Softmax <axis = -1> (p) }")
    assert [s.labels for s in res.matches] == [("Softmax#1",), ("Softmax#2",)]
    assert "attribute axis is 0" in res.misses[0]
    assert len(found(m, "g (float[A,B] p) => (float[A,B] r) { r = Softmax (p) }").matches) == 3


def test_variadic_ops_match_only_their_arity():
    m = model("""g (float[2] x, float[2] y, float[2] z) => (float[6] a, float[4] b) {
        a = Concat <axis = 0> (x, y, z)
        b = Concat <axis = 0> (y, z)
    }""")
    two = found(m, "g (float[N] p, float[N] q) => (float[M] r) { r = Concat <axis = 0> (p, q) }")
    assert [s.labels for s in two.matches] == [("Concat#1",)]
    assert "has 3 inputs; the pattern wants 2" in two.misses[0]
    three = found(m, "g (float[N] p, float[N] q, float[N] t) => (float[M] r) "
                     "{ r = Concat <axis = 0> (p, q, t) }")
    assert [s.inputs for s in three.matches] == [{"p": "x", "q": "y", "t": "z"}]
    summed = model("""g (float[2] x, float[2] y, float[2] z) => (float[2] a) {
        a = Sum(z, x, y) }""")
    sum3 = found(summed, "g (float[N] p, float[N] q, float[N] t) => (float[N] r) "
                         "{ r = Sum(p, q, t) }")
    assert len(sum3.matches) == 1  # Sum is commutative too: any order of its three inputs


def test_multi_output_pattern_finds_every_output():
    text = """g (float[2] x, float[2] y) => (float[2] a, float[2] b, float[2] c, float[2] d) {
        s = Add(x, y)
        a = Relu(s)
        b = Sigmoid(s)
        t = Add(y, x)
        c = Relu(t)
        u = Add(x, x)
        d = Relu(u)
    }"""
    pat = """g (float[N] p, float[N] q) => (float[N] r1, float[N] r2) {
        s = Add(p, q)
        r1 = Relu(s)
        r2 = Sigmoid(s)
    }"""
    res = found(model(text), pat)
    assert len(res.matches) == 1
    site = res.matches[0]
    assert site.nodes == (0, 1, 2) and site.outputs == {"r1": "a", "r2": "b"}
    assert any("other outputs are not found" in line for line in res.misses)


def test_matches_inside_if_and_loop_bodies():
    body = """g (float[2] x, float[2] y) => (float[2] a) {
        c = Constant <value = bool {1}> ()
        a = If (c) <then_branch = then_g () => (float[2] t) { s = Add(x, y)
                                                            t = Relu(s) },
                     else_branch = else_g () => (float[2] e) { e = Relu(x) }>
    }"""
    res = found(model(body), ADD_RELU)
    assert [(s.graph, s.labels) for s in res.matches] == [("If#1/then_branch", ("Add#0", "Relu#1"))]
    assert res.matches[0].inputs == {"p": "x", "q": "y"}


@pytest.mark.parametrize("seed", range(6))
def test_match_count_equals_an_independent_count(seed):
    """Random Add/Relu/Mul graphs with random extra readers: the matches of Relu(Add(p, q))
    are exactly the Add nodes read only by one Relu (and not graph outputs), counted by hand."""
    rng = np.random.default_rng(seed)
    names = ["x0", "x1"]
    nodes = []
    for i in range(60):
        op = ["Add", "Relu", "Mul"][rng.integers(3)]
        ins = [names[rng.integers(len(names))] for _ in range(1 if op == "Relu" else 2)]
        nodes.append(helper.make_node(op, ins, [f"t{i}"]))
        names.append(f"t{i}")
    outs = [names[-1], names[-7]]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, 1, [2])
                                           for n in ("x0", "x1")],
                              [helper.make_tensor_value_info(n, 1, [2]) for n in outs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in nodes:
        for t in n.input:
            readers.setdefault(t, []).append(n)
    expected = sum(1 for n in nodes if n.op_type == "Add" and n.output[0] not in outs
                   and len(readers.get(n.output[0], [])) == 1
                   and readers[n.output[0]][0].op_type == "Relu"
                   and list(readers[n.output[0]][0].input).count(n.output[0]) == 1)
    assert len(found(m, ADD_RELU).matches) == expected


@pytest.mark.parametrize("text, error", [
    ("g (float p) => (float r) { r = Relu(p \n", "not valid ONNX text"),
    ("g (float p) => (float r) { r = Relu(missing) }", "reads 'missing'"),
    ("g (float p) => (float p) { r = Relu(p) }", "not computed by one of its nodes"),
    ("g (float p) => (float r) { r = Relu(p)\n z = Neg(p) }", "computes nothing"),
    ("g (float p, float q) => (float r) { r = Relu(p) }", "input 'q' is read by none"),
])
def test_bad_pattern_files_are_one_line_errors(tmp_path, text, error):
    path = tmp_path / "p.txt"
    path.write_text(text)
    with pytest.raises(InvalidModelError, match=error):
        load_pattern(path)


def test_a_pattern_may_be_an_onnx_file_or_a_whole_model_in_text(tmp_path):
    m = model("""g (float[2] x, float[2] y) => (float[2] a) { s = Add(x, y)
        a = Relu(s) }""")
    as_model = tmp_path / "p.onnx"
    onnx.save(onnx.parser.parse_model(
        '<ir_version: 8, opset_import: ["" : 17]>\n' + ADD_RELU.decode()), as_model)
    assert len(find_matches(GraphIndex(m), load_pattern(as_model)).matches) == 1
    text = tmp_path / "p.txt"
    text.write_text('<ir_version: 8, opset_import: ["" : 17]>\n' + ADD_RELU.decode())
    assert load_pattern(text).has_opsets and not load_pattern(ADD_RELU).has_opsets


def test_match_cli_lists_sites_json_explains_and_exits_2_on_none(tmp_path, capsys):
    m = model("""g (float[2] x, float[2] y) => (float[2] a, float[2] w) {
        s = Add(x, y)
        a = Relu(s)
        s2 = Add(a, y)
        w = Relu(s2)
    }""")
    path, pat = tmp_path / "m.onnx", tmp_path / "p.txt"
    onnx.save(m, path)
    pat.write_bytes(ADD_RELU)
    code, out, err = cli_main(capsys, "match", path, "--pattern", pat, "--json")
    data = json.loads(out)
    assert code == 0 and data["matches"] == 2
    assert data["sites"][1] == {"nodes": ["Add#2", "Relu#3"], "inputs": {"p": "a", "q": "y"},
                                "outputs": {"r": "w"}}
    code, out, err = cli_main(capsys, "match", path, "--select", "op:Relu")
    assert code == 0 and out.startswith("2 matches of op:Relu")
    none = tmp_path / "none.txt"
    none.write_text("g (float[N] p) => (float[N] r) { r = Sigmoid(p) }")
    code, out, err = cli_main(capsys, "match", path, "--pattern", none)
    assert code == 2 and err.count("\n") == 1 and "matches nothing" in err
    bad = tmp_path / "bad.txt"
    bad.write_text("not onnx at all")
    code, out, err = cli_main(capsys, "match", path, "--pattern", bad)
    assert code == 2 and err.count("\n") == 1 and "neither an ONNX model" in err
    code, out, err = cli_main(capsys, "match", path, "--pattern", tmp_path / "missing.txt")
    assert code == 2 and "not found" in err


def test_match_sites_carry_framework_names(capsys):
    """A dynamo-exported torch model: the matched node's module path and its output's."""
    path = Path(__file__).resolve().parent.parent / "models" / "torch_cnn.onnx"
    code, out, err = cli_main(capsys, "match", path, "--select", "op:Conv", "--json")
    site = json.loads(out)["sites"][0]
    assert code == 0 and site["framework"]["node_conv2d"] == ["conv5"]


BAD_PATTERNS = {
    "syntax": "g (float p) => (float r) { r = Relu(p \n",
    "undefined read": "g (float p) => (float r) { r = Relu(missing) }",
    "output an input": "g (float p) => (float p) { r = Relu(p) }",
    "dead node": "g (float p) => (float r) { r = Relu(p)\n z = Neg(p) }",
    "not onnx": "not onnx at all",
}


@pytest.mark.parametrize("verb", ["match", "replace-pattern", "replace-replacement"])
@pytest.mark.parametrize("case", list(BAD_PATTERNS))
def test_bad_pattern_files_exit_2_with_one_line_from_match_and_replace(verb, case, tmp_path,
                                                                        capsys):
    """Issue 28's done-when: a bad pattern (or replacement) file is exit 2, one line, nothing
    written, from every command that reads one."""
    m = model("g (float[2] x, float[2] y) => (float[2] a) { s = Add(x, y)\n a = Relu(s) }")
    path, bad, good, out = (tmp_path / "m.onnx", tmp_path / "bad.txt", tmp_path / "p.txt",
                            tmp_path / "out.onnx")
    onnx.save(m, path)
    bad.write_text(BAD_PATTERNS[case])
    good.write_bytes(ADD_RELU)
    argv = {"match": ["match", path, "--pattern", bad],
            "replace-pattern": ["replace", path, "-o", out, "--pattern", bad, "--replacement",
                                good],
            "replace-replacement": ["replace", path, "-o", out, "--pattern", good,
                                    "--replacement", bad]}[verb]
    code, _, err = cli_main(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "bad.txt" in err or "pattern" in err or "replacement" in err, err
    assert not out.exists()


def test_a_pattern_input_no_node_reads_is_refused_and_a_replacement_may_leave_one(tmp_path,
                                                                                  capsys):
    """P's input 'q' read by no node bound to nothing: match listed sites without it and
    replace exited 3 (KeyError: 'q'); now exit 2 naming it. R may ignore one of its inputs
    (Add(x, b) -> Identity(x) drops b)."""
    m = model("g (float[2] x, float[2] y) => (float[2] a) { s = Add(x, y)\n a = Relu(s) }")
    path, pat, out = (tmp_path / n for n in ("m.onnx", "p.txt", "out.onnx"))
    onnx.save(m, path)
    pat.write_text("g (float[N] p, float[N] q) => (float[N] r) { r = Relu(p) }")
    for argv in (["match", path, "--pattern", pat],
                 ["replace", path, "-o", out, "--pattern", pat, "--replacement", pat]):
        code, _, err = cli_main(capsys, *argv)
        assert code == 2 and err.count("\n") == 1, err
        assert "input 'q' is read by none of its nodes" in err and not out.exists()
    code, _, err, out = replace_cli(
        capsys, tmp_path, m, "g (float[N] p, float[N] q) => (float[N] r) { r = Add(p, q) }",
        "g (float[N] p, float[N] q) => (float[N] r) { r = Identity(p) }")
    assert code == 0, err
    assert [n.op_type for n in onnx.load(out).graph.node] == ["Identity", "Relu"]


def test_an_if_pattern_capturing_an_input_is_refused_and_a_branch_miss_is_words(tmp_path,
                                                                               capsys):
    """P = an If whose branches read P's input x (captured): a match compares a body whole and
    never bound x, so replace exited 3 (KeyError: 'x'); now exit 2 naming x. An If pattern
    whose branches capture nothing matches the model's equal If, and against another If the
    near miss names the attribute instead of quoting its serialized bytes (b'\\n\\x18...')."""
    branches = ("<then_branch = t () => (float[2] z) { z = Relu(x) }, "
                "else_branch = e () => (float[2] z) { z = Neg(x) }>")
    text = f"g (bool c, float[2] x) => (float[2] y) {{ y = If (c) {branches} }}"
    code, _, err, out = replace_cli(capsys, tmp_path, model(text), text)
    assert code == 2 and err.count("\n") == 1 and not out.exists(), err
    assert "input 'x' is read only inside a body" in err
    const = ("<then_branch = t () => (float[2] z) {{ z = Constant <value = float[2] {{1, 2}}> () }}, "
             "else_branch = e () => (float[2] z) {{ z = Constant <value = float[2] {{{v}}}> () }}>")
    m = model(f"""g (bool c) => (float[2] y, float[2] w) {{
        y = If (c) {const.format(v="3, 4")}
        w = If (c) {const.format(v="5, 6")}
    }}""")
    res = found(m, f"g (bool c) => (float[2] y) {{ y = If (c) {const.format(v='3, 4')} }}")
    assert [s.labels for s in res.matches] == [("If#0",)]
    assert res.misses == ["If#1: If 'If#1' attribute else_branch differs; the pattern's graph "
                          "must be equal, byte for byte"]
