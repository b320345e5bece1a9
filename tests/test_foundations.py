"""Index, closure, selectors and the name allocator: the pure queries every verb builds on."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon import (
    AmbiguousNameError,
    GraphIndex,
    InvalidModelError,
    NameAllocator,
    NotFoundError,
    Selector,
    closure,
    downstream_nodes,
)
from onnxsurgeon.select import NAME_MAP_KEY, node_module
from tests import builders

ROOT = Path(__file__).resolve().parent.parent


def test_core_never_imports_frameworks_statically():
    offenders = []
    for path in (ROOT / "onnxsurgeon").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in {"tensorflow", "torch", "tf2onnx", "keras"}:
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_core_import_loads_no_framework_at_runtime():
    code = (
        "import sys, onnxsurgeon, onnxsurgeon.cli, onnxsurgeon.inspect, onnxsurgeon.demo;"
        "bad = [m for m in ('torch', 'tensorflow', 'tf2onnx', 'keras') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_index_producers_consumers_and_outputs():
    model = builders.tiny_cnn()
    index = GraphIndex(model)
    assert index.graph.node[index.producer["act"]].name == "relu5"
    readers = sorted(index.node_label(u.node) for u in index.consumers["act"])
    assert readers == ["pool", "side"]
    assert "act" in index.outputs and "x" in index.inputs
    assert set(index.initializers) == {"conv5.weight", "conv5.bias", "fc.weight", "fc.bias"}


def test_index_sees_reads_inside_if_branches():
    index = GraphIndex(builders.if_capture())
    uses = index.consumers["a"]
    inner = [u for u in uses if u.slot == -1]
    assert {u.inner.holder.name for u in inner} == {"then_mul", "else_sub"}
    assert {index.node_label(u.node) for u in inner} == {"branch"}
    assert any(u.slot >= 0 and index.node_label(u.node) == "add" for u in uses)


def test_closure_follows_captures_of_if_and_loop():
    for build, target, needed in (
        (builders.if_capture, "y", {"relu", "branch", "gt", "sum"}),
        (builders.loop_capture, "y", {"neg", "loop"}),
    ):
        index = GraphIndex(build())
        c = closure(index, [target])
        assert {index.node_label(i) for i in c.nodes} == needed
        assert "W" in c.initializers


def test_closure_stops_and_reports_inputs():
    index = GraphIndex(builders.tiny_cnn())
    c = closure(index, ["logits"], stop_at=["act"])
    assert [index.node_label(i) for i in c.nodes] == ["pool", "flatten", "fc"]
    assert c.stops == ("act",) and c.inputs == ()
    full = closure(index, ["logits"])
    assert full.inputs == ("x",) and full.stops == ()


def test_closure_initializer_listed_as_input_counts_as_initializer():
    index = GraphIndex(builders.init_as_input())
    c = closure(index, ["y"])
    assert c.initializers == ("W",) and c.inputs == ("x",)


def test_closure_of_dangling_tensor_names_it():
    model = builders.tied_weights()
    model.graph.node[1].input[0] = "ghost"
    with pytest.raises(InvalidModelError, match="'ghost'.*read by node 'relu'"):
        closure(GraphIndex(model), ["y"])


def test_closure_on_100k_chain_is_iterative():
    model = builders.chain(34_000)  # 102k nodes
    index = GraphIndex(model)
    c = closure(index, ["y"])
    assert len(c.nodes) == 102_000
    assert len(downstream_nodes(index, ["x"])) == 102_000


def test_two_producers_is_an_error():
    model = builders.tied_weights()
    model.graph.node[2].output[0] = "h"
    with pytest.raises(InvalidModelError, match="'h' is produced twice"):
        GraphIndex(model)


def test_selector_resolution_order_and_errors():
    model = builders.tiny_cnn()
    sel = Selector(GraphIndex(model))
    assert sel.resolve("act") == "act"
    assert sel.resolve("act:0") == "act"            # TF-style suffix
    assert sel.resolve("relu5") == "act"            # node name -> its single output
    with pytest.raises(NotFoundError, match="did you mean 'act'"):
        sel.resolve("acts")


def test_selector_tf_names_and_name_map():
    model = builders.tiny_cnn()
    model.graph.node[1].output[0] = "net/relu:0"
    for n in model.graph.node:
        for k, name in enumerate(n.input):
            if name == "act":
                n.input[k] = "net/relu:0"
    model.graph.output[1].name = "net/relu:0"
    entry = model.metadata_props.add()
    entry.key, entry.value = NAME_MAP_KEY, '{"network/fused/BiasAdd:0": "conv5_out"}'
    sel = Selector(GraphIndex(model))
    assert sel.resolve("net/relu") == "net/relu:0"
    assert sel.resolve("network/fused/BiasAdd:0") == "conv5_out"
    assert sel.resolve("network/fused/BiasAdd") == "conv5_out"


def test_selector_node_with_several_outputs_lists_them():
    node = helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=0)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sel = Selector(GraphIndex(model))
    with pytest.raises(AmbiguousNameError, match=r"node 'split' has 2 outputs"):
        sel.resolve("split")
    assert sel.resolve("split:1") == "b"


def _torch_like(dynamo: bool) -> onnx.ModelProto:
    """conv5 -> relu -> layer4 (block 'layer4.1' with conv1 + relu) -> fc, named like exporters."""
    specs = [  # (op, inputs, output, module scopes)
        ("Relu", ["x"], "t0", ["", "conv5", "conv2d"]),
        ("Neg", ["t0"], "t1", ["", "layer4", "layer4.1", "conv1", "conv2d"]),
        ("Abs", ["t1"], "t2", ["", "layer4", "layer4.1", "relu", "relu"]),
        ("Sigmoid", ["t2"], "y", ["", "fc", "linear"]),
    ]
    nodes = []
    for k, (op, ins, out, scopes) in enumerate(specs):
        if dynamo:
            node = helper.make_node(op, ins, [out], name=f"node_{k}")
            entry = node.metadata_props.add()
            entry.key, entry.value = "pkg.torch.onnx.name_scopes", repr(scopes)
        else:
            node = helper.make_node(op, ins, [out], name="/" + "/".join(scopes[1:-1] + [op]))
        nodes.append(node)
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_selector_torch_module_paths(dynamo):
    model = _torch_like(dynamo)
    assert node_module(model.graph.node[1]) == "layer4.1.conv1"
    sel = Selector(GraphIndex(model))
    assert sel.resolve("conv5") == "t0"
    assert sel.resolve("layer4.1") == "t2"
    assert sel.resolve("layer4") == "t2"
    assert sel.resolve("layer4.1.conv1") == "t1"
    with pytest.raises(NotFoundError):
        sel.resolve("layer5")


def test_name_allocator_is_deterministic_and_collision_free():
    model = builders.tiny_cnn()
    names = NameAllocator.for_model(model)
    assert names.fresh("act") == "act__1"
    assert names.fresh("act") == "act__2"
    assert names.fresh("new") == "new"
    assert names.fresh("new") == "new__1"
    again = NameAllocator.for_model(model)
    assert [again.fresh("act"), again.fresh("act")] == ["act__1", "act__2"]


def test_name_allocator_claims_all_or_nothing():
    names = NameAllocator.for_model(builders.tiny_cnn())
    assert not names.claim(["copy/a", "act"])  # taken
    assert not names.claim(["copy/a", "copy/a"])  # repeated
    assert not names.claim(["copy/a", ""])  # empty
    assert "copy/a" not in names  # a refused claim reserves nothing
    assert names.claim(["copy/a", "copy/b"])
    assert "copy/b" in names and not names.claim(["copy/b"])
    assert names.fresh("copy/a") == "copy/a__1"  # claimed names are never handed out again
    assert names.fresh_many(["copy/c", "copy/a"]) == ["copy/c", "copy/a__2"]


def test_an_index_allocator_refuses_a_claim_of_any_name_the_model_has():
    """``for_index`` probes the index's name maps (dicts, the node names' set) instead of one
    set of every name: a claim that takes any kind of name, alone among many new ones, is
    refused whole; one of new names only is taken."""
    from onnxsurgeon.index import GraphIndex

    m = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[2] x) => (float[2] out) <float[2] vi_t, float[2] w = {1, 2}> {
            vi_t = Relu(x)
            out = Add(vi_t, w)
        }""")
    m.graph.node[0].name = "relu_node"
    fresh = [f"copy/{k}" for k in range(5000)]
    for taken in ("x", "w", "vi_t", "out", "relu_node"):
        names = NameAllocator.for_index(GraphIndex(m))
        assert not names.claim([*fresh, taken]), taken
        assert not names.claim([taken, *fresh]), taken
        assert "copy/0" not in names
        assert names.claim(fresh) and names.fresh(taken) == f"{taken}__1"


def test_name_allocator_sees_nested_and_function_names():
    names = NameAllocator.for_model(builders.if_capture())
    assert names.fresh("then_mul") == "then_mul__1"
    assert names.fresh("t") == "t__1"
    fnames = NameAllocator.for_model(builders.local_function())
    assert fnames.fresh("XW") == "XW__1"


def test_every_subpackage_is_declared_for_plain_installs():
    import tomllib

    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in (ROOT / "onnxsurgeon").rglob("__init__.py")} | {"onnxsurgeon.converters"}
    # package-data folders (no __init__.py): the schemas, and models/ and examples/ (mapped)
    data = {"onnxsurgeon.schemas", "onnxsurgeon.models", "onnxsurgeon.examples"}
    assert found | data == declared


def test_torch_placeholder_scope_is_not_a_module():
    node = helper.make_node("Shape", ["x"], ["s"], name="node_shape")
    entry = node.metadata_props.add()
    entry.key = "pkg.torch.onnx.name_scopes"
    entry.value = "['', '_empty_nn_module_stack_from_metadata_hook', 'sym_size_int']"
    assert node_module(node) is None
    inner = helper.make_node("Relu", ["x"], ["r"], name="node_relu")
    entry = inner.metadata_props.add()
    entry.key = "pkg.torch.onnx.name_scopes"
    entry.value = "['', 'blocks.0', '_empty_nn_module_stack_from_metadata_hook', 'relu']"
    assert node_module(inner) == "blocks.0"


# ------------------------------------------------ gauntlet regression (moved from test_gauntlet.py)


def test_regression_unknown_rank_is_not_a_scalar(tmp_path):
    """Bug 4: onnxruntime reports an unknown rank as [], which was taken for a scalar (rank 0),
    so insert/copy wrote models the checker rejects (exit 3)."""
    import onnx

    from onnxsurgeon.ortinfer import ort_value_infos
    from tests import gauntlet_models as gm

    model = onnx.load(str(gm.loop_rnn(tmp_path)))
    vi = ort_value_infos(model, ["h_last", "h0"])
    assert not vi["h_last"].type.tensor_type.HasField("shape")
    assert len(vi["h0"].type.tensor_type.shape.dim) == 2


def test_regression_module_path_ignores_shared_constants_shapes_and_unscoped_glue():
    """Bug 6: 'enc.layers.0' (TorchScript shares Constant / Shape->Gather outputs across layers)
    and 'm.h.0' (dynamo drops the scope of GPT-2's qkv Split) were ambiguous."""
    from onnx import TensorProto, helper

    from onnxsurgeon.index import GraphIndex
    from onnxsurgeon.select import Selector

    n = helper.make_node
    nodes = [
        n("Constant", [], ["/blk/Constant_output_0"], name="/blk/Constant",
          value=helper.make_tensor("c", TensorProto.INT64, [1], [-1])),
        n("Shape", ["x"], ["/blk/Shape_output_0"], name="/blk/Shape"),
        n("Gather", ["/blk/Shape_output_0", "zero"], ["/blk/Gather_output_0"], name="/blk/Gather", axis=0),
        n("Relu", ["x"], ["/blk/lin/Relu_output_0"], name="/blk/lin/Relu"),
        n("Split", ["/blk/lin/Relu_output_0"], ["s0", "s1"], name="split_no_scope", axis=1, num_outputs=2),
        n("Add", ["s0", "s1"], ["/blk/Add_output_0"], name="/blk/Add"),
        n("Reshape", ["/blk/Add_output_0", "/blk/Constant_output_0"], ["/head/Reshape_output_0"], name="/head/Reshape"),
        n("Unsqueeze", ["/blk/Gather_output_0", "zero1"], ["/head/U_output_0"], name="/head/Unsqueeze"),
        n("Expand", ["/head/Reshape_output_0", "/head/U_output_0"], ["e"], name="/head/Expand"),
        # dynamo-style symbolic-size arithmetic: a size taken outside the module, reshaped inside
        n("Shape", ["x"], ["pre_shape"], name="/pre/Shape"),
        n("Mul", ["pre_shape", "two"], ["/blk/size_output_0"], name="/blk/size"),
        n("Reshape", ["e", "/blk/size_output_0"], ["y"], name="/head/Reshape2"),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
                           helper.make_tensor("two", TensorProto.INT64, [1], [1]),
                           helper.make_tensor("zero1", TensorProto.INT64, [1], [0])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    assert Selector(GraphIndex(model)).resolve("blk") == "/blk/Add_output_0"
