"""What ``insert ... --verify`` costs, counted in a real command-line process (issue 25).

The wrappers below count calls of the real functions and call them through (nothing is
replaced): loads of the input, GraphIndex constructions (and of those, the builds that walk the
nodes for their producer map; an index made from a map already built, load's or the verb's,
walks nothing), fsyncs, onnx shape inferences, onnx.checker runs and onnxruntime sessions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.cli_helpers import ROOT

_COUNTING = textwrap.dedent("""
    import collections, json, os, sys
    counts = collections.Counter()

    def counted(owner, name, key, when=lambda *a, **k: True):
        real = getattr(owner, name)

        def wrapper(*args, **kwargs):
            if when(*args, **kwargs):
                counts[key] += 1
            return real(*args, **kwargs)

        setattr(owner, name, wrapper)

    import onnx.checker, onnx.shape_inference, onnxruntime
    import onnxsurgeon.index, onnxsurgeon.io
    counted(os, "fsync", "fsync")
    counted(onnx.shape_inference, "infer_shapes", "shape inference")
    counted(onnx.checker, "check_model", "check_model")
    counted(onnxruntime.InferenceSession, "__init__", "onnxruntime session")
    counted(onnxsurgeon.index.GraphIndex, "__init__", "index")
    counted(onnxsurgeon.index.GraphIndex, "__init__", "index build",
            lambda self, model, _producer=None, **kw: _producer is None)
    model = os.path.abspath(sys.argv[1])
    counted(onnxsurgeon.io, "load", "load of the input",
            lambda path, *a, **k: os.path.abspath(path) == model)
    from onnxsurgeon.__main__ import main
    sys.argv = ["onnxsurgeon", *sys.argv[2:]]
    code = main()
    print("COUNTS " + json.dumps(counts), file=sys.stderr)
    sys.exit(code)
""")


def _counted(*argv: object) -> tuple[subprocess.CompletedProcess[str], dict[str, int]]:
    proc = subprocess.run([sys.executable, "-c", _COUNTING, str(argv[1]), *map(str, argv)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("COUNTS "))
    return proc, json.loads(line.removeprefix("COUNTS "))


def test_insert_verify_loads_once_syncs_once_and_stages_each_model_once(tmp_path):
    """``insert models/seed_cnn.onnx ... --verify``: the input is loaded once (verify compares
    against a copy taken before the verb), the only fsync is the output's (verification stages
    in memory), at most 3 index builds, and 4 onnxruntime sessions: the original, the result,
    the block alone and the original recomputed with the block's values. Shape inference: the
    verb's two (the tensor's type; building the block, which types its output for this very
    input) and verify's rebuilt block; none for the staged models (their types are declared or
    onnxruntime's)."""
    out = tmp_path / "out.onnx"
    proc, counts = _counted("insert", "models/seed_cnn.onnx", "-o", out, "--at",
                            "network/layer_conv5/Relu:0", "--op", "identity", "--verify")
    assert "ok: 4/4 pairs agree" in proc.stdout
    assert counts["load of the input"] == 1
    assert counts["fsync"] == 1
    assert counts["index build"] <= 3
    assert counts["onnxruntime session"] == 4
    assert counts["shape inference"] <= 3
    assert out.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx"]


def test_insert_without_verify_costs_no_session_and_one_fsync(tmp_path):
    """Without --verify nothing of the verification runs: no session, no copy of the input."""
    _, counts = _counted("insert", "models/seed_cnn.onnx", "-o", tmp_path / "o.onnx", "--at",
                         "network/layer_conv5/Relu:0", "--op", "identity")
    assert counts["load of the input"] == 1
    assert counts["fsync"] == 1
    assert counts.get("onnxruntime session", 0) == 0


def test_insert_verify_settles_a_saturated_chain_without_more_sessions(tmp_path):
    """A chain whose values are non-finite everywhere (no pair can show a difference): the
    settling's first deep batch (the frontier behind the near one) reuses each check's idle
    session, which computed those tensors too: the 4 check sessions (original, result, block,
    cut) and onnxruntime's type inference of the cut (its fed input has no shape): 5 (7 before:
    the settling loaded models again; 3.5 s each on a 90k-node chain)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, prev = [], "x"
    for i in range(300):
        out = "y" if i == 299 else f"relu{i}"
        nodes += [helper.make_node("MatMul", [prev, "W"], [f"mm{i}"], name=f"MatMul_{i}"),
                  helper.make_node("Add", [f"mm{i}", "B"], [f"add{i}"], name=f"Add_{i}"),
                  helper.make_node("Relu", [f"add{i}"], [out], name=f"Relu_{i}")]
        prev = out
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [numpy_helper.from_array((rng.standard_normal((16, 16)) * 0.5).astype(np.float32), "W"),
         numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "B")])
    model = tmp_path / "chain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(model))
    proc, counts = _counted("insert", model, "-o", tmp_path / "out.onnx", "--at", "mm150",
                            "--op", "l2_normalize", "--verify")
    assert "ok: 3/3 pairs agree" in proc.stdout
    assert "not informative" in proc.stdout
    assert counts["onnxruntime session"] == 5
