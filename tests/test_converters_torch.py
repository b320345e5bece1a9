"""PyTorch -> ONNX with both exporters: module-path name maps, dynamic axes, the CLI entry."""

from __future__ import annotations

import json
import re
import textwrap

import onnx
import pytest

from tests.framework_helpers import assert_close, images, metadata, run

torch = pytest.importorskip("torch")

from onnxsurgeon.converters import (  # noqa: E402
    ConversionError,
    cli_convert_torch,
    from_torch,
    load_factory,
)
from onnxsurgeon.converters import seed_models as sm  # noqa: E402
from onnxsurgeon.converters.common import NAME_MAP_KEY, ValueIndex, run_all_tensors  # noqa: E402

from onnxsurgeon.errors import NotFoundError, UsageError  # noqa: E402
from onnxsurgeon.index import GraphIndex  # noqa: E402
from onnxsurgeon.select import Selector  # noqa: E402
from onnxsurgeon.select import fused_names as metadata_fused  # noqa: E402

pytestmark = pytest.mark.torch
EXPORTERS = ["dynamo", "torchscript"]


class Block(torch.nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c, c, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(c)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv1(x)) + x)


class TinyResNet(torch.nn.Module):
    """ResNet-like paths: ``layer4.0``, ``layer4.1``, ``layer4.1.conv1``, a dropped ``drop``."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.layer4 = torch.nn.Sequential(Block(4), Block(4))
        self.drop = torch.nn.Dropout(0.5)
        self.fc = torch.nn.Linear(4, 6)

    def forward(self, x):
        h = self.layer4(self.stem(x))
        return self.fc(self.drop(h.mean(dim=(2, 3))))


def _hook_values(module, x, paths):
    got = {}
    handles = [module.get_submodule(p).register_forward_hook(
        lambda _m, _i, out, p=p: got.__setitem__(p, out.detach().numpy().copy())) for p in paths]
    with torch.no_grad():
        module(x)
    for h in handles:
        h.remove()
    return got


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_torch_cnn_converts_and_module_paths_resolve(exporter, tmp_path):
    module = sm.torch_cnn(seed=0)
    x = torch.from_numpy(images((2, 3, 8, 8), seed=1))
    report = from_torch(module, (x,), tmp_path / "m.onnx", exporter=exporter,
                        input_names=["x"], output_names=["logits"])
    model = onnx.load(report.path)
    assert [i.name for i in model.graph.input] == ["x"]
    assert report.checked and report.max_excess <= 0
    meta = metadata(model)
    assert meta["onnxsurgeon.source.framework"] == "pytorch"
    assert meta["onnxsurgeon.source.exporter"] == f"torch.onnx {exporter}"
    assert json.loads(meta[NAME_MAP_KEY]) == dict(report.name_map)
    assert set(report.name_map) == {"conv5", "fc"}
    sel = Selector(GraphIndex(model))
    conv5 = sel.resolve("conv5")
    assert conv5 == report.name_map["conv5"]
    got = run(model, {"x": x.numpy()}, extra=[conv5])
    want = _hook_values(module, x, ["conv5"])["conv5"]
    assert_close(got[conv5], want)
    with torch.no_grad():
        assert_close(got["logits"], module(x).numpy())


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_nested_module_paths_and_dropped_modules(exporter, tmp_path):
    torch.manual_seed(0)
    module = TinyResNet()
    module.layer4[1].bn.running_mean.normal_()       # non-trivial batch norm statistics
    module.layer4[1].bn.running_var.uniform_(0.5, 2.0)
    module.train()                                    # exported in eval mode, mode restored
    x = torch.from_numpy(images((2, 3, 8, 8), seed=2))
    report = from_torch(module, (x,), tmp_path / "r.onnx", exporter=exporter, input_names=["x"])
    assert module.training
    module.eval()
    model = onnx.load(report.path)
    paths = ["stem", "layer4", "layer4.0", "layer4.1", "layer4.1.conv1", "layer4.1.bn", "drop", "fc"]
    sel = Selector(GraphIndex(model))
    fused = set(metadata_fused(model))
    # the conv folded into a batch norm with real statistics (layer4.0.bn is near identity: its
    # conv's value survives within tolerance and stays mapped)
    assert fused == {"layer4.1.conv1"}
    for p in fused:
        with pytest.raises(NotFoundError, match=(
                rf"^'{re.escape(p)}' was fused into Conv '[^']+' by the converter; its value does "
                rf"not exist in the ONNX model; use '{re.escape(p[:-5])}bn'$")):
            sel.resolve(p)
    resolved = {p: sel.resolve(p) for p in paths if p not in fused}
    got = run(model, {"x": x.numpy()}, extra=list(resolved.values()))
    want = _hook_values(module, x, paths)
    everything = ValueIndex({**run_all_tensors(model, {"x": x.numpy()}), "x": x.numpy()})
    for p in fused:
        assert everything.absent(want[p]), p      # no tensor holds the conv's own output
    for p in resolved:
        assert got[resolved[p]].shape == want[p].shape, p
        assert_close(got[resolved[p]], want[p])
    # every entry of the map, not only the paths above, holds its module's value, on an input
    # the conversion never saw
    entries = {p: t for p, t in report.name_map.items() if "#" not in p}
    assert entries
    x2 = torch.from_numpy(images((2, 3, 8, 8), seed=7))
    every = _hook_values(module, x2, list(entries))
    values = run(model, {"x": x2.numpy()}, extra=list(entries.values()))
    for p, tensor in entries.items():
        assert_close(values[tensor], every[p])
    assert resolved["layer4"] == resolved["layer4.1"]


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_dynamic_axes_keep_batch_symbolic(exporter, tmp_path):
    module = sm.torch_cnn(seed=1)
    x = torch.from_numpy(images((2, 3, 8, 8), seed=3))
    report = from_torch(module, x, tmp_path / "d.onnx", exporter=exporter, input_names=["x"],
                        dynamic_axes={"x": {0: "batch"}})
    model = onnx.load(report.path)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    x5 = images((5, 3, 8, 8), seed=4)
    with torch.no_grad():
        assert_close(run(model, {"x": x5})[report.outputs[0]], module(torch.from_numpy(x5)).numpy())


def test_opset_choice_and_bad_exporter(tmp_path):
    module = sm.torch_cnn(seed=0)
    x = torch.zeros(1, 3, 8, 8)
    report = from_torch(module, x, tmp_path / "o.onnx", exporter="torchscript", opset=13)
    assert report.opset == 13
    with pytest.raises(UsageError, match="exporter 'onnx2'"):
        from_torch(module, x, tmp_path / "o.onnx", exporter="onnx2")
    with pytest.raises(UsageError, match="nn.Module"):
        from_torch(lambda t: t, x, tmp_path / "o.onnx")


def test_export_failure_is_a_conversion_error(tmp_path):
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x[x > 0].numpy()  # leaves torch: no exporter can trace it

    with pytest.raises(ConversionError, match="could not export DataDependent"):
        from_torch(DataDependent(), torch.ones(3), tmp_path / "x.onnx", exporter="torchscript")
    assert not (tmp_path / "x.onnx").exists()


def test_cli_convert_torch_loads_factory_file(tmp_path):
    src = tmp_path / "net.py"
    src.write_text(textwrap.dedent("""
        import torch
        from onnxsurgeon.converters.seed_models import torch_cnn
        def build():
            return torch_cnn(seed=3)
    """))
    out = tmp_path / "net.onnx"
    report = cli_convert_torch(f"{src}:build", out, inputs=["image:batch,3,8,8:float32"],
                               exporter="torchscript")
    model = onnx.load(out)
    assert [i.name for i in model.graph.input] == ["image"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert report.name_map["conv5"] in {o for n in model.graph.node for o in n.output}
    ref = sm.torch_cnn(seed=3)
    x = images((3, 3, 8, 8), seed=9)
    with torch.no_grad():
        assert_close(run(model, {"image": x})[report.outputs[0]], ref(torch.from_numpy(x)).numpy())
    with pytest.raises(UsageError, match="needs --input"):
        cli_convert_torch(f"{src}:build", out, inputs=[])


def test_load_factory_errors(tmp_path):
    with pytest.raises(UsageError, match="FILE.py:NAME"):
        load_factory("no_colon")
    with pytest.raises(NotFoundError, match="does not exist"):
        load_factory(str(tmp_path / "missing.py") + ":f")
    src = tmp_path / "m.py"
    src.write_text("def f():\n    return 1\n")
    with pytest.raises(NotFoundError, match="defines no 'g'"):
        load_factory(f"{src}:g")
    assert load_factory(f"{src}:f")() == 1
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(UsageError, match="boom"):
        load_factory(f"{bad}:f")


def test_committed_torch_model_matches_generator():
    from pathlib import Path

    model = onnx.load(Path(__file__).resolve().parent.parent / "models" / "torch_cnn.onnx")
    module = sm.torch_cnn(seed=0)
    x = images((3, 3, 8, 8), seed=10)
    with torch.no_grad():
        assert_close(run(model, {"x": x})["logits"], module(torch.from_numpy(x)).numpy())
    assert Selector(GraphIndex(model)).resolve("conv5") in {o for n in model.graph.node for o in n.output}


@pytest.mark.slow
def test_the_bundled_tiny_bert_regenerates_byte_for_byte_and_computes_the_bert():
    """models/tiny_bert.onnx is what ``seed_models.tiny_bert_onnx`` writes (same bytes), keeps
    its 5 Dropouts and decomposed LayerNorms, and computes the transformers BERT it came from."""
    from pathlib import Path

    import numpy as np
    import onnxruntime as ort

    path = Path(__file__).resolve().parent.parent / "models" / "tiny_bert.onnx"
    data = sm.tiny_bert_onnx(seed=0)
    assert data == path.read_bytes(), "regenerate: python models/make_framework_models.py"
    model = onnx.load_from_string(data)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Dropout") == 5 and ops.count("Pow") == 5 and "LayerNormalization" not in ops
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [16]
    ids = np.random.default_rng(0).integers(0, sm.TINY_BERT_VOCAB, (1, sm.TINY_BERT_SEQ))
    with torch.no_grad():
        want = sm.tiny_bert(seed=0).eval()(torch.from_numpy(ids)).numpy()
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"input_ids": ids.astype(np.int64)})
    assert_close(got, want)
