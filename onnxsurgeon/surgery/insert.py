"""``insert``: splice a processing block (built-in or any one-input one-output model) at a tensor.

Opset reconciliation (the block's default-domain opset ``b`` vs the host's ``h``):

1. if none of the block's ops changed definition between ``b`` and ``h`` the block is used as is;
2. else the block is converted to ``h`` with ``onnx.version_converter`` (up or down);
3. else, when ``b > h``, the host's opset is raised to ``b`` only if none of the host's ops
   (nested bodies and local functions included) changed definition between ``h`` and ``b`` — a
   pure version bump that rewrites no host node. Running the version converter over the whole
   host is not attempted: it copies every weight and rewrites unrelated nodes, and it is weak on
   control-flow bodies; convert the host yourself if you want that;
4. else a :class:`RewriteError` says which ops block each route.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx

from ..closure import downstream_nodes
from ..errors import RewriteError, UsageError
from ..external import is_external, iter_tensors, read_tensor
from ..index import GraphIndex, iter_graphs
from ..io import Model, as_model
from ..names import NameAllocator
from ..processing import (
    ParamValue,
    make_block,
    min_opset_for,
    normalize_params,
    opset_for_import,
)
from ..protos import (
    DEFAULT_DOMAINS,
    default_opset,
    rename_scoped,
    set_default_opset,
    weightless_copy,
)
from ..record import InsertRecord, add_rewrite
from ..select import Selector, follow_renames
from ..types import TypeOracle, is_complete, renamed_value_info
from ._edges import check_types, rewire
from ._proto import quick_value_info


@dataclass(frozen=True)
class InsertResult:
    """What ``insert`` did.

    Attributes:
        processed: name of the block's output tensor in the host.
        rerouted: main-graph nodes that now read ``processed`` (nodes whose nested bodies read it
            count), in node order.
        rerouted_outputs: graph outputs that now carry the processed values (their names as
            before the insert; they keep them unless ``keep_output_name`` was off).
        block_nodes: names of the block's nodes in the host, in order.
        renamed: tensors renamed by the insert, old name -> new name: the activation itself
            when it was a graph output that kept its name (the unprocessed values moved to a new
            tensor), else empty.
    """

    processed: str
    rerouted: list[str]
    rerouted_outputs: list[str]
    block_nodes: list[str]
    renamed: dict[str, str] = field(default_factory=dict)


# ----------------------------------------------------------------------------------- opsets
def _default_nodes(model: onnx.ModelProto, *, functions: bool) -> Iterator[onnx.NodeProto]:
    for g in iter_graphs(model.graph):
        for node in g.node:
            if node.domain in DEFAULT_DOMAINS:
                yield node
    if functions:
        for fn in model.functions:
            for node in fn.node:
                if node.domain in DEFAULT_DOMAINS:
                    yield node


def changed_ops(nodes: Iterator[onnx.NodeProto], a: int, b: int) -> list[str]:
    """Default-domain op types among ``nodes`` whose definition differs between opsets a and b
    (or that do not exist in one of them), sorted."""
    changed: set[str] = set()
    seen: set[str] = set()
    for node in nodes:
        op = node.op_type
        if op in seen:
            continue
        seen.add(op)
        try:
            sa = onnx.defs.get_schema(op, a, "").since_version
            sb = onnx.defs.get_schema(op, b, "").since_version
        except onnx.defs.SchemaError:
            changed.add(op)
            continue
        if sa != sb and not _types_only_change(op, a, b):
            changed.add(op)
    return sorted(changed)


# ops whose semantics changed between versions with an identical signature (coerced-2D -> axis)
_SEMANTIC_CHANGES = frozenset({"Softmax", "LogSoftmax", "Hardmax"})


def _signature(schema: onnx.defs.OpSchema) -> tuple[object, ...]:
    """Attributes, inputs/outputs and arities; type parameters by position, not by name
    (Identity-14 renamed T to V when it took sequences)."""
    attrs = tuple(sorted((n, a.type, a.required, a.default_value.SerializeToString())
                         for n, a in schema.attributes.items()))
    params = {tc.type_param_str: f"#{k}" for k, tc in enumerate(schema.type_constraints)}
    ios = tuple((f.name, params.get(f.type_str, f.type_str), f.option)
                for f in [*schema.inputs, *schema.outputs])
    return attrs, ios, schema.min_input, schema.max_input, schema.min_output, schema.max_output


def _types_only_change(op: str, a: int, b: int) -> bool:
    """True when every version of ``op`` between opsets a and b differs from the others only by
    types added to its type constraints (Abs-6 vs Abs-13 gained bfloat16): a node valid at one
    opset means the same at the other, as long as its types exist in both (the checker of the
    saved model still checks that). Gauntlet bug: an opset-13 block (Abs, Neg) was refused in an
    opset-11 host because Abs/Neg/Add/MatMul all 'changed' at 13."""
    if op in _SEMANTIC_CHANGES:
        return False
    lo, hi = min(a, b), max(a, b)
    try:
        versions = {onnx.defs.get_schema(op, v, "").since_version for v in range(lo, hi + 1)}
        schemas = [onnx.defs.get_schema(op, v, "") for v in sorted(versions)]
    except onnx.defs.SchemaError:
        return False
    if any(sc.deprecated for sc in schemas):
        return False
    first = _signature(schemas[0])
    for older, newer in zip(schemas, schemas[1:], strict=False):
        if _signature(newer) != first:
            return False
        old_types = [set(tc.allowed_type_strs) for tc in older.type_constraints]
        new_types = [set(tc.allowed_type_strs) for tc in newer.type_constraints]
        if len(old_types) != len(new_types):
            return False
        if any(not o <= n for o, n in zip(old_types, new_types, strict=True)):
            return False
    return True


def _convert(block: onnx.ModelProto, target: int) -> onnx.ModelProto | None:
    """``block`` converted to opset ``target`` by onnx.version_converter, or None on failure."""
    try:
        converted = onnx.version_converter.convert_version(block, target)
        onnx.checker.check_model(converted)
    except Exception:  # noqa: BLE001 - the converter raises many types; failure means "cannot"
        return None
    if default_opset(converted) != target:
        return None
    return converted


def _reconcile(block: onnx.ModelProto, host: onnx.ModelProto, label: str) -> tuple[onnx.ModelProto, int | None]:
    """Return (block usable at the host's opset, new host opset or None when unchanged)."""
    h = default_opset(host)
    b = default_opset(block)
    if b is None or b == h:
        return block, None
    if h is None:
        # the host has no default-domain node (an ai.onnx.ml-only model): importing the block's
        # opset changes nothing of the host
        return block, b
    block_changed = changed_ops(_default_nodes(block, functions=False), b, h)
    if not block_changed:
        set_default_opset(block, h)
        return block, None
    converted = _convert(block, h)
    if converted is not None:
        return converted, None
    if b > h:
        host_changed = changed_ops(_default_nodes(host, functions=True), h, b)
        if not host_changed:
            return block, b
        raise RewriteError(
            f"block '{label}' has opset {b} and the host opset {h}: the version converter cannot "
            f"bring the block's ops {block_changed} down to {h}, and raising the host would change "
            f"its ops {host_changed[:8]}; export the block at opset {h} or convert the host with "
            f"onnx.version_converter to opset {b} first"
        )
    raise RewriteError(
        f"block '{label}' has opset {b} and the host opset {h}: the version converter cannot "
        f"bring the block's ops {block_changed} up to {h}; export the block at opset {h}"
    )


# ----------------------------------------------------------------------------------- blocks
def _block_io(block: onnx.ModelProto, label: str) -> tuple[onnx.ValueInfoProto, onnx.ValueInfoProto]:
    """The block's single real input and single output; initializers listed as inputs are
    dropped from ``block.graph.input`` (old IR style)."""
    g = block.graph
    inits = {t.name for t in g.initializer} | {st.values.name for st in g.sparse_initializer}
    inputs = [vi for vi in g.input if vi.name not in inits]
    if len(inputs) != 1 or len(g.output) != 1:
        raise RewriteError(
            f"block '{label}' must have exactly one input and one output; it has inputs "
            f"{[vi.name for vi in inputs]} and outputs {[vi.name for vi in g.output]}; extract "
            "a one-input one-output part first"
        )
    if len(inputs) != len(g.input):
        kept = onnx.ValueInfoProto()
        kept.CopyFrom(inputs[0])
        del g.input[:]
        g.input.append(kept)
    x, y = g.input[0], g.output[0]
    if x.name == y.name:  # the block passes its input through: give it a node to own the output
        fresh = NameAllocator.for_model(block).fresh(y.name + "_out")
        g.node.append(onnx.helper.make_node("Identity", [x.name], [fresh], name="passthrough"))
        y.name = fresh
    return g.input[0], g.output[0]


def _prepare_graph_block(graph: onnx.ModelProto | Model) -> tuple[onnx.ModelProto, str]:
    """A private copy of a user block with external tensors read inline; checked."""
    m = as_model(graph)
    block = onnx.ModelProto()
    block.CopyFrom(m.proto)
    for tensor in iter_tensors(block):
        if is_external(tensor):
            values = read_tensor(tensor, m.base_dir)
            inline = onnx.numpy_helper.from_array(values, tensor.name)
            tensor.CopyFrom(inline)
    label = block.graph.name or "graph"
    try:
        onnx.checker.check_model(block)
    except onnx.checker.ValidationError as exc:
        first = (str(exc).strip().splitlines() or ["invalid"])[0][:160]
        raise RewriteError(f"block '{label}' is not a valid ONNX model ({first}); repair it") from None
    return block, label


def _infer_output(block: onnx.ModelProto, x_type: onnx.TypeProto | None, label: str) -> onnx.ValueInfoProto:
    """The block output's ValueInfo when its input has type ``x_type``; strict inference, so a
    block that cannot take this activation is refused here, before the host changes."""
    probe = onnx.ModelProto()
    probe.CopyFrom(block)
    if x_type is not None and x_type.WhichOneof("value") is not None:
        probe.graph.input[0].type.CopyFrom(x_type)
    out = probe.graph.output[0]
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, check_type=True, strict_mode=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        first = (str(exc).strip().splitlines() or ["inference failed"])[0][:200]
        raise RewriteError(
            f"block '{label}' cannot take this activation ({first}); pick parameters that fit "
            "its shape and dtype"
        ) from None
    for vi in inferred.graph.output:
        if vi.name == out.name and vi.type.WhichOneof("value") is not None:
            return vi
    return out


def _rename_block(block: onnx.ModelProto, at: str, prefix: str, processed: str,
                  names: NameAllocator) -> list[str]:
    """Rename every tensor and node of the block (nested bodies included) into the host's
    namespace: input -> ``at``, output -> ``processed``, the rest -> fresh ``prefix + name``.
    Returns the new names of the main block nodes."""
    g = block.graph
    fixed = {g.input[0].name: at, g.output[0].name: processed}
    rename_scoped([g], {}, depth=0,
                  define=lambda name: fixed[name] if name in fixed else names.fresh(prefix + name))
    for sub in iter_graphs(g):
        for node in sub.node:
            node.name = names.fresh(prefix + (node.name or node.op_type))
    return [node.name for node in g.node]


def _body_key(fn: onnx.FunctionProto) -> tuple[str, str, bytes]:
    """(domain, overload, definition without its name): equal keys mean interchangeable."""
    anon = onnx.FunctionProto()
    anon.CopyFrom(fn)
    anon.name = ""
    return fn.domain, fn.overload, anon.SerializeToString(deterministic=True)


def _merge_functions(block: onnx.ModelProto, host: onnx.ModelProto) -> list[onnx.FunctionProto]:
    """Block functions to add to the host. A block function whose definition the host already
    has (under any name) is reused; one whose (domain, name, overload) the host uses for a
    different definition is renamed ``name__N``. Calls inside the block follow. Deterministic."""
    host_keys = {(f.domain, f.name, f.overload) for f in host.functions}
    host_bodies: dict[tuple[str, str, bytes], str] = {}
    for f in host.functions:
        host_bodies.setdefault(_body_key(f), f.name)
    taken = {(f.domain, f.name) for f in host.functions} | {(f.domain, f.name) for f in block.functions}
    to_add: list[onnx.FunctionProto] = []
    renames: dict[tuple[str, str, str], str] = {}
    for fn in block.functions:
        key = (fn.domain, fn.name, fn.overload)
        same = host_bodies.get(_body_key(fn))
        if same is not None:
            if same != fn.name:
                renames[key] = same
            continue
        if key in host_keys:
            n = 1
            while (fn.domain, f"{fn.name}__{n}") in taken:
                n += 1
            taken.add((fn.domain, f"{fn.name}__{n}"))
            renames[key] = f"{fn.name}__{n}"
        to_add.append(fn)
    if renames:
        calls = [node for g in iter_graphs(block.graph) for node in g.node]
        calls += [node for fn in block.functions for node in fn.node]
        for node in calls:
            new = renames.get((node.domain, node.op_type, node.overload))
            if new is not None:
                node.op_type = new
        for fn in to_add:
            new = renames.get((fn.domain, fn.name, fn.overload))
            if new is not None:
                fn.name = new
    return to_add


def _merge_opsets(block: onnx.ModelProto, host: onnx.ModelProto, label: str) -> list[onnx.OperatorSetIdProto]:
    """Non-default-domain opset imports of the block the host lacks; refuses version clashes."""
    have = {op.domain: op.version for op in host.opset_import}
    add: list[onnx.OperatorSetIdProto] = []
    for op in block.opset_import:
        if op.domain in DEFAULT_DOMAINS:
            continue
        if op.domain in have:
            if have[op.domain] != op.version:
                raise RewriteError(
                    f"block '{label}' imports domain '{op.domain}' version {op.version} but the "
                    f"host imports version {have[op.domain]}; export the block with version "
                    f"{have[op.domain]}"
                )
            continue
        have[op.domain] = op.version
        add.append(op)
    return add


# ----------------------------------------------------------------------------------- splice
@dataclass
class _Plan:
    block: onnx.ModelProto
    at: str
    processed: str
    processed_vi: onnx.ValueInfoProto
    as_output: bool
    new_host_opset: int | None
    functions: list[onnx.FunctionProto]
    opsets: list[onnx.OperatorSetIdProto]
    pre: str | None = None
    """When set, ``at`` is a graph output that keeps its name: its producer writes ``pre``, the
    block reads ``pre`` and writes ``at`` (== ``processed``); every reader of ``at`` stays."""


def _rename_source(index: GraphIndex, at: str, pre: str) -> list[str]:
    """The producer of ``at`` writes ``pre`` instead, and ``at``'s value_info follows; readers of
    ``at`` are left alone (they will read the block's output, which takes the name ``at``).
    Returns the labels of the main-graph nodes reading ``at`` (they read processed values now)."""
    g = index.graph
    node = g.node[index.producer[at]]
    for k, name in enumerate(node.output):
        if name == at:
            node.output[k] = pre
    for vi in g.value_info:
        if vi.name == at:
            vi.name = pre
    readers = sorted({u.node for u in index.uses_of(at)})
    return [index.node_label(i) for i in readers]


def _splice(host: onnx.ModelProto, index: GraphIndex, plan: _Plan) -> tuple[list[str], list[str]]:
    """Apply ``plan`` to ``host`` (``index`` is the host's index). Mutates host; the plan's block
    is only read, so the same plan can be applied to a probe copy first."""
    g = host.graph
    if plan.new_host_opset is not None:
        set_default_opset(host, plan.new_host_opset)
        for fn in host.functions:
            set_default_opset(fn, plan.new_host_opset)
    rerouted: list[str] = []
    rerouted_outputs: list[str] = []
    if plan.pre is not None:
        rerouted, rerouted_outputs = _rename_source(index, plan.at, plan.pre), [plan.at]
        for out in g.output:
            if out.name == plan.at:
                out.CopyFrom(plan.processed_vi)
    elif not plan.as_output:
        rerouted = rewire(index, index.uses_of(plan.at), plan.processed)
        for out in g.output:
            if out.name == plan.at:
                out.CopyFrom(plan.processed_vi)
                rerouted_outputs.append(plan.at)
    bg = plan.block.graph
    g.initializer.extend(bg.initializer)
    g.sparse_initializer.extend(bg.sparse_initializer)
    if host.ir_version < 4:  # IR 3 wants every initializer listed as a graph input too
        g.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                       for t in bg.initializer)
    g.value_info.extend(vi for vi in bg.value_info if vi.name != plan.processed)
    if plan.as_output:
        g.output.append(plan.processed_vi)
    elif not rerouted_outputs and plan.processed_vi.type.WhichOneof("value") is not None:
        g.value_info.append(plan.processed_vi)
    pos = index.producer[plan.at] + 1 if plan.at in index.producer else 0
    for k, node in enumerate(bg.node):
        g.node.insert(pos + k, node)
    host.functions.extend(plan.functions)
    host.opset_import.extend(plan.opsets)
    return rerouted, rerouted_outputs


def _downstream_types(host: onnx.ModelProto, plan: _Plan, label: str) -> dict[str, onnx.ValueInfoProto]:
    """When the block changes the activation's type, the declared types of everything computed
    from it may be stale. Splice into a weight-free probe, infer strictly, and return the new
    ValueInfo of every main-graph tensor downstream of the processed tensor. Refuses (before the
    host changes) when the downstream cannot take the processed tensor."""
    probe = weightless_copy(host)
    probe_index = GraphIndex(probe)
    _splice(probe, probe_index, plan)
    probe_index = GraphIndex(probe)
    affected = {o for i in downstream_nodes(probe_index, [plan.processed])
                for o in probe.graph.node[i].output if o}
    affected_in_graph = {vi.name for vi in probe.graph.value_info} | {vi.name for vi in probe.graph.output}
    # declared types of affected tensors are what would clash: drop them before inferring
    keep = [vi for vi in probe.graph.value_info if vi.name not in affected]
    del probe.graph.value_info[:]
    probe.graph.value_info.extend(keep)
    for out in probe.graph.output:
        if out.name in affected:
            out.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, check_type=True, strict_mode=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        first = (str(exc).strip().splitlines() or ["inference failed"])[0][:200]
        if not _infers_strictly(host):  # the host fails by itself: not the block's fault
            inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=False)
            return _typed(inferred, affected & affected_in_graph)
        raise RewriteError(
            f"the graph after '{plan.at}' cannot take the output of block '{label}' ({first}); "
            "use as_output to keep the block off the main path, or pick a shape-preserving block"
        ) from None
    return _typed(inferred, affected & affected_in_graph)


def _typed(inferred: onnx.ModelProto, names: set[str]) -> dict[str, onnx.ValueInfoProto]:
    """Inferred ValueInfo of ``names`` that carry a shape (where inference could not reach, e.g.
    past a custom op, the old declaration is kept)."""
    g = inferred.graph
    return {vi.name: vi for vi in list(g.value_info) + list(g.output)
            if vi.name in names and vi.type.HasField("tensor_type")
            and vi.type.tensor_type.HasField("shape")}


def _infers_strictly(model: onnx.ModelProto) -> bool:
    try:
        onnx.shape_inference.infer_shapes(weightless_copy(model), check_type=True, strict_mode=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        return False
    return True


def _retype(host: onnx.ModelProto, fresh: dict[str, onnx.ValueInfoProto]) -> None:
    """Replace the declared types of the tensors in ``fresh`` (value_info and graph outputs)."""
    g = host.graph
    keep = [vi for vi in g.value_info if vi.name not in fresh]
    known = {vi.name for vi in g.value_info}
    if len(keep) != len(g.value_info):
        del g.value_info[:]
        g.value_info.extend(keep)
        g.value_info.extend(fresh[n] for n in sorted(known & fresh.keys()))
    for out in g.output:
        if out.name in fresh:
            out.type.CopyFrom(fresh[out.name].type)


# ----------------------------------------------------------------------------------- insert
def insert(
    model: Model | onnx.ModelProto,
    at: str,
    /,
    *,
    op: str | None = None,
    params: Mapping[str, ParamValue] | None = None,
    graph: onnx.ModelProto | Model | None = None,
    as_output: bool = False,
    keep_output_name: bool = True,
) -> InsertResult:
    """Splice a processing block at tensor ``at``. Mutates model.

    A function written in TensorFlow or PyTorch is spliced by
    ``onnxsurgeon.converters.insert_function(model, at, func, framework)``, which exports it to
    a block and calls this function (the core never imports the converters).

    The block is a built-in (``op``, see :mod:`onnxsurgeon.processing`) or any model with one
    input and one output (``graph``). Its names are made unique under ``"<at>/<block>/"``, its
    opset is reconciled with the host's (see the module docstring), its initializers, local
    functions and extra opset imports are merged. By default every reader of ``at`` — main-graph
    nodes, nodes inside If/Loop/Scan bodies and graph outputs — reads the processed tensor
    instead; with ``as_output`` nothing is rerouted and the processed tensor becomes a new graph
    output. Everything is checked before the model changes.

    Output names are a deployed model's API: when ``at`` is a graph output, the processed tensor
    takes its name and the unprocessed values move to a new tensor ``<at>/pre_<block>``
    (``result.renamed``; the converters' name map follows). ``keep_output_name=False`` gives the
    processed tensor a new name instead, and the graph output takes that name. A graph input
    that is also a graph output cannot keep its name (the input would change): it is renamed.

    Before:  conv -> act -> {fc, pool}                 (act not a graph output)
    After:   conv -> act -> l2_normalize -> act/l2_normalize -> {fc, pool}
    Before:  conv -> act -> {fc, pool, <output act>}
    After:   conv -> act/pre_l2_normalize -> l2_normalize -> act -> {fc, pool, <output act>}
    as_output: conv -> act -> {fc, pool, <output act>};  act -> l2_normalize -> <output>

    O(nodes + edges) of the host plus shape inference on the block.

    Raises:
        UsageError: not exactly one of ``op`` / ``graph``; bad block parameters; nothing reads
            ``at`` and ``as_output`` is off.
        NotFoundError / AmbiguousNameError: ``at`` does not name one tensor.
        RewriteError: block with several inputs or outputs, dtype or shape mismatch, opsets that
            cannot be reconciled, clashing domain versions.
    """
    m = as_model(model)
    host = m.proto
    if (op is None) == (graph is None):
        raise UsageError("insert needs exactly one of op (a built-in block name) or graph (an ONNX model)")
    if params and op is None:
        raise UsageError("params only apply to a built-in block (op=...); a graph block takes none")
    index = GraphIndex(host)
    at_name = Selector(index).resolve(at)
    oracle = TypeOracle(index, quick=lambda name: quick_value_info(index, name))
    at_vi = oracle.value_info(at_name)
    at_type = oracle.elem_type(at_name)
    at_shape = oracle.shape(at_name)
    uses = index.uses_of(at_name)
    as_graph_output = at_name in index.outputs
    if not as_output and not uses and not as_graph_output:
        raise UsageError(
            f"nothing reads tensor '{at_name}' and it is not a graph output; use as_output to "
            "expose the processed tensor as a new graph output"
        )

    record_params: dict[str, Any] = {}
    if op is not None:
        label = op
        record_params = normalize_params(op, params)
        h = default_opset(host)
        new_host_opset: int | None = None
        at_value_type = at_vi.type if at_vi is not None else None
        if h is None:  # an ai.onnx.ml-only host: it gets a default-domain import
            h = new_host_opset = opset_for_import(host, op)
        need = min_opset_for(op, at_value_type)
        if h < need and not changed_ops(_default_nodes(host, functions=True), h, need):
            h = new_host_opset = need  # a pure version bump: no host op changes meaning
        block = make_block(op, record_params, elem_type=at_type, opset=h, shape=at_shape,
                           value_type=at_value_type)
    else:
        assert graph is not None
        block, label = _prepare_graph_block(graph)
        bx, _ = _block_io(block, label)
        bx_type = bx.type.tensor_type.elem_type if bx.type.HasField("tensor_type") else 0
        bx_shape = None
        if bx.type.HasField("tensor_type") and bx.type.tensor_type.HasField("shape"):
            bx_shape = [d.dim_value if d.HasField("dim_value") else None
                        for d in bx.type.tensor_type.shape.dim]
        check_types(f"block '{label}' input '{bx.name}' vs tensor '{at_name}'",
                    bx.name, at_name, bx_type, at_type, bx_shape, at_shape)
        block, new_host_opset = _reconcile(block, host, label)
    _block_io(block, label)
    x_type = at_vi.type if at_vi is not None else None
    processed_vi = _infer_output(block, x_type, label)
    opsets_to_add = _merge_opsets(block, host, label)
    functions_to_add = _merge_functions(block, host)

    names = NameAllocator.for_model(host)
    safe_label = label.replace("/", "_")
    pre: str | None = None
    if (keep_output_name and as_graph_output and not as_output and at_name in index.producer
            and at_name not in index.inputs):
        pre = names.fresh(f"{at_name}/pre_{safe_label}")
        processed = at_name
    else:
        processed = names.fresh(f"{at_name}/{safe_label}")
    block_nodes = _rename_block(block, pre or at_name, f"{at_name}/{safe_label}/", processed, names)
    processed_vi = renamed_value_info(processed_vi, processed)
    if (as_output or as_graph_output) and not is_complete(processed_vi):
        # a graph output needs an element type and a rank (onnx.checker); a Loop-carried value
        # can leave both unknown to onnx and onnxruntime alike (gauntlet bug: exit 3 before)
        raise RewriteError(
            f"the rank of tensor '{at_name}' is unknown (no value_info; neither onnx nor "
            f"onnxruntime can infer it), so the processed tensor cannot become a graph output; "
            f"add value_info with its shape for '{at_name}'"
        )

    plan = _Plan(block, at_name, processed, processed_vi, as_output, new_host_opset,
                 functions_to_add, opsets_to_add, pre)
    fresh_types: dict[str, onnx.ValueInfoProto] | None = None
    if not as_output and (at_vi is None or at_vi.type != processed_vi.type):
        fresh_types = _downstream_types(host, plan, label)

    # ------------------------------------------------------------------ mutate (all checked)
    rerouted, rerouted_outputs = _splice(host, index, plan)
    if fresh_types:
        _retype(host, fresh_types)
    renamed = {at_name: pre} if pre is not None else {}
    follow_renames(host, renamed)
    add_rewrite(host, InsertRecord(
        at=at_name, processed=processed, block=op if op is not None else "graph",
        params=record_params, block_nodes=tuple(block_nodes), rerouted=tuple(rerouted),
        rerouted_outputs=tuple(rerouted_outputs), as_output=bool(as_output),
        renamed=renamed or None,
    ))
    return InsertResult(processed, rerouted, rerouted_outputs, block_nodes, renamed)

