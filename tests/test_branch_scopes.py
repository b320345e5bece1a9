"""What a nested body sees of its enclosing graph (issue 26): the names defined before its node,
not the node's own outputs nor later ones. A branch defining a tensor named like its If's
output is valid ONNX (onnx.checker's full check, onnxruntime and onnx.compose.add_prefix take
it); load accepts it, still refuses a body that redefines a name it can see, and the verbs that
rename or copy scoped names keep such a model valid and its numbers unchanged."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon.errors import InvalidModelError
from onnxsurgeon.io import load
from tests import builders as B
from tests.cli_helpers import cli
from tests.conftest import run

F = TensorProto.FLOAT
XS = [np.float32([1, -2, 3]), np.float32([-1, -2, 0.5])]  # both branches


def _if(model: onnx.ModelProto) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.op_type == "If")


def _reorder(model: onnx.ModelProto, order: list[int]) -> onnx.ModelProto:
    nodes = [onnx.NodeProto() for _ in order]
    for dst, k in zip(nodes, order, strict=True):
        dst.CopyFrom(model.graph.node[k])
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def test_onnx_and_onnxruntime_accept_the_model():
    model = B.if_defines_its_output()
    onnx.checker.check_model(model, full_check=True)
    x = XS[0]
    out = run(model, {"x": x})
    assert np.isfinite(out["y"]).all() and out["Out"].shape == (3,)


def test_load_and_inspect_accept_it(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(B.if_defines_its_output(), str(path))
    assert load(path).warnings == []
    proc = cli("inspect", path)
    assert proc.returncode == 0, proc.stderr
    assert "2 nodes in nested bodies" not in proc.stdout and "4 in nested bodies" in proc.stdout


@pytest.mark.parametrize("name", ["s", "x", "W"])
def test_a_body_redefining_a_name_it_sees_is_still_refused(tmp_path, name):
    """``s`` (a node output before the If), ``x`` (a graph input), ``W`` (an initializer)."""
    model = B.if_defines_its_output()
    then_g = _if(model).attribute[0].g
    then_g.node[0].output[0] = name
    then_g.node[1].input[0] = name
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(InvalidModelError, match=f"defines '{name}', which shadows"):
        load(path)


def test_visibility_follows_the_sorted_order(tmp_path):
    """The If stored before the nodes computing its condition: load sorts the graph, and what
    the body sees is what precedes the If after the sort (``s`` yes, ``Out`` no)."""
    path = tmp_path / "m.onnx"
    onnx.save(_reorder(B.if_defines_its_output(), [2, 0, 1, 3]), str(path))
    model = load(path)
    assert len(model.warnings) == 1 and "out of topological order" in model.warnings[0]
    for x in XS:
        np.testing.assert_array_equal(run(model.proto, {"x": x})["y"],
                                      run(B.if_defines_its_output(), {"x": x})["y"])
    shadowing = _reorder(B.if_defines_its_output(), [2, 0, 1, 3])
    body = _if(shadowing).attribute[1].g
    body.node[0].output[0] = "s"
    body.node[1].input[0] = "s"
    onnx.save(shadowing, str(path))
    with pytest.raises(InvalidModelError, match="defines 's', which shadows"):
        load(path)


@pytest.mark.parametrize("argv, outputs", [
    (["rename", "--map", "Out=Res,s=total"], {"y": "y", "Out": "Res"}),
    (["rename", "--regex", "^(Out|t|y)$=n_\\1"], {"y": "n_y", "Out": "n_Out"}),
    (["copy", "--outputs", "y"], {"y": "copy/y", "Out": "Out"}),
    (["copy", "--outputs", "y", "--weights", "shared"], {"y": "copy/y", "Out": "Out"}),
    (["extract", "--outputs", "Out"], {"Out": "Out"}),
    (["insert", "--at", "Out", "--op", "identity"], {"y": "y", "Out": "Out"}),
], ids=["rename", "rename-regex", "copy", "copy-shared", "extract", "insert"])
def test_verbs_keep_it_valid_and_its_numbers(tmp_path, argv, outputs):
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(B.if_defines_its_output(), str(src))
    verb, *flags = argv
    proc = cli(verb, src, "-o", out, *flags, "--verify", "--check", "full")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    for x in XS:
        got, want = run(model, {"x": x}), run(B.if_defines_its_output(), {"x": x})
        for old, new in outputs.items():
            np.testing.assert_array_equal(got[new], want[old])


def _with_later(reads_the_if: bool) -> onnx.ModelProto:
    """The model plus a main-graph tensor ``t`` (named like the branches' ``t``) made after the
    If: from the If's output, or from ``x`` only."""
    model = B.if_defines_its_output()
    model.graph.node.append(helper.make_node("Neg", ["Out" if reads_the_if else "x"], ["t"],
                                             name="later"))
    model.graph.output.append(helper.make_tensor_value_info("t", F, [3]))
    return model


def test_a_later_tensor_computed_from_the_if_is_not_seen_but_an_independent_one_is(tmp_path):
    """A tensor computed from the If's outputs always comes after the If, whatever the order:
    the body may reuse its name. One computed without the If may be ordered before it
    (onnxruntime sorts the graph again and then refuses the model): refused."""
    path = tmp_path / "m.onnx"
    onnx.save(_with_later(True), str(path))
    onnx.checker.check_model(_with_later(True), full_check=True)
    assert load(path).warnings == []
    for x in XS:
        np.testing.assert_array_equal(run(_with_later(True), {"x": x})["t"],
                                      -run(B.if_defines_its_output(), {"x": x})["Out"])
    onnx.save(_with_later(False), str(path))
    with pytest.raises(InvalidModelError, match="defines 't', which shadows"):
        load(path)
    import onnxruntime as ort

    with pytest.raises(Exception, match="single static assignment"):  # noqa: B017 - ort's own type
        ort.InferenceSession(_with_later(False).SerializeToString())
