"""``replace``: every match of P replaced by R in one rewrite, each site proved (P alone equals
the original there, R alone equals P), the record replaying; structural, numeric, CLI, and on
converted models (a transformers encoder's decomposed LayerNorm fused into one op, a CNN's
SiLU computed another way)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

from onnxsurgeon.errors import RewriteError, UsageError
from onnxsurgeon.record import ReplaceRecord, records
from onnxsurgeon.surgery import replace
from onnxsurgeon.verify import verify_log
from tests.cli_helpers import cli, cli_main, replace_cli

ADD_RELU = b"g (float[A,B] p, float[A,B] q) => (float[A,B] r) { s = Add(p, q)\n r = Relu(s) }"
SUM_RELU = b"g (float[A,B] p, float[A,B] q) => (float[A,B] r) { s = Sum(q, p)\n r = Relu(s) }"
SUB_RELU = b"g (float[A,B] p, float[A,B] q) => (float[A,B] r) { s = Sub(q, p)\n r = Relu(s) }"


def model(text: str, opset: int = 17) -> onnx.ModelProto:
    return onnx.parser.parse_model(f'<ir_version: 8, opset_import: ["" : {opset}]>\n{text}')


def chain() -> onnx.ModelProto:
    return model("""g (float[2,3] x, float[2,3] y) => (float[2,3] z, float[2,3] w) {
        a = Add(x, y)
        b = Relu(a)
        c = Add(y, b)
        d = Relu(c)
        e = Add(d, x)
        z = Relu(e)
        w = Mul(a, x)
    }""")


def run(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def copy_of(m: onnx.ModelProto) -> onnx.ModelProto:
    c = onnx.ModelProto()
    c.CopyFrom(m)
    return c


def test_every_site_replaced_in_one_rewrite_outputs_equal_and_record_lists_sites():
    m, orig = chain(), chain()
    result = replace(m, pattern=ADD_RELU, replacement=SUM_RELU)
    onnx.checker.check_model(m, full_check=True)
    ops = [n.op_type for n in m.graph.node]
    assert ops == ["Add", "Relu", "Sum", "Relu", "Sum", "Relu", "Mul"]  # Add#0 is read by Mul
    assert [list(s.labels) for s in result.sites] == [["Add#2", "Relu#3"], ["Add#4", "Relu#5"]]
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3), dtype=np.float32),
             "y": np.random.default_rng(1).standard_normal((2, 3), dtype=np.float32)}
    for a, b in zip(run(orig, feeds), run(m, feeds), strict=True):
        assert np.array_equal(a, b)
    (record,) = records(m)
    assert isinstance(record, ReplaceRecord) and len(record.sites) == 2
    assert record.sites[0]["outputs"] == {"r": "d"} and record.sites[0]["replaced"]
    assert verify_log(orig, m).verdict == "pass"


def test_multi_output_sites_replaced_and_the_same_command_gives_the_same_bytes():
    text = """g (float[2] x, float[2] y) => (float[2] z) {
        a = Add(x, y)
        b = Relu(a)
        c = Sigmoid(a)
        z = Mul(b, c)
    }"""
    pat = (b"g (float[N] p, float[N] q) => (float[N] r1, float[N] r2) { s = Add(p, q)\n"
           b" r1 = Relu(s)\n r2 = Sigmoid(s) }")
    rep = (b"g (float[N] p, float[N] q) => (float[N] r1, float[N] r2) { s = Sum(p, q)\n"
           b" r1 = Relu(s)\n r2 = Sigmoid(s) }")
    m, again, orig = model(text), model(text), model(text)
    result = replace(m, pattern=pat, replacement=rep)
    replace(again, pattern=pat, replacement=rep)
    assert m.SerializeToString(deterministic=True) == again.SerializeToString(deterministic=True)
    assert result.sites[0].outputs == {"r1": "b", "r2": "c"}
    assert [n.op_type for n in m.graph.node] == ["Sum", "Relu", "Sigmoid", "Mul"]
    onnx.checker.check_model(m, full_check=True)
    feeds = {"x": np.array([1.0, -2.0], np.float32), "y": np.array([0.5, 3.0], np.float32)}
    assert np.array_equal(run(orig, feeds)[0], run(m, feeds)[0])


def test_the_record_replays_without_the_files():
    from onnxsurgeon.io import Model
    from onnxsurgeon.verify.log import replay

    m = chain()
    replace(m, pattern=ADD_RELU, replacement=SUM_RELU)
    again = Model(chain())
    replay(again, records(m)[0])
    assert again.proto.graph == m.graph


def test_a_wrong_replacement_fails_its_site_by_name():
    m, orig = chain(), chain()
    replace(m, pattern=ADD_RELU, replacement=SUB_RELU)
    report = verify_log(orig, m)
    assert report.verdict == "fail"
    failed = [p for p in report.pairs if not p.agree]
    assert any(p.reference_text.startswith("site Add#2+Relu#3") for p in failed)
    patterns = [p for p in report.pairs if p.check.endswith("replace:pattern")]
    assert patterns and all(p.agree for p in patterns)  # P alone still equals the original


def test_any_constant_sites_are_proved_with_their_own_constant():
    """Mul(p, c) with c any constant, replaced by Add(p, p): right where c is 2, and the proof
    (P fed the site's own constant) fails the site where c is 3, by name."""
    text = """g (float[2] x) => (float[2] a, float[2] b) <float two = {2.0}, float three = {3.0}> {
        a = Mul(x, two)
        b = Mul(x, three)
    }"""
    m, orig = model(text), model(text)
    pat = b"g (float[N] p) => (float[N] r) <float c = {2.0}> { r = Mul(p, c) }"
    replace(m, pattern=pat, replacement=b"g (float[N] p) => (float[N] r) { r = Add(p, p) }",
            any_constant=["c"])
    report = verify_log(orig, m)
    bad = sorted({p.reference_text.split(":")[0] for p in report.pairs if not p.agree})
    assert report.verdict == "fail" and bad == ["b", "site Mul#1"]


def test_refusals_leave_the_model_unchanged():
    m = chain()
    before = m.SerializeToString()
    one_input = b"g (float[A,B] p) => (float[A,B] r) { r = Relu(p) }"
    with pytest.raises(UsageError, match="bind by"):
        replace(m, pattern=ADD_RELU, replacement=one_input)
    as_double = (b"g (float[A,B] p, float[A,B] q) => (double[A,B] r) { s = Add(p, q)\n"
                 b" r = Cast <to = 11> (s) }")
    with pytest.raises(RewriteError, match="double"):
        replace(m, pattern=ADD_RELU, replacement=as_double)
    with pytest.raises(RewriteError, match="matches nothing"):
        replace(m, pattern=b"g (float[N] p) => (float[N] r) { r = Tanh(p) }",
                replacement=b"g (float[N] p) => (float[N] r) { r = Tanh(p) }")
    assert m.SerializeToString() == before


def test_sites_in_bodies_replaced_with_weights_shared_and_dead_constants_removed():
    m = model("""g (float[2] x, float[2] y) => (float[2] a, float[2] m) {
        c = Constant <value = bool {1}> ()
        a = If (c) <then_branch = then_g () => (float[2] t) { s = Add(x, y)
                                                            t = Relu(s) },
                     else_branch = else_g () => (float[2] e) { e = Relu(x) }>
        k = Constant <value = float {2.0}> ()
        m = Mul(x, k)
    }""")
    orig = copy_of(m)
    two = b"g (float[N] p) => (float[N] r) <float c = {2.0}> { r = Mul(p, c) }"
    doubled = b"g (float[N] p) => (float[N] r) { r = Add(p, p) }"
    result = replace(m, pattern=two, replacement=doubled)
    assert result.removed_constants == ["Constant#2"]
    assert [n.op_type for n in m.graph.node] == ["Constant", "If", "Add"]
    scaled = b"g (float[N] p, float[N] q) => (float[N] r) <float[1] h = {0.5}> {\n" \
             b" s = Sum(p, q)\n t = Relu(s)\n r = Div(t, h) }"
    nested = copy_of(m)
    assert [s.graph for s in replace(nested, pattern=ADD_RELU, replacement=scaled).sites] == [
        "If#1/then_branch"]
    onnx.checker.check_model(nested, full_check=True)
    feeds = {"x": np.array([1.0, -2.0], np.float32), "y": np.array([0.5, 3.0], np.float32)}
    want = run(orig, feeds)
    got = run(nested, feeds)
    assert np.array_equal(got[0], want[0] / 0.5) and np.array_equal(got[1], want[1])


def test_replace_cli_end_to_end_with_verify_and_json(tmp_path):
    path, pat, rep, out = tmp_path / "m.onnx", tmp_path / "p.txt", tmp_path / "r.txt", \
        tmp_path / "out.onnx"
    onnx.save(chain(), path)
    pat.write_bytes(ADD_RELU)
    rep.write_bytes(SUM_RELU)
    proc = cli("replace", path, "-o", out, "--pattern", pat, "--replacement", rep, "--verify",
               "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["matches"] == 2 and data["verify"]["verdict"] == "pass"
    assert data["sites"][0]["nodes"] == ["Add#2", "Relu#3"] and out.exists()


def test_replace_cli_failing_site_is_exit_1_and_nothing_written(tmp_path, capsys):
    path, pat, rep, out = tmp_path / "m.onnx", tmp_path / "p.txt", tmp_path / "r.txt", \
        tmp_path / "out.onnx"
    onnx.save(chain(), path)
    pat.write_bytes(ADD_RELU)
    rep.write_bytes(SUB_RELU)
    code, stdout, err = cli_main(capsys, "replace", path, "-o", out, "--pattern", pat,
                                 "--replacement", rep, "--verify")
    assert code == 1 and not out.exists()
    assert "site Add#2+Relu#3: the pattern alone" in stdout and "nothing written" in err
    code, stdout, err = cli_main(capsys, "replace", path, "-o", out, "--pattern", pat,
                                 "--replacement", tmp_path / "missing.txt")
    assert code == 2 and err.count("\n") == 1 and "not found" in err


# ------------------------------------------------------------------ converted models
LN_PATTERN = """<ir_version: 8, opset_import: ["" : 16]>
ln (float[N,S,H] x, float[H] w, float[H] b) => (float[N,S,H] y) {
  mean = ReduceMean <axes = [-1]> (x)
  d = Sub(x, mean)
  two = Constant <value = float {2.0}> ()
  p = Pow(d, two)
  var = ReduceMean <axes = [-1]> (p)
  eps = Constant <value = float {1e-12}> ()
  ve = Add(var, eps)
  s = Sqrt(ve)
  n = Div(d, s)
  m = Mul(n, w)
  y = Add(m, b)
}"""
LN_FUSED = """<ir_version: 8, opset_import: ["" : 17]>
ln (float[N,S,H] x, float[H] w, float[H] b) => (float[N,S,H] y) {
  y = LayerNormalization <axis = -1, epsilon = 1e-12> (x, w, b)
}"""


@pytest.fixture(scope="session")
def bert_opset16(tmp_path_factory) -> onnx.ModelProto:
    """A transformers BERT encoder from a config (random weights), exported with
    torch.onnx (dynamo=False) at opset 16, where LayerNorm is decomposed."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=32,
                                  max_position_embeddings=16)
    torch.manual_seed(0)
    bert = transformers.BertModel(cfg).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids):  # noqa: ANN001
            return self.bert(input_ids=ids).last_hidden_state

    path = tmp_path_factory.mktemp("bert") / "bert.onnx"
    torch.onnx.export(Encoder().eval(), (torch.randint(0, 50, (1, 8)),), str(path),
                      opset_version=16, dynamo=False, input_names=["input_ids"],
                      output_names=["hidden"])
    return onnx.load(str(path))


@pytest.mark.slow
@pytest.mark.torch
def test_decomposed_layernorm_of_a_transformer_fused_into_one_op_proved_per_site(
        bert_opset16, tmp_path):
    from onnxsurgeon.io import Model

    m, orig = copy_of(bert_opset16), copy_of(bert_opset16)
    pattern, fused = tmp_path / "ln.txt", tmp_path / "fused.txt"
    pattern.write_text(LN_PATTERN)
    fused.write_text(LN_FUSED)
    expected = Counter(n.op_type for n in orig.graph.node)["Pow"]  # one Pow per LayerNorm
    result = replace(m, pattern=pattern, replacement=fused, tolerance=(1e-4, 1e-5))
    assert len(result.sites) == expected == 5
    ops = Counter(n.op_type for n in m.graph.node)
    assert ops["LayerNormalization"] == 5 and ops["Pow"] == 0 and ops["Sqrt"] == 0
    assert {o.version for o in m.opset_import if o.domain in ("", "ai.onnx")} == {17}
    onnx.checker.check_model(m)
    report = verify_log(Model(orig), Model(m))
    assert report.verdict == "pass", report.to_text()
    sites = [p for p in report.pairs if p.check.endswith("replace:site")]
    assert len(sites) == 5 and all(p.agree for p in sites)


SILU = "g (float[N,C,H,W] p) => (float[N,C,H,W] r) { s = Sigmoid(p)\n r = Mul(s, p) }"
SILU_EXP = """g (float[N,C,H,W] p) => (float[N,C,H,W] r) <float one = {1.0}> {
  n = Neg(p)
  e = Exp(n)
  d = Add(one, e)
  r = Div(p, d)
}"""


@pytest.mark.slow
@pytest.mark.torch
def test_a_cnn_silu_replaced_everywhere_under_tolerance(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    from onnxsurgeon.io import Model

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.SiLU(),
        torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.SiLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 2)).eval()
    path = tmp_path / "cnn.onnx"
    torch.onnx.export(net, (torch.randn(1, 3, 8, 8),), str(path), opset_version=16,
                      dynamo=False, input_names=["x"], output_names=["y"])
    orig = onnx.load(str(path))
    m = copy_of(orig)
    expected = Counter(n.op_type for n in orig.graph.node)["Sigmoid"]
    result = replace(m, pattern=SILU.encode(), replacement=SILU_EXP.encode(),
                     tolerance="1e-5,1e-6")
    assert len(result.sites) == expected == 2  # Mul(x, sigmoid) matches Mul(s, p): commutative
    report = verify_log(Model(orig), Model(m))
    assert report.verdict == "pass", report.to_text()
    # the same pattern written as a torch function (converted as insert --func converts one)
    (tmp_path / "pat.py").write_text("import torch\n\ndef silu(x):\n    return x * torch.sigmoid(x)\n")
    code, out, err = cli_main(capsys, "match", path, "--pattern", f"{tmp_path / 'pat.py'}:silu",
                              "--framework", "torch", "--pattern-input", "x:1x4x8x8", "--json")
    assert code == 0, err
    assert json.loads(out)["matches"] == expected
    code, out, err = cli_main(capsys, "match", path, "--pattern", f"{tmp_path / 'pat.py'}:silu",
                              "--framework", "torch", "--pattern-input", "x:1x4", "--pattern-input",
                              "y:1x4")
    assert code == 2 and "takes one input" in err


def test_the_splice_is_followed_so_the_save_vouches_for_the_copies_by_their_stand_ins(tmp_path):
    """replace hands its journal on (issue 28): the kept index equals a fresh build, the
    touched check vouches for the model by R's nodes once (the copies differ only in names),
    and a stand-in that fails its schema makes it decline (the whole check runs)."""
    from onnx import helper

    from onnxsurgeon import io
    from onnxsurgeon.checking import Check
    from onnxsurgeon.index import GraphIndex, _build_edges
    from onnxsurgeon.session import Session
    from tests import builders

    proto = builders.chain(40)
    proto.graph.node.append(helper.make_node("Sigmoid", ["relu5"], ["s"], name="side"))
    proto.graph.output.append(helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, [1, 4]))
    onnx.save(proto, tmp_path / "m.onnx")
    model = io.load(tmp_path / "m.onnx")
    with Session(model, loaded=True) as session:
        replace(model, pattern=b"g (float[1,4] p) => (float[1,4] r) { r = Sigmoid(p) }",
                replacement=b"g (float[1,4] p) => (float[1,4] r) { q = Identity(p)\n"
                            b" r = Sigmoid(q) }")
        session.verb_returned()
        journal = session.journal
        assert journal is not None and not journal.dearer_than_check()
        kept = session.kept_index()
        assert kept is not None and kept.edges == _build_edges(model.proto.graph)
        assert list(kept.producer.items()) == list(GraphIndex(model.proto).producer.items())
        assert journal.touched() == [] and [n.op_type for n in journal.stand_ins] == [
            "Identity", "Sigmoid"]
        assert io.vouched_by_edits(model, journal)
        session.save(tmp_path / "out.onnx", check=Check.TOUCHED)
        journal.stand_ins[1].op_type = "NoSuchOp"
        assert not io.vouched_by_edits(model, journal)
    onnx.checker.check_model(onnx.load(tmp_path / "out.onnx"), full_check=True)
    assert (tmp_path / "out.onnx").read_bytes() == model.proto.SerializeToString(
        deterministic=True)


MAX_MIN = b"""<ir_version: 8, opset_import: ["" : 17]>
p (float x, float lo, float hi) => (float y) { m = Max(x, lo)\n y = Min(m, hi) }"""
CLIP = b"""<ir_version: 8, opset_import: ["" : 17]>
r (float x, float lo, float hi) => (float y) { y = Clip(x, lo, hi) }"""


@pytest.mark.parametrize("fixed", [False, True], ids=["any-rank", "fixed-rank"])
def test_a_replacement_declared_without_a_fixed_size_takes_a_site_of_any_rank(tmp_path, capsys,
                                                                            fixed):
    """``float x`` declares no rank (as for P, README): Max/Min -> Clip (onnx-graphsurgeon's
    replacing-a-subgraph example) on a rank-3 site passes where R says ``float x``; R saying
    ``float[2] x`` (rank 1) is refused at the site in one line (was refused either way)."""
    host = model("""g (float[1,3,4] x) => (float[1,3,4] y) <float lo = {0.0}, float hi = {6.0}> {
        r = Relu(x)
        mx = Max(r, lo)
        mn = Min(mx, hi)
        y = Neg(mn)
    }""")
    path, pat, rep, out = (tmp_path / n for n in ("m.onnx", "p.txt", "r.txt", "out.onnx"))
    onnx.save(host, path)
    pat.write_bytes(MAX_MIN)
    rep.write_bytes(CLIP.replace(b"(float x,", b"(float[2] x,") if fixed else CLIP)
    code, stdout, err = cli_main(capsys, "replace", path, "-o", out, "--pattern", pat,
                                 "--replacement", rep, "--verify", "--json")
    if fixed:
        assert code == 2 and err.count("\n") == 1 and "has rank 1" in err and not out.exists()
        return
    assert code == 0, err
    assert json.loads(stdout)["verify"]["verdict"] == "pass"
    got = onnx.load(out)
    assert [n.op_type for n in got.graph.node] == ["Relu", "Clip", "Neg"]
    x = np.random.default_rng(0).standard_normal((1, 3, 4)).astype(np.float32) * 8
    assert np.array_equal(run(host, {"x": x})[0], run(got, {"x": x})[0])


def test_the_declared_types_filled_at_once_are_those_asked_one_by_one():
    """``_SiteTypes.fill`` keys the declared tensors by C-level maps: the same keys as
    :meth:`key` asked name by name, a declared entry without a dtype (or not a tensor) left to
    the next source."""
    import importlib

    from onnx import helper

    from onnxsurgeon.index import GraphIndex
    from tests import builders

    replace_module = importlib.import_module("onnxsurgeon.surgery.replace")
    proto = onnx.shape_inference.infer_shapes(builders.chain(6))
    vis = proto.graph.value_info
    vis[1].type.tensor_type.ClearField("elem_type")  # declared, no dtype
    vis[2].type.CopyFrom(helper.make_sequence_type_proto(vis[2].type))  # not a tensor
    vis[3].type.tensor_type.shape.dim[0].dim_param = "batch"
    names = [vi.name for vi in vis] + ["x", "W", "y"]
    one, many = (replace_module._SiteTypes(GraphIndex(proto), len(proto.graph.node))
                 for _ in range(2))
    by_one = {name: one.key(name) for name in names}
    many.fill(names)
    assert many.memo == by_one
    untyped = by_one[vis[1].name]  # typed by another source: a tensor with its dtype
    assert untyped != vis[1].type.SerializeToString(deterministic=True)
    assert replace_module._elem(replace_module._type_of(untyped)) == 1
    assert by_one[vis[3].name] == vis[3].type.SerializeToString(deterministic=True)


def test_untyped_pattern_and_replacement_are_proved_per_dtype_of_their_sites(tmp_path, capsys):
    """P and R written without types (``g (x) => (y)``, as onnxscript's rewriter users write
    them) match a float and an int64 site: the replacement was refused by the checker ('Field
    type of value_info is required'), and --verify of an untyped P exited 2 (onnxruntime: 'Model
    input (x) does not have type information'); each site is now proved with P and R typed by
    its own values."""
    host = model("""g (float[2,3] x, int64[4] i) => (float[2,3] y, int64[4] j) {
        a = Neg(x)
        y = Relu(a)
        j = Neg(i)
    }""")
    code, stdout, err, out = replace_cli(capsys, tmp_path, host, "g (x) => (y) { y = Neg(x) }",
                                         "g (x) => (y) { n = Neg(x)\n y = Identity(n) }",
                                         "--verify", "--json")
    assert code == 0, err
    data = json.loads(stdout)
    assert data["matches"] == 2 and data["verify"]["verdict"] == "pass"
    got = onnx.load(out)
    onnx.checker.check_model(got, full_check=True)
    assert Counter(n.op_type for n in got.graph.node) == {"Neg": 2, "Identity": 2, "Relu": 1}
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32),
             "i": np.array([3, -1, 0, 7], np.int64)}
    for a, b in zip(run(host, feeds), run(got, feeds), strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("where", ["declared", "inferred"])
def test_a_body_site_refused_when_the_replacement_changes_its_dtype(tmp_path, capsys, where):
    """A site inside a Loop body is type-checked as a main-graph site is: R = Cast(to int64)
    for a float Relu used to be written and the save's checker exited 3 ('Inferred elem type
    differs'); now exit 2 naming the site, nothing written. The site's output is the body's
    declared output, or an inner tensor only inference types."""
    inner = "r = Relu(t)\n yout = Identity(r)" if where == "inferred" else "yout = Relu(t)"
    host = model(f"""g (float[2,3] x) => (float[2,3] y) <float[2,3] one = {{1,1,1,1,1,1}},
                                                          int64 trip = {{3}}, bool cond = {{1}}> {{
        y = Loop (trip, cond, x) <body = body (int64 i, bool cin, float[2,3] yin)
                                  => (bool cout, float[2,3] yout) {{
            t = Add(yin, one)
            {inner}
            cout = Identity(cin)
        }}>
    }}""")
    relu = "g (float x) => (float y) { y = Relu(x) }"
    code, _, err, out = replace_cli(capsys, tmp_path, host, relu,
                                    "g (float x) => (int64 y) { y = Cast <to = 7> (x) }")
    assert code == 2 and err.count("\n") == 1, err
    assert "is int64 but the pattern's output" in err and not out.exists()
    code, _, err, out = replace_cli(
        capsys, tmp_path, host, relu,
        "g (float x) => (float y) <float zero = {0.0}> { y = Max(x, zero) }")
    assert code == 0, err
    got = onnx.load(out)
    onnx.checker.check_model(got, full_check=True)
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    assert np.array_equal(run(host, {"x": x})[0], run(got, {"x": x})[0])


def test_a_pattern_calling_a_local_function_is_proved(tmp_path, capsys):
    """P = a call of the model's local function, R = its body inlined: --verify ran P alone
    without the function (exit 2: onnxruntime 'local:Block(-1) is not a registered
    function/op'); P and R alone now carry the host's functions."""
    host = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17, "local" : 1]>
    g (float[2,3] x, float[2,3] b) => (float[2,3] y) {
        t = local.Block(x, b)
        y = Neg(t)
    }
    <domain: "local", opset_import: ["" : 17]>
    Block (p, q) => (r) { s = Add(p, q)
        r = Relu(s) }""")
    code, stdout, err, out = replace_cli(
        capsys, tmp_path, host,
        '<ir_version: 8, opset_import: ["" : 17, "local" : 1]>\n'
        "g (float[2,3] x, float[2,3] b) => (float[2,3] y) { y = local.Block(x, b) }",
        "g (float[2,3] x, float[2,3] b) => (float[2,3] y) { s = Add(x, b)\n y = Relu(s) }",
        "--verify", "--json")
    assert code == 0, err
    assert json.loads(stdout)["verify"]["verdict"] == "pass"
    got = onnx.load(out)
    assert [n.op_type for n in got.graph.node] == ["Add", "Relu", "Neg"]
    feeds = {n: np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
             for n in ("x", "b")}
    assert np.array_equal(run(host, feeds)[0], run(got, feeds)[0])


def test_the_declared_types_from_loads_reading_are_those_of_the_value_info():
    """An index with load's reading of the value_info entries (``listed_value_info``, the
    type bytes as written) keys every declared tensor as one reading the ValueInfoProtos
    does, a type written in another field order included, and names the same types."""
    import importlib

    from onnxsurgeon import scan
    from onnxsurgeon.index import GraphIndex
    from tests import builders

    replace_module = importlib.import_module("onnxsurgeon.surgery.replace")
    proto = onnx.shape_inference.infer_shapes(builders.chain(6))
    vis = proto.graph.value_info
    vis[1].type.tensor_type.ClearField("elem_type")
    vis[3].type.tensor_type.shape.dim[0].dim_param = "batch"
    listed = scan.ValueInfos([vi.name for vi in vis], [vi.type.SerializeToString() for vi in vis],
                             proto.SerializeToString())
    # the shape field written before the element type: other bytes, the same type
    tt = vis[4].type.tensor_type
    listed.types[4] = b"\x0a" + bytes([len(shape := b"\x12" + bytes([len(
        tt.shape.SerializeToString())]) + tt.shape.SerializeToString()) + 2]) + shape + b"\x08\x01"
    assert onnx.TypeProto.FromString(listed.types[4]) == vis[4].type
    plain = GraphIndex(proto)
    fast = GraphIndex(proto, _producer=dict(plain.producer), _value_info=listed)
    assert plain.type_bytes is None and fast.type_bytes is not None
    names = [vi.name for vi in vis] + ["x", "W", "y"]
    for name in names:
        assert fast.declared_type(name) == plain.declared_type(name)
    one, many = (replace_module._SiteTypes(index, len(proto.graph.node))
                 for index in (plain, fast))
    one.fill(names)
    many.fill(names)
    assert many.memo == one.memo
    lookups = [replace_module.site_type_lookup(index) for index in (plain, fast)]
    for index in (plain, fast):
        index.memo["int_graph"] = plain.int_graph()
    assert [lookups[0].by_id(g) for g in range(18)] == [lookups[1].by_id(g) for g in range(18)]


def test_a_loaded_model_with_value_info_is_replaced_the_same_with_and_without_the_scan(
        tmp_path):
    """Replace on a loaded model whose value_info declares every tensor (as exporters write
    it) reads the declared types and drops the removed tensors' entries from load's reading
    of the bytes: the same file as the Python passes give, the entries of the removed
    tensors gone, the others kept in order."""
    from onnxsurgeon import fast, io
    from onnxsurgeon.session import Session
    from tests import builders

    proto = onnx.shape_inference.infer_shapes(builders.chain(30))
    proto.graph.value_info[7].doc_string = "kept as written"  # add2
    onnx.save(proto, tmp_path / "m.onnx")
    pattern = b"g (float[1,4] p, float[4,4] w, float[4] b) => (float[1,4] y) {\n" \
              b" h = MatMul(p, w)\n y = Add(h, b) }"
    got = {}
    for on in (True, False):
        with fast.forced(scan=on):
            listed = io.take_loaded_index(io.load(tmp_path / "m.onnx")).listed_value_info
            assert (listed is not None) == (on and fast.available("scan"))
            model = io.load(tmp_path / "m.onnx")
            with Session(model, loaded=True) as session:
                replace(model, pattern=pattern, replacement=pattern.replace(b"Add(", b"Sum("))
                session.verb_returned()
                session.save(tmp_path / f"out{on}.onnx")
            got[on] = (tmp_path / f"out{on}.onnx").read_bytes()
    assert got[True] == got[False]
    out = onnx.load_from_string(got[True])
    kept = [vi.name for vi in out.graph.value_info]
    assert kept == [vi.name for vi in proto.graph.value_info if not vi.name.startswith("mm")]
    assert len(kept) == 59  # the sites' outputs (add*) and the Relus (relu*) are still there
    assert out.graph.value_info[kept.index(proto.graph.value_info[7].name)].doc_string \
        == "kept as written"


def test_the_copies_built_column_by_column_are_those_built_site_by_site(monkeypatch):
    """``build_copies`` makes the main graph's copies column by column (C-level maps over the
    sites' names) when every name was claimed at once: the same bytes, node names and the
    fields the save's check reads as the site-by-site loop gives."""
    import importlib

    from onnxsurgeon.index import GraphIndex
    from onnxsurgeon.names import NameAllocator
    from onnxsurgeon.pattern import find_matches, load_pattern
    from tests import builders

    replicas = importlib.import_module("onnxsurgeon.surgery._replicas")
    proto = builders.chain(12)
    index = GraphIndex(proto)
    p = load_pattern(b"g (float[1,4] p, float[4,4] w, float[4] b) => (float[1,4] y) {\n"
                     b" h = MatMul(p, w)\n y = Add(h, b) }")
    r = onnx.parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>\n'
                                "g (float[1,4] p, float[4,4] w, float[4] b) => (float[1,4] y) "
                                "<float[4] k = {1.0, 2.0, 3.0, 4.0}> {\n h = MatMul(p, w)\n"
                                " s = Sum(h, b, k)\n y = Identity(s) }")
    sites = find_matches(index, p).matches
    assert len(sites) == 12

    def built() -> object:
        tpl = replicas.Template(r)
        weights = {"k": "R/k"}
        tpl.prepare(weights)
        return replicas.build_copies(tpl, sites, p, weights, NameAllocator.for_index(index), "R")

    by_columns = built()
    monkeypatch.setattr(replicas, "_GRAPH", lambda site: "not only the main graph")
    by_sites = built()
    assert by_columns.plans == by_sites.plans and by_columns.replaced == by_sites.replaced
    assert by_columns.written.replicas == by_sites.written.replicas
    assert by_columns.written.names == by_sites.written.names
    assert by_columns.stand_ins == by_sites.stand_ins
    assert by_columns.replaced[0] == ["Add_0/R/MatMul", "Add_0/R/Sum", "Add_0/R/Identity"]


def test_a_replacement_of_unknown_rank_is_taken(tmp_path, capsys):
    """An .onnx R whose inputs and outputs are tensors of unknown rank (a TensorProto type
    without a shape, as ``make_tensor_value_info(name, FLOAT, None)`` and exporters write) was
    refused: 'Field shape of type is required but missing'. It binds to the sites' tensors."""
    host = chain()
    rep = tmp_path / "r.onnx"
    f = onnx.TensorProto.FLOAT
    r = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Sum", ["p", "q"], ["s"]),
         onnx.helper.make_node("Relu", ["s"], ["r"])],
        "r", [onnx.helper.make_tensor_value_info(n, f, None) for n in ("p", "q")],
        [onnx.helper.make_tensor_value_info("r", f, None)]),
        opset_imports=[onnx.helper.make_opsetid("", 17)])
    onnx.save(r, rep)
    code, stdout, err, out = replace_cli(capsys, tmp_path, host, ADD_RELU, rep, "--verify",
                                         "--json")
    assert code == 0, err
    assert json.loads(stdout)["matches"] == 2
    got = onnx.load(out)
    assert Counter(n.op_type for n in got.graph.node) == {"Sum": 2, "Relu": 3, "Mul": 1, "Add": 1}
    feeds = {n: np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
             for n in ("x", "y")}
    for a, b in zip(run(host, feeds), run(got, feeds), strict=True):
        assert np.array_equal(a, b)


def test_a_multi_output_site_read_between_its_nodes_names_the_output_and_a_fix_that_works(
        tmp_path, capsys):
    """P = {a = Relu(x); y = Neg(a)} with outputs (a, y), and Sigmoid(a) between Relu and Neg
    in a sorted model: refused (R goes where Neg is), and the advice was 'sort the graph',
    which toposort cannot do (the order is topological already). It names the output and the
    split of the pattern; nothing is written."""
    host = model("""g (float[2,3] x) => (float[2,3] y, float[2,3] z) {
        a = Relu(x)
        z = Sigmoid(a)
        y = Neg(a)
    }""")
    code, _, err, out = replace_cli(
        capsys, tmp_path, host,
        "g (float[N] x) => (float[N] a, float[N] y) { a = Relu(x)\n y = Neg(a) }")
    assert code == 2 and err.count("\n") == 1 and not out.exists(), err
    assert "node 'Sigmoid' reads its output 'a' between its nodes" in err
    assert "split the pattern at 'a'" in err and "sort the graph" not in err


def test_a_replacement_may_hand_an_input_or_a_constant_on(tmp_path, capsys):
    """R's outputs may be its inputs (``g (x) => (x) { }``) or its constants: an Identity owns
    each, as the copies were written to do; load refused them ('not computed by one of its
    nodes; a pattern's outputs must be node outputs'). Identity -> passthrough is proved bit for
    bit; Relu -> a constant is written and gives the constant."""
    host = model("""g (float[2,3] x) => (float[2,3] y) {
        a = Relu(x)
        b = Identity(a)
        c = Neg(b)
        y = Identity(c)
    }""")
    code, stdout, err, out = replace_cli(capsys, tmp_path, host,
                                         "g (x) => (y) { y = Identity(x) }", "g (x) => (x) { }",
                                         "--verify", "--json")
    assert code == 0, err
    assert json.loads(stdout)["matches"] == 2
    x = np.random.default_rng(4).standard_normal((2, 3)).astype(np.float32)
    assert np.array_equal(run(host, {"x": x})[0], run(onnx.load(out), {"x": x})[0])
    code, _, err, out = replace_cli(
        capsys, tmp_path, host, "g (float[2,3] x) => (float[2,3] y) { y = Relu(x) }",
        "g (float[2,3] x) => (float[2,3] k) <float[2,3] k = {1,2,3,4,5,6}> { }", "--force")
    assert code == 0, err
    got = onnx.load(out)
    onnx.checker.check_model(got, full_check=True)
    assert np.array_equal(run(got, {"x": x})[0], -np.arange(1, 7, dtype=np.float32).reshape(2, 3))
