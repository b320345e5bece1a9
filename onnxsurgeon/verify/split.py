"""``split --verify``: the stages, joined in order, compute the whole model bit for bit; and the
check of one stage's record (``verify --rewrite-log SOURCE STAGE``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx

from ..io import Model, snapshot
from ..record import SplitRecord
from ..surgery.merge import merge
from .compare import compare
from .invariant import Check, Context, rewrite_check
from .report import VerifyReport
from .rewrite import check_closure


def join_stages(stages: Sequence[Model]) -> Model:
    """One model running ``stages`` in order: each stage's inputs read the tensors of that name
    computed (or fed) before it (:func:`~onnxsurgeon.surgery.merge`, on a copy of the first)."""
    joined = snapshot(stages[0])
    for stage in stages[1:]:
        graph = joined.proto.graph
        known = {i.name for i in graph.input} | {o for n in graph.node for o in n.output}
        merge(joined, stage, connect={i.name: i.name for i in stage.proto.graph.input
                                      if i.name in known})
    return joined


def verify_split(original: Model | onnx.ModelProto, stages: Sequence[Model],
                 **options: Any) -> VerifyReport:
    """Run ``original`` and the chain of ``stages`` on the same inputs and compare the graph
    outputs exactly (graph optimizations off). ``options``: :func:`~.compare.compare`'s data,
    tolerance and isolation keywords (the ``--verify-*`` flags)."""
    options.pop("rtol", None)
    options.pop("atol", None)
    return compare(original, join_stages(stages), exact=True, **options)


@rewrite_check(SplitRecord)
def _check_split_stage(ctx: Context, record: SplitRecord, check: Check) -> None:
    """A stage computes its outputs exactly as the source does, fed the source's values of the
    tensors earlier stages pass it."""
    check_closure(ctx, record.inputs, check, "split")
