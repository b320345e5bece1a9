"""``set``: give node attributes and initializers new values, checked first.

An attribute ``NODE.KEY=VALUE`` (a node name holding dots is split at the last one) is typed by
the op's schema (``onnx.defs.get_schema`` at the model's opset for that domain; for an op without
a schema, by the attribute the node has) and its text parsed per that type: int, float, string,
ints ``1,2,3``, floats ``0.5,1``, strings ``a,b``. An initializer ``NAME=FILE.npy`` takes the
array's values: dtype and shape must match unless ``reshape`` (then only the dtype). A weight
of an external-data model is written to the output's data file by the save; the input's data
file is never touched.
"""

from __future__ import annotations

import difflib
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from ..edit import Edit
from ..errors import UsageError
from ..index import GraphIndex, node_label
from ..io import Model, as_model
from ..record import SetRecord, add_rewrite
from ..select import Selector, is_selector
from ..selectors import NODE, TENSOR
from ..session import indexed
from ._bodies import body_initializer, body_node, children_first, locate
from ._setshapes import redeclared

__all__ = ["SetResult", "parse_attribute", "set_values", "split_attr_key"]

_PARSERS: dict[int, tuple[str, Any]] = {
    AttributeProto.INT: ("an int", int),
    AttributeProto.FLOAT: ("a float", float),
    AttributeProto.STRING: ("a string", lambda text: text),
    AttributeProto.INTS: ("ints like 1,2,3", lambda text: [int(v) for v in _items(text)]),
    AttributeProto.FLOATS: ("floats like 0.5,1", lambda text: [float(v) for v in _items(text)]),
    AttributeProto.STRINGS: ("strings like a,b", lambda text: list(_items(text))),
}


def _items(text: str) -> list[str]:
    return [v.strip() for v in text.split(",")] if text.strip() else []


@dataclass(frozen=True)
class SetResult:
    """What ``set_values`` changed.

    Attributes:
        attrs: ``NODE.KEY`` (the node's name or label) -> the value as text, in the order given.
        weights: initializer name -> the ``.npy`` file its values came from.
        digests: initializer name -> sha256 (hex) of its new raw bytes.
        reshape: shapes were allowed to change.
    """

    attrs: dict[str, str]
    weights: dict[str, str]
    digests: dict[str, str]
    reshape: bool

    def record(self) -> SetRecord:
        """The rewrite record of this change."""
        return SetRecord(attrs=dict(self.attrs), weights=dict(self.weights),
                         digests=dict(self.digests), reshape=self.reshape)


def split_attr_key(key: str) -> tuple[str, str]:
    """``NODE.KEY`` -> (node, key), split at the last dot.

    Raises:
        UsageError: no dot, or an empty side.
    """
    node, sep, attr = key.rpartition(".")
    if not sep or not node or not attr:
        raise UsageError(f"'{key}' is not NODE.KEY; write the node name, a dot and the "
                         "attribute name (e.g. conv1.strides=2,2)")
    return node, attr


def _opset(model: onnx.ModelProto, domain: str) -> int:
    for o in model.opset_import:
        if o.domain == domain or (domain in ("", "ai.onnx") and o.domain in ("", "ai.onnx")):
            return int(o.version)
    return 0


def _attr_type(model: onnx.ModelProto, node: onnx.NodeProto, key: str, label: str) -> int:
    """The type attribute ``key`` of ``node`` takes (schema first, else the node's own)."""
    have = {a.name: a for a in node.attribute}
    try:
        schema = onnx.defs.get_schema(node.op_type, _opset(model, node.domain), node.domain)
    except onnx.defs.SchemaError:
        schema = None
    if schema is not None:
        if key in schema.attributes:
            return int(schema.attributes[key].type)  # type: ignore[call-overload]
        names = sorted(schema.attributes)
    elif key in have:
        return int(have[key].type)
    else:
        names = sorted(have)
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
    hint = ("did you mean " + ", ".join(f"'{c}'" for c in close) + "?") if close else (
        f"its attributes are {', '.join(names)}" if names else "it takes no attributes")
    op = f"{node.domain}.{node.op_type}" if node.domain else node.op_type
    raise UsageError(f"node '{label}' ({op}) has no attribute '{key}'; {hint}")


def parse_attribute(model: onnx.ModelProto, node: onnx.NodeProto, key: str, text: str,
                    label: str) -> AttributeProto:
    """The attribute ``key`` of ``node`` with the value ``text`` parsed per its type.

    Raises:
        UsageError: unknown attribute (did-you-mean), a type that cannot be given as text, a
            value that does not parse.
    """
    kind = _attr_type(model, node, key, label)
    if kind not in _PARSERS:
        name = AttributeProto.AttributeType.Name(kind)
        raise UsageError(f"attribute '{label}.{key}' is of type {name}, which cannot be set "
                         "from text; set ints, floats or strings")
    what, parse = _PARSERS[kind]
    try:
        value = parse(text)
    except ValueError:
        raise UsageError(f"value '{text}' of '{label}.{key}' is not {what}; give {what}") from None
    return helper.make_attribute(key, value, attr_type=kind)


def _read_npy(path: str) -> np.ndarray:
    try:
        arr = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise UsageError(f"weight file '{path}' does not exist; check the path") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read '{path}' as a .npy array ({exc}); save it with "
                         "numpy.save") from None
    if not isinstance(arr, np.ndarray):
        raise UsageError(f"'{path}' holds several arrays; give one .npy array per weight")
    return arr


def _checked_weight(old: onnx.TensorProto, label: str, path: str,
                    reshape: bool) -> onnx.TensorProto:
    """The array of ``path`` as the new value of initializer ``old`` (called ``label``)."""
    arr = _read_npy(path)
    want = helper.tensor_dtype_to_np_dtype(old.data_type)
    if arr.dtype != want:
        raise UsageError(f"'{path}' holds {arr.dtype} values but initializer '{label}' is "
                         f"{want}; save the array as {want}")
    if tuple(arr.shape) != tuple(old.dims) and not reshape:
        raise UsageError(f"'{path}' has shape {list(arr.shape)} but initializer '{label}' "
                         f"has {list(old.dims)}; give that shape, or pass --reshape")
    return numpy_helper.from_array(np.ascontiguousarray(arr), old.name)


def _weight_sites(index: GraphIndex, selector: Selector, name: str) -> list[tuple[str, int]]:
    """(body path or "", initializer position) of each initializer ``name`` names: a main
    initializer, a selector's matches (inside bodies too), a body initializer's address
    ``<body path>/<name>`` (as the record gives it), else a tensor :meth:`Selector.resolve`
    finds."""
    if name in index.initializers:
        return [("", index.initializers[name])]
    if is_selector(name) and not index.is_tensor(name) and name not in index.node_names:
        found: list[tuple[str, int]] = []
        for site in selector.find(name, TENSOR):
            if not site.graph:
                found.append(("", _main_initializer(index, site.tensor or "")))
                continue
            where = body_initializer(index.model, f"{site.graph}/{site.tensor}")
            if where is None:
                raise UsageError(f"tensor '{site.tensor}' inside the body '{site.graph}' is not "
                                 "an initializer; --weight replaces initializers")
            found.append((site.graph, where[2]))
        return found
    if not index.is_tensor(name):
        where = body_initializer(index.model, name)
        if where is not None:
            return [(where[0], where[2])]
    return [("", _main_initializer(index, selector.resolve(name)))]


def _main_initializer(index: GraphIndex, resolved: str) -> int:
    pos = index.initializers.get(resolved)
    if pos is None:
        raise UsageError(f"tensor '{resolved}' is not an initializer; --weight replaces "
                         "initializers (onnxsurgeon inspect MODEL lists them)")
    if pos < 0:
        raise UsageError(f"initializer '{resolved}' is sparse; replace a dense initializer")
    return pos


def _node_sites(index: GraphIndex, selector: Selector, name: str) -> list[tuple[str, int]]:
    """(body path or "", node position) of each node ``name`` names: a main node's name, a
    selector's matches (inside bodies too), a body node's address ``<body path>/<label>`` (as
    the record gives it), else :meth:`Selector.resolve_node`."""
    if name in index.node_names:
        return [("", index.node_names[name])]
    if is_selector(name) and not index.is_tensor(name):
        labels = {index.node_label(i): i for i in range(len(index.graph.node))}
        found: list[tuple[str, int]] = []
        for site in selector.find(name, NODE):
            if not site.graph:
                found.append(("", labels[site.node or ""]))
                continue
            where = body_node(index.model, f"{site.graph}/{site.node}")
            if where is not None:
                found.append((site.graph, where[2]))
        return found
    if not index.is_tensor(name):
        where = body_node(index.model, name)
        if where is not None:
            return [(where[0], where[2])]
    return [("", selector.resolve_node(name))]


def _graph_of(index: GraphIndex, path: str) -> onnx.GraphProto:
    return locate(index.model, path) if path else index.graph


def _label(index: GraphIndex, path: str, i: int) -> str:
    """A node's label as records give it: ``<body path>/<label>`` inside a body."""
    return f"{path}/{node_label(_graph_of(index, path).node[i], i)}" if path else \
        index.node_label(i)


def set_values(model: Model | onnx.ModelProto, /, *, attrs: Mapping[str, str] | None = None,
               weights: Mapping[str, str | os.PathLike[str]] | None = None,
               reshape: bool = False) -> SetResult:
    """Give attributes (``NODE.KEY`` -> value text) and initializers (name -> ``.npy`` file)
    new values. Mutates model.

    A selector acts at each of its matches, nodes and initializers inside If/Loop/Scan bodies
    too; those are recorded by address (``<body path>/<label>.KEY``, ``<body path>/<name>``),
    which names them again exactly.

    Before:  x -> Conv(strides=1,1; W) -> y
    After (attrs conv.strides=2,2; weights W=w.npy):  x -> Conv(strides=2,2; W') -> y

    O(attributes + weights given) plus reading the arrays; a selector or a body address walks
    the graphs once.

    Raises:
        NotFoundError: a node or tensor that does not resolve (did-you-mean).
        UsageError: nothing given, an unknown attribute, a bad value, a weight file that does
            not read or whose dtype (or shape, without ``reshape``) differs.
    """
    m = as_model(model)
    proto = m.proto
    index = indexed(m)
    attrs = dict(attrs or {})
    files_given = {k: os.fspath(v) for k, v in (weights or {}).items()}
    if not attrs and not files_given:
        raise UsageError("nothing to set; give --attr NODE.KEY=VALUE or --weight NAME=FILE.npy")
    selector = Selector(index)
    new_attrs: list[tuple[str, int, AttributeProto]] = []
    attr_text: dict[str, str] = {}
    for key, text in attrs.items():
        node_name, attr = split_attr_key(key)
        for path, i in _node_sites(index, selector, node_name):
            label = _label(index, path, i)
            full = f"{label}.{attr}"
            if full in attr_text:
                raise UsageError(f"attribute '{full}' is set twice; set it once")
            node = _graph_of(index, path).node[i]
            new_attrs.append((path, i, parse_attribute(proto, node, attr, text, label)))
            attr_text[full] = text
    new_weights: list[tuple[str, int, onnx.TensorProto]] = []
    files: dict[str, str] = {}
    digests: dict[str, str] = {}
    for name, file in files_given.items():
        for path, pos in _weight_sites(index, selector, name):
            old = _graph_of(index, path).initializer[pos]
            label = f"{path}/{old.name}" if path else old.name
            tensor = _checked_weight(old, label, file, reshape)
            if label in files:
                raise UsageError(f"initializer '{label}' is set twice; set it once")
            new_weights.append((path, pos, tensor))
            files[label] = file
            digests[label] = hashlib.sha256(tensor.raw_data).hexdigest()
    result = SetResult(attr_text, files, digests, bool(reshape))
    paths = children_first(proto, {p for p, _, _ in (*new_attrs, *new_weights) if p})
    declared = redeclared(proto, [(i, a) for path, i, a in new_attrs if not path],
                          [(pos, t) for path, pos, t in new_weights if not path and reshape])

    # ------------------------------------------------------------------ mutate (all checked)
    e = Edit(index)
    for path, pos, tensor in new_weights:
        if not path:
            e.set_initializer(pos, tensor)
    for path, i, attribute in new_attrs:
        if not path:
            e.set_attribute(i, attribute)
    if declared is not None:  # the new values change declared shapes or types: inferred anew
        e.set_outputs(declared[0])
        e.set_value_info(declared[1])
    for path in paths:  # children first: a holder's copy has its bodies' new values
        graph = locate(proto, path)
        body = onnx.GraphProto()
        body.CopyFrom(graph)
        for where, pos, tensor in new_weights:
            if where == path:
                body.initializer[pos].CopyFrom(tensor)
        for where, i, attribute in new_attrs:
            if where == path:
                held = body.node[i].attribute
                k = next((k for k, a in enumerate(held) if a.name == attribute.name), None)
                if k is None:
                    body.node[i].attribute.append(attribute)
                else:
                    body.node[i].attribute[k].CopyFrom(attribute)
        e.set_body(graph, body, list(body.input))
    e.hand_on(m)
    add_rewrite(proto, result.record())
    return result

