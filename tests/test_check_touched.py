"""The output check limited to what one verb touched (issue 14): it vouches for every verb's
output on large graphs, it refuses (and the whole onnx.checker pass then reports) every fault a
rewrite could leave in what it touched, and it gives up where it cannot tell.

``FULL_CHECK_MAX_NODES`` is lowered so that small chains count as large graphs (the rule under
test is the same at 20,000 nodes; one test runs it there)."""

from __future__ import annotations

import importlib

import numpy as np
import onnx
import pytest
from onnx import helper

from onnxsurgeon import checking, io, load
from onnxsurgeon.checking import Check, OutputCheckError
from onnxsurgeon.io import vouched_by_edits
from onnxsurgeon.protos import node_entries
from onnxsurgeon.session import Session, active
from onnxsurgeon.surgery import copy, extract, fold, insert, rename, replace, reroute
from onnxsurgeon.upkeep import Upkeep
from tests import builders
from tests.cli_helpers import cli_main as run

copy_module = importlib.import_module("onnxsurgeon.surgery.copy")  # the module, not the verb
fuse_module = importlib.import_module("onnxsurgeon.surgery.fuse")
fuse_gemm_module = importlib.import_module("onnxsurgeon.surgery._fuse_gemm")
replace_module = importlib.import_module("onnxsurgeon.surgery.replace")

# replace's sites: every MatMul -> Add, by R the same with Sum, times a weight of R's own (an
# initializer appended before the splice); the Relus are kept
FUSE_P = (b"g (float[1,4] p, float[4,4] w, float[4] b) => (float[1,4] y) {\n"
          b" h = MatMul(p, w)\n y = Add(h, b) }")
FUSE_R = (b"g (float[1,4] p, float[4,4] w, float[4] b) => (float[1,4] y)"
          b" <float[1] one = {1.0}> {\n h = MatMul(p, w)\n s = Sum(h, b)\n y = Mul(s, one) }")


@pytest.fixture
def large(monkeypatch):
    """Every model above 10 nodes is 'large': the touched check applies."""
    monkeypatch.setattr(checking, "FULL_CHECK_MAX_NODES", 10)


_OPEN: list[Session] = []
"""The sessions a test opened (closed after it)."""


@pytest.fixture(autouse=True)
def _sessions():
    yield
    while _OPEN:
        _OPEN.pop().close()


def _session(src) -> Session:
    """``src`` loaded in a session, as the CLI's load -> verb -> save runs: the verb's journal
    goes to the session, whose save checks what it touched."""
    _OPEN.append(Session(load(src), loaded=True))
    return _OPEN[-1]


def _in_session(model):
    """The model of a session opened on ``model`` as loaded."""
    _OPEN.append(Session(model, loaded=True))
    return model


def _journal(m):
    session = active(m)
    return session.journal if session is not None else None


def check_touched(m, nodes_checked: range = range(0)) -> bool:
    """The touched check of ``m`` with its session's journal (none without a session)."""
    return vouched_by_edits(m, _journal(m), nodes_checked)


def save(m, path, **options):
    """io.save with the journal of ``m``'s session, as ``Session.save``."""
    return io.save(m, path, journal=_journal(m), **options)


def _loaded(tmp_path, model: onnx.ModelProto | None = None, name: str = "src.onnx"):
    src = tmp_path / name
    src.write_bytes((model or builders.chain(8)).SerializeToString())
    return src, _session(src).model


VERBS = {
    "extract": lambda m: extract(m, ["relu3"]),
    "insert": lambda m: insert(m, "relu3", op="l2_normalize", params={"axis": 1}),
    "insert-as-output": lambda m: insert(m, "relu3", op="scale", params={"factor": 2.0},
                                         as_output=True),
    "reroute": lambda m: reroute(m, "relu3", "add3"),
    "reroute-prune": lambda m: reroute(m, "relu5", "relu2", prune=True),
    "copy": lambda m: copy(m, ["relu2"], prefix="twin/"),
    "copy-whole": lambda m: copy(m, ["y"], prefix="twin/"),  # 24 nodes more
    "copy-shared": lambda m: copy(m, ["y", "relu4"], prefix="twin/", weights="shared"),
    "rename": lambda m: rename(m, {"relu3": "act"}),
    "fold": lambda m: fold(m),  # 8 MatMul + Add -> Gemm: one splice of half the nodes
    "replace": lambda m: replace(m, pattern=FUSE_P, replacement=FUSE_R),  # 24 new of 32
}


@pytest.mark.usefixtures("large")
@pytest.mark.parametrize("verb", VERBS)
def test_each_verb_output_is_vouched_for_and_passes_the_whole_checker(tmp_path, verb):
    src, m = _loaded(tmp_path)
    VERBS[verb](m)
    assert check_touched(m)
    out = save(m, tmp_path / "touched.onnx", check=Check.TOUCHED)
    onnx.checker.check_model(str(out), full_check=True)  # the verdict it stands for
    again = _in_session(load(src))
    VERBS[verb](again)
    plain = save(again, tmp_path / "plain.onnx", check=Check.STRUCTURE)
    assert out.read_bytes() == plain.read_bytes()  # the check level changes no byte


def _insert(m):
    insert(m, "relu3", op="l2_normalize", params={"axis": 1})
    nodes = m.proto.graph.node
    return [i for i, n in enumerate(nodes) if n.output and n.output[0].startswith("relu3")
            and n.name != "Relu_3"]


def _bogus_attribute(m):
    node = m.proto.graph.node[_insert(m)[0]]
    node.attribute.append(helper.make_attribute("no_such_attribute", 1))


def _reads_a_later_tensor(m):
    node = m.proto.graph.node[_insert(m)[0]]
    node.input[0] = "relu6"


def _unknown_op(m):
    m.proto.graph.node[_insert(m)[0]].op_type = "NoSuchOp"


def _weight_named_like_another(m):
    insert(m, "relu3", op="scale", params={"factor": 2.0})  # appends the block's weight
    g = m.proto.graph
    old = g.initializer[-1].name
    g.initializer[-1].name = "W"  # the chain's own weight: two initializers named W
    for node in g.node:
        for k, name in enumerate(node.input):
            if name == old:
                node.input[k] = "W"


def _output_not_produced(m):
    extract(m, ["relu3"])
    m.proto.graph.output[0].name = "nowhere"


def _initializer_twice(m):
    extract(m, ["relu3"])
    m.proto.graph.initializer.append(m.proto.graph.initializer[0])


def _metadata_key_twice(m):
    extract(m, ["relu3"])
    for value in ("a", "b"):
        m.proto.metadata_props.append(onnx.StringStringEntryProto(key="k", value=value))


def _unnamed_graph(m):
    extract(m, ["relu3"])
    m.proto.graph.name = ""


def _untyped_output(m):
    extract(m, ["relu3"])
    m.proto.graph.output[0].ClearField("type")


@pytest.mark.usefixtures("large")
@pytest.mark.parametrize("fault", [_bogus_attribute, _reads_a_later_tensor, _unknown_op,
                                   _weight_named_like_another,
                                   _output_not_produced, _initializer_twice, _untyped_output,
                                   _metadata_key_twice, _unnamed_graph])
def test_a_fault_where_the_rewrite_worked_is_refused(tmp_path, fault):
    """A fault in what the verb touched: the touched check cannot vouch, the whole check runs
    and, the input being valid, the output is refused and removed."""
    _, m = _loaded(tmp_path)
    fault(m)
    assert not check_touched(m)
    out = tmp_path / "o.onnx"
    with pytest.raises(OutputCheckError, match="onnx.checker"):
        save(m, out, check=Check.TOUCHED)
    assert not out.exists()


@pytest.mark.usefixtures("large")
def test_it_gives_up_where_it_cannot_tell(tmp_path):
    src, m = _loaded(tmp_path)
    assert not check_touched(m)  # no verb yet: nothing says what changed
    extract(m, ["relu3"])
    m.proto.opset_import[0].version = 16  # model-level fields changed: the whole check
    assert not check_touched(m)
    save(m, tmp_path / "o.onnx", check=Check.TOUCHED)  # still valid: written after the check

    m = _in_session(load(src))  # a second verb works on an index the first one edited
    extract(m, ["relu5"])
    insert(m, "relu3", op="l2_normalize", params={"axis": 1})
    assert not check_touched(m)

    session = _session(src)  # most of the graph inserted and to be read back from the
    m = session.model
    nodes = m.proto.graph.node  # proto: the C++ pass is cheaper
    upkeep = Upkeep(session.index())
    n = len(nodes)
    for node in list(nodes):
        twin = nodes.add()
        twin.CopyFrom(node)
        twin.name = "t/" + node.name
        twin.input[:] = ["t/" + x if x not in ("x", "W", "B") else x for x in node.input]
        twin.output[:] = ["t/" + x for x in node.output]
    upkeep.inserted(n, n)
    session.hand_on(upkeep)
    assert upkeep.result() is not None and not check_touched(m)
    onnx.checker.check_model(m.proto)  # a valid model: only the cost decided

    bare = builders.chain(8)  # a proto load never validated
    extract(bare, ["relu3"])
    from onnxsurgeon.io import as_model
    assert not check_touched(as_model(bare))


def _copy_reading_a_later_tensor(monkeypatch):
    """The copy's int-graph reads, broken: its first copied node reads the last copy's
    output (a read of a later tensor)."""
    real = copy_module._inputs_on_ints

    def broken(*args, **kwargs):
        reads = real(*args, **kwargs)
        reads[0] = [kwargs.get("mapping", args[6])["y"], *reads[0][1:]]
        return reads

    monkeypatch.setattr(copy_module, "_inputs_on_ints", broken)


def _copy_naming_an_output_twice(monkeypatch):
    """The copy's names, broken: one copied node's output takes a name the model has."""
    real = copy_module._allocate

    def broken(*args, **kwargs):
        names = real(*args, **kwargs)
        names.outputs.flat[3] = "relu5"
        return names

    monkeypatch.setattr(copy_module, "_allocate", broken)


def _copy_with_a_bogus_attribute(monkeypatch):
    """A copied node given an attribute its schema lacks, after the copy wrote it."""
    real = copy_module.copy

    def broken(model, *args, **kwargs):
        result = real(model, *args, **kwargs)
        model.proto.graph.node[-1].attribute.append(helper.make_attribute("nope", 1))
        return result

    monkeypatch.setattr(copy_module, "copy", broken)


@pytest.mark.usefixtures("large")
@pytest.mark.parametrize("fault", [_copy_reading_a_later_tensor, _copy_naming_an_output_twice,
                                   _copy_with_a_bogus_attribute])
def test_a_whole_copy_is_checked_from_what_it_wrote(tmp_path, monkeypatch, fault):
    """A copy hands the upkeep the lists it wrote into its nodes instead of having them read
    back: a fault in those lists (a read of a later tensor, a name defined twice) or in a
    copied node's schema is refused, and the whole check then refuses the file."""
    _, m = _loaded(tmp_path)
    fault(monkeypatch)
    copy_module.copy(m, ["y"], prefix="twin/")
    assert len(m.proto.graph.node) == 48
    assert not check_touched(m)
    out = tmp_path / "o.onnx"
    with pytest.raises(OutputCheckError, match="onnx.checker"):
        save(m, out, check=Check.TOUCHED)
    assert not out.exists()


def _gemm_fault(monkeypatch, change, site: int = 1):
    """The fusions' sites, broken: Gemm ``site``'s input ``x`` and output ``y`` become
    ``change(x, y)``, in its bytes and in the fields handed to the upkeep alike."""
    real = fuse_module._gemm_sites

    def broken(facts, nodes, ops):
        sites, written = real(facts, nodes, ops)
        add, (mm, _) = list(sites.items())[site]
        (x, w, b), (y,) = written.inputs[site], written.outputs[site]
        x, y = change(x, y)
        sites[add] = (mm, fuse_gemm_module._gemm_bytes(x, w, b, y, written.names[site]))
        inputs, outputs = list(written.inputs), list(written.outputs)
        inputs[site], outputs[site] = (x, w, b), (y,)
        return sites, written._replace(inputs=inputs, outputs=outputs)

    monkeypatch.setattr(fuse_module, "_gemm_sites", broken)


@pytest.mark.usefixtures("large")
@pytest.mark.parametrize("change", [
    pytest.param(lambda x, y: ("relu6", y), id="reads-a-later-tensor"),
    pytest.param(lambda x, y: ("nowhere", y), id="reads-an-undefined-tensor"),
    pytest.param(lambda x, y: (x, "relu5"), id="defines-a-name-a-kept-node-defines"),
    pytest.param(lambda x, y: (x, "x"), id="defines-a-graph-input"),
    pytest.param(lambda x, y: (x, "elsewhere"), id="drops-what-a-kept-node-reads"),
])
def test_a_splice_of_many_is_vouched_for_only_where_it_holds(tmp_path, monkeypatch, change):
    """fold's Gemms, half the graph: the touched check decides on the int graph before the
    splice, without applying it (:meth:`Upkeep.holds_unapplied`); a fault in what the splice
    wrote is refused, and the whole check then refuses the file."""
    _, m = _loaded(tmp_path)
    fold(m)
    journal = _journal(m)
    assert journal.dearer_than_check() and journal.holds_unapplied() is not None
    assert check_touched(m) and journal._todo  # vouched for, the splice still unapplied

    _, m = _loaded(tmp_path, name="broken.onnx")
    _gemm_fault(monkeypatch, change)
    fold(m)
    assert _journal(m).holds_unapplied() is None
    assert not check_touched(m)
    out = tmp_path / "o.onnx"
    with pytest.raises(OutputCheckError, match="onnx.checker"):
        save(m, out, check=Check.TOUCHED)
    assert not out.exists()


def test_a_graph_output_a_splice_no_longer_produces_is_refused(tmp_path, monkeypatch, large):
    """The last site's Add computes a graph output nothing reads: a Gemm writing another name
    leaves it unproduced (no kept node's read shows it)."""
    model = builders.chain(8)
    model.graph.node[-1].input[0] = "relu6"  # the last Relu skips the last block's Add
    model.graph.output.append(helper.make_tensor_value_info("add7", onnx.TensorProto.FLOAT,
                                                            [1, 4]))
    src, m = _loaded(tmp_path, model)
    fold(m)
    assert check_touched(m) and len(m.proto.graph.node) == 16  # add7 made by a Gemm

    m = _in_session(load(src))
    _gemm_fault(monkeypatch, lambda x, y: (x, "elsewhere"), site=-1)
    fold(m)
    assert _journal(m).holds_unapplied() is None and not check_touched(m)
    with pytest.raises(OutputCheckError, match="onnx.checker"):
        save(m, tmp_path / "o.onnx", check=Check.TOUCHED)


def _replica_fault(monkeypatch, change, site: int = 1):
    """replace's copies, broken: copy ``site``'s names (its slots: R's inputs, outputs and
    inner tensors, then its weights) become ``change(names, every site's names)``, in its
    bytes and in the fields handed to the upkeep alike."""
    real = replace_module.build_copies

    def broken(tpl, sites, *args):
        copies = real(tpl, sites, *args)
        rep, names = copies.written.replicas, copies.written.names
        new = change(list(rep.sites[site]), rep.sites)
        rep.sites[site][:] = new
        t = len(rep.reads)
        nodes = [helper.make_node(op, [new[k] for k in ins], [new[k] for k in outs],
                                  name=names[site * t + j], domain=domain or None)
                 for j, ((_, _, op, domain, _), ins, outs) in enumerate(zip(
                     tpl.specs, rep.reads, rep.writes, strict=True))]
        inserted = copies.plans[""][1]
        at = sorted(inserted)[site]
        inserted[at] = (t, b"".join(node_entries([n.SerializeToString() for n in nodes])))
        return copies

    monkeypatch.setattr(replace_module, "build_copies", broken)


def _slot(k, value):
    """A change of one slot of a site's names."""
    def change(names, _sites):
        names[k] = value
        return names
    return change


# FUSE_R's slots: p w b (read), y h s (made), one (R's weight, every site alike)
@pytest.mark.usefixtures("large")
@pytest.mark.parametrize("change", [
    pytest.param(_slot(0, "relu6"), id="reads-a-later-tensor"),
    pytest.param(_slot(0, "nowhere"), id="reads-an-undefined-tensor"),
    pytest.param(lambda names, sites: _slot(0, sites[3][3])(names, sites),
                 id="reads-a-later-copy's-output"),
    pytest.param(lambda names, sites: _slot(0, names[3])(names, sites),
                 id="reads-its-own-output"),
    pytest.param(_slot(6, "nowhere"), id="reads-an-undefined-weight"),
    pytest.param(_slot(3, "relu5"), id="defines-a-name-a-kept-node-defines"),
    pytest.param(_slot(4, "relu5"), id="an-inner-tensor-defines-a-name-a-kept-node-defines"),
    pytest.param(_slot(4, "x"), id="defines-a-graph-input"),
    pytest.param(_slot(4, "W"), id="defines-an-initializer"),
    pytest.param(_slot(3, "elsewhere"), id="drops-what-a-kept-node-reads"),
    pytest.param(lambda names, sites: _slot(5, sites[2][5])(names, sites),
                 id="two-copies-define-one-name"),
])
def test_replace_s_splice_is_vouched_for_per_site_only_where_it_holds(tmp_path, monkeypatch,
                                                                      change):
    """replace's copies of R with a weight of its own (an initializer appended, then one
    splice of most of the graph): the touched check decides on the int graph before the
    splice, by R's template once and the sites' names (:class:`~onnxsurgeon.splice.Replicas`);
    a fault in what the splice wrote is refused, and the whole check then refuses the file."""
    _, m = _loaded(tmp_path)
    replace(m, pattern=FUSE_P, replacement=FUSE_R)
    journal = _journal(m)
    assert [edit.__name__ for edit, _ in journal._todo] == ["_leaves_appended", "_spliced"]
    assert journal._todo[-1][1][2].replicas is not None  # the fields said per site
    assert journal.dearer_than_check() and journal.holds_unapplied() is not None
    assert check_touched(m) and journal._done is None  # vouched for, the splice unapplied

    _, m = _loaded(tmp_path, name="broken.onnx")
    _replica_fault(monkeypatch, change)
    replace(m, pattern=FUSE_P, replacement=FUSE_R)
    assert _journal(m).holds_unapplied() is None
    assert not check_touched(m)
    out = tmp_path / "o.onnx"
    with pytest.raises(OutputCheckError, match="onnx.checker"):
        save(m, out, check=Check.TOUCHED)
    assert not out.exists()


@pytest.mark.usefixtures("large")
@pytest.mark.parametrize("name", ["W", "relu3"])
def test_replace_s_weight_named_like_a_leaf_or_a_node_output_is_refused(tmp_path, monkeypatch,
                                                                        name):
    """R's weight appended under a name the graph has (an initializer, a kept node's output),
    its copies reading it: the appended leaf is refused, the whole check refuses the file."""
    real = replace_module.Template.prepare

    def named(self, weights):
        weights.update(dict.fromkeys(weights, name))
        real(self, weights)

    _, m = _loaded(tmp_path)
    monkeypatch.setattr(replace_module.Template, "prepare", named)
    replace(m, pattern=FUSE_P, replacement=FUSE_R)
    assert m.proto.graph.initializer[-1].name == name
    assert _journal(m).holds_unapplied() is None and not check_touched(m)
    with pytest.raises(OutputCheckError, match="onnx.checker"):
        save(m, tmp_path / "o.onnx", check=Check.TOUCHED)


def test_replace_s_graph_output_its_copies_no_longer_produce_is_refused(tmp_path, monkeypatch,
                                                                       large):
    """The last site's Add computes a graph output nothing reads: a copy writing another name
    leaves it unproduced (no kept node's read shows it)."""
    model = builders.chain(8)
    model.graph.node[-1].input[0] = "relu6"  # the last Relu skips the last block's Add
    model.graph.output.append(helper.make_tensor_value_info("add7", onnx.TensorProto.FLOAT,
                                                            [1, 4]))
    src, m = _loaded(tmp_path, model)
    replace(m, pattern=FUSE_P, replacement=FUSE_R)
    assert check_touched(m) and _journal(m)._done is None

    m = _in_session(load(src))
    _replica_fault(monkeypatch, _slot(3, "elsewhere"), site=-1)
    replace(m, pattern=FUSE_P, replacement=FUSE_R)
    assert _journal(m).holds_unapplied() is None and not check_touched(m)
    with pytest.raises(OutputCheckError, match="onnx.checker"):
        save(m, tmp_path / "o.onnx", check=Check.TOUCHED)


def test_untouched_nodes_are_the_inputs_and_the_structure_level_still_reports_them(
        tmp_path, capsys, large):
    """A fault the input file already has, in a node no edit touched: the touched check
    vouches for what the verb did (the node is the input's, byte for byte); ``--check
    structure`` runs the whole check and reports it as the input's."""
    model = builders.chain(8)
    model.graph.node[20].attribute.append(helper.make_attribute("no_such_attribute", 1))
    src = tmp_path / "bad.onnx"
    src.write_bytes(model.SerializeToString())
    out = tmp_path / "o.onnx"
    code, _, err = run(capsys, "insert", src, "-o", out, "--at", "relu2", "--op",
                       "l2_normalize:axis=1")
    assert code == 0 and "fails onnx.checker" not in err
    code, _, err = run(capsys, "insert", src, "-o", out, "--at", "relu2", "--op",
                       "l2_normalize:axis=1", "--check", "structure", "--force")
    assert code == 0 and "fails onnx.checker as the input does" in err


def test_at_the_real_threshold(tmp_path):
    """Above FULL_CHECK_MAX_NODES as shipped: the CLI's default vouches by the touched check."""
    blocks = checking.FULL_CHECK_MAX_NODES // 3 + 1
    src, m = _loaded(tmp_path, builders.chain(blocks))
    insert(m, f"relu{blocks // 2}", op="l2_normalize", params={"axis": 1})
    assert check_touched(m)
    out = save(m, tmp_path / "o.onnx", check=Check.TOUCHED)
    onnx.checker.check_model(str(out))


@pytest.mark.usefixtures("large")
@pytest.mark.parametrize("verb", ["extract", "insert", "copy"])
def test_external_weights_still_reach_the_output_when_the_check_is_limited(tmp_path, verb):
    """Save skips its walk over every tensor only when load found no external one: with
    external weights the walk runs, and the output carries its own data file."""
    src = tmp_path / "ext.onnx"
    onnx.save(builders.chain(8), str(src), save_as_external_data=True,
              all_tensors_to_one_file=True, location="ext.onnx.data", size_threshold=0)
    m = _in_session(load(src))
    VERBS[verb](m)
    assert check_touched(m)
    out = save(m, tmp_path / "o.onnx", check=Check.TOUCHED)
    assert (tmp_path / "o.onnx.data").stat().st_size > 0
    onnx.checker.check_model(str(out), full_check=True)
    reference = _in_session(load(src))
    VERBS[verb](reference)
    plain = save(reference, tmp_path / "p.onnx", check=Check.STRUCTURE)
    assert onnx.load(str(out)).graph.node == onnx.load(str(plain)).graph.node


def _point_at(value: onnx.TensorProto, location: str) -> onnx.TensorProto:
    """Make the 4-float tensor ``value`` read its bytes from the file ``location``."""
    value.data_location = onnx.TensorProto.EXTERNAL
    for key, v in (("location", location), ("offset", "0"), ("length", "16")):
        entry = value.external_data.add()
        entry.key, entry.value = key, v
    return value


@pytest.mark.usefixtures("large")
def test_a_save_that_trusted_the_edits_to_be_inline_walks_when_they_fail(tmp_path, verdicts):
    """A whole copy lets save skip its walk over every tensor (load found no external one and
    the copy only copies) and check the copy while the file is written. Here a node nobody told
    the upkeep about, holding an external tensor, is appended after the copy: the checks of
    the edits fail (the verdict says so), save starts again with the walk, and the output
    carries that tensor's bytes in its own data file."""
    said = verdicts
    src, m = _loaded(tmp_path)
    copy(m, ["y"], prefix="twin/")
    (tmp_path / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    value = _point_at(onnx.TensorProto(name="c", data_type=onnx.TensorProto.FLOAT, dims=[4]),
                      "w.bin")
    m.proto.graph.node.append(helper.make_node("Constant", [], ["c"], name="c", value=value))
    (tmp_path / "out").mkdir()
    out = save(m, tmp_path / "out" / "o.onnx", check=Check.TOUCHED)
    assert said == ["walk"]
    assert (tmp_path / "out" / "o.onnx.data").read_bytes() == (tmp_path / "w.bin").read_bytes()
    onnx.checker.check_model(str(out))
    assert m.proto.graph.node[-1].attribute[0].t.external_data[0].value == "w.bin"  # unchanged


@pytest.mark.usefixtures("large")
def test_an_inserted_node_holding_external_data_makes_the_save_walk(tmp_path):
    """Save trusts a verb's edits to be inline while it writes the file, and checks that on
    the way. Here the Constant of an inserted block is pointed at a data file after the insert
    (no verb makes such a node today: insert reads a block's external data in): it is found,
    the save starts again with the walk, and the output carries those bytes in its own data
    file."""
    _, m = _loaded(tmp_path)
    block = helper.make_model(helper.make_graph(
        [helper.make_node("Constant", [], ["c"], name="c",
                          value=helper.make_tensor("c", onnx.TensorProto.FLOAT, [4], [0] * 4)),
         helper.make_node("Add", ["in", "c"], ["out"], name="add")], "shift",
        [helper.make_tensor_value_info("in", onnx.TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, [1, 4])]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    insert(m, "relu3", graph=block)
    data = np.arange(4, dtype=np.float32).tobytes()
    (tmp_path / "w.bin").write_bytes(data)
    value = next(n for n in m.proto.graph.node if n.op_type == "Constant").attribute[0].t
    value.ClearField("float_data")
    _point_at(value, "w.bin")
    (tmp_path / "out").mkdir()
    out = save(m, tmp_path / "out" / "o.onnx", check=Check.TOUCHED)
    assert (tmp_path / "out" / "o.onnx.data").read_bytes() == data
    onnx.checker.check_model(str(out), full_check=True)


# ------------------------------------------------------------ the verdict of a trusted save
@pytest.fixture
def verdicts(monkeypatch, large):
    """The verdicts trusted saves give (a counting wrapper calling the real one through)."""
    import onnxsurgeon.saving as io_module

    said: list[str] = []
    real = io_module._verdict

    def verdict(m, journal):
        said.append(real(m, journal))
        return said[-1]

    monkeypatch.setattr(io_module, "_verdict", verdict)
    return said


@pytest.mark.parametrize("verb", VERBS)
def test_a_verdict_of_the_edits_writes_the_same_file_as_the_whole_check(tmp_path, verdicts,
                                                                        verb):
    """The checks of a trusted save (what the verb touched) run while the file is written:
    same bytes as the save that runs the whole structural check."""
    src, m = _loaded(tmp_path)
    VERBS[verb](m)
    out = save(m, tmp_path / "trusted.onnx", check=Check.TOUCHED)
    if verb != "rename":  # renames insert nothing: load found them inline, no walk to skip
        assert verdicts == ["vouched"]
    again = _in_session(load(src))
    VERBS[verb](again)
    plain = save(again, tmp_path / "plain.onnx", check=Check.STRUCTURE)
    assert out.read_bytes() == plain.read_bytes()


@pytest.mark.parametrize("verb, split", [("copy-whole", range(24, 48)), ("copy", range(24, 33)),
                                         ("insert", range(0)), ("extract", range(0)),
                                         ("reroute-prune", range(0))])
def test_the_nodes_a_verb_appended_are_known_before_its_edits_apply(tmp_path, verb, split):
    """The nodes a verb appended itself are the copies; a verb that inserts among the nodes
    or removes some gives none."""
    _, m = _loaded(tmp_path)
    VERBS[verb](m)
    journal = _journal(m)
    assert journal is not None and journal.appended() == split
    touched = journal.touched()
    assert touched is not None and set(split) <= set(touched)


@pytest.mark.parametrize("fault, verdict", [(_copy_reading_a_later_tensor, "walk"),
                                            (_copy_naming_an_output_twice, "walk"),
                                            (_copy_with_a_bogus_attribute, "check")])
def test_a_verdict_that_cannot_vouch_leaves_the_whole_check(tmp_path, monkeypatch, verdicts,
                                                            fault, verdict):
    """The verdict cannot vouch for a faulty copy: its upkeep gave up (the save starts again
    with the walk) or a node fails its schema (the checker runs on the bytes). Either way the
    whole check refuses the file, which is never published."""
    _, m = _loaded(tmp_path)
    fault(monkeypatch)
    copy_module.copy(m, ["y"], prefix="twin/")
    out = tmp_path / "o.onnx"
    with pytest.raises(OutputCheckError, match="onnx.checker"):
        save(m, out, check=Check.TOUCHED)
    assert verdicts == [verdict]
    assert not out.exists()


def test_an_interrupted_save_publishes_nothing(tmp_path, monkeypatch, large):
    """Ctrl-C while the file is written: nothing is published, no temporary file is left."""
    import onnxsurgeon.saving as io_module

    def interrupted(target, payload):
        raise KeyboardInterrupt

    monkeypatch.setattr(io_module, "write_behind", interrupted)
    _, m = _loaded(tmp_path)
    copy(m, ["y"], prefix="twin/")
    (tmp_path / "out").mkdir()
    with pytest.raises(KeyboardInterrupt):
        save(m, tmp_path / "out" / "o.onnx", check=Check.TOUCHED)
    assert list((tmp_path / "out").iterdir()) == []


def test_the_package_never_forks():
    """Saving checks in-process: no ``os.fork`` anywhere in the package (issue 25)."""
    from pathlib import Path

    import onnxsurgeon

    root = Path(onnxsurgeon.__file__).parent
    forking = [str(p.relative_to(root)) for p in root.rglob("*.py")
               if "os.fork" in p.read_text() or "fork()" in p.read_text()]
    assert forking == []


