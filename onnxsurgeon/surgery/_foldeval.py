"""How ``fold`` evaluates its constant subgraphs: the evaluator types, and the node-by-node
fallback when a whole subgraph does not evaluate (see :func:`partitioned`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["Evaluator", "Runner", "partitioned"]

Runner = Callable[[Sequence[str]], Mapping[str, np.ndarray]]
"""Values of the named outputs of the model an :data:`Evaluator` was given."""
Evaluator = Callable[[onnx.ModelProto], Runner]
"""A model with no inputs -> a runner of its outputs (one session, run as often as asked)."""


def partitioned(evaluate: Evaluator, model: onnx.ModelProto) -> Runner:
    """``evaluate`` on ``model``; when that fails (a node neither onnxruntime nor the reference
    evaluator runs, e.g. an attribute its opset does not define), node by node instead, the
    values of the nodes that fail and of what reads them left out (they stay computed, as
    onnx-graphsurgeon's partitioned folding leaves them). O(nodes) sessions on that path only."""
    try:
        whole: Runner | None = evaluate(model)
    except Exception:  # noqa: BLE001 - any evaluator failure: node by node
        whole = None
    each: dict[str, np.ndarray] | None = None

    def run(names: Sequence[str]) -> Mapping[str, np.ndarray]:
        nonlocal each
        if whole is not None and each is None:
            try:
                return whole(names)
            except Exception:  # noqa: BLE001 - any evaluator failure: node by node
                pass
        if each is None:
            each = _node_by_node(evaluate, model)
        return {n: each[n] for n in names if n in each}

    return run


def _node_by_node(evaluate: Evaluator, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The values of ``model``'s node outputs, one node at a time (in order: ``model`` is
    sorted); a node that fails, or reads a value that failed, gives none."""
    g = model.graph
    values = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    got: dict[str, np.ndarray] = {}
    for node in g.node:
        ins = sorted({n for n in node.input if n})
        outs = [o for o in node.output if o]
        if not outs or any(n not in values for n in ins):
            continue
        one = onnx.helper.make_model(
            onnx.helper.make_graph([node], "fold", [], [onnx.ValueInfoProto(name=o) for o in outs],
                                   [numpy_helper.from_array(values[n], n) for n in ins]),
            opset_imports=list(model.opset_import), ir_version=model.ir_version)
        try:
            out = evaluate(one)(outs)
        except Exception:  # noqa: BLE001 - this node does not evaluate: it stays computed
            continue
        for o in outs:
            values[o] = got[o] = np.asarray(out[o])
    return got
