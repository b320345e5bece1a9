"""Verbs at sites inside If/Loop/Scan bodies (issue 28): a body is edited as the main graph of a
model of its own, then put back.

A selector finds sites in the main graph and in nested bodies (:meth:`Selector.find`). A verb
that acts at body sites gives each body holding sites to itself, as the main graph of a *body
model*: the body's nodes, leaves and outputs, its own inputs, and as further graph inputs the
outer-scope names it reads (typed from the whole model's inference), the host's opsets and
functions. The verb runs there unchanged (its checks, naming and rerouting: readers in deeper
bodies follow through the captures as in a main graph), its names drawn clear of every name of
the host. :func:`put_back` then hands the edited body back through :meth:`Edit.set_body`, with
the opset imports and functions the verb added. Bodies are done children first, so the path of
a body still to do is never changed by an edit (an edit renumbers only the unnamed holders of
the body it edits); the main graph comes last.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import onnx

from ..edit import Edit
from ..errors import UsageError
from ..index import body_captures, graph_defined_names, has_subgraphs, iter_graphs, node_label
from ..names import all_names
from ..protos import default_opset, weightless_copy
from ..select import Selector
from ..selectors import NODE, TENSOR, Site, body_graphs, is_selector


def split(sites: Iterable[Site]) -> tuple[list[Site], dict[str, list[Site]]]:
    """The main-graph sites, and body path -> that body's sites, each in the order given."""
    main: list[Site] = []
    bodies: dict[str, list[Site]] = {}
    for site in sites:
        if site.graph:
            bodies.setdefault(site.graph, []).append(site)
        else:
            main.append(site)
    return main, bodies


def children_first(host: onnx.ModelProto, paths: Iterable[str]) -> list[str]:
    """``paths`` ordered so that a body nested in another comes before it (reversed walk
    order: the walk yields a body before the bodies inside it). O(bodies)."""
    wanted = set(paths)
    order = [path for path, _ in body_graphs(host.graph) if path in wanted]
    return list(reversed(order))


def locate(host: onnx.ModelProto, path: str) -> onnx.GraphProto:
    """The body at ``path`` (as a :class:`Site` names it). O(bodies up to it)."""
    for where, graph in body_graphs(host.graph):
        if where == path:
            return graph
    raise UsageError(f"the model has no body '{path}'; give the model the sites were found in")


def outer_types(host: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Name -> the best ValueInfo known anywhere in the model (declared, else onnx's
    non-strict inference on a weight-free copy), for the outer names a body model reads."""
    found: dict[str, onnx.ValueInfoProto] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(weightless_copy(host), strict_mode=False)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        inferred = host
    for model in (host, inferred):
        for g in iter_graphs(model.graph):
            for vi in (*g.input, *g.output, *g.value_info):
                if vi.type.WhichOneof("value") is not None:
                    found.setdefault(vi.name, vi)
            for t in g.initializer:
                if t.name not in found:
                    found[t.name] = onnx.helper.make_tensor_value_info(t.name, t.data_type,
                                                                       list(t.dims))
    return found


def _outer_reads(graph: onnx.GraphProto) -> list[str]:
    """Names ``graph`` (and the bodies in it) reads without defining them, in order, once."""
    local = graph_defined_names(graph)
    seen: dict[str, None] = {}
    for node in graph.node:
        for name in node.input:
            if name and name not in local:
                seen[name] = None
        if has_subgraphs(node):
            for name, _ in body_captures(node):
                if name not in local:
                    seen[name] = None
    for out in graph.output:
        if out.name not in local:
            seen[out.name] = None
    return list(seen)


@dataclass
class BodyModel:
    """A body given to a verb as the main graph of ``model``; ``inputs``: its own inputs."""

    path: str
    graph: onnx.GraphProto
    model: onnx.ModelProto
    inputs: int
    outer: int


def body_model(host: onnx.ModelProto, path: str,
               types: Mapping[str, onnx.ValueInfoProto], *,
               graph: onnx.GraphProto | None = None) -> BodyModel:
    """The body at ``path`` as the main graph of a model of its own (see the module
    docstring). O(size of the body); ``graph``: that body, when the caller holds it (else
    found by :func:`locate`)."""
    graph = locate(host, path) if graph is None else graph
    model = onnx.ModelProto()
    model.ir_version = host.ir_version
    model.opset_import.extend(host.opset_import)
    model.functions.extend(host.functions)
    model.graph.CopyFrom(graph)
    outer = _outer_reads(graph)
    for name in outer:
        vi = onnx.ValueInfoProto()
        if name in types:
            vi.CopyFrom(types[name])
        vi.name = name
        model.graph.input.append(vi)
    return BodyModel(path, graph, model, len(graph.input), len(outer))


def host_names(host: onnx.ModelProto) -> set[str]:
    """Every name of the host: a body model's fresh names avoid them all (a body may not
    define a name its outer scopes see, and another body's names stay clear too)."""
    return set(all_names(host))


def put_back(e: Edit, body: BodyModel) -> None:
    """Hand the edited body model back to its body in the host ``e`` edits, with the opset
    imports and local functions the verb added to the body model."""
    g = body.model.graph
    kept = [*g.input[:body.inputs], *g.input[body.inputs + body.outer:]]
    e.set_body(body.graph, g, kept)
    host = e.model
    have = {op.domain: op.version for op in host.opset_import}
    new_default = default_opset(body.model)
    if new_default is not None and default_opset(host) not in (None, new_default):
        e.set_default_opset(new_default)
    e.add_opsets([op for op in body.model.opset_import if op.domain not in have])
    known = {(fn.domain, fn.name) for fn in host.functions}
    e.add_functions([fn for fn in body.model.functions if (fn.domain, fn.name) not in known])


def refuse_body_sites(sites: Sequence[Site], text: str, why: str) -> None:
    """One line naming the first body site of ``text`` and ``why`` a verb cannot act there."""
    for site in sites:
        if site.graph:
            raise UsageError(f"selector '{text}' matches '{site.matched}' inside the body "
                             f"'{site.graph}'; {why}")


def split_address(host: onnx.ModelProto, address: str) -> tuple[str, onnx.GraphProto, str] | None:
    """``<body path>/<rest>`` -> (the body path, the body, rest), the longest body path that
    prefixes ``address``; None when none does. Records name body nodes (``rest``: the node's
    label, its name else ``OpType#position``) and body initializers so, exactly. O(bodies)."""
    best: tuple[str, onnx.GraphProto, str] | None = None
    for path, graph in body_graphs(host.graph):
        if address.startswith(path + "/") and len(address) > len(path) + 1 and (
                best is None or len(path) > len(best[0])):
            best = (path, graph, address[len(path) + 1:])
    return best


def body_node(host: onnx.ModelProto, address: str) -> tuple[str, onnx.GraphProto, int] | None:
    """(body path, body, position) of the body node at ``address`` (:func:`split_address`)."""
    found = split_address(host, address)
    if found is None:
        return None
    path, graph, label = found
    k = next((i for i, n in enumerate(graph.node) if node_label(n, i) == label), None)
    return None if k is None else (path, graph, k)


def body_initializer(host: onnx.ModelProto, address: str
                     ) -> tuple[str, onnx.GraphProto, int] | None:
    """(body path, body, position) of the body initializer at ``address``."""
    found = split_address(host, address)
    if found is None:
        return None
    path, graph, name = found
    k = next((i for i, t in enumerate(graph.initializer) if t.name == name), None)
    return None if k is None else (path, graph, k)


def address_site(selector: Selector, name: str, kind: str = TENSOR) -> Site | None:
    """The body site ``name`` addresses exactly (``<body path>/<node label>`` for a node,
    ``<body path>/<tensor>`` for a tensor the body holds: an input, an initializer, a node
    output), as records write body sites so that a replay finds them again (an unnamed node,
    a name two bodies share); None when ``name`` is a selector, addresses nothing, or means
    something in the main graph (a node or tensor name, a framework name, a module path:
    plain names keep their meaning). O(bodies)."""
    index = selector.index
    if is_selector(name) or name in index.node_names or index.is_tensor(name) or "/" not in name:
        return None
    found = split_address(index.model, name)
    if found is None:
        return None
    path, graph, rest = found
    site: Site | None = None
    if kind == NODE:
        k = next((i for i, n in enumerate(graph.node) if node_label(n, i) == rest), None)
        site = None if k is None else Site(None, rest, path, name)
    else:
        made = next(((node_label(n, i)) for i, n in enumerate(graph.node) if rest in n.output),
                    None)
        held = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
        site = Site(rest, made, path, name) if made is not None or rest in held else None
    if site is None or selector._direct(name) is not None or name in selector._module_nodes():
        return None
    return site
