"""bypass of a torch module path (every node of the module goes, its readers read its input, or
it is refused) and ``--prune`` (the nodes and initializers no graph output depends on any more
go too): structure, numbers (onnxruntime), the rewrite record's check and replay, the CLI
(issues 26 item 12 and 27)."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import RewriteError, UsageError
from onnxsurgeon.io import Model
from onnxsurgeon.record import BypassRecord, records
from onnxsurgeon.schema import validate
from onnxsurgeon.surgery import bypass
from onnxsurgeon.verify import verify_log
from onnxsurgeon.verify.log import replay
from tests.cli_helpers import assert_refused, cli
from tests.rewire_helpers import clone, rand, run, serialized

F = TensorProto.FLOAT
X = {"x": rand((2, 4), 0)}


def _const(name: str, value: float) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.float32), name)


def gelu_model() -> onnx.ModelProto:
    """x -> fc1 -> h -> act (erf GELU in 5 nodes, TorchScript-style names '/act/...') -> g -> fc2
    -> y; ``one`` is shared with the 'head' module, which stays."""
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"], name="/fc1/MatMul"),
        helper.make_node("Div", ["h", "sqrt2"], ["d"], name="/act/Div"),
        helper.make_node("Erf", ["d"], ["e"], name="/act/Erf"),
        helper.make_node("Add", ["e", "one"], ["a"], name="/act/Add"),
        helper.make_node("Mul", ["h", "a"], ["m"], name="/act/Mul"),
        helper.make_node("Mul", ["m", "half"], ["g"], name="/act/Mul_1"),
        helper.make_node("MatMul", ["g", "W2"], ["f"], name="/fc2/MatMul"),
        helper.make_node("Add", ["f", "one"], ["y"], name="/head/Add"),
    ]
    g = helper.make_graph(
        nodes, "gelu", [helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info("y", F, [2, 4])],
        [numpy_helper.from_array(rand((4, 4), 1), "W1"), numpy_helper.from_array(rand((4, 4), 2), "W2"),
         _const("sqrt2", math.sqrt(2.0)), _const("one", 1.0), _const("half", 0.5)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _names(model: onnx.ModelProto) -> list[str]:
    return [n.name for n in model.graph.node]


def _inits(model: onnx.ModelProto) -> list[str]:
    return [t.name for t in model.graph.initializer]


def test_a_module_path_bypasses_every_node_of_the_module():
    orig = gelu_model()
    model = clone(orig)
    result = bypass(model, "act")
    assert result.removed == ["/act/Mul_1"] and result.modules == {"act": "/act/Mul_1"}
    assert result.pruned == ["/act/Div", "/act/Erf", "/act/Add", "/act/Mul"]
    assert _names(model) == ["/fc1/MatMul", "/fc2/MatMul", "/head/Add"]
    assert list(model.graph.node[1].input) == ["h", "W2"]
    # the module's own constants go; 'one' is shared with 'head' and stays
    assert result.pruned_initializers == ["sqrt2", "half"]
    assert _inits(model) == ["W1", "W2", "one"]
    onnx.checker.check_model(model, full_check=True)
    w1, w2 = (numpy_helper.to_array(t) for t in orig.graph.initializer[:2])
    np.testing.assert_array_equal(run(model, X)["y"], (X["x"] @ w1) @ w2 + np.float32(1))
    assert verify_log(orig, model).ok


def test_unscoped_glue_only_the_module_reads_goes_with_it():
    """The dynamo exporter drops the scope of some nodes inside a module: an unscoped node
    whose output only the module reads is part of it (else the module would take 2 tensors)."""
    orig = gelu_model()
    orig.graph.node.insert(1, helper.make_node("Identity", ["h"], ["h2"], name="glue"))
    orig.graph.node[2].input[0] = "h2"  # /act/Div reads the glue
    model = clone(orig)
    result = bypass(model, "act")
    assert "glue" in result.pruned
    assert _names(model) == ["/fc1/MatMul", "/fc2/MatMul", "/head/Add"]
    assert verify_log(orig, model).ok


def test_module_bypass_record_replays_and_plain_records_keep_their_keys():
    orig = gelu_model()
    model = clone(orig)
    bypass(model, "act")
    record = records(model)[-1]
    assert isinstance(record, BypassRecord) and record.sources == {"/act/Mul_1": "h"}
    again = Model(clone(orig))
    replay(again, record)
    assert serialized(again.proto) == serialized(model)
    plain = clone(orig)
    bypass(plain, "/head/Add")
    assert set(json.loads(plain.metadata_props[-1].value)[-1]) == {
        "op", "removed", "input", "rerouted", "rerouted_outputs"}


@pytest.mark.parametrize("edit, name, needle", [
    # the module reads two data tensors
    (lambda n: n[4].input.__setitem__(0, "x"), "act", "takes 2 tensors"),
    # a second tensor of the module is read outside it
    (lambda n: n[7].input.__setitem__(1, "e"), "act", "hands 2 tensors"),
])
def test_a_module_with_two_inputs_or_outputs_is_refused(edit, name, needle):
    model = gelu_model()
    edit(model.graph.node)
    before = serialized(model)
    with pytest.raises(RewriteError, match=needle):
        bypass(model, name)
    assert serialized(model) == before


def test_a_module_with_a_node_of_it_or_an_input_slot_is_refused():
    model = gelu_model()
    before = serialized(model)
    with pytest.raises(UsageError, match="inside module 'act'"):
        bypass(model, ["act", "/act/Erf"])
    with pytest.raises(UsageError, match="one input"):
        bypass(model, "act", input=1)
    assert serialized(model) == before


def prune_model() -> onnx.ModelProto:
    """x -> Relu -> r; C -> Neg -> n; Add(r, n) -> a -> Sigmoid -> y; Abs(x) is dead already."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Neg", ["C"], ["n"], name="neg"),
        helper.make_node("Add", ["r", "n"], ["a"], name="add"),
        helper.make_node("Sigmoid", ["a"], ["y"], name="sig"),
        helper.make_node("Abs", ["x"], ["unused"], name="old_dead"),
    ]
    g = helper.make_graph(nodes, "p", [helper.make_tensor_value_info("x", F, [2, 4])],
                          [helper.make_tensor_value_info("y", F, [2, 4])],
                          [numpy_helper.from_array(rand((2, 4), 3), "C"), _const("spare", 2.0)],
                          value_info=[helper.make_tensor_value_info("n", F, [2, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def test_prune_removes_what_no_output_depends_on_after_the_bypass():
    orig = prune_model()
    kept = clone(orig)
    assert bypass(kept, "add").pruned == []
    assert _names(kept) == ["relu", "neg", "sig", "old_dead"] and _inits(kept) == ["C", "spare"]
    model = clone(orig)
    result = bypass(model, "add", prune=True)
    assert result.pruned == ["neg", "old_dead"] and result.pruned_initializers == ["C", "spare"]
    assert _names(model) == ["relu", "sig"] and _inits(model) == []
    assert not model.graph.value_info  # 'n' went with its node
    onnx.checker.check_model(model, full_check=True)
    x = X["x"]
    np.testing.assert_array_equal(run(model, X)["y"], run(kept, X)["y"])
    np.testing.assert_allclose(run(model, X)["y"], 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-6)
    assert verify_log(orig, model).ok
    again = Model(clone(orig))
    replay(again, records(model)[-1])
    assert serialized(again.proto) == serialized(model)


def test_prune_keeps_an_initializer_the_bypass_reroutes_to():
    """Identity(W) bypassed: its readers read the initializer W, which must stay."""
    g = helper.make_graph(
        [helper.make_node("Identity", ["W"], ["w"], name="id"),
         helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "w", [helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info("y", F, [2, 4])], [numpy_helper.from_array(rand((4, 4), 4), "W")])
    orig = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model = clone(orig)
    assert bypass(model, "id", prune=True).pruned_initializers == []
    np.testing.assert_array_equal(run(model, X)["y"], run(orig, X)["y"])


def test_cli_bypass_module_and_prune_json_verify(tmp_path):
    src = tmp_path / "gelu.onnx"
    src.write_bytes(gelu_model().SerializeToString())
    out = tmp_path / "out.onnx"
    proc = cli("bypass", src, "-o", out, "--node", "act", "--prune", "--json", "--verify")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    validate("bypass", data)
    assert data["modules"] == {"act": "/act/Mul_1"} and data["verify"]["ok"] is True
    assert data["pruned_initializers"] == ["sqrt2", "half"]
    assert _names(onnx.load(str(out))) == ["/fc1/MatMul", "/fc2/MatMul", "/head/Add"]
    text = cli("bypass", src, "-o", tmp_path / "o2.onnx", "--node", "act")
    assert text.returncode == 0 and "removed module act (+4 nodes, 2 initializers)" in text.stdout
    bad = tmp_path / "bad.onnx"
    model = gelu_model()
    model.graph.node[4].input[0] = "x"
    bad.write_bytes(model.SerializeToString())
    assert_refused(["bypass", bad, "-o", tmp_path / "no.onnx", "--node", "act"], "takes 2 tensors",
                   inputs=[bad], out=tmp_path / "no.onnx")


# ----------------------------------------------- the user's way: torch.onnx dynamo=True


TORCH_SOURCE = '''
import math
import torch


class Act(torch.nn.Module):          # tanh GELU by hand: several ONNX nodes, one module path
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = torch.nn.Linear(8, 16), Act(), torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Mlp()

    def forward(self, x):
        return x + self.mlp(x)


class Stage(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(), Block())

    def forward(self, x):
        return self.blocks(x)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stages = torch.nn.Sequential(Stage(), Stage())

    def forward(self, x):
        return self.stages(x)
'''


@pytest.fixture(scope="session")
def dynamo_gelu(tmp_path_factory):
    torch = pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("dynamo_gelu")
    namespace: dict = {}
    exec(compile(TORCH_SOURCE, "net.py", "exec"), namespace)
    net = namespace["Net"]().eval()
    x = torch.randn(2, 8)
    with torch.no_grad():
        prog = torch.onnx.export(net, (x,), dynamo=True, verbose=False)
    path = folder / "net.onnx"
    onnx.save(prog.model_proto, str(path))
    net.stages[1].blocks[1].mlp.act = torch.nn.Identity()
    with torch.no_grad():
        want = net(x).numpy()
    return path, x.numpy(), want


@pytest.mark.slow
@pytest.mark.torch
def test_dynamo_module_path_bypass_through_the_cli(dynamo_gelu, tmp_path):
    path, x, want = dynamo_gelu
    orig = onnx.load(str(path))
    from onnxsurgeon.select import node_module

    act = [n.name for n in orig.graph.node if node_module(n) == "stages.1.blocks.1.mlp.act"]
    assert len(act) >= 5
    out = tmp_path / "noact.onnx"
    proc = cli("bypass", path, "-o", out, "--node", "stages.1.blocks.1.mlp.act", "--json",
               "--verify")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["verify"]["ok"] is True
    assert sorted(data["removed"] + data["pruned"]) == sorted(act)
    model = onnx.load(str(out))
    left = {n.name for n in model.graph.node}
    assert not left & set(act) and len(left) == len(orig.graph.node) - len(act)
    # the other GELUs still read the constants the exporter shares between modules
    assert _inits(model) == _inits(orig)
    got = run(model, {orig.graph.input[0].name: x})[model.graph.output[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
