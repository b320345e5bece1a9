"""The rewrite invariant of ``precision``: the converted model's outputs equal the float32
original's within the precision budget (:func:`~.accumulate.precision_budget`; ``--verify-rtol``
/ ``--verify-atol`` replace it), never exactly. Inputs the conversion turned to float16 are fed
the same samples rounded to float16."""

from __future__ import annotations

import numpy as np

from ..errors import UsageError
from ..record import PrecisionRecord
from .accumulate import precision_budget
from .invariant import Check, Context, dtype_of, rewrite_check, run_all
from .locate import Side


@rewrite_check(PrecisionRecord)
def _check_precision(ctx: Context, record: PrecisionRecord, check: Check) -> None:
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    if not record.keep_io_types and record.to == "bf16":
        raise UsageError("a bfloat16 model with bfloat16 inputs cannot be fed from numpy; "
                         "convert with --keep-io-types to verify it")
    if record.keep_io_types:
        new_feeds = feeds
    else:
        new_feeds = [{k: v.astype(np.float16) if v.dtype == np.float32 else v
                      for k, v in f.items()} for f in feeds]
    names = list(orig.output_names)
    orig_vals = run_all(orig, feeds, names)
    raw = run_all(new, new_feeds, names)
    new_vals = [{k: (v.astype(np.float32) if getattr(v, "dtype", None) == np.float16 else v)
                 for k, v in r.items()} for r in raw]
    check.rtol, check.atol = precision_budget(record.to, check.rtol, check.atol)
    check.notes.append(f"{record.to} outputs compared within rtol={check.rtol:g}, "
                       f"atol={check.atol:g} (the precision budget)")

    def sides(k: int) -> tuple[Side, Side]:
        return Side(orig, feeds[k]), Side(new, new_feeds[k])

    for n in names:
        check.compare("precision", n, n, orig_vals, new_vals, dtype=dtype_of(orig, n),
                      exact=False, sides=sides)
