"""The element types and ranks a pattern declares limit what it matches (issue 28): a float
rank-1 pattern skips the rank-4 and the double sites (near misses, with the reason) instead of
making ``replace`` refuse the whole call; symbolic dims match any rank. Hand-built graphs, the
counts against an independent count from onnx shape inference."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

from onnxsurgeon.index import GraphIndex
from onnxsurgeon.pattern import find_matches, load_pattern
from tests.cli_helpers import cli_main

MIXED = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1,2,3,4] x4, float[4] x1, double[4] d1) => (float[1,2,3,4] a, float[4] b, double[4] c,
                                                  float[1,2,3,4] e3, float[4] g2) {
    a = Relu(x4)
    b = Relu(x1)
    c = Relu(d1)
    e = Neg(x4)
    e2 = Relu(e)
    e3 = Neg(e2)
    g1 = Neg(x1)
    g2 = Relu(g1)
}"""
RANK1 = "g (float[4] p) => (float[4] r) { r = Relu(p) }"
ANY_RANK = "g (float[N] p) => (float[N] r) { r = Relu(p) }"
DOUBLE = "g (double[N] p) => (double[N] r) { r = Relu(p) }"
WANT = {RANK1: (onnx.TensorProto.FLOAT, 1), ANY_RANK: (onnx.TensorProto.FLOAT, None),
        DOUBLE: (onnx.TensorProto.DOUBLE, None)}


def _independent(m: onnx.ModelProto, elem: int, rank: int | None) -> list[str]:
    """The Relu nodes whose input has that element type (and rank), by shape inference."""
    inferred = onnx.shape_inference.infer_shapes(m)
    types = {vi.name: vi.type.tensor_type for vi in [*inferred.graph.input,
                                                     *inferred.graph.value_info]}
    return [f"Relu#{i}" for i, n in enumerate(m.graph.node) if n.op_type == "Relu"
            and types[n.input[0]].elem_type == elem
            and (rank is None or len(types[n.input[0]].shape.dim) == rank)]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("types")
    m = onnx.parser.parse_model(MIXED)
    onnx.save(m, folder / "mixed.onnx")
    for k, text in enumerate(WANT):
        (folder / f"p{k}.txt").write_text(text)
    return m, folder


@pytest.mark.parametrize("k", range(len(WANT)))
def test_declared_types_limit_the_matches_to_an_independent_count(mixed, capsys, k):
    m, folder = mixed
    text = list(WANT)[k]
    expected = _independent(m, *WANT[text])
    assert expected  # every pattern has sites, and the rank-1 one skips some float ones
    for extra in ([], ["--explain"]):  # the int fast path, and the name walk
        code, out, err = cli_main(capsys, "match", folder / "mixed.onnx", "--pattern",
                                  folder / f"p{k}.txt", "--json", *extra)
        assert code == 0, err
        assert [s["nodes"] for s in json.loads(out)["sites"]] == [[n] for n in expected]


def test_near_misses_name_the_type_that_does_not_fit(mixed, capsys):
    m, folder = mixed
    code, out, _ = cli_main(capsys, "match", folder / "mixed.onnx", "--pattern",
                            folder / "p0.txt", "--explain")
    assert code == 0
    assert "'x4' has rank 4; the pattern declares rank 1" in out
    assert "'d1' is float64; the pattern declares float32" in out
    assert "'e' has rank 4" in out  # known by inference only: no value_info
    # find_matches alone compares what the graph declares: 'e' and 'e2' state no type
    declared = find_matches(GraphIndex(m), load_pattern(RANK1.encode()), explain=True)
    assert [s.labels for s in declared.matches] == [("Relu#1",), ("Relu#4",), ("Relu#7",)]
    assert any("'d1' is float64; the pattern declares float32" in x for x in declared.misses)


def test_replace_acts_at_the_sites_that_fit_and_refuses_one_r_cannot_take(mixed, capsys,
                                                                          tmp_path):
    m, folder = mixed
    r = tmp_path / "r.txt"
    r.write_text("g (float[4] p) => (float[4] r) { n = Neg(p)\n t = Neg(n)\n r = Relu(t) }")
    out = tmp_path / "out.onnx"
    code, text, err = cli_main(capsys, "replace", folder / "mixed.onnx", "-o", out, "--pattern",
                               folder / "p0.txt", "--replacement", r, "--json", "--verify")
    assert code == 0, err
    assert json.loads(text)["matches"] == len(_independent(m, onnx.TensorProto.FLOAT, 1)) == 2
    new = onnx.load(out)
    assert [n.op_type for n in new.graph.node].count("Neg") == 3 + 2 * 2  # 3 kept, 2 per replaced site
    feeds = {"x4": np.random.default_rng(0).standard_normal((1, 2, 3, 4)).astype(np.float32),
             "x1": np.array([-1, 2, -3, 4], np.float32), "d1": np.array([-1, 2, -3, 4.0])}
    run = [ort.InferenceSession(x.SerializeToString()).run(None, feeds) for x in (m, new)]
    for a, b in zip(*run, strict=True):
        np.testing.assert_array_equal(a, b)
    # any rank in P, rank 1 in R: the rank-4 float sites are P's matches that R cannot take
    code, _, err = cli_main(capsys, "replace", folder / "mixed.onnx", "-o", tmp_path / "o2.onnx",
                            "--pattern", folder / "p1.txt", "--replacement", r)
    assert code == 2 and err.count("\n") == 1, err
    assert "site Relu#0" in err
    assert not (tmp_path / "o2.onnx").exists()


BY_ID = """<ir_version: 8, opset_import: ["" : 17]>
g (float[4] x, float[2,3] y, u) => (float[4] o, float[1,3] q) <double[4,1] b, float[4] w = {1,2,3,4}> {
    a = Relu(x)
    b = Add(a, w)
    k = Constant<value = float[1] {2.0}>()
    c = Mul(b, k)
    s1, s2 = Split<axis = 0, num_outputs = 2>(y)
    t = Neg(s1)
    q = Relu(t)
    v = Identity(u)
    o = Relu(c)
    n = Neg(a)
}"""


def test_the_types_by_id_are_those_by_name():
    """``site_type_lookup(...).by_id`` (how the matcher reads a bound tensor's type without its
    name) answers as the name lookup for every tensor of the int graph it answers for: a
    declared ValueInfo that contradicts what inference would say (``b``), the cheap pass's
    type (``a``, ``n``), a graph input, an initializer; it leaves a Constant, the outputs of a
    multi-output node and their readers (``t``), an untyped ValueInfo and an input without a
    type to the names."""
    from onnxsurgeon.surgery.replace import site_type_lookup

    m = onnx.parser.parse_model(BY_ID)
    m.graph.value_info.append(onnx.helper.make_value_info("c", onnx.TypeProto()))
    index = GraphIndex(m)
    edges = index.int_graph()
    assert edges is not None
    lookup = site_type_lookup(index)
    answered = {}
    for name in [*index.producer, *edges.leaves.values()]:
        g = index.edge_id(name)
        if g is None or (g >= 0 and len(m.graph.node[g].output) != 1):
            continue
        found = lookup.by_id(g)
        if found is not None:
            assert found == lookup("", name), name
            answered[name] = found
    f = onnx.TensorProto.FLOAT
    assert answered == {"x": (f, 1), "y": (f, 2), "w": (f, 1), "a": (f, 1),
                        "b": (onnx.TensorProto.DOUBLE, 2), "q": (f, 2),
                        "o": (f, 1), "n": (f, 1)}
    # a declared type read once (by its bytes), the same answers from the memo
    assert {name: lookup.by_id(index.edge_id(name)) for name in answered} == answered
    assert lookup.by_type[b""] is None and len(lookup.by_type) == 4  # untyped "c" too
    # by name only: after the untyped ValueInfo the cheap pass (from b's declared type); the
    # Constant's value
    assert lookup("", "c") == (onnx.TensorProto.DOUBLE, 2) and lookup("", "k") == (f, 1)
    # the declared double[4,1] of 'b' limits a match through by_id as it does by name
    add = b"g (float[4] p, float[4] w) => (%s r) { r = Add(p, w) }"
    assert not find_matches(index, load_pattern(add % b"float[4]"), types=lookup).matches
    found = find_matches(index, load_pattern(add % b"double[N]"), types=lookup).matches
    assert [(s.inputs, s.outputs) for s in found] == [({"p": "a", "w": "w"}, {"r": "b"})]


def test_replace_names_the_first_site_r_cannot_take(mixed, capsys, tmp_path):
    """Sites of several signatures, R taking only the first one's (rank 4): the error names
    the first site in order that R cannot take (Relu#1, rank 1), not a later one (Relu#7)."""
    _, folder = mixed
    r = tmp_path / "r4.txt"
    # a fixed size declares the rank (symbolic dims alone would take any rank, as in P)
    r.write_text("g (float[1,B,C,D] p) => (float[1,B,C,D] r) { r = Relu(p) }")
    code, _, err = cli_main(capsys, "replace", folder / "mixed.onnx", "-o", tmp_path / "o.onnx",
                            "--pattern", folder / "p1.txt", "--replacement", r)
    assert code == 2 and err.count("\n") == 1, err
    assert "site Relu#1:" in err and "Relu#7" not in err, err
    assert not (tmp_path / "o.onnx").exists()


def test_a_weight_every_site_shares_is_checked_once_and_the_rest_still_are():
    """The bench's shape: every Add reads one weight. Once a site found the weight fits, the
    swept sites check only their other tensors: the double ``d`` still fails; a weight of
    another type fails every site (by id and by name alike)."""
    from onnxsurgeon.surgery.replace import site_type_lookup

    text = """<ir_version: 8, opset_import: ["" : 17]>
    g (float[4] x, double[4] d) => (float[4] f, double[4] e) <%s[4] W = {1, 2, 3, 4}> {
        a = Add(x, W)
        e = Add(d, W)
        f = Add(a, W)
    }"""
    p = load_pattern(b"g (float[4] p, float[4] w) => (float[4] r) { r = Add(p, w) }")
    for elem, want in (("float", [(0,), (2,)]), ("double", [])):
        index = GraphIndex(onnx.parser.parse_model(text % elem))
        for types in (site_type_lookup(index), None):
            assert [s.nodes for s in find_matches(index, p, types=types).matches] == want
