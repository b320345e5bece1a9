"""Regenerate the small committed framework models (deterministic; needs TensorFlow and PyTorch).

    python models/make_framework_models.py [OUT_DIR]

Writes ``tf1_seed.onnx`` (the seed's TF1 graph, frozen and converted), ``keras_cnn.onnx`` and
``torch_cnn.onnx`` (dynamo exporter), each with its name map in ``metadata_props``, and
``tiny_bert.onnx`` (a 2-layer transformers BERT from a config, TorchScript exporter at opset 16:
decomposed LayerNorms and GELUs, Dropout nodes kept; needs transformers).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(out_dir: str | None = None) -> list[Path]:
    import numpy as np
    import torch
    from onnxsurgeon.converters import from_tf, from_torch
    from onnxsurgeon.converters import seed_models as sm

    out = Path(out_dir) if out_dir else Path(__file__).resolve().parent
    written = []
    sess = sm.tf1_seed_session(seed=0)
    try:
        example = {"input": np.random.default_rng(1).standard_normal((2, 8, 8, 3)).astype(np.float32)}
        written.append(from_tf(sess, out / "tf1_seed.onnx", inputs=[sm.TF1_INPUT],
                               outputs=[sm.TF1_OUTPUT], opset=17, example_inputs=example).path)
    finally:
        sess.close()
    written.append(from_tf(sm.keras_cnn(seed=0), out / "keras_cnn.onnx", opset=17).path)
    x = torch.from_numpy(np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32))
    written.append(from_torch(sm.torch_cnn(seed=0), (x,), out / "torch_cnn.onnx", exporter="dynamo",
                              input_names=["x"], output_names=["logits"],
                              dynamic_axes={"x": {0: "batch"}}).path)
    bert = out / "tiny_bert.onnx"
    bert.write_bytes(sm.tiny_bert_onnx(seed=0))
    written.append(bert)
    return written


if __name__ == "__main__":
    for p in main(sys.argv[1] if len(sys.argv) > 1 else None):
        print(f"{p}  {p.stat().st_size} bytes")
