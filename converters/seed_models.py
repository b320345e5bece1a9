"""The small framework models of the seeds, built deterministically (numpy-seeded weights).

Used by ``models/make_framework_models.py`` (committed ONNX files), the tests and the demo.
Each builder imports its framework lazily.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

TF1_INPUT = "input:0"
TF1_OUTPUT = "logits:0"
TF1_ACT = "network/layer_conv5/Relu:0"
IMAGE_HW = 8
CHANNELS_IN = 3
CHANNELS = 4
CLASSES = 10


def _rng_weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    f = np.float32
    flat = IMAGE_HW * IMAGE_HW * CHANNELS
    return {
        "conv_kernel": (rng.standard_normal((3, 3, CHANNELS_IN, CHANNELS)) * 0.5).astype(f),
        "conv_bias": (rng.standard_normal(CHANNELS) * 0.1).astype(f),
        "fc_kernel": (rng.standard_normal((flat, CLASSES)) / np.sqrt(flat)).astype(f),
        "fc_bias": (rng.standard_normal(CLASSES) * 0.1).astype(f),
    }


def tf1_seed_session(func: Callable[[Any], Any] | None = None, *, seed: int = 0) -> Any:
    """The seed's TF1 graph in a ``tf.compat.v1.Session`` with initialized variables.

    ``input[N,8,8,3]`` -> scope ``network``: conv2d ``layer_conv5`` (relu) -> ``flatten`` ->
    dense ``fc1`` -> ``logits``. With ``func`` the activation goes through ``func`` before the
    flatten (the seed's approach 1: the function inline). Same ``seed`` -> same weights.
    """
    import tensorflow as tf

    w = _rng_weights(seed)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, IMAGE_HW, IMAGE_HW, CHANNELS_IN], name="input")
        with tf.compat.v1.variable_scope("network"):
            k = tf.compat.v1.get_variable("layer_conv5/kernel", initializer=w["conv_kernel"])
            b = tf.compat.v1.get_variable("layer_conv5/bias", initializer=w["conv_bias"])
            with tf.name_scope("layer_conv5"):
                conv = tf.nn.conv2d(x, k, strides=1, padding="SAME", name="Conv2D")
                act = tf.nn.relu(tf.nn.bias_add(conv, b, name="BiasAdd"), name="Relu")
            v = func(act) if func is not None else act
            flat = tf.reshape(v, [-1, IMAGE_HW * IMAGE_HW * CHANNELS], name="flatten/Reshape")
            fk = tf.compat.v1.get_variable("fc1/kernel", initializer=w["fc_kernel"])
            fb = tf.compat.v1.get_variable("fc1/bias", initializer=w["fc_bias"])
            with tf.name_scope("fc1"):
                y = tf.nn.bias_add(tf.matmul(flat, fk, name="MatMul"), fb, name="BiasAdd")
        tf.identity(y, name="logits")
        init = tf.compat.v1.global_variables_initializer()
    sess = tf.compat.v1.Session(graph=graph)
    sess.run(init)
    return sess


def keras_cnn(seed: int = 0) -> Any:
    """A small Keras 3 CNN: image[8,8,3] -> conv5 (relu) -> conv6 -> relu6 -> gap -> logits[5]."""
    import keras

    keras.utils.set_random_seed(seed)
    def init(k: int) -> Any:  # distinct seeds: equal constants would be merged by tf2onnx
        return keras.initializers.RandomNormal(stddev=0.2, seed=seed * 10 + k)

    inp = keras.Input((IMAGE_HW, IMAGE_HW, CHANNELS_IN), name="image")
    x = keras.layers.Conv2D(CHANNELS, 3, padding="same", activation="relu", name="conv5",
                            bias_initializer=init(1))(inp)
    x = keras.layers.Conv2D(CHANNELS, 3, padding="same", name="conv6", bias_initializer=init(2))(x)
    x = keras.layers.ReLU(name="relu6")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    x = keras.layers.Dense(5, name="logits", bias_initializer=init(3))(x)
    return keras.Model(inp, x, name="keras_cnn")


def torch_cnn(seed: int = 0) -> Any:
    """The PyTorch CNN of seed scenario 4: conv5 -> relu -> mean over H,W -> fc (eval mode)."""
    import torch

    class TorchCNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv5 = torch.nn.Conv2d(CHANNELS_IN, CHANNELS, 3, padding=1)
            self.fc = torch.nn.Linear(CHANNELS, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.relu(self.conv5(x)).mean(dim=(2, 3)))

    torch.manual_seed(seed)
    return TorchCNN().eval()


TINY_BERT_SEQ = 8
TINY_BERT_VOCAB = 100


def tiny_bert(seed: int = 0) -> Any:
    """A 2-layer transformers ``BertModel`` from a config (hidden 32, 2 heads, intermediate 64,
    vocab 100, 16 positions; dropout probabilities 0), random weights seeded by ``seed``, as
    attribute ``bert`` of a module whose ``forward(input_ids)`` returns the last hidden state."""
    import torch
    import transformers

    class TinyBert(torch.nn.Module):
        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.bert(input_ids=input_ids).last_hidden_state

    cfg = transformers.BertConfig(
        vocab_size=TINY_BERT_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)
    torch.manual_seed(seed)
    return TinyBert(transformers.BertModel(cfg, add_pooling_layer=False))


def tiny_bert_onnx(seed: int = 0) -> bytes:
    """:func:`tiny_bert` exported by torch.onnx (TorchScript, ``dynamo=False``) at opset 16.

    ``input_ids[1,8]`` (int64) -> ``last_hidden_state[1,8,32]``. Opset 16 has no
    LayerNormalization, so each of the 5 LayerNorms (embeddings + 2 per layer) is decomposed
    (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add), and each GELU is
    Div/Erf/Add/Mul/Mul. The export runs in training mode, where the exporter keeps the 5
    hidden-state ``Dropout`` nodes (p=0: they compute the identity), as a model exported for
    fine-tuning has them; in eval mode the exporter drops them. Node names carry the module
    paths (``/bert/encoder/layer.0/output/LayerNorm/Pow`` -> module
    ``bert.encoder.layer.0.output``).
    Same ``seed`` and library versions -> same bytes.
    """
    import io
    import warnings

    import onnx
    import torch

    model = tiny_bert(seed)
    ids = (torch.arange(TINY_BERT_SEQ, dtype=torch.int64) % TINY_BERT_VOCAB).reshape(1, -1)
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer notes
        torch.onnx.export(
            model, (ids,), buf, dynamo=False, opset_version=16,  # type: ignore[arg-type]  # file objects work
            training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
            input_names=["input_ids"], output_names=["last_hidden_state"])
    return onnx.load_from_string(buf.getvalue()).SerializeToString(deterministic=True)
