"""``inspect``: a read-only summary of a model (never reads external weight bytes)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import onnx

from .external import is_external
from .index import iter_graphs, real_inputs
from .io import Model, as_model
from .select import FUSED_KEY, NAME_MAP_KEY, fused_names, name_map
from .types import dtype_name


@dataclass(frozen=True)
class TensorSummary:
    """Name, dtype and shape of one graph input or output."""

    name: str
    dtype: str
    shape: list[int | str | None] | None


@dataclass(frozen=True)
class Inspection:
    """What ``onnxsurgeon inspect`` reports. ``to_json()`` is the ``--json`` form."""

    ir_version: int
    producer: str
    opsets: dict[str, int]
    inputs: list[TensorSummary]
    outputs: list[TensorSummary]
    nodes: int
    nodes_nested: int
    ops: dict[str, int]
    initializers: int
    weight_bytes_inline: int
    weight_bytes_external: int
    functions: list[str]
    framework: dict[str, Any]
    name_map: dict[str, str]
    warnings: list[str]
    fused: dict[str, dict[str, str]] = field(default_factory=dict)
    inputs_with_default: list[str] = field(default_factory=list)
    """Inputs that are also initializers (IR >= 4): fed when given, else their initializer."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def to_text(self, *, max_ops: int = 30, max_names: int = 20) -> str:
        lines = [
            f"producer      {self.producer or '-'}   ir_version {self.ir_version}",
            "opsets        " + ", ".join(f"{d or 'ai.onnx'}:{v}" for d, v in self.opsets.items()),
            f"nodes         {self.nodes} in the main graph, {self.nodes_nested} in nested bodies",
            f"initializers  {self.initializers}  ({_bytes(self.weight_bytes_inline)} inline, "
            f"{_bytes(self.weight_bytes_external)} external)",
        ]
        if self.functions:
            lines.append("functions     " + ", ".join(self.functions))
        for key, value in self.framework.items():
            if isinstance(value, dict):
                value = ", ".join(f"{k} {v}" for k, v in value.items())
            lines.append(f"{key:<13} {value}")
        lines.append("inputs")
        defaults = set(self.inputs_with_default)
        lines += [f"  {t.name}  {t.dtype}{_shape(t.shape)}"
                  + ("  (has a default: its initializer)" if t.name in defaults else "")
                  for t in self.inputs]
        lines.append("outputs")
        lines += [f"  {t.name}  {t.dtype}{_shape(t.shape)}" for t in self.outputs]
        lines.append("ops")
        for op, n in list(self.ops.items())[:max_ops]:
            lines.append(f"  {n:>7}  {op}")
        if len(self.ops) > max_ops:
            lines.append(f"  ... {len(self.ops) - max_ops} more op types (--json lists all)")
        if self.name_map:
            shown = list(self.name_map.items())[:max_names]
            lines.append(f"name map      {len(self.name_map)} framework names"
                         + (f", the first {len(shown)}" if len(shown) < len(self.name_map) else ""))
            for k, v in shown:
                lines.append(f"  {k} -> {v}")
        if self.fused:
            lines.append(f"fused away    {len(self.fused)} framework names have no ONNX tensor "
                         "(the converter fused their op into another)")
            for k, entry in list(self.fused.items())[:max_names]:
                into = (f"fused into {entry['op']} '{entry['node']}'" if entry.get("node")
                        else "fused")
                use = f"; use '{entry['use']}'" if entry.get("use") else ""
                if use and entry.get("layout"):
                    use += f" (its value in {entry['layout']} layout)"
                lines.append(f"  {k}: {into}{use}")
        for w in self.warnings:
            lines.append(f"warning: {w}")
        lines.append("(--nodes and --tensors list every node and tensor with its framework "
                     "names; --grep PATTERN and --around TENSOR narrow the list)")
        return "\n".join(lines)


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _shape(shape: list[int | str | None] | None) -> str:
    if shape is None:
        return " (shape unknown)"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _summary(vi: onnx.ValueInfoProto) -> TensorSummary:
    t = vi.type
    if t.HasField("tensor_type"):
        tt = t.tensor_type
        shape: list[int | str | None] | None = None
        if tt.HasField("shape"):
            shape = [
                int(d.dim_value) if d.HasField("dim_value")
                else (d.dim_param if d.HasField("dim_param") else None)
                for d in tt.shape.dim
            ]
        return TensorSummary(vi.name, dtype_name(tt.elem_type), shape)
    kind = t.WhichOneof("value") or "unknown"
    return TensorSummary(vi.name, kind.replace("_type", ""), None)


def _tensor_bytes(t: onnx.TensorProto) -> tuple[int, int]:
    """(inline bytes, external bytes) of a tensor, from its fields only."""
    if is_external(t):
        for e in t.external_data:
            if e.key == "length" and e.value.isdigit():
                return 0, int(e.value)
        return 0, 0
    if t.HasField("raw_data"):
        return len(t.raw_data), 0
    return t.ByteSize(), 0


def _json_or_text(value: str) -> Any:
    """A metadata value: the object when it holds a JSON object (conversion_check), else text."""
    if value.startswith("{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def inspect_model(model: Model | onnx.ModelProto) -> Inspection:
    """Summarize ``model``: O(nodes) over every graph; no weight bytes are read."""
    m = as_model(model)
    proto = m.proto
    graph = proto.graph
    ops: Counter[str] = Counter()
    nested = 0
    inline = external = 0
    inits = 0
    for g in iter_graphs(graph):
        if g is not graph:
            nested += len(g.node)
        for node in g.node:
            ops[f"{node.domain}.{node.op_type}" if node.domain else node.op_type] += 1
        for t in g.initializer:
            a, b = _tensor_bytes(t)
            inline += a
            external += b
        inits += len(g.initializer)
    initializer_names = {t.name for t in graph.initializer}
    initializer_names.update(st.values.name for st in graph.sparse_initializer)
    inputs = [_summary(vi) for vi in real_inputs(proto)]
    framework = {
        p.key.removeprefix("onnxsurgeon."): _json_or_text(p.value)
        for p in proto.metadata_props
        if p.key.startswith("onnxsurgeon.")
        and p.key not in (NAME_MAP_KEY, FUSED_KEY, "onnxsurgeon.rewrites")
    }
    producer = f"{proto.producer_name} {proto.producer_version}".strip()
    return Inspection(
        ir_version=int(proto.ir_version),
        producer=producer,
        opsets={o.domain: int(o.version) for o in proto.opset_import},
        inputs=inputs,
        outputs=[_summary(vi) for vi in graph.output],
        nodes=len(graph.node),
        nodes_nested=nested,
        ops=dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        initializers=inits,
        weight_bytes_inline=inline,
        weight_bytes_external=external,
        functions=[f"{f.domain}.{f.name}" for f in proto.functions],
        framework=framework,
        name_map=name_map(proto),
        warnings=list(m.warnings),
        fused=fused_names(proto),
        inputs_with_default=[t.name for t in inputs if t.name in initializer_names],
    )


def inspection_json(model: Model | onnx.ModelProto) -> str:
    """The ``inspect --json`` text of ``model``."""
    return json.dumps(inspect_model(model).to_json(), indent=2, sort_keys=False)
