"""One line on stderr, always: onnxruntime's own log lines stay off the terminal unless -v (real
onnxruntime, through the CLI). Ray's are held to the same in tests/test_ray.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import cli


@pytest.fixture()
def embedding(tmp_path: Path) -> Path:
    """Gather over a 10-row table: token ids drawn from --range ids=0,100 fall outside it."""
    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], name="lookup"),
         helper.make_node("Relu", ["rows"], ["out"], name="act")], "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 4])], [table])
    path = tmp_path / "embedding.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("extra", [[], ["--isolate"]], ids=["in-process", "isolated"])
def test_an_onnxruntime_failure_is_one_line_unless_verbose(embedding, extra):
    args = ["verify", embedding, embedding, "--range", "ids=0,100", *extra]
    proc = cli(*args)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr  # not onnxruntime's red '[E:onnxruntime:...]' line too
    assert lines[0].startswith("onnxsurgeon: error: onnxruntime") and "out of data bounds" in lines[0]
    assert "\x1b[" not in proc.stderr
    if not extra:  # -v shows onnxruntime's own line as well (an isolated worker's goes to its pipe)
        loud = cli("-v", *args)
        assert loud.returncode == 2 and "[E:onnxruntime:" in loud.stderr
        assert loud.stderr.splitlines()[-1] == lines[0]
