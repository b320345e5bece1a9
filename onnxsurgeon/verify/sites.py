"""The proof of ``replace``: every site locally, then the graph outputs.

For each site of the main graph, the pattern P and the replacement R are each evaluated alone
(onnxruntime, optimizations off) on the values the site's inputs take in a real run of the
original model (one run collects every site's inputs and outputs as extra outputs). P alone must
give the original's values at the site (the match is that computation, exactly); R must give
P's, exactly or under the record's tolerance (a fused op computes the same function
differently). Then the rewritten model's graph outputs are compared with the original's, settled
when they cannot show a difference as every rewrite check is. A failing site is named by its
nodes. Sites inside If/Loop/Scan bodies are proved through the graph outputs (a body's tensors
cannot be read out).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from ..io import Model
from ..pattern import Pattern, graph_constant, load_pattern
from ..record import ReplaceRecord
from .invariant import Check, Context, Values, dtype_of, rewrite_check, run_all
from .locate import Side


def _standalone(p: Pattern, host: onnx.ModelProto, fed: Mapping[str, Any]) -> onnx.ModelProto:
    """P (or R) as a model onnxruntime runs: the host's opsets when it has none; the constants
    in ``fed`` (matched with ``any_constant``) become graph inputs fed the site's values."""
    model = onnx.ModelProto()
    model.CopyFrom(p.model)
    if not model.opset_import:
        model.opset_import.extend(host.opset_import)
        model.ir_version = max(host.ir_version, 7)
    g = model.graph
    for name in fed:
        kept = [t for t in g.initializer if t.name != name]
        if len(kept) != len(g.initializer):
            value = p.constants[name]
            del g.initializer[:]
            g.initializer.extend(kept)
            g.input.append(onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(value.dtype), None))
    return model


@rewrite_check(ReplaceRecord)
def _check_replace(ctx: Context, record: ReplaceRecord, check: Check) -> None:
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    any_constant = tuple(record.any_constant or ())
    p = load_pattern(record.pattern, any_constant=any_constant)
    r = load_pattern(record.replacement, what="replacement")
    host = orig.model.proto
    sites = [s for s in record.sites if not s.get("graph")]
    nested = len(record.sites) - len(sites)
    if nested:
        check.notes.append(f"{nested} sites inside If/Loop/Scan bodies are proved through the "
                           "graph outputs")
    tolerance = record.tolerance
    exact = tolerance is None
    saved = check.rtol, check.atol
    if tolerance is not None:
        check.rtol = float(tolerance["rtol"]) if check.rtol is None else check.rtol
        check.atol = float(tolerance["atol"]) if check.atol is None else check.atol
    try:
        wanted = [t for s in sites for t in (*s["inputs"].values(), *s["outputs"].values())]
        orig_vals = run_all(orig, feeds, [*wanted, *orig.output_names])
        fed = {c: None for c in any_constant}
        p_staged = ctx.stage(Model(_standalone(p, host, fed)), "pattern")
        r_staged = ctx.stage(Model(_standalone(r, host, {})), "replacement")
        for site in sites:
            _check_site(check, site, p, r, p_staged, r_staged, orig, orig_vals, exact, host)
        new_vals = run_all(new, feeds, list(new.output_names))

        def sides(k: int) -> tuple[Side, Side]:
            return Side(orig, feeds[k]), Side(new, feeds[k])

        for name in orig.output_names:
            if not new.is_tensor(name):
                check.missing("replace:outputs", name, f"the rewritten model has no '{name}'")
                continue
            check.compare("replace:outputs", name, name, orig_vals, new_vals,
                          dtype=dtype_of(orig, name), exact=exact, sides=sides)
    finally:
        check.rtol, check.atol = saved


def _check_site(check: Check, site: Mapping[str, Any], p: Pattern, r: Pattern, p_staged: Any,
                r_staged: Any, orig: Any, orig_vals: Values, exact: bool,
                host: onnx.ModelProto) -> None:
    """P alone equals the original at the site; R alone equals P (under the tolerance)."""
    inputs, outputs = site["inputs"], site["outputs"]
    label = "+".join(site["nodes"])
    consts = {c: graph_constant(host.graph, t) for c, t in (site.get("constants") or {}).items()
              if c in p.any_constant}
    fed = set(p_staged.input_names)
    p_feeds = [{**{n: v[inputs[n]] for n in p.inputs}, **{c: np.asarray(x) for c, x in
                                                          consts.items()
                                                          if x is not None and c in fed}}
               for v in orig_vals]
    r_feeds = [{rn: v[inputs[pn]] for rn, pn in zip(r.inputs, p.inputs, strict=True)}
               for v in orig_vals]
    p_vals = run_all(p_staged, p_feeds, list(p.outputs))
    r_vals = run_all(r_staged, r_feeds, list(r.outputs))
    for k, (pn, rn) in enumerate(zip(p.outputs, r.outputs, strict=True)):
        target = outputs[pn]
        dtype = dtype_of(orig, target)
        seen = [{pn: v[target]} for v in orig_vals]
        check.compare("replace:pattern", pn, pn, seen, p_vals, dtype=dtype, exact=True,
                      display=f"site {label} original '{target}'",
                      label=f"site {label}: the original")
        check.compare("replace:site", pn, rn, p_vals, r_vals, dtype=dtype, exact=exact,
                      display=f"site {label} output {k} '{target}'",
                      label=f"site {label}: the pattern alone")
