"""Edge rewiring shared by ``insert`` and ``reroute``: which reads to move, and moving them."""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from ..errors import RewriteError
from ..index import GraphIndex, Use
from ..types import dtype_name

Shape = Sequence[int | str | None]


def rewire(index: GraphIndex, uses: Sequence[Use], new_name: str) -> list[str]:
    """Make every read in ``uses`` read ``new_name``. Mutates the indexed model.

    Explicit input slots of main-graph nodes, inputs of nodes inside nested bodies and body
    outputs that pass the outer tensor through are all handled. Returns the labels of the
    main-graph nodes touched, in node order, without repeats. The index is stale afterwards.
    """
    touched: dict[int, None] = {}
    graph = index.graph
    for use in uses:
        if use.inner is None:
            graph.node[use.node].input[use.slot] = new_name
        else:
            holder = use.inner.holder
            if isinstance(holder, onnx.NodeProto):
                holder.input[use.inner.slot] = new_name
            else:
                holder.name = new_name
        touched[use.node] = None
    return [index.node_label(i) for i in sorted(touched)]


def check_types(what: str, a: str, b: str, a_type: int, b_type: int,
                a_shape: Shape | None, b_shape: Shape | None) -> None:
    """Refuse when known dtypes differ or known shapes cannot be the same.

    Shapes pass when either is unknown, or when ranks match and every pair of static dims is
    equal (symbolic or unknown dims pass).
    """
    if a_type and b_type and a_type != b_type:
        raise RewriteError(
            f"{what}: '{a}' is {dtype_name(a_type)} but '{b}' is {dtype_name(b_type)}; "
            "add a Cast so the dtypes match"
        )
    if a_shape is None or b_shape is None:
        return
    if len(a_shape) != len(b_shape):
        raise RewriteError(
            f"{what}: '{a}' has rank {len(a_shape)} {list(a_shape)} but '{b}' has rank "
            f"{len(b_shape)} {list(b_shape)}; reshape one so the ranks match"
        )
    for k, (da, db) in enumerate(zip(a_shape, b_shape, strict=True)):
        if isinstance(da, int) and isinstance(db, int) and da != db:
            raise RewriteError(
                f"{what}: dim {k} of '{a}' is {da} but of '{b}' is {db} "
                f"(shapes {list(a_shape)} vs {list(b_shape)}); make the shapes agree"
            )
