"""Rewrite-aware verification: each recorded rewrite's invariant holds for the real verbs and is
caught, and located, when a rewrite is broken by hand the way a buggy verb would break it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import UsageError
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.io import Model, load, save
from onnxsurgeon.record import add_rewrite, rewrites
from onnxsurgeon.surgery import Weights, copy, extract, insert, reroute
from onnxsurgeon.verify import verify_log, verify_rewrite

from . import builders
from .test_verify import clone, mlp, node

F = TensorProto.FLOAT


def rewritten(model: onnx.ModelProto, verb, *args, **kwargs) -> onnx.ModelProto:
    out = clone(model)
    verb(out, *args, **kwargs)
    return out


def checks(report) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for p in report.pairs:
        out[p.check] = out.get(p.check, True) and p.ok
    return out


# ------------------------------------------------------------------------------ extract
def test_extract_with_stop_tensor_verifies_exactly():
    original = builders.tiny_cnn()
    new = rewritten(original, extract, ["logits"], inputs=["act"])
    report = verify_log(original, new)
    assert report.ok and report.kind == "rewrite:extract"
    assert checks(report) == {"extract": True}
    assert all(p.exact for p in report.pairs)


def test_extract_with_a_changed_weight_is_caught_and_located():
    original = builders.tiny_cnn()
    new = rewritten(original, extract, ["logits"])
    fc = next(t for t in new.graph.initializer if t.name == "fc.weight")
    fc.CopyFrom(numpy_helper.from_array(
        (numpy_helper.to_array(fc) * np.float32(1 + 1e-3)).astype(np.float32), "fc.weight"))
    report = verify_log(original, new)
    assert not report.ok
    assert report.divergence is not None
    assert (report.divergence.tensor, report.divergence.node) == ("logits", "fc")
    assert report.divergence.differing_weights == ("fc.weight",)


# --------------------------------------------------------------------------------- copy
@pytest.mark.parametrize("weights", list(Weights), ids=str)
def test_copy_equals_original_in_one_session(weights):
    original = builders.tiny_cnn()
    new = rewritten(original, copy, ["logits"], weights=weights, prefix="twin/")
    report = verify_log(original, new)
    assert report.ok
    assert checks(report) == {"copy": True, "untouched": True}
    pair = next(p for p in report.pairs if p.check == "copy")
    assert (pair.reference, pair.candidate, pair.exact) == ("logits", "twin/logits", True)


def test_copy_with_input_replacement_equals_original_fed_the_replacement():
    original = mlp()
    new = rewritten(original, copy, ["y"], prefix="alt/", replace_inputs={"relu1": "relu0"})
    report = verify_log(original, new)
    assert report.ok, report.to_text()
    assert checks(report)["copy"]


def test_copy_with_a_perturbed_twin_weight_is_caught_and_located():
    original = mlp()
    new = rewritten(original, copy, ["y"], prefix="twin/")
    record = rewrites(new)[-1]
    assert record["prefix"] == "twin/" and record["initializers"] == {}  # no name collided
    twin_w = "twin/W3"
    t = next(t for t in new.graph.initializer if t.name == twin_w)
    t.CopyFrom(numpy_helper.from_array(
        (numpy_helper.to_array(t) * np.float32(1 + 1e-3)).astype(np.float32), twin_w))
    report = verify_log(original, new)
    assert not report.ok
    assert checks(report) == {"copy": False, "untouched": True}
    div = report.divergence
    assert div is not None
    assert div.tensor == "mm3" and div.node == "twin/MatMul_3"
    assert div.differing_weights == ("W3",)


# ------------------------------------------------------------------------------- insert
def test_insert_l2_normalize_verifies():
    original = builders.tiny_cnn()
    new = rewritten(original, insert, "act", op="l2_normalize", params={"axis": 1})
    report = verify_log(original, new)
    assert report.ok, report.to_text()
    assert checks(report) == {"at": True, "block": True, "downstream": True}


def test_insert_at_a_graph_output_that_keeps_its_name_verifies_and_catches_a_miss():
    original = builders.tiny_cnn()
    new = rewritten(original, insert, "act", op="scale", params={"factor": 2.0})
    assert rewrites(new)[-1]["renamed"] == {"act": "act/pre_scale"}
    report = verify_log(original, new)
    assert report.ok, report.to_text()
    assert checks(report) == {"at": True, "block": True, "downstream": True}
    assert {p.reference for p in report.pairs if p.check == "downstream"} >= {"act"}
    node(new, "pool").input[0] = "act/pre_scale"  # the verb "forgot" one reader
    report = verify_log(original, new)
    assert not report.ok and checks(report)["downstream"] is False
    assert report.divergence is not None and report.divergence.node == "pool"


def test_insert_that_renames_the_graph_output_verifies_and_replays():
    original = builders.tiny_cnn()
    new = rewritten(original, insert, "act", op="scale", params={"factor": 2.0},
                    keep_output_name=False)
    assert verify_log(original, new).ok
    insert(new, "logits", op="identity")  # step 1 is replayed with the output renamed
    assert verify_log(original, new).ok
    kept = rewritten(original, insert, "act", op="scale", params={"factor": 2.0})
    insert(kept, "logits", op="identity")  # step 1 is replayed with the name kept
    assert verify_log(original, kept).ok


def test_insert_as_output_leaves_every_output_bit_identical():
    original = builders.tiny_cnn()
    new = rewritten(original, insert, "act", op="clip", params={"min": 0, "max": 1},
                    as_output=True)
    report = verify_log(original, new)
    assert report.ok
    assert checks(report) == {"at": True, "block": True, "untouched": True}


def test_insert_a_user_graph_isolates_the_block():
    original = builders.tiny_cnn()
    block_graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["i"], ["o"])], "blk",
        [helper.make_tensor_value_info("i", F, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("o", F, [1, 4, 8, 8])])
    block = helper.make_model(block_graph, opset_imports=[helper.make_opsetid("", 17)])
    block.ir_version = 8
    new = rewritten(original, insert, "act", graph=block)
    report = verify_log(original, new)
    assert report.ok, report.to_text()
    assert any("isolated" in n for n in report.notes)


def test_insert_with_a_wrong_axis_is_caught_and_located():
    original = builders.tiny_cnn()
    new = rewritten(original, insert, "act", op="l2_normalize", params={"axis": 1})
    reduce = next(n for n in new.graph.node if n.op_type == "ReduceSumSquare")
    for attr in reduce.attribute:
        if attr.name == "axes":
            attr.ints[:] = [2]
    report = verify_log(original, new)
    assert not report.ok
    assert checks(report)["block"] is False
    div = report.divergence
    assert div is not None and div.node == reduce.name and div.op_type == "ReduceSumSquare"
    assert div.attribute_changes == ("axes: [1] -> [2]",)


def test_insert_inside_if_capture_verifies_both_branches():
    original = builders.if_capture()
    new = rewritten(original, insert, "a", op="scale", params={"factor": 2.0})
    report = verify_log(original, new)
    assert report.ok and report.samples == 2
    assert checks(report)["downstream"]


def test_insert_whose_consumer_was_not_rerouted_is_caught():
    original = mlp()
    new = rewritten(original, insert, "relu1", op="scale", params={"factor": 0.5})
    record = rewrites(new)[-1]
    assert set(record["rerouted"]) == {"MatMul_2", "side_tanh"}
    node(new, "side_tanh").input[0] = "relu1"  # the verb "forgot" one consumer
    report = verify_log(original, new)
    assert not report.ok
    assert report.divergence is not None and report.divergence.tensor == "side"
    assert report.divergence.node == "side_tanh"


# ------------------------------------------------------------------------------ reroute
def test_reroute_verifies():
    original = mlp()
    new = rewritten(original, reroute, "relu3", "relu2", consumers=["MatMul_4"])
    report = verify_log(original, new)
    assert report.ok, report.to_text()
    assert checks(report) == {"downstream": True}


def test_reroute_to_the_wrong_tensor_is_caught_and_located():
    original = mlp()
    new = rewritten(original, reroute, "relu3", "relu2", consumers=["MatMul_4"])
    node(new, "MatMul_4").input[0] = "relu1"  # same shape [1, 8], wrong tensor
    report = verify_log(original, new)
    assert not report.ok
    div = report.divergence
    assert div is not None and (div.tensor, div.node) == ("mm4", "MatMul_4")
    assert div.candidate_inputs == ("relu1", "W4")


def test_reroute_of_a_graph_output_verifies():
    original = builders.tiny_cnn()
    new = rewritten(original, reroute, "act", "conv5_out")
    report = verify_log(original, new)
    assert report.ok, report.to_text()


def test_untouched_output_that_changed_is_caught():
    original = builders.tiny_cnn()
    new = rewritten(original, insert, "act", op="l2_normalize", params={"axis": 1},
                    as_output=True)
    node(new, "side").op_type = "Tanh"  # an output the rewrite did not touch
    report = verify_log(original, new)
    assert not report.ok
    assert checks(report)["untouched"] is False
    assert report.divergence is not None and report.divergence.node == "side"


# ----------------------------------------------------------------------- log handling
def test_verify_log_needs_a_continued_log():
    original = builders.tiny_cnn()
    with pytest.raises(UsageError, match="no rewrite"):
        verify_log(original, clone(original))
    twice = rewritten(original, insert, "act", op="identity")
    insert(twice, "logits", op="identity")
    once = rewritten(original, insert, "act", op="identity")
    assert verify_log(once, twice).ok  # the second step from its own input
    unrelated = clone(original)
    add_rewrite(unrelated, {"op": "extract", "outputs": ["logits"], "inputs": []})
    with pytest.raises(UsageError, match="does not continue"):
        verify_log(unrelated, twice)


def _pipeline(original: onnx.ModelProto) -> onnx.ModelProto:
    model = clone(original)
    copy(model, ["y"], prefix="twin/")
    insert(model, "relu2", op="l2_normalize", params={"axis": 1})
    reroute(model, "relu4", "relu3", consumers=["MatMul_5"])
    extract(model, ["y", "twin/y"])
    return model


def test_several_rewrites_are_replayed_and_verified_step_by_step():
    original = mlp()
    final = _pipeline(original)
    report = verify_log(original, final)
    assert report.ok, report.to_text()
    assert report.kind == "rewrite:log"
    steps = {p.check.split(":")[0] + ":" + p.check.split(":")[1] for p in report.pairs}
    assert steps == {"1:copy", "2:insert", "3:reroute", "4:extract"}


def test_a_broken_last_step_of_several_is_caught():
    original = mlp()
    model = clone(original)
    copy(model, ["y"], prefix="twin/")
    reroute(model, "relu4", "relu3", consumers=["MatMul_5"])
    node(model, "MatMul_5").input[0] = "relu2"  # the reroute went to the wrong tensor
    report = verify_log(original, model)
    assert not report.ok
    failing = {p.check for p in report.pairs if not p.ok}
    assert failing and all(c.startswith("2:reroute:") for c in failing)
    assert report.divergence is not None and report.divergence.node == "MatMul_5"


def test_an_inserted_user_graph_before_the_last_step_cannot_be_replayed():
    original = builders.tiny_cnn()
    block = helper.make_model(helper.make_graph(
        [helper.make_node("Sigmoid", ["i"], ["o"])], "blk",
        [helper.make_tensor_value_info("i", F, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("o", F, [1, 4, 8, 8])]),
        opset_imports=[helper.make_opsetid("", 17)])
    model = rewritten(original, insert, "act", graph=block)
    insert(model, "logits", op="identity")
    with pytest.raises(UsageError, match="cannot be replayed"):
        verify_log(original, model)


def test_unknown_record_op_is_a_usage_error():
    model = builders.tiny_cnn()
    with pytest.raises(UsageError, match="unknown"):
        verify_rewrite(model, model, {"op": "melt"})


def test_every_record_type_has_exactly_one_check():
    """One registry of rewrite checks keyed by record type (verify/invariant.py): every
    RewriteRecord subclass of record.py has a check, nothing else has one, a second check for a
    type is refused, and the registry is complete whichever part of verify is imported first."""
    import inspect
    import subprocess
    import sys

    from onnxsurgeon import record
    from onnxsurgeon.verify import invariant

    kinds = {c for _, c in inspect.getmembers(record, inspect.isclass)
             if issubclass(c, record.RewriteRecord) and c is not record.RewriteRecord
             and c.__module__ == record.__name__}
    assert len(kinds) >= 7 and set(invariant.CHECKS) == kinds
    assert invariant.CHECKS[record.RenameRecord].__module__ == "onnxsurgeon.verify.verbs"
    with pytest.raises(TypeError, match="has a check already"):
        invariant.rewrite_check(record.InsertRecord)(lambda ctx, rec, check: None)
    assert invariant.CHECKS[record.InsertRecord].__name__ == "_check_insert"
    out = subprocess.run([sys.executable, "-c", "from onnxsurgeon.verify.invariant import CHECKS;"
                          " print(sorted(t.op for t in CHECKS))"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == str(sorted(k.op for k in kinds))
    for kind in kinds:  # check_of imports the check's own module first (CHECK_HOMES)
        home = invariant.CHECK_HOMES[kind.op]
        assert invariant.CHECKS[kind].__module__ == f"onnxsurgeon.verify.{home}"


def test_verify_loads_only_the_checks_it_runs():
    """``verify A B`` does not import the rewrite checks' modules (and the surgery they
    load); a rename's check loads its own module, not the folding checks'."""
    import subprocess
    import sys

    code = ("import sys; from onnxsurgeon import verify; verify.compare;"
            "print(sorted(m for m in ('onnxsurgeon.verify.folding', 'onnxsurgeon.verify.verbs',"
            " 'onnxsurgeon.surgery.fold') if m in sys.modules));"
            "from onnxsurgeon.record import RenameRecord;"
            "from onnxsurgeon.verify.invariant import check_of;"
            "check_of(RenameRecord(renamed={}, nodes=False));"
            "print(sorted(m for m in ('onnxsurgeon.verify.folding', 'onnxsurgeon.verify.verbs')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "['onnxsurgeon.verify.verbs']"


def test_record_naming_a_missing_node_is_a_usage_error():
    original = mlp()
    new = rewritten(original, reroute, "relu3", "relu2", consumers=["MatMul_4"])
    record = dict(rewrites(new)[-1], rerouted=["no_such_node"])
    with pytest.raises(UsageError, match="no_such_node"):
        verify_rewrite(original, new, record)


def test_rewrites_of_external_data_models_verify_from_paths(tmp_path):
    save(Model(mlp(width=64)), tmp_path / "m.onnx", external=True)
    model = load(tmp_path / "m.onnx")
    copy(model, ["y"], prefix="twin/")
    save(model, tmp_path / "twin.onnx")
    assert (tmp_path / "twin.onnx.data").exists()
    report = verify_log(tmp_path / "m.onnx", tmp_path / "twin.onnx")
    assert report.ok, report.to_text()
    assert checks(report) == {"copy": True, "untouched": True}


BUILDERS = ["tiny_cnn", "tied_weights", "if_capture", "loop_capture", "local_function",
            "init_as_input"]
VERBS = {
    "copy": lambda m, out: copy(m, [out], prefix="c/"),
    "extract": lambda m, out: extract(m, [out]),
    "insert": lambda m, out: insert(m, out, op="scale", params={"factor": 3.0}),
}


@pytest.mark.parametrize("deep", [False, True], ids=["pairs", "deep"])
@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.parametrize("builder", BUILDERS)
def test_every_verb_on_every_builder_verifies(builder, verb, deep):
    original = getattr(builders, builder)()
    new = clone(original)
    VERBS[verb](new, original.graph.output[0].name)
    report = verify_log(original, new, deep=deep)
    assert report.ok, report.to_text()
    assert report.pairs and all(p.exact for p in report.pairs if p.check != "block")
    if deep:  # every tensor on the way agrees too, named and ordered as in the rewritten model
        assert report.deep is not None and report.deep.forced and report.deep.tensors
        assert all(t.ok for t in report.deep.tensors)
        index = GraphIndex(new)
        assert [t.position for t in report.deep.tensors] == sorted(
            index.producer[t.candidate] for t in report.deep.tensors)


# ------------------------------------------------------------------ forced deep (--html)
def test_deep_compares_every_tensor_on_the_way_against_each_pairs_reference():
    """deep=True: the intermediates upstream of the insert against the original, those
    downstream against the original fed the processed values -- all agree for a correct insert;
    without it only the pairs (and no deep table) are reported."""
    original = mlp()
    new = rewritten(original, insert, "relu1", op="scale", params={"factor": 0.5})
    plain = verify_log(original, new)
    assert plain.ok and plain.deep is None
    report = verify_log(original, new, deep=True)
    assert report.ok, report.to_text()
    seen = {t.candidate: t for t in report.deep.tensors}
    processed = rewrites(new)[-1]["processed"]
    assert {"mm0", "relu0", "add1", processed, "mm2", "relu3", "side", "y"} <= set(seen)
    assert all(t.ok and t.max_abs_diff == 0 for t in seen.values())
    index = GraphIndex(new)
    assert seen["mm2"].node == "MatMul_2"
    assert seen[processed].node == index.node_label(index.producer[processed])
    assert seen[processed].position == index.producer[processed]


def test_deep_marks_the_first_tensor_where_a_broken_rewrite_parts():
    """A rewrite broken downstream (W3 shifted): the forced deep comparison agrees up to mm3's
    inputs, differs from mm3 on, and its first difference is MatMul_3, as located."""
    original = mlp()
    new = rewritten(original, insert, "relu1", op="scale", params={"factor": 0.5})
    w3 = next(t for t in new.graph.initializer if t.name == "W3")
    w3.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w3) + 0.25, "W3"))
    report = verify_log(original, new, deep=True)
    assert report.verdict == "fail"
    seen = {t.candidate: t for t in report.deep.tensors}
    assert report.deep.first_difference.node == report.divergence.node == "MatMul_3"
    assert all(seen[n].ok and seen[n].max_abs_diff == 0 for n in ("mm0", "relu1", "mm2", "relu2", "side"))
    assert not seen["mm3"].ok and not seen["y"].ok and seen["mm3"].max_abs_diff > 0.01


def test_a_bug_inside_a_loop_body_is_caught():
    original = builders.loop_capture()
    new = rewritten(original, copy, ["z"], prefix="c/")
    loop_copy = next(n for n in new.graph.node if n.op_type == "Loop" and n.name != "loop")
    body = loop_copy.attribute[0].g
    next(n for n in body.node if n.op_type == "Mul").op_type = "Add"
    report = verify_log(original, new)
    assert not report.ok
    assert report.divergence is not None and report.divergence.node == loop_copy.name


# ------------------------------------------------ gauntlet regression (moved from test_gauntlet.py)


def _ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-2000:]}"
    return proc


def test_regression_float16_rewrites_verify_within_tolerance(tmp_path):
    """Bug 1: onnxruntime's CPU provider computes float16 chains in float32, so a cut value fed
    back is rounded differently: extract --inputs / insert / reroute --verify always failed."""
    from tests import gauntlet_models as gm
    from tests.cli_helpers import cli
    src = gm.fp16_weights(tmp_path)
    proc = _ok(cli("reroute", src, "-o", tmp_path / "r.onnx", "--from", "r2", "--to", "mm1", "--verify"))
    assert "float16 tensors compared within tolerance" in proc.stdout


def test_deep_on_named_tensors_compares_only_those():
    """deep=<names> (what a page draws): only those tensors of the rewritten model are compared
    layer by layer, whatever the model's size."""
    original = mlp()
    new = rewritten(original, insert, "relu1", op="scale", params={"factor": 0.5})
    report = verify_log(original, new, deep={"mm2", "relu2", "side", "nothing"})
    assert report.ok, report.to_text()
    assert [t.candidate for t in report.deep.tensors] == ["mm2", "relu2", "side"]
