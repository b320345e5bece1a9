"""The output check limited to what one verb touched (issue 14): it vouches for every verb's
output on large graphs, it refuses (and the whole onnx.checker pass then reports) every fault a
rewrite could leave in what it touched, and it gives up where it cannot tell.

``FULL_CHECK_MAX_NODES`` is lowered so that small chains count as large graphs (the rule under
test is the same at 20,000 nodes; one test runs it there)."""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

from onnxsurgeon import checking, load, save
from onnxsurgeon.checking import Check, OutputCheckError
from onnxsurgeon.io import handed_over
from onnxsurgeon.io import vouched_by_edits as check_touched
from onnxsurgeon.surgery import copy, extract, insert, rename, reroute
from tests import builders
from tests.cli_helpers import cli_main as run


@pytest.fixture
def large(monkeypatch):
    """Every model above 10 nodes is 'large': the touched check applies."""
    monkeypatch.setattr(checking, "FULL_CHECK_MAX_NODES", 10)


def _loaded(tmp_path, model: onnx.ModelProto | None = None, name: str = "src.onnx"):
    src = tmp_path / name
    src.write_bytes((model or builders.chain(8)).SerializeToString())
    return src, handed_over(load(src))


VERBS = {
    "extract": lambda m: extract(m, ["relu3"]),
    "insert": lambda m: insert(m, "relu3", op="l2_normalize", params={"axis": 1}),
    "insert-as-output": lambda m: insert(m, "relu3", op="scale", params={"factor": 2.0},
                                         as_output=True),
    "reroute": lambda m: reroute(m, "relu3", "add3"),
    "reroute-prune": lambda m: reroute(m, "relu5", "relu2", prune=True),
    "copy": lambda m: copy(m, ["relu2"], prefix="twin/"),
    "rename": lambda m: rename(m, {"relu3": "act"}),
}


@pytest.mark.usefixtures("large")
@pytest.mark.parametrize("verb", VERBS)
def test_each_verb_output_is_vouched_for_and_passes_the_whole_checker(tmp_path, verb):
    src, m = _loaded(tmp_path)
    VERBS[verb](m)
    assert check_touched(m)
    out = save(m, tmp_path / "touched.onnx", check=Check.TOUCHED)
    onnx.checker.check_model(str(out), full_check=True)  # the verdict it stands for
    again = handed_over(load(src))
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

    m = handed_over(load(src))  # a second verb works on an index the first one edited
    extract(m, ["relu5"])
    insert(m, "relu3", op="l2_normalize", params={"axis": 1})
    assert not check_touched(m)

    m = handed_over(load(src))  # copying most of the graph: the C++ pass is cheaper
    copy(m, ["y"], prefix="twin/")
    assert not check_touched(m)

    bare = builders.chain(8)  # a proto load never validated
    extract(bare, ["relu3"])
    from onnxsurgeon.io import as_model
    assert not check_touched(as_model(bare))


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
    m = handed_over(load(src))
    VERBS[verb](m)
    assert check_touched(m)
    out = save(m, tmp_path / "o.onnx", check=Check.TOUCHED)
    assert (tmp_path / "o.onnx.data").stat().st_size > 0
    onnx.checker.check_model(str(out), full_check=True)
    reference = handed_over(load(src))
    VERBS[verb](reference)
    plain = save(reference, tmp_path / "p.onnx", check=Check.STRUCTURE)
    assert onnx.load(str(out)).graph.node == onnx.load(str(plain)).graph.node
