"""Architectures beyond the gauntlet's, built at test time from configs with seeded random weights
(no downloads): transformers T5 / CLIP / Whisper encoders, a Swin-style shifted-window attention
block (ScatterND, Where), an LSTM + GRU stack with dynamic batch and time axes, grouped and
dilated convolutions (the Swin block also by the dynamo exporter), and a detection head whose NonMaxSuppression runs inside an If that reads
the outer graph's boxes and scores.

Each builder writes ``<folder>/<name>.onnx`` and returns the path. The PyTorch ones export through
the project's converter (``onnxsurgeon.converters.from_torch``, which checks onnxruntime against
PyTorch on the example input), so they carry the name map a user's export carries.

Run ``python -m tests.corpus_models DIR`` to build them all into DIR.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I64 = TensorProto.FLOAT, TensorProto.INT64


# ------------------------------------------------------------------------------ onnx.helper models
def detection_nms_if(folder: Path) -> Path:
    """A detection head: x[1,16,8] -> boxes[1,16,4] and sigmoid class scores[1,3,16]; an If on
    `max(scores) > 0.3` runs NonMaxSuppression in its then-branch on the outer `boxes` and
    `scores` (captures), the else-branch gives no detections; the kept boxes are gathered and
    refined by a last MatMul (a weight after the If)."""
    rng = np.random.default_rng(26)

    def w(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), name)

    def const(name: str, value: Any, dtype: Any) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(value, dtype), name)

    then_branch = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_thr"], ["sel"],
                          name="nms/NonMaxSuppression")],
        "then", [], [helper.make_tensor_value_info("sel", I64, ["K", 3])])
    else_branch = helper.make_graph(
        [helper.make_node("Constant", [], ["none"], name="nms/none",
                          value=numpy_helper.from_array(np.zeros((0, 3), np.int64), "none_value"))],
        "else", [], [helper.make_tensor_value_info("none", I64, ["K", 3])])
    nodes = [
        helper.make_node("MatMul", ["x", "W_box"], ["box_mm"], name="box/MatMul"),
        helper.make_node("Add", ["box_mm", "b_box"], ["boxes"], name="box/Add"),
        helper.make_node("MatMul", ["x", "W_cls"], ["logits"], name="cls/MatMul"),
        helper.make_node("Transpose", ["logits"], ["logits_t"], name="cls/Transpose", perm=[0, 2, 1]),
        helper.make_node("Sigmoid", ["logits_t"], ["scores"], name="cls/Sigmoid"),
        helper.make_node("ReduceMax", ["scores"], ["best"], name="gate/ReduceMax", keepdims=0),
        helper.make_node("Greater", ["best", "gate_thr"], ["keep"], name="gate/Greater"),
        helper.make_node("If", ["keep"], ["selected"], name="nms/If",
                         then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Gather", ["selected", "two"], ["box_idx"], name="pick/Gather_idx", axis=1),
        helper.make_node("Squeeze", ["boxes", "zero_ax"], ["boxes2d"], name="pick/Squeeze"),
        helper.make_node("Gather", ["boxes2d", "box_idx"], ["picked"], name="pick/Gather", axis=0),
        helper.make_node("MatMul", ["picked", "W_ref"], ["refined"], name="refine/MatMul"),
        helper.make_node("Add", ["refined", "picked"], ["detections"], name="refine/Add"),
    ]
    inits = [w("W_box", (8, 4)), w("b_box", (4,)), w("W_cls", (8, 3)), w("W_ref", (4, 4)),
             const("gate_thr", 0.3, np.float32), const("max_out", [4], np.int64),
             const("iou", [0.5], np.float32), const("score_thr", [0.2], np.float32),
             const("two", 2, np.int64), const("zero_ax", [0], np.int64)]
    graph = helper.make_graph(
        nodes, "detector", [helper.make_tensor_value_info("x", F, [1, 16, 8])],
        [helper.make_tensor_value_info("detections", F, ["K", 4]),
         helper.make_tensor_value_info("scores", F, [1, 3, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="corpus")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    path = folder / "detection_nms_if.onnx"
    onnx.save_model(model, str(path))
    return path


# ------------------------------------------------------------------------------ torch models
def _windows(t: Any, w: int) -> Any:
    """[B, H, W, C] -> [B * windows, w * w, C] (Swin's window partition)."""
    b, h, wd, c = t.shape
    return t.view(b, h // w, w, wd // w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, c)


def _torch_modules() -> dict[str, Callable[[], tuple[Any, tuple[Any, ...], dict[str, dict[int, str]] | None]]]:
    """name -> factory of (module, example inputs, dynamic axes)."""
    import torch
    import transformers
    from torch import nn

    class Wrap(nn.Module):
        """A transformers model called with one keyword input, returning its first output."""

        def __init__(self, model: nn.Module, keyword: str) -> None:
            super().__init__()
            self.m, self.keyword = model, keyword
            if hasattr(model, "config"):
                model.config.return_dict = False

        def forward(self, x):
            return self.m(**{self.keyword: x})[0]

    class SwinStyle(nn.Module):
        """One shifted-window attention block on an 8x8 token grid (window 4, shift 2): the
        relative position bias gathered from a table, the shift mask applied with masked_fill
        (Where), the windows written back to token order by index assignment (ScatterND)."""

        def __init__(self, dim: int = 16, w: int = 4, heads: int = 2, side: int = 8, shift: int = 2) -> None:
            super().__init__()
            self.w, self.heads, self.side, self.shift = w, heads, side, shift
            self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
            self.bias_table = nn.Parameter(torch.randn((2 * w - 1) ** 2, heads) * 0.2)
            grid = torch.stack(torch.meshgrid(torch.arange(w), torch.arange(w), indexing="ij")).flatten(1)
            rel = (grid[:, :, None] - grid[:, None, :]).permute(1, 2, 0) + (w - 1)
            self.register_buffer("rel_index", rel[..., 0] * (2 * w - 1) + rel[..., 1])
            region = torch.zeros(side, side, dtype=torch.long)
            spans = (slice(0, -w), slice(-w, -shift), slice(-shift, None))
            for k, (hs, ws) in enumerate((hs, ws) for hs in spans for ws in spans):
                region[hs, ws] = k
            rw = _windows(region[None, :, :, None], w).squeeze(-1)
            self.register_buffer("mask", rw[:, :, None] != rw[:, None, :])
            self.register_buffer("order", _windows(torch.arange(side * side).view(1, side, side, 1), w).reshape(-1))

        def forward(self, x):
            b, n, c = x.shape
            t = self.w * self.w
            h = torch.roll(self.norm1(x).view(b, self.side, self.side, c), (-self.shift, -self.shift), (1, 2))
            win = _windows(h, self.w)
            nw = win.shape[0] // b
            qkv = self.qkv(win).view(-1, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            attn = (qkv[0] * (c // self.heads) ** -0.5) @ qkv[1].transpose(-2, -1)
            bias = self.bias_table[self.rel_index.reshape(-1)].view(t, t, self.heads).permute(2, 0, 1)
            attn = (attn + bias).view(b, nw, self.heads, t, t).masked_fill(self.mask[None, :, None], -100.0)
            attn = attn.view(-1, self.heads, t, t).softmax(-1)
            out = self.proj((attn @ qkv[2]).transpose(1, 2).reshape(-1, t, c)).reshape(b, nw * t, c)
            back = torch.zeros_like(out)
            back[:, self.order] = out
            back = torch.roll(back.view(b, self.side, self.side, c), (self.shift, self.shift), (1, 2))
            x = x + back.reshape(b, n, c)
            return x + self.fc2(nn.functional.gelu(self.fc1(self.norm2(x))))

    class Recurrent(nn.Module):
        """A bidirectional LSTM into a two-layer GRU, a linear head at every step."""

        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(8, 16, batch_first=True, bidirectional=True)
            self.gru = nn.GRU(32, 12, num_layers=2, batch_first=True)
            self.head = nn.Linear(12, 3)

        def forward(self, x):
            y, _ = self.lstm(x)
            y, _ = self.gru(y)
            return self.head(y)

    class GroupedDilated(nn.Module):
        """Dilated, grouped, dilated+grouped convolutions, a grouped ConvTranspose, BatchNorm."""

        def __init__(self) -> None:
            super().__init__()
            self.dilated = nn.Conv2d(4, 8, 3, padding=2, dilation=2)
            self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=4)
            self.both = nn.Conv2d(8, 16, 3, padding=3, dilation=3, groups=2)
            self.up = nn.ConvTranspose2d(16, 8, 2, stride=2, groups=2)
            self.bn = nn.BatchNorm2d(8)

        def forward(self, x):
            y = torch.relu(self.grouped(torch.relu(self.dilated(x))))
            return torch.sigmoid(self.bn(self.up(self.both(y))))

    def t5():
        cfg = transformers.T5Config(d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=2, vocab_size=100,
                                    relative_attention_num_buckets=8, dropout_rate=0.0)
        return Wrap(transformers.T5EncoderModel(cfg), "input_ids")

    def clip():
        cfg = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, image_size=32, patch_size=8)
        return Wrap(transformers.CLIPVisionModel(cfg), "pixel_values")

    def whisper():
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        cfg = transformers.WhisperConfig(d_model=32, encoder_layers=2, encoder_attention_heads=4,
                                         encoder_ffn_dim=64, num_mel_bins=8, max_source_positions=16,
                                         vocab_size=100, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                         decoder_start_token_id=1)
        return Wrap(WhisperEncoder(cfg), "input_features")

    gen = torch.Generator().manual_seed(0)
    batch = {"x": {0: "batch"}}
    return {
        "t5_encoder": (t5, (torch.randint(0, 100, (1, 8), generator=gen),), {"x": {0: "batch", 1: "seq"}}),
        "clip_vision": (clip, (torch.randn(1, 3, 32, 32, generator=gen),), batch),
        "whisper_encoder": (whisper, (torch.randn(1, 8, 32, generator=gen),), batch),
        "swin_block": (SwinStyle, (torch.randn(2, 64, 16, generator=gen),), batch),
        "lstm_gru": (Recurrent, (torch.randn(2, 5, 8, generator=gen),), {"x": {0: "batch", 1: "time"}}),
        "grouped_dilated": (GroupedDilated, (torch.randn(1, 4, 12, 12, generator=gen),), batch),
    }


def export_torch(folder: Path, name: str, exporter: str = "torchscript") -> Path:
    """Module ``name`` with seeded weights (non-trivial BatchNorm statistics), exported by
    ``onnxsurgeon.converters.from_torch`` with ``exporter`` and the dynamic axes of its entry."""
    import torch

    from onnxsurgeon import converters

    factory, args, axes = _torch_modules()[name]
    torch.manual_seed(0)
    module = factory().eval()
    with torch.no_grad():
        for mod in module.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 1.5)
    path = folder / (f"{name}.onnx" if exporter == "torchscript" else f"{name}_{exporter}.onnx")
    converters.from_torch(module, args, path, exporter=exporter, dynamic_axes=axes)
    return path


@dataclass(frozen=True)
class Entry:
    """One corpus model: its builder and whether it needs PyTorch (then it runs with the slow tests)."""

    build: Callable[[Path], Path]
    torch: bool


REGISTRY: dict[str, Entry] = {
    "detection_nms_if": Entry(detection_nms_if, torch=False),
    **{name: Entry(lambda folder, name=name: export_torch(folder, name), torch=True)
       for name in ("t5_encoder", "clip_vision", "whisper_encoder", "swin_block", "lstm_gru",
                    "grouped_dilated")},
    # the converters' default exporter (opset 18, torch.export's graph): ScatterND and Where again
    "swin_block_dynamo": Entry(lambda folder: export_torch(folder, "swin_block", "dynamo"), torch=True),
}
"""name -> Entry, in test order."""


def build(name: str, folder: Path) -> Path:
    """Build corpus model ``name`` into ``folder`` and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    return REGISTRY[name].build(folder)


if __name__ == "__main__":  # pragma: no cover
    out = Path(sys.argv[1])
    for key in (sys.argv[2:] or list(REGISTRY)):
        print(key, build(key, out))
