"""``opset``: convert the model's default-domain opset with onnx's version converter.

The converter runs on a weight-free copy (:func:`~onnxsurgeon.protos.weightless_copy`), so a
model with gigabytes of weights converts at the memory cost of its graph; the converted nodes,
value_info and opset import replace the model's, its weights stay as they are. Every refusal of
the converter names the op and the opsets in one line. The result is checked with onnx's strict
shape inference before anything changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from operator import attrgetter

import onnx

from ..checking import _context as checker_context
from ..edit import Edit
from ..errors import UsageError
from ..index import has_subgraphs, iter_graphs, subgraphs
from ..io import Model, as_model
from ..protos import default_opset, weightless_copy
from ..record import OpsetRecord, add_rewrite
from ..session import indexed
from ._opsets import DEFAULT_DOMAINS, changed_op_types


@dataclass(frozen=True)
class OpsetResult:
    """What ``opset`` did.

    Attributes:
        source: the default-domain opset before.
        target: the opset now.
        changed: labels of the nodes whose op type or inputs changed (an adapter rewrote them).
    """

    source: int
    target: int
    changed: tuple[str, ...]

    def record(self) -> OpsetRecord:
        """The rewrite record of this conversion."""
        return OpsetRecord(source=self.source, target=self.target)


_DOMAIN_OP, _ATTRIBUTES = attrgetter("domain", "op_type"), attrgetter("attribute")
_NO_PREVIOUS = re.compile(r"No Previous Version of (\S+) exists")
_NO_ADAPTER = re.compile(r"No Adapter (?:From|To) Version \$?(\d+) for (\S+)")


def _refusal(exc: Exception, source: int, target: int) -> UsageError:
    text = str(exc)
    way = f"opset {source} -> {target}"
    found = _NO_PREVIOUS.search(text)
    if found:
        return UsageError(f"cannot convert {way}: op {found.group(1)} does not exist before its "
                          f"first version (above opset {target}); keep opset >= its version or "
                          "replace the op")
    found = _NO_ADAPTER.search(text)
    if found:
        return UsageError(f"cannot convert {way}: onnx's version converter has no adapter for op "
                          f"{found.group(2)} at opset {found.group(1)}; convert to another opset "
                          "or replace the op")
    last = text.strip().splitlines()[-1] if text.strip() else type(exc).__name__
    last = last.split("failed: ")[-1]
    return UsageError(f"onnx's version converter refuses {way}: {last}; try another opset")


def _check_nodes(model: onnx.ModelProto) -> None:
    """``onnx.checker.check_node`` on each main-graph node without a body (the op known at the
    new opset, its attributes, its input and output counts); bodies are covered by the strict
    shape inference after. The weights are stubs, so the whole-model checker cannot run."""
    ctx = checker_context(model)
    for node in model.graph.node:
        if not has_subgraphs(node):
            onnx.checker.check_node(node, ctx)


def _min_ir(version: int) -> int:
    return int(onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", version)], True))


def _needs_adapters(proto: onnx.ModelProto, source: int, target: int) -> bool:
    """Whether any default-domain op of the model (bodies too) has another definition at
    ``target`` than at ``source``: only then does the converter have work (else the opset import
    alone changes). A local function importing the default domain always counts: the converter
    does not convert local functions, so it decides. O(nodes)."""
    if any(o.domain in DEFAULT_DOMAINS for fn in proto.functions for o in fn.opset_import):
        return True
    nodes = proto.graph.node  # the main graph's (domain, op) pairs read C-level
    ops = {op for dom, op in set(map(_DOMAIN_OP, nodes)) if dom in DEFAULT_DOMAINS}
    holders = [i for i, attrs in enumerate(map(_ATTRIBUTES, nodes)) if attrs]
    for i in holders:  # bodies: their nodes one by one (few)
        for body in subgraphs(nodes[i]):
            for g in iter_graphs(body):
                ops.update(n.op_type for n in g.node if n.domain in DEFAULT_DOMAINS)
    return bool(changed_op_types(ops, source, target))


def _narrowed(proto: onnx.ModelProto, source: int, target: int) -> bool:
    """Whether a default-domain op of the main graph has another definition at ``target``
    (a change of its types only, which needs no adapter, may still drop a type it reads)."""
    seen = {n.op_type for n in proto.graph.node if n.domain in DEFAULT_DOMAINS}
    for op in seen:
        try:
            if (onnx.defs.get_schema(op, source, "").since_version
                    != onnx.defs.get_schema(op, target, "").since_version):
                return True
        except onnx.defs.SchemaError:
            return True
    return False


def _checked(converted: onnx.ModelProto, source: int, to: int) -> None:
    """Refuse a converted (weight-free) model onnx's node checker or strict typed inference
    rejects."""
    try:
        _check_nodes(converted)
        onnx.shape_inference.infer_shapes(converted, check_type=True, strict_mode=True)
    except Exception as exc:  # noqa: BLE001 - onnx's checker and inference errors
        raise UsageError(f"cannot convert opset {source} -> {to}: onnx's version converter "
                         f"makes an invalid model ({_first_line(exc)}); convert to another "
                         "opset") from None


def _first_line(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    text = " ".join(lines[:3]) if lines else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def opset(model: Model | onnx.ModelProto, /, *, to: int) -> OpsetResult:
    """Convert the default-domain opset to ``to`` (up or down). Mutates model.

    Before:  x -> Reduce(axes attribute) -> y     (opset 12)
    After:   x -> Reduce(x, axes input) -> y      (opset 18)

    O(nodes) plus onnx's converter on the weight-free graph.

    Raises:
        UsageError: ``to`` out of onnx's range or equal to the current opset, a model importing
            no default domain, an op the converter cannot convert (named with the opsets), a
            converted model onnx's checker refuses.
    """
    m = as_model(model)
    proto = m.proto
    index = indexed(m)
    source = default_opset(proto)
    if source is None:
        raise UsageError("the model imports no default-domain (ai.onnx) opset; nothing to convert")
    highest = onnx.defs.onnx_opset_version()
    if not isinstance(to, int) or not 1 <= to <= highest:
        raise UsageError(f"opset {to!r} is out of range; give 1..{highest} (this onnx's newest)")
    if to == source:
        raise UsageError(f"the model is at opset {to} already; give another --to")
    if not _needs_adapters(proto, source, to):  # no op changes between the opsets
        ir = max(proto.ir_version, _min_ir(to))
        if to < source and _narrowed(proto, source, to):  # a type the older op lacks?
            probe = weightless_copy(proto)
            Edit.of(probe).set_default_opset(to)
            _checked(probe, source, to)
        e = Edit(index)
        e.set_default_opset(to)
        e.set_ir_version(ir)
        e.hand_on(m)
        result = OpsetResult(source=source, target=to, changed=())
        add_rewrite(proto, result.record())
        return result
    light = weightless_copy(proto)
    try:
        converted = onnx.version_converter.convert_version(light, to)
    except Exception as exc:  # noqa: BLE001 - onnx raises RuntimeError/ConvertError with C++ text
        raise _refusal(exc, source, to) from None
    ir = max(proto.ir_version, _min_ir(to))
    Edit.of(converted).set_ir_version(ir)
    _checked(converted, source, to)
    before = {i.name: i for i in proto.graph.initializer}
    new_inits = [t for t in converted.graph.initializer if t.name not in before]
    labels = [index.node_label(i) for i in range(len(proto.graph.node))]
    old_ops = [(n.op_type, tuple(n.input)) for n in proto.graph.node]
    new_ops = [(n.op_type, tuple(n.input)) for n in converted.graph.node]
    changed = tuple(lb for lb, a, b in zip(labels, old_ops, new_ops, strict=False) if a != b)
    # ------------------------------------------------------------------ mutate (all checked)
    e = Edit(index)
    e.set_all_nodes(list(converted.graph.node))
    e.set_value_info(list(converted.graph.value_info), copy=False)
    if new_inits:
        e.add_initializers(new_inits, made=True)
    e.set_default_opset(to)
    e.set_ir_version(ir)
    e.hand_on(m)
    result = OpsetResult(source=source, target=to, changed=changed)
    add_rewrite(proto, result.record())
    return result
