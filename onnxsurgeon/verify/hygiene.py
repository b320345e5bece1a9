"""Rewrite invariants of the hygiene verbs ``cleanup``, ``toposort``, ``outputs`` and ``set``.

With graph optimizations off, compared bit for bit:

* cleanup, toposort -- every graph output of the rewritten model equals the original's;
* outputs -- every graph output of the rewritten model (kept or added) equals the original's
  tensor of that name, and no dropped output is still one;
* set -- the rewritten model equals the original with the recorded values put in (attributes
  parsed from the record, initializers taken from the rewritten model after their bytes are
  proved to be the recorded ones by their sha256): nothing else changed.
"""

from __future__ import annotations

import hashlib

import onnx
from onnx import numpy_helper

from ..errors import UsageError
from ..external import is_external, read_tensor
from ..index import GraphIndex
from ..io import Model
from ..record import CleanupRecord, OutputsRecord, SetRecord, ToposortRecord
from ..surgery._bodies import body_initializer, body_node
from ..surgery.setvalues import parse_attribute, split_attr_key
from .invariant import Check, Context, dtype_of, node_position, rewrite_check, run_all
from .locate import Side
from .run import Staged


def _same_outputs(ctx: Context, check: Check, kind: str, ref: Staged, names: list[str]) -> None:
    """Each of ``names`` (outputs of the rewritten model) equals ``ref``'s tensor of that name."""
    new, feeds = ctx.new, ctx.feeds
    present = [n for n in names if ref.is_tensor(n)]
    for n in names:
        if n not in present:
            check.missing(kind, n, f"the original model has no tensor '{n}'")
    ref_vals = run_all(ref, feeds, present)
    new_vals = run_all(new, feeds, present)

    def sides(k: int) -> tuple[Side, Side]:
        return Side(ref, feeds[k]), Side(new, feeds[k])

    for n in present:
        check.compare(kind, n, n, ref_vals, new_vals, dtype=dtype_of(ref, n), exact=True,
                      sides=sides)


def _outputs_kept(ctx: Context, kind: str) -> list[str]:
    orig, new = ctx.orig, ctx.new
    if list(new.output_names) != list(orig.output_names):
        raise UsageError(f"the rewritten model's outputs {list(new.output_names)[:8]} are not "
                         f"the original's {list(orig.output_names)[:8]}; give the model the "
                         f"{kind} started from")
    return list(new.output_names)


@rewrite_check(CleanupRecord)
def _check_cleanup(ctx: Context, record: CleanupRecord, check: Check) -> None:
    _same_outputs(ctx, check, "cleanup", ctx.orig, _outputs_kept(ctx, "cleanup"))


def _dfs_order(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """``nodes`` in a topological order found independently of the verb's (an iterative
    depth-first post-order over producers, not Kahn's): the reference a function body out of
    order is run in (onnxruntime refuses the body as it was)."""
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    done: set[int] = set()
    order: list[int] = []
    for root in range(len(nodes)):
        stack = [(root, False)]
        while stack:
            i, expanded = stack.pop()
            if i in done:
                continue
            if expanded:
                done.add(i)
                order.append(i)
                continue
            stack.append((i, True))
            stack.extend((producer[r], False) for r in nodes[i].input
                         if r in producer and producer[r] not in done)
    return [nodes[i] for i in order]


def _functions_sorted(original: Model, record: ToposortRecord) -> Model:
    """The original, whose local function bodies the record says were out of order put in an
    order of :func:`_dfs_order`; the original itself when none was."""
    if not any(k.startswith("function ") for k in record.moved):
        return original
    proto = onnx.ModelProto()
    proto.CopyFrom(original.proto)
    for fn in proto.functions:
        name = f"{fn.domain}.{fn.name}" if fn.domain else fn.name
        if f"function {name}" in record.moved:
            nodes = [onnx.NodeProto() for _ in fn.node]
            for dst, src in zip(nodes, _dfs_order(list(fn.node)), strict=True):
                dst.CopyFrom(src)
            del fn.node[:]
            fn.node.extend(nodes)
    return Model(proto, base_dir=original.base_dir)


@rewrite_check(ToposortRecord)
def _check_toposort(ctx: Context, record: ToposortRecord, check: Check) -> None:
    names = _outputs_kept(ctx, "toposort")
    reference = _functions_sorted(ctx.orig.model, record)
    ref = ctx.orig if reference is ctx.orig.model else ctx.stage(reference, "functions-sorted")
    if ref is not ctx.orig:
        check.notes.append("local function bodies out of order: the original was run with them "
                           "in a depth-first topological order")
    _same_outputs(ctx, check, "toposort", ref, names)


@rewrite_check(OutputsRecord)
def _check_outputs(ctx: Context, record: OutputsRecord, check: Check) -> None:
    names = list(ctx.new.output_names)
    for gone in record.removed:
        if gone in names:
            check.missing("outputs", gone, f"'{gone}' was dropped but is still a graph output")
    for added in record.added:
        if added not in names:
            check.missing("outputs", added, f"'{added}' was added but is not a graph output")
    _same_outputs(ctx, check, "outputs", ctx.orig, names)


def _set_reference(original: Model, rewritten: Model, record: SetRecord) -> Model:
    """The original with the recorded values put in (see the module docstring)."""
    proto = onnx.ModelProto()
    proto.CopyFrom(original.proto)
    index = GraphIndex(proto)
    for key, text in record.attrs.items():
        label, attr = split_attr_key(key)
        k = node_position(index, label)
        inside = body_node(proto, label) if k is None else None  # '<body path>/<label>'
        if k is None and inside is None:
            raise UsageError(f"the set record names node '{label}', which the original model "
                             "does not have; give the model the set started from")
        node = proto.graph.node[k] if inside is None else inside[1].node[inside[2]]
        value = parse_attribute(proto, node, attr, text, label)
        kept = [a for a in node.attribute if a.name != attr]
        del node.attribute[:]
        node.attribute.extend([*kept, value])
    new_inits = {t.name: t for t in rewritten.proto.graph.initializer}
    for name, digest in record.digests.items():
        pos = index.initializers.get(name)
        new = new_inits.get(name)
        held = proto.graph.initializer
        if pos is None:  # a body's: '<body path>/<name>'
            inside, made = body_initializer(proto, name), body_initializer(rewritten.proto, name)
            if inside is not None and made is not None:
                pos, held, new = inside[2], inside[1].initializer, made[1].initializer[made[2]]
        if pos is None or pos < 0 or new is None:
            raise UsageError(f"the set record replaces initializer '{name}', which one of the "
                             "models does not have; give the models the set started from and made")
        if is_external(new):
            new = numpy_helper.from_array(read_tensor(new, rewritten.base_dir), new.name)
        if hashlib.sha256(new.raw_data).hexdigest() != digest:
            raise UsageError(f"initializer '{name}' of the rewritten model is not the one the "
                             "set record wrote (sha256 differs); give the model the set made")
        held[pos].CopyFrom(new)
    return Model(proto, base_dir=original.base_dir)


@rewrite_check(SetRecord)
def _check_set(ctx: Context, record: SetRecord, check: Check) -> None:
    ref = ctx.stage(_set_reference(ctx.orig.model, ctx.new.model, record), "set-reference")
    _same_outputs(ctx, check, "set", ref, _outputs_kept(ctx, "set"))
