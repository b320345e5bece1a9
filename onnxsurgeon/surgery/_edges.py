"""Type checks shared by the verbs that move reads (``insert``, ``reroute``, ``bypass``, ``merge``);
moving them is :meth:`onnxsurgeon.edit.Edit.rewire`."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import RewriteError
from ..types import dtype_name

Shape = Sequence[int | str | None]


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
