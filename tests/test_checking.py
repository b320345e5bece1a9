"""save() offers the CLI's onnx.checker guarantee to API users (issue 9): levels, removal of a
failing file, a warning when the source fails the same way, and the cheap default."""

from __future__ import annotations

import onnx
import pytest

from onnxsurgeon import UsageError, load, save
from onnxsurgeon.checking import FULL_CHECK_MAX_NODES, Check, OutputCheckError, node_count
from tests import builders


def test_default_save_runs_the_full_check_on_small_models(tmp_path):
    out = tmp_path / "o.onnx"
    with pytest.raises(OutputCheckError, match="onnx.checker"):
        save(builders.shape_clash(builders.chain(2)), out)
    assert not out.exists()
    save(builders.chain(2), out)  # a valid model passes and is written
    onnx.checker.check_model(str(out), full_check=True)


@pytest.mark.parametrize("level", ["off", Check.STRUCTURE])
def test_weaker_levels_keep_a_model_only_full_inference_refuses(tmp_path, level):
    out = tmp_path / "o.onnx"
    save(builders.shape_clash(builders.chain(2)), out, check=level)
    assert len(onnx.load(str(out)).graph.node) == 7


def test_structure_level_still_catches_an_unknown_op_and_removes_the_file(tmp_path):
    model = builders.chain(1)
    model.graph.node.append(onnx.helper.make_node("NoSuchOp", ["y"], ["bad"], name="bad"))
    out = tmp_path / "o.onnx"
    with pytest.raises(OutputCheckError):
        save(model, out, check="structure")
    assert not out.exists()
    save(model, out, check=Check.OFF)
    assert out.exists()


def test_default_skips_large_models_auto_checks_them_plainly(tmp_path):
    blocks = FULL_CHECK_MAX_NODES // 3 + 1
    model = builders.chain(blocks)
    assert node_count(model, FULL_CHECK_MAX_NODES) > FULL_CHECK_MAX_NODES
    model.graph.node.append(onnx.helper.make_node("NoSuchOp", ["y"], ["bad"], name="bad"))
    save(model, tmp_path / "default.onnx")  # above the limit the default costs nothing
    with pytest.raises(OutputCheckError):
        save(model, tmp_path / "auto.onnx", check=Check.AUTO)
    assert not (tmp_path / "auto.onnx").exists()


def test_a_source_that_fails_the_same_check_gives_a_warning_not_an_error(tmp_path):
    src = tmp_path / "src.onnx"
    src.write_bytes(builders.shape_clash(builders.chain(2)).SerializeToString())
    model = load(src)
    out = tmp_path / "o.onnx"
    save(model, out)
    assert out.exists()
    assert any("fails onnx.checker as the input does" in w for w in model.warnings)


def test_an_unknown_level_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="check level"):
        save(builders.chain(1), tmp_path / "o.onnx", check="sometimes")
    assert not (tmp_path / "o.onnx").exists()
