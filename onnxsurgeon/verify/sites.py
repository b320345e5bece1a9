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


def _standalone(p: Pattern, host: onnx.ModelProto, fed: Mapping[str, Any],
                values: Mapping[str, Any] | None = None) -> onnx.ModelProto:
    """P (or R) as a model onnxruntime runs: the host's opsets when it has none, and its local
    functions (a node of P calling one, as the model's nodes do) with their domains; the constants
    in ``fed`` (matched with ``any_constant``) become graph inputs fed the site's values; an
    untyped input (``g (x) => (y)``) takes the dtype of its value in ``values``."""
    model = onnx.ModelProto()
    model.CopyFrom(p.model)
    if not model.opset_import:
        model.opset_import.extend(host.opset_import)
        model.ir_version = max(host.ir_version, 7)
    own = {(f.domain, f.name) for f in model.functions}
    model.functions.extend(f for f in host.functions if (f.domain, f.name) not in own)
    imported = {o.domain for o in model.opset_import}
    model.opset_import.extend(o for o in host.opset_import if o.domain not in imported)
    g = model.graph
    for vi in g.input:
        if not vi.type.WhichOneof("value") and values is not None and vi.name in values:
            vi.type.CopyFrom(_value_type(values[vi.name]))
    for name in fed:
        kept = [t for t in g.initializer if t.name != name]
        if len(kept) != len(g.initializer):
            value = p.constants[name]
            del g.initializer[:]
            g.initializer.extend(kept)
            g.input.append(onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(value.dtype), None))
    return model


def _value_type(value: Any) -> onnx.TypeProto:
    """The type of a site's value as onnxruntime gives it: a tensor of its dtype, any shape;
    a list is a sequence of them."""
    if isinstance(value, list):
        elem = _value_type(value[0]) if value else onnx.helper.make_tensor_type_proto(
            onnx.TensorProto.FLOAT, None)
        return onnx.helper.make_sequence_type_proto(elem)
    dtype = onnx.helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype)
    return onnx.helper.make_tensor_type_proto(dtype, None)


def _untyped(p: Pattern) -> bool:
    """Whether one of P's (or R's) inputs declares no type: it is staged per site then."""
    names = set(p.inputs)
    return any(not vi.type.WhichOneof("value") for vi in p.graph.input if vi.name in names)


class _Stages:
    """P and R staged for onnxruntime: once, or, for a P or R with an untyped input, once per
    dtype signature of the sites' input values (the site's values type it)."""

    def __init__(self, ctx: Context, p: Pattern, r: Pattern, host: onnx.ModelProto,
                 any_constant: tuple[str, ...]) -> None:
        self.ctx, self.p, self.r, self.host = ctx, p, r, host
        self.fed = {c: None for c in any_constant}
        self.untyped = _untyped(p) or _untyped(r)
        self.memo: dict[Any, tuple[Any, Any]] = {}

    def of(self, inputs: Mapping[str, str], value: Mapping[str, Any]) -> tuple[Any, Any]:
        """(P staged, R staged) for a site whose input ``name`` is bound to ``inputs[name]``,
        ``value`` one sample of the original's values."""
        p, r = self.p, self.r
        by_p = {n: value[inputs[n]] for n in p.inputs} if self.untyped else {}
        key = tuple(_value_type(v).SerializeToString() for v in by_p.values())
        if key not in self.memo:
            by_r = dict(zip(r.inputs, by_p.values(), strict=True)) if by_p else {}
            self.memo[key] = (
                self.ctx.stage(Model(_standalone(p, self.host, self.fed, by_p)), "pattern"),
                self.ctx.stage(Model(_standalone(r, self.host, {}, by_r)), "replacement"))
        return self.memo[key]


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
        stages = _Stages(ctx, p, r, host, any_constant)
        for site in sites:
            p_staged, r_staged = stages.of(site["inputs"], orig_vals[0])
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
