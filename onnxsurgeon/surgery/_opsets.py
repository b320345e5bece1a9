"""Opset reconciliation of a block with its host (used by ``insert`` and ``merge``).

The block's default-domain opset ``b`` vs the host's ``h``:

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

from collections.abc import Iterable, Iterator

import onnx

from ..edit import Edit
from ..errors import RewriteError
from ..index import iter_graphs
from ..protos import DEFAULT_DOMAINS, default_opset


def default_nodes(model: onnx.ModelProto, *, functions: bool) -> Iterator[onnx.NodeProto]:
    """Default-domain nodes of ``model`` (nested bodies included; local functions' too when
    ``functions``)."""
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
    return changed_op_types({node.op_type for node in nodes}, a, b)


def changed_op_types(ops: Iterable[str], a: int, b: int) -> list[str]:
    """:func:`changed_ops` of default-domain op types given by name. O(distinct ops)."""
    changed: set[str] = set()
    for op in set(ops):
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


def reconcile(block: onnx.ModelProto, host: onnx.ModelProto, label: str) -> tuple[onnx.ModelProto, int | None]:
    """Return (block usable at the host's opset, new host opset or None when unchanged); see
    the module docstring for the routes tried. ``label`` names the block in errors."""
    h = default_opset(host)
    b = default_opset(block)
    if b is None or b == h:
        return block, None
    if h is None:
        # the host has no default-domain node (an ai.onnx.ml-only model): importing the block's
        # opset changes nothing of the host
        return block, b
    block_changed = changed_ops(default_nodes(block, functions=False), b, h)
    if not block_changed:
        Edit.of(block).set_default_opset(h, functions=False)
        return block, None
    converted = _convert(block, h)
    if converted is not None:
        return converted, None
    if b > h:
        host_changed = changed_ops(default_nodes(host, functions=True), h, b)
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

