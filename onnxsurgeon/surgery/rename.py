"""``rename``: give tensors (or nodes) new names without breaking a single tie.

A renamed main-graph tensor keeps its producer, every reader (main-graph nodes, nodes inside
If/Loop/Scan bodies that capture it, bodies that pass it straight through), its place among the
graph inputs, outputs, initializers and value_info, and its entry in the converters' name map
(``metadata_props['onnxsurgeon.name_map']``). Nodes keep their names and metadata, so module paths
recorded by the PyTorch exporter still resolve.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter

import onnx

from ..edit import Edit
from ..errors import UsageError
from ..index import GraphIndex, graph_defined_names, iter_graphs, node_label, subgraphs
from ..io import Model, as_model
from ..record import RenameRecord, add_rewrite
from ..select import Selector, follow_renames, is_selector
from ..selectors import NODE
from ..session import indexed
from ._bodies import address_site
from ._shown import Shown


@dataclass(frozen=True)
class RenameResult(Shown):
    """What ``rename`` did.

    Attributes:
        renamed: old name -> new name, in the order the names were given (map first, then the
            regex matches in graph order).
        nodes: True when node names were renamed, False for tensor names.
    """

    renamed: dict[str, str]
    nodes: bool
    bodies: dict[str, dict[str, str]] = field(default_factory=dict)
    """With ``nodes``: body path -> old -> new names of nodes inside that If/Loop/Scan body
    (a selector key matching a body's node); ``renamed`` holds the main graph's."""

    def record(self) -> RenameRecord:
        """The rewrite record of this rename (the entry the verb adds to the model's log)."""
        return RenameRecord(renamed=dict(self.renamed), nodes=self.nodes,
                            bodies={k: dict(v) for k, v in self.bodies.items()} or None)


def _compile(regex: Mapping[str, str] | Iterable[tuple[str, str]]) -> list[tuple[re.Pattern[str], str]]:
    items = regex.items() if isinstance(regex, Mapping) else regex
    compiled: list[tuple[re.Pattern[str], str]] = []
    for pattern, repl in items:
        try:
            compiled.append((re.compile(pattern), repl))
        except re.error as exc:
            raise UsageError(f"regex '{pattern}' does not compile ({exc}); fix the pattern") from None
    return compiled


def _apply(compiled: list[tuple[re.Pattern[str], str]], names: Iterable[str],
           skip: Mapping[str, str]) -> dict[str, str]:
    """Old -> new for every name some pattern changes (patterns chain in order)."""
    found: dict[str, str] = {}
    hits = [0] * len(compiled)
    for name in names:
        if name in skip or name in found:
            continue
        new = name
        for k, (pattern, repl) in enumerate(compiled):
            try:
                out = pattern.sub(repl, new)
            except (re.error, IndexError) as exc:
                raise UsageError(
                    f"replacement '{repl}' of regex '{pattern.pattern}' is invalid ({exc}); "
                    "use \\1 or \\g<name> for groups the pattern has"
                ) from None
            if out != new:
                hits[k] += 1
            new = out
        if new != name:
            found[name] = new
    for k, (pattern, _) in enumerate(compiled):
        if not hits[k]:
            raise UsageError(f"regex '{pattern.pattern}' matches no name in the model; check the pattern")
    return found


def _nested_names(index: GraphIndex) -> dict[str, str]:
    """Name defined inside a nested body -> label of the main-graph node holding that body."""
    found: dict[str, str] = {}
    for i in index.body_holders:
        for body in subgraphs(index.graph.node[i]):
            for g in iter_graphs(body):
                for name in graph_defined_names(g):
                    found.setdefault(name, index.node_label(i))
    return found


def _defining_bodies(index: GraphIndex, names: Iterable[str]) -> dict[str, list[onnx.GraphProto]]:
    """Each of ``names`` -> the nested bodies that define it (a name may be defined by several
    bodies, e.g. both branches of an If). O(size of the nested bodies)."""
    wanted = set(names)
    found: dict[str, list[onnx.GraphProto]] = {}
    if not wanted:
        return found
    for i in index.body_holders:
        for body in subgraphs(index.graph.node[i]):
            for g in iter_graphs(body):
                for name in graph_defined_names(g) & wanted:
                    found.setdefault(name, []).append(g)
    return found


def _rename_in_scope(e: Edit, graph: onnx.GraphProto, renames: Mapping[str, str]) -> None:
    """Rename, in ``graph`` (a nested body that defines every key of ``renames``) and in the
    bodies below it, every definition and read. Each element is renamed once, so swaps work.
    Iterative; O(size of the bodies)."""
    e.rename_scoped([graph], {}, define=lambda name: renames.get(name, name))


def _check_inner_names(inner: Mapping[str, str], renamed: Mapping[str, str],
                       main_tensors: set[str], nested: Mapping[str, str]) -> None:
    """A tensor defined inside a body may not take a name the main graph (an outer scope) or any
    body uses, unless that name is renamed away too."""
    for old, new in inner.items():
        if not new:
            raise UsageError(f"tensor '{old}' would get an empty name; give a non-empty new name")
        if new in main_tensors and new not in renamed:
            raise UsageError(
                f"cannot rename tensor '{old}' (inside the body of node '{nested[old]}') to "
                f"'{new}': an outer scope (the main graph) uses '{new}'; pick another name"
            )
        if new in nested and new not in renamed:
            raise UsageError(
                f"cannot rename tensor '{old}' to '{new}': the body of node '{nested[new]}' "
                f"already uses '{new}'; pick another name"
            )


def _check_new_names(renamed: Mapping[str, str], exists: Callable[[str], bool], what: str,
                     nested: Mapping[str, str]) -> None:
    """Refuse empty names, two names renamed to one, collisions with names that stay (``exists``
    and not renamed away), and names a nested body defines (they would shadow the renamed
    tensor inside it). O(renamed)."""
    seen: dict[str, str] = {}
    for old, new in renamed.items():
        if not new:
            raise UsageError(f"{what} '{old}' would get an empty name; give a non-empty new name")
        if new in seen:
            raise UsageError(
                f"{what}s '{seen[new]}' and '{old}' would both be named '{new}'; give them "
                "different names"
            )
        seen[new] = old
        if exists(new) and new not in renamed:
            raise UsageError(
                f"cannot rename {what} '{old}' to '{new}': the model already has a {what} named "
                f"'{new}'; pick another name (or rename that one too)"
            )
        if new in nested:
            raise UsageError(
                f"cannot rename {what} '{old}' to '{new}': the body of node '{nested[new]}' "
                f"defines '{new}', which would hide the renamed {what} inside it; pick another name"
            )


def _resolve_nodes(index: GraphIndex, mapping: Mapping[str, str],
                   bodies: dict[str, dict[str, str]]) -> dict[str, str]:
    """Old node names (or any selector of a tensor: its producer) -> new names; a selector's
    one match inside an If/Loop/Scan body goes to ``bodies`` (path -> old -> new) instead."""
    selector = Selector(index)
    out: dict[str, str] = {}
    for old, new in mapping.items():
        if is_selector(old) and selector._selects(old):
            sites = selector.find(old, NODE)
            _one_each(old, new, [s.node or "" for s in sites], "node")
            site = sites[0]
            if site.graph:
                if re.fullmatch(r"\w+#\d+", site.node or ""):
                    raise UsageError(f"'{old}' matches node '{site.node}' inside the body "
                                     f"'{site.graph}', which has no name; rename nodes by name")
                bodies.setdefault(site.graph, {})[site.node or ""] = new
                continue
        at = address_site(selector, old, NODE)  # '<body path>/<label>', as records give it
        if at is not None:
            bodies.setdefault(at.graph, {})[at.node or ""] = new
            continue
        node = index.graph.node[selector.resolve_node(old)]
        if not node.name:
            raise UsageError(f"'{old}' is made by a {node.op_type} node without a name; rename "
                             "nodes by name (onnxsurgeon inspect MODEL --nodes lists them)")
        if node.name in out and out[node.name] != new:
            raise UsageError(f"node '{node.name}' is given two new names; give it one")
        out[node.name] = new
    return out


def _check_body_nodes(proto: onnx.ModelProto, bodies: Mapping[str, Mapping[str, str]]
                      ) -> list[tuple[onnx.GraphProto, dict[int, str]]]:
    """Each body's node renames as (body, position -> new name); refuses an empty new name or
    one another node of that body keeps. O(size of those bodies)."""
    from ._bodies import locate

    out: list[tuple[onnx.GraphProto, dict[int, str]]] = []
    for path, ren in bodies.items():  # keyed by node label: its name, else OpType#position
        graph = locate(proto, path)
        labels = [node_label(n, i) for i, n in enumerate(graph.node)]
        kept = {n.name for n, label in zip(graph.node, labels, strict=True) if label not in ren}
        for old, new in ren.items():
            if not new or new in kept or list(ren.values()).count(new) > 1:
                why = "the name is empty" if not new else "another node of that body has it"
                raise UsageError(f"cannot rename node '{old}' inside the body '{path}' to "
                                 f"'{new}': {why}; pick another name")
        out.append((graph, {i: ren[label] for i, label in enumerate(labels) if label in ren}))
    return out


_BACKREF = re.compile(r"\\(\d|g<)")
"""A group reference in a new name (backslash + digit, or ``g<name>``): an ``re:`` key then
renames each match."""


def _expanded(selector: Selector, old: str, new: str) -> dict[str, str]:
    """Main-graph tensor -> ``new`` with the groups of the ``re:`` selector ``old`` filled in
    from the name that matched it (its ONNX, framework or module name)."""
    pattern = re.compile(old[len("re:"):], re.DOTALL)
    out: dict[str, str] = {}
    for site in selector.find(old):  # a body's tensors too: renamed within their scope
        found = pattern.fullmatch(site.matched)
        try:
            out[site.tensor or ""] = found.expand(new) if found else new
        except (re.error, IndexError) as exc:
            raise UsageError(f"new name '{new}' for selector '{old}' refers to a group the "
                             f"pattern does not have ({exc}); fix the reference") from None
    return out


def _one_each(old: str, new: str, found: list[str], what: str) -> None:
    """Refuse a selector key matching several names: they cannot all take the one new name."""
    if len(found) > 1:
        shown = ", ".join(f"'{f}'" for f in found[:5]) + (", ..." if len(found) > 5 else "")
        raise UsageError(f"selector '{old}' matches {len(found)} {what}s ({shown}); they cannot "
                         f"all be named '{new}': narrow the selector to one, use an re: selector "
                         "whose groups the new name uses (re:a(\\d)=b\\1), or --regex")


_NAME = attrgetter("name")


def _rename_tensors(e: Edit, renamed: Mapping[str, str]) -> None:
    """Apply ``renamed`` to every tie of each main-graph tensor (definition, reads in every
    scope that does not shadow it, value_info, graph outputs) through ``e``, and to the
    converters' name map. Every element is renamed once, from the state before the call, so
    swaps (a->b, b->a) work. O(model size); on the int graph, O(edges) of ints plus the fields
    that change."""
    e.rename_tensors(renamed)
    follow_renames(e.model, renamed)


def rename(
    model: Model | onnx.ModelProto,
    mapping: Mapping[str, str] | None = None,
    /,
    *,
    regex: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    nodes: bool = False,
) -> RenameResult:
    """Rename tensors (or, with ``nodes``, main-graph nodes). Mutates model.

    ``mapping`` maps old names to new ones; old tensor names are resolved like every selector
    (exact ONNX name, converters' name map, TF ``:0`` style, node name, torch module path,
    or a ``glob:``/``re:``/``op:`` selector matching one name, inside a body too: several
    cannot share a new name, unless the key is an ``re:`` selector and the new name refers to
    its groups (``re.expand`` syntax), which renames every match: ``re:layer.(d+).out`` ->
    ``block`` + group 1).
    ``regex`` maps patterns to replacements (``re.sub`` syntax, applied in order) over every
    main-graph tensor (or node) name the mapping does not name. A renamed tensor keeps every tie
    (see the module docstring); renaming a graph input or output renames that input or output.
    A tensor defined inside an If/Loop/Scan body is renamed within its scope: its definition,
    the body's inputs/outputs and the reads in that body and the bodies below it that do not
    redefine the name; it may not take a name an outer scope (or any body) uses.

    Before:  conv -> act -> {pool, If(then: Mul(act, W)), <output act>}
    After (act=feat):  conv -> feat -> {pool, If(then: Mul(feat, W)), <output feat>}

    O(nodes + edges), plus the size of nested bodies (their names are checked for shadowing).

    Raises:
        NotFoundError / AmbiguousNameError: an old name does not resolve.
        UsageError: nothing to rename, an empty new name, two names renamed to one, a new name
            the model already uses (in the main graph, an outer scope or inside a nested body),
            a bad regex.
    """
    m = as_model(model)
    proto = m.proto
    index = indexed(m)  # load's (or the previous step's) int graph when the model is unchanged
    given = dict(mapping or {})
    compiled = _compile(regex or {})
    if not given and not compiled:
        raise UsageError("nothing to rename; give a mapping OLD=NEW or a regex PATTERN=REPLACEMENT")
    what = "node" if nodes else "tensor"
    body_nodes: dict[str, dict[str, str]] = {}
    if nodes:
        renamed = _resolve_nodes(index, given, body_nodes)
        if compiled:
            renamed |= _apply(compiled, index.node_names, renamed)
        exists: Callable[[str], bool] = index.node_names.__contains__
        nested: dict[str, str] = {}
    else:
        selector = Selector(index)
        nested = _nested_names(index)
        renamed = {}
        for old, new in given.items():
            inner_only = not index.is_tensor(old) and old in nested
            if is_selector(old) and old.startswith("re:") and _BACKREF.search(new):
                for tensor, name in _expanded(selector, old, new).items():
                    if tensor in renamed and renamed[tensor] != name:
                        raise UsageError(f"tensor '{tensor}' is given two new names; give it one")
                    renamed[tensor] = name
                continue
            if is_selector(old) and selector._selects(old):  # bodies' tensors included
                matched = list(dict.fromkeys(s.tensor or "" for s in selector.find(old)))
                _one_each(old, new, matched, "tensor")
                resolved = matched[0]
            else:
                resolved = old if inner_only else selector.resolve(old)
            if resolved in renamed and renamed[resolved] != new:
                raise UsageError(f"tensor '{resolved}' is given two new names; give it one")
            renamed[resolved] = new
        if compiled:
            candidates = [*index.tensor_names(),
                          *(n for n in nested if not index.is_tensor(n))]
            renamed |= _apply(compiled, candidates, renamed)
        exists = index.is_tensor
    renamed = {old: new for old, new in renamed.items() if old != new}
    body_nodes = {p: {o: n for o, n in ren.items() if o != n} for p, ren in body_nodes.items()}
    body_nodes = {p: ren for p, ren in body_nodes.items() if ren}
    located = _check_body_nodes(proto, body_nodes)
    if not renamed and not body_nodes:
        raise UsageError(f"every {what} keeps its name; nothing to rename")
    main = {o: n for o, n in renamed.items() if nodes or index.is_tensor(o)}
    inner = {o: n for o, n in renamed.items() if o not in main}
    if inner:
        _check_inner_names(inner, renamed, set(index.tensor_names()), nested)
    _check_new_names(renamed, exists, what, {})
    _check_new_names(main, exists, what, {k: v for k, v in nested.items() if k not in inner})
    bodies = _defining_bodies(index, inner)

    # ------------------------------------------------------------------ mutate (all checked)
    e = Edit(index)
    if nodes:
        edges = index.known_int_graph()
        listed = edges.names if edges is not None else list(map(_NAME, proto.graph.node))
        e.name_nodes({i: renamed[name] for i, name in enumerate(listed) if name in renamed})
        for graph, names in located:
            e.name_body_nodes(graph, names)
    else:
        _rename_tensors(e, main)
        by_body: dict[int, tuple[onnx.GraphProto, dict[str, str]]] = {}
        for old, new in inner.items():
            for g in bodies.get(old, []):
                by_body.setdefault(id(g), (g, {}))[1][old] = new
        for g, ren in by_body.values():
            _rename_in_scope(e, g, ren)
    e.hand_on(m)
    result = RenameResult(dict(renamed), bool(nodes), body_nodes)
    add_rewrite(proto, result.record())
    return result
