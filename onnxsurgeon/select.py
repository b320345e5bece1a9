"""Names as users know them -> ONNX tensor names.

Resolution order (first hit wins):
1. the exact ONNX tensor name;
2. the converters' name map (``metadata_props['onnxsurgeon.name_map']``: framework name -> tensor);
3. a TensorFlow-style name with or without ``:0``;
4. a node name (its single output; an error lists the outputs when it has several);
5. a PyTorch module path (``conv5``, ``transformer.h.0.mlp``) from exporter metadata
   (``pkg.torch.onnx.name_scopes`` with dynamo, ``/conv5/Conv`` node names with TorchScript),
   meaning the tensor the module hands to the rest of the network.
Absence or ambiguity raises an error listing the closest existing names. A framework name whose
value the converter fused away (``Conv2D:0`` folded into the ``Conv`` that also adds the bias) is
in no name map: it is listed under ``metadata_props['onnxsurgeon.fused_names']`` and resolving it
raises an error saying so and naming the framework tensor to use instead.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any

import onnx

from .errors import AmbiguousNameError, NotFoundError, UsageError, close_matches
from .index import GraphIndex, iter_graphs
from .metadata import get_metadata, set_metadata
from .selectors import NODE, TENSOR, Pattern, body_sites
from .selectors import Site as Site  # re-exported: the selector core's public names
from .selectors import is_selector as is_selector

CALL_SEP = "#"
"""A module called several times is mapped once per call: ``emb#0``, ``emb#1``..."""

NAME_MAP_KEY = "onnxsurgeon.name_map"
"""metadata_props key holding the converters' JSON map framework name -> ONNX tensor name."""


FUSED_KEY = "onnxsurgeon.fused_names"
"""metadata_props key holding the converters' JSON map framework name -> ``{"op", "node", "use"}``
for framework tensors whose value exists nowhere in the ONNX model (fused into ``node``, an ``op``;
``use`` is the framework name of the nearest tensor that does exist, or the ONNX tensor holding
its value transposed, with ``"layout": "NCHW"``)."""


def _metadata_object(model: onnx.ModelProto, key: str) -> dict[Any, Any]:
    """The JSON object stored under ``metadata_props[key]`` ({} when absent or unreadable)."""
    text = get_metadata(model, key)
    if text is None:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def fused_names(model: onnx.ModelProto) -> dict[str, dict[str, str]]:
    """The framework names a converter fused away (empty when absent or unreadable)."""
    return {str(k): {str(a): str(b) for a, b in v.items()}
            for k, v in _metadata_object(model, FUSED_KEY).items() if isinstance(v, dict)}


def name_map(model: onnx.ModelProto) -> dict[str, str]:
    """The framework-name map written by converters (empty when absent or unreadable)."""
    return {str(k): str(v) for k, v in _metadata_object(model, NAME_MAP_KEY).items()
            if isinstance(v, str)}


def set_name_map(model: onnx.ModelProto, mapping: Mapping[str, str]) -> None:
    """Write the framework-name map (deterministic JSON). Mutates model."""
    set_metadata(model, {NAME_MAP_KEY: json.dumps(mapping, sort_keys=True, separators=(",", ":"))})


def follow_renames(model: onnx.ModelProto, renamed: Mapping[str, str]) -> None:
    """Point the converters' name map at the new names of renamed tensors. Mutates model.

    Framework names that meant tensor ``old`` mean ``renamed[old]`` afterwards (a verb that
    renames a tensor keeps its values under the new name). No-op without a name map."""
    current = name_map(model)
    if not renamed or not current or not renamed.keys() & set(current.values()):
        return
    set_name_map(model, {k: renamed.get(v, v) for k, v in current.items()})


def drop_missing(model: onnx.ModelProto, exists: Callable[[str], bool]) -> None:
    """Drop name-map entries whose tensor no longer exists (``exists(name)`` is False). Mutates
    model. No-op without a name map."""
    current = name_map(model)
    kept = {k: v for k, v in current.items() if exists(v)}
    if len(kept) != len(current):
        set_name_map(model, kept)


@lru_cache(maxsize=4096)
def _join_scopes(scopes: tuple[str, ...]) -> str:
    """Join exporter scope segments into a module path.

    Segments are either relative attribute names (``mlp``) or already-qualified paths
    (``layer1.0`` under ``layer1``); both spell ``layer1.0.conv1`` in the end.
    """
    path = ""
    for seg in scopes:
        if not seg:
            continue
        if path and (seg == path or seg.startswith(path + ".")):
            path = seg
        else:
            path = f"{path}.{seg}" if path else seg
    return path


_NO_MODULE = "_empty_nn_module_stack"


def node_module(node: onnx.NodeProto) -> str | None:
    """The PyTorch module path a node was exported from, when the exporter recorded it."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return None
            if isinstance(scopes, (list, tuple)) and len(scopes) >= 2:
                # the last entry names the aten op itself, not a module; torch's placeholder
                # scope for nodes without a module stack is not a module either
                real = tuple(str(s) for s in scopes[:-1] if not str(s).startswith(_NO_MODULE))
                return _join_scopes(real) or None
            return None
    name = node.name
    if name.startswith("/") and name.count("/") >= 2:
        return _join_scopes(tuple(name.split("/")[1:-1]))
    return None


def unnamed_label(index: GraphIndex, name: str) -> int | None:
    """The position of the unnamed main-graph node whose label is ``name`` (``OpType#i``, as
    inspect, results and records give it: :func:`~onnxsurgeon.index.node_label`), else None.
    O(1)."""
    op, sep, pos = name.rpartition("#")
    if sep and op and pos.isdigit() and int(pos) < len(index.graph.node):
        node = index.graph.node[int(pos)]
        if node.op_type == op and not node.name:
            return int(pos)
    return None


class Selector:
    """Resolves user names against one :class:`GraphIndex` (build once, resolve many)."""

    def __init__(self, index: GraphIndex) -> None:
        self.index = index
        self._map: dict[str, str] | None = None
        self._modules: dict[str, list[int]] | None = None
        self._const_shape: tuple[set[str], set[str]] | None = None
        self._fused: dict[str, dict[str, str]] | None = None

    @property
    def framework_map(self) -> dict[str, str]:
        if self._map is None:
            self._map = name_map(self.index.model)
        return self._map

    @property
    def fused(self) -> dict[str, dict[str, str]]:
        """Framework names the converter fused away (see :data:`FUSED_KEY`)."""
        if self._fused is None:
            self._fused = fused_names(self.index.model)
        return self._fused

    def fused_error(self, name: str) -> str | None:
        """Why framework tensor ``name`` has no ONNX tensor, when the converter fused it away."""
        fused = self.fused
        key = next((k for k in (name, name + ":0", name[:-2] if name.endswith(":0") else None)
                    if k and k in fused), None)
        if key is None:
            return None
        entry = fused[key]
        node, op = entry.get("node", ""), entry.get("op", "")
        where = (f"into {op} '{node}' " if node in self.index.node_names
                 else "into another op ")
        text = (f"'{key}' was fused {where}by the converter; its value does not exist in the "
                "ONNX model")
        use = entry.get("use", "")
        if use and self._direct(use) is None:
            use = ""
        layout = f" (its value in {entry['layout']} layout)" if use and entry.get("layout") else ""
        return text + (f"; use '{use}'{layout}" if use else "; pick a tensor that exists "
                       "(onnxsurgeon inspect MODEL --tensors)")

    def _module_nodes(self) -> dict[str, list[int]]:
        """Module path -> node indexes in that module or below it. O(nodes x depth)."""
        if self._modules is None:
            modules: dict[str, list[int]] = {}
            for i, node in enumerate(self.index.graph.node):
                path = node_module(node)
                while path:
                    modules.setdefault(path, []).append(i)
                    path = path.rpartition(".")[0]
            self._modules = modules
        return self._modules

    def module_outputs(self, path: str) -> list[str]:
        """Tensors made inside module ``path`` and read outside it (or graph outputs)."""
        nodes = self._module_nodes().get(path)
        if not nodes:
            return []
        inside = set(nodes)
        index = self.index
        consumers = index.consumers
        graph = index.graph
        found: list[str] = []
        for i in nodes:
            for out in graph.node[i].output:
                if not out:
                    continue
                if out in index.outputs or any(
                    u.node not in inside and not self._glue_inside(u.node, inside)
                    for u in consumers.get(out, ())
                ):
                    found.append(out)
        if len(found) > 1:
            data = self._data_tensors(nodes, found)
            if data:
                return data
        return found

    def _glue_inside(self, i: int, inside: set[int]) -> bool:
        """True when node ``i`` carries no module scope and everything it makes is read inside
        the module only (the dynamo exporter drops the scope of some nodes, e.g. the Split of
        GPT-2's fused qkv projection)."""
        index = self.index
        node = index.graph.node[i]
        if node_module(node) is not None:
            return False
        for out in node.output:
            if out in index.outputs:
                return False
            if any(u.node not in inside for u in index.consumers.get(out, ())):
                return False
        return True

    def _data_tensors(self, nodes: list[int], found: list[str]) -> list[str]:
        """``found`` without constants and shape computations: the exporters share those across
        modules (TorchScript's Constant / Shape->Gather, dynamo's symbolic-size arithmetic),
        but they are not what a module hands on."""
        const, shape = self._non_data()
        return [t for t in found if t not in const and t not in shape]

    def _non_data(self) -> tuple[set[str], set[str]]:
        """(constants, shape computations) of the main graph: Constant outputs and what only
        constants and initializers feed; Shape/Size outputs and what only they (plus constants)
        feed. One pass in node order, cached. O(nodes + edges)."""
        if self._const_shape is None:
            index = self.index
            const: set[str] = set()
            shape: set[str] = set()
            for node in index.graph.node:
                ins = [x for x in node.input if x]
                outs = [o for o in node.output if o]
                if node.op_type in ("Shape", "Size") or (
                    any(x in shape for x in ins)
                    and all(x in shape or x in const or x in index.initializers for x in ins)
                ):
                    shape.update(outs)
                elif all(x in const or x in index.initializers for x in ins):
                    const.update(outs)  # Constant nodes (no inputs) included
            self._const_shape = (const, shape)
        return self._const_shape

    def _direct(self, name: str) -> str | None:
        """Steps 1 and 2 of the resolution order: the exact tensor or a name-map entry."""
        index = self.index
        if index.is_tensor(name):
            return name
        fmap = self.framework_map
        for key in (name, name + ":0", name[:-2] if name.endswith(":0") else None):
            if key and key in fmap and index.is_tensor(fmap[key]):
                return fmap[key]
        return None

    def resolve(self, name: str) -> str:
        """The ONNX tensor name for the user-given ``name`` (see the module docstring); a
        selector (:func:`is_selector`) must match exactly one main-graph tensor here."""
        if self._selects(name):
            return _one(self.find_tensors(name), name, "tensor")
        direct = self._direct(name)
        if direct is not None:
            return direct
        index = self.index
        fmap = self.framework_map
        calls = [k for k in fmap if k.startswith(name + CALL_SEP)
                 and k[len(name) + 1:].isdigit() and index.is_tensor(fmap[k])]
        if calls:
            listed = ", ".join(f"'{k}' ({fmap[k]})" for k in sorted(calls, key=_call_number))
            raise AmbiguousNameError(
                f"module '{name}' is called {len(calls)} times; name one call: {listed}"
            )
        if name.endswith(":0") and index.is_tensor(name[:-2]):
            return name[:-2]
        if not name.endswith(":0") and index.is_tensor(name + ":0"):
            return name + ":0"
        fused = self.fused_error(name)
        if fused is not None:
            raise NotFoundError(fused)
        node_name = name.rsplit(":", 1)[0] if name.rsplit(":", 1)[-1].isdigit() else name
        if node_name in index.node_names:
            node = index.graph.node[index.node_names[node_name]]
            outs = [o for o in node.output if o]
            if ":" in name and name.rsplit(":", 1)[-1].isdigit():
                k = int(name.rsplit(":", 1)[1])
                if k < len(node.output) and node.output[k]:
                    return node.output[k]
            if len(outs) == 1:
                return outs[0]
            raise AmbiguousNameError(
                f"node '{node_name}' has {len(outs)} outputs {outs[:8]}; name one of them "
                f"(or '{node_name}:N')"
            )
        outs = self.module_outputs(name)
        if len(outs) == 1:
            return outs[0]
        if len(outs) > 1:
            raise AmbiguousNameError(
                f"module '{name}' hands {len(outs)} tensors to the rest of the graph {outs[:8]}; "
                "name one of them"
            )
        raise NotFoundError(f"tensor '{name}' not found; {self._suggest(name)}")

    def resolve_node(self, name: str) -> int:
        """The main-graph node ``name`` means: the node of that name, else the producer of the
        tensor ``name`` selects (name map, TF ``:0``, torch module path). O(1) for a node name.

        Raises:
            NotFoundError: neither (a did-you-mean over node names), or a fused framework name.
            AmbiguousNameError: the tensor selector is ambiguous.
        """
        index = self.index
        i = index.node_names.get(name)
        if i is None:
            i = unnamed_label(index, name)
        if i is not None:
            return i
        if self._selects(name):
            return _one(self.find_nodes(name), name, "node", index.node_label)
        tensor: str | None = None
        try:
            tensor = self.resolve(name)
        except NotFoundError:
            fused = self.fused_error(name)
            if fused is not None:
                raise NotFoundError(fused) from None
        producer = index.producer.get(tensor) if tensor is not None else None
        if producer is not None:
            return producer
        close = close_matches(name, list(index.node_names), n=3, cutoff=0.5)
        hint = ("did you mean " + ", ".join(f"'{c}'" for c in close) + "?") if close else \
            "run 'onnxsurgeon inspect MODEL --nodes' to list node names"
        made = f" (tensor '{tensor}' is a graph input or initializer)" if tensor else ""
        raise NotFoundError(f"node '{name}' not found in the main graph{made}; {hint}")

    def resolve_many(self, names: Iterable[str]) -> list[str]:
        return [self.resolve(n) for n in names]

    def find(self, text: str, kind: str = TENSOR) -> list[Site]:
        """Every place ``text`` names: a selector's matches, or a plain name's one place.

        A selector (:func:`is_selector`) is matched against the ONNX tensor and node names, the
        converters' framework names and PyTorch module paths (a module means the tensor it hands
        on, as :meth:`resolve` says), and inside If/Loop/Scan bodies against ONNX names. Sites
        come in node order, main graph first, then bodies in node order; each once. A plain
        name keeps its meaning: ``[`` the :meth:`resolve` (or :meth:`resolve_node`) result ``]``.
        O(tensors + nodes + framework names + module paths), the pattern compiled once.

        Args:
            text: a plain name or a selector.
            kind: ``"tensor"`` (``op:`` gives the nodes' outputs) or ``"node"``.

        Raises:
            NotFoundError: nothing matches (names the selector and the nearest names).
            AmbiguousNameError: a plain name is ambiguous (see :meth:`resolve`).
            UsageError: a malformed selector or an unknown ``kind``.
        """
        if kind not in (TENSOR, NODE):
            raise UsageError(f"find() kind must be 'tensor' or 'node', got {kind!r}")
        index = self.index
        if not self._selects(text):
            if kind == NODE:
                i = self.resolve_node(text)
                return [Site(None, index.node_label(i), "", text)]
            tensor = self.resolve(text)
            made = index.producer.get(tensor)
            return [Site(tensor, None if made is None else index.node_label(made), "", text)]
        pattern = Pattern.parse(text)
        sites = self._main_sites(pattern, kind)
        sites.extend(body_sites(index.graph, pattern, kind))
        if not sites:
            raise NotFoundError(self._no_match(pattern, kind))
        return sites

    def _selects(self, text: str) -> bool:
        """True when ``text`` is a selector and no tensor or node of the model is named so
        (an exact name keeps its meaning)."""
        index = self.index
        return is_selector(text) and not index.is_tensor(text) and text not in index.node_names

    def _by_name(self, pattern: Pattern) -> dict[str, str]:
        """Main-graph tensor -> the framework name or module path of it that matches (the first
        framework name in map order, then modules in node order)."""
        found: dict[str, str] = {}
        if pattern.regex is None:
            return found
        index = self.index
        for key, tensor in self.framework_map.items():
            if pattern.names(key) and index.is_tensor(tensor):
                found.setdefault(tensor, key)
        for path in self._module_nodes():
            if pattern.names(path):
                outs = self.module_outputs(path)
                if len(outs) == 1:
                    found.setdefault(outs[0], path)
        return found

    def _node_hits(self, pattern: Pattern, extra: dict[str, str]) -> list[tuple[int, str]]:
        """(main-graph node number, what matched) in node order."""
        names = pattern.names
        hits: list[tuple[int, str]] = []
        for i, node in enumerate(self.index.graph.node):
            hit = pattern.node(node) or next((o for o in node.output if names(o)), None) or next(
                (extra[o] for o in node.output if o in extra), None)
            if hit is not None:
                hits.append((i, hit))
        return hits

    def _main_sites(self, pattern: Pattern, kind: str) -> list[Site]:
        index = self.index
        graph = index.graph
        extra = self._by_name(pattern)
        names = pattern.names
        sites: list[Site] = []
        if kind == NODE:
            return [Site(None, index.node_label(i), "", hit)
                    for i, hit in self._node_hits(pattern, extra)]
        if pattern.regex is not None:
            leaves = list(index.inputs)
            leaves.extend(n for n in index.initializers if n not in index.inputs)
            for name in leaves:
                hit = name if names(name) else extra.get(name)
                if hit is not None:
                    sites.append(Site(name, None, "", hit))
        for i, node in enumerate(graph.node):
            by_node = pattern.node(node)
            label: str | None = None
            for out in node.output:
                if not out:
                    continue
                hit = out if names(out) else by_node or extra.get(out)
                if hit is not None:
                    label = label or index.node_label(i)
                    sites.append(Site(out, label, "", hit))
        return sites

    def _no_match(self, pattern: Pattern, kind: str) -> str:
        what = "node" if kind == NODE or pattern.regex is None else "tensor or node"
        if pattern.regex is None:
            present = sorted({n.op_type for g in iter_graphs(self.index.graph) for n in g.node})
            close = close_matches(next(iter(sorted(pattern.ops))), present, n=3, cutoff=0.5)
            shown = ", ".join(dict.fromkeys(close + present[:10]))
            return (f"selector '{pattern.text}' matches no {what}: the model has no such op; "
                    f"its op types include {shown}")
        hint = self._suggest(pattern.stem)
        return f"selector '{pattern.text}' matches no {what} in the model; {hint}"

    def find_tensors(self, text: str) -> list[str]:
        """The main-graph tensors ``text`` names (:meth:`find`); a site inside a body is refused.

        Raises:
            NotFoundError, AmbiguousNameError, UsageError: see :meth:`find`; UsageError also
                when a selector matches inside a nested body (verbs edit the main graph).
        """
        return [_main_only(s, text).tensor or "" for s in self.find(text, TENSOR)]

    def find_nodes(self, text: str) -> list[int]:
        """The main-graph node numbers ``text`` names (:meth:`find` with ``kind="node"``).

        Raises:
            NotFoundError, AmbiguousNameError, UsageError: see :meth:`find_tensors`.
        """
        if not self._selects(text):
            return [self.resolve_node(text)]
        pattern = Pattern.parse(text)
        hits = self._node_hits(pattern, self._by_name(pattern))
        for site in body_sites(self.index.graph, pattern, NODE)[:1]:
            _main_only(site, text)
        if not hits:
            raise NotFoundError(self._no_match(pattern, NODE))
        return [i for i, _ in hits]

    def _suggest(self, name: str) -> str:
        candidates = list(self.index.tensor_names())
        candidates.extend(k for k, v in self.framework_map.items() if self.index.is_tensor(v))
        candidates.extend(self.index.node_names)
        candidates.extend(self._module_nodes())
        tail = name.rstrip(":0").rsplit("/", 1)[-1].rsplit(".", 1)[-1].lower()
        pool = [c for c in candidates if tail and tail in c.lower()] if len(candidates) > 5000 else candidates
        if len(pool) > 5000:
            pool = pool[:5000]
        close = close_matches(name, pool, n=5, cutoff=0.4)
        if not close and pool and len(pool) <= 5000:
            close = [c for c in pool if tail and tail in c.lower()][:5]
        if close:
            return "did you mean " + ", ".join(f"'{c}'" for c in dict.fromkeys(close)) + "?"
        return "run 'onnxsurgeon inspect MODEL' to list tensor names"


def _one(found: list[Any], text: str, what: str, label: Callable[[Any], str] = str) -> Any:
    """The one element of ``found``; several: AmbiguousNameError naming them and the fix."""
    if len(found) == 1:
        return found[0]
    shown = ", ".join(f"'{label(f)}'" for f in found[:6]) + (", ..." if len(found) > 6 else "")
    raise AmbiguousNameError(f"selector '{text}' matches {len(found)} {what}s ({shown}) where "
                             f"one {what} is wanted; narrow the selector to one of them")


def _main_only(site: Site, text: str) -> Site:
    if site.graph:
        raise UsageError(f"selector '{text}' matches '{site.matched}' inside the body "
                         f"'{site.graph}'; this command acts on the main graph only: narrow the "
                         "selector to main-graph names")
    return site


def _call_number(key: str) -> int:
    return int(key.rpartition(CALL_SEP)[2])


def resolve(model: GraphIndex | onnx.ModelProto | Any, name: str) -> str:
    """The ONNX tensor ``name`` means in ``model`` (a :class:`~onnxsurgeon.io.Model`, a
    ``ModelProto`` or a :class:`GraphIndex`): ``Selector(GraphIndex(model)).resolve(name)``.

    Raises:
        NotFoundError / AmbiguousNameError: see :meth:`Selector.resolve`.
        TypeError: ``model`` is none of those (a path: load it first with ``onnxsurgeon.load``).
    """
    if isinstance(model, GraphIndex):
        return Selector(model).resolve(name)
    proto = getattr(model, "proto", model)
    if not isinstance(proto, onnx.ModelProto):
        raise TypeError(f"resolve() takes a Model, ModelProto or GraphIndex, got "
                        f"{type(model).__name__}; load a file first with onnxsurgeon.load(path)")
    return Selector(GraphIndex(proto)).resolve(name)
