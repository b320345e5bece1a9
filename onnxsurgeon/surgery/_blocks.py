"""Block preparation for ``insert`` (and ``merge``): a user graph made private and checked, its
one input and output, the type of its output at an activation, its names moved into the host's
namespace, and its local functions and opset imports merged with the host's."""

from __future__ import annotations

import onnx

from ..edit import Edit
from ..errors import RewriteError
from ..external import is_external, iter_tensors, read_tensor
from ..index import iter_graphs
from ..io import Model, as_model
from ..names import NameAllocator
from ..protos import DEFAULT_DOMAINS


def block_io(block: onnx.ModelProto, label: str) -> tuple[onnx.ValueInfoProto, onnx.ValueInfoProto]:
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
    e = Edit.of(block)
    if len(inputs) != len(g.input):
        e.set_block_io(inputs[0])
    x, y = g.input[0], g.output[0]
    if x.name == y.name:  # the block passes its input through: give it a node to own the output
        fresh = NameAllocator.for_model(block).fresh(y.name + "_out")
        e.set_block_io(append=[onnx.helper.make_node("Identity", [x.name], [fresh],
                                                     name="passthrough")], output_name=fresh)
    return g.input[0], g.output[0]


def prepare_graph_block(graph: onnx.ModelProto | Model) -> tuple[onnx.ModelProto, str]:
    """A private copy of a user block with external tensors read inline; checked."""
    m = as_model(graph)
    block = onnx.ModelProto()
    block.CopyFrom(m.proto)
    e = Edit.of(block)
    for tensor in iter_tensors(block):
        if is_external(tensor):
            values = read_tensor(tensor, m.base_dir)
            e.set_tensor(tensor, onnx.numpy_helper.from_array(values, tensor.name))
    label = block.graph.name or "graph"
    try:
        onnx.checker.check_model(block)
    except onnx.checker.ValidationError as exc:
        first = (str(exc).strip().splitlines() or ["invalid"])[0][:160]
        raise RewriteError(f"block '{label}' is not a valid ONNX model ({first}); repair it") from None
    return block, label


def infer_output(block: onnx.ModelProto, x_type: onnx.TypeProto | None, label: str) -> onnx.ValueInfoProto:
    """The block output's ValueInfo when its input has type ``x_type``; strict inference, so a
    block that cannot take this activation is refused here, before the host changes."""
    probe = onnx.ModelProto()
    probe.CopyFrom(block)
    if x_type is not None and x_type.WhichOneof("value") is not None:
        Edit.of(probe).set_block_io(input_type=x_type)
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


def rename_block(block: onnx.ModelProto, at: str, prefix: str, processed: str,
                  names: NameAllocator) -> list[str]:
    """Rename every tensor and node of the block (nested bodies included) into the host's
    namespace: input -> ``at``, output -> ``processed``, the rest -> fresh ``prefix + name``.
    Returns the new names of the main block nodes."""
    g = block.graph
    fixed = {g.input[0].name: at, g.output[0].name: processed}
    e = Edit.of(block)
    e.rename_scoped([g], {}, depth=0,
                    define=lambda name: fixed[name] if name in fixed else names.fresh(prefix + name))
    e.name_every_node(iter_graphs(g), lambda node: names.fresh(prefix + (node.name or node.op_type)))
    return [node.name for node in g.node]


def _body_key(fn: onnx.FunctionProto) -> tuple[str, str, bytes]:
    """(domain, overload, definition without its name): equal keys mean interchangeable."""
    anon = onnx.FunctionProto()
    anon.CopyFrom(fn)
    anon.name = ""
    return fn.domain, fn.overload, anon.SerializeToString(deterministic=True)


def merge_functions(block: onnx.ModelProto, host: onnx.ModelProto) -> list[onnx.FunctionProto]:
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
        e = Edit.of(block)  # the block is a private copy
        calls = [node for g in iter_graphs(block.graph) for node in g.node]
        calls += [node for fn in block.functions for node in fn.node]
        for node in calls:
            new = renames.get((node.domain, node.op_type, node.overload))
            if new is not None:
                e.set_op(node, new)
        for fn in to_add:
            new = renames.get((fn.domain, fn.name, fn.overload))
            if new is not None:
                e.rename_function(fn, new)
    return to_add


def merge_opsets(block: onnx.ModelProto, host: onnx.ModelProto, label: str) -> list[onnx.OperatorSetIdProto]:
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

