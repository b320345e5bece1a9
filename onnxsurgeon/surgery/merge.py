"""``merge``: put a second model behind the first, its connected inputs reading the first's tensors.

The second model's names are kept where they are free in the first and prefixed where they would
collide (every scope of both models counts, nested bodies included; one name map over the whole
second model keeps its own scoping intact). Its default-domain opset is reconciled with the
first's exactly as ``insert`` reconciles a block; local functions and other opset imports are
merged as ``insert`` merges them. Weights are never read: inline tensors move over as they are,
external tensors keep pointing at the second model's data files (through
:attr:`~onnxsurgeon.io.Model.data_dirs`) and ``save`` streams both models' bytes into one data
file, so models past 2 GB merge at the memory cost of their protos.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from ..edit import Edit
from ..errors import NotFoundError, RewriteError, UsageError, name_list
from ..external import is_external, iter_tensors
from ..index import DEFAULT_INPUT_IR, GraphIndex, iter_graphs, real_inputs
from ..io import Model, as_model
from ..metadata import set_metadata
from ..names import NameAllocator, all_names
from ..record import MergeRecord, add_rewrite
from ..select import FUSED_KEY, NAME_MAP_KEY, Selector, fused_names, is_selector, name_map
from ..types import TypeOracle, is_complete, renamed_value_info
from ._blocks import merge_functions, merge_opsets
from ._edges import check_types
from ._opsets import reconcile
from ._shown import Shown

_OWN_METADATA = "onnxsurgeon."
"""Key prefix of this project's metadata entries (rewrite log, name map, source facts): the
first's describe the merged model, the second's name map and fused names are merged explicitly."""

DATA_ALIAS = "onnxsurgeon-merged"
"""First path component given to the second model's external-data locations in memory."""


@dataclass(frozen=True)
class MergeResult(Shown):
    """What ``merge`` did.

    Attributes:
        inputs: graph inputs of the merged model, in order.
        outputs: graph outputs of the merged model, in order.
        renamed: names of the second model that changed (old -> new): prefixed collisions and
            the connected inputs (-> the first model's tensor they now read).
        prefix: the prefix given to colliding names.
        connect: each (first-model tensor, second-model input it feeds), ONNX names, in the
            order given.
    """

    inputs: list[str]
    outputs: list[str]
    renamed: dict[str, str]
    prefix: str
    connect: tuple[tuple[str, str], ...]

    def record(self) -> MergeRecord:
        """The rewrite record of this merge (the entry the verb adds to the model's log)."""
        return MergeRecord(connect=self.connect, renamed=dict(self.renamed), prefix=self.prefix,
                           outputs=tuple(self.outputs))


def _second_input(index: GraphIndex, name: str) -> str:
    real = index.input_names()  # an input with a default value (IR >= 4) is an input too
    if name in real:
        return name
    try:
        resolved = Selector(index).resolve(name)
    except NotFoundError:
        resolved = None
    if resolved in real:
        return str(resolved)
    close = difflib.get_close_matches(name, real, n=3, cutoff=0.4)
    hint = ("did you mean " + ", ".join(f"'{c}'" for c in close) + "?") if close else \
        f"its inputs are {real[:10]}"
    raise NotFoundError(f"'{name}' is not an input of the second model; {hint}")


def _default_prefix(second: onnx.ModelProto, taken: set[str]) -> str:
    """``<second graph name>/`` (sanitized), numbered until no existing name starts with it."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", second.graph.name or "").strip("_") or "second"
    prefix = f"{stem}/"
    k = 1
    while any(n.startswith(prefix) for n in taken):
        k += 1
        prefix = f"{stem}{k}/"
    return prefix


def _second_names(second: onnx.ModelProto) -> list[str]:
    """Every name the second model defines or declares, in a deterministic order."""
    found: dict[str, None] = {}
    for g in iter_graphs(second.graph):
        for vi in g.input:
            found[vi.name] = None
        for t in g.initializer:
            found[t.name] = None
        for st in g.sparse_initializer:
            found[st.values.name] = None
        for node in g.node:
            for o in node.output:
                if o:
                    found[o] = None
        for vi in g.output:
            found[vi.name] = None
    return list(found)


def _apply_names(second: onnx.ModelProto, renames: Mapping[str, str], prefix: str,
                 names: NameAllocator, first_nodes: set[str]) -> None:
    """Rename every tensor of every graph of ``second`` by ``renames`` and its node names that
    the first model uses. Mutates second (a private copy)."""
    Edit.of(second).rename_scoped(
        [second.graph], {}, depth=0, define=lambda name: renames.get(name, name),
        node_name=lambda node: (names.fresh(prefix + node.name)
                                if node.name and node.name in first_nodes else node.name))


def _relocate(second: onnx.ModelProto, base: Path | None, alias: str) -> None:
    """Point the second model's external tensors at ``alias/<location>`` (see Model.data_dirs)."""
    if base is None:
        return
    for t in iter_tensors(second):
        if is_external(t):
            for e in t.external_data:
                if e.key == "location":
                    e.value = f"{alias}/{e.value}"


def _merged_name_map(first: onnx.ModelProto, second: onnx.ModelProto,
                     renames: Mapping[str, str], prefix: str) -> dict[str, str] | None:
    a, b = name_map(first), name_map(second)
    if not b:
        return None
    merged = dict(a)
    for key, value in b.items():
        merged[key if key not in merged else prefix + key] = renames.get(value, value)
    return merged


def _merged_fused(first: onnx.ModelProto, second: onnx.ModelProto, renames: Mapping[str, str],
                  prefix: str, first_nodes: set[str]) -> dict[str, dict[str, str]] | None:
    """The first's fused framework names plus the second's (see ``FUSED_KEY``), named as
    :func:`_merged_name_map` names the second's map entries; None when the second has none."""
    b = fused_names(second)
    if not b:
        return None
    a, first_map, second_map = fused_names(first), name_map(first), name_map(second)
    merged = dict(a)
    for key, entry in b.items():
        e = dict(entry)
        if e.get("node") in first_nodes:     # that node gets a fresh name in the merged model
            e.pop("node", None)
            e.pop("op", None)
        use = e.get("use")
        if use is not None:
            e["use"] = ((prefix + use if use in first_map else use) if use in second_map
                        else renames.get(use, use))
        merged[key if key not in a and key not in first_map else prefix + key] = e
    return merged


def merge(
    first: Model | onnx.ModelProto,
    second: Model | onnx.ModelProto,
    /,
    *,
    connect: Mapping[str, str] | Sequence[tuple[str, str]],
    prefix: str | None = None,
    outputs: Sequence[str] | None = None,
) -> MergeResult:
    """Append ``second`` to ``first``; ``connect`` maps first's tensors to second's inputs.
    Mutates first (second is only read).

    The second model's connected inputs read the first's tensors; its other inputs become graph
    inputs. Graph outputs are the second's outputs, then the first's outputs no connection
    consumed, unless ``outputs`` names them (names of the merged model: the first's as they are,
    the second's as renamed). Names of the second that collide with any name of the first get
    ``prefix`` (default: the second graph's name and ``/``, made unique). The second's
    ``metadata_props`` entries come along where the first has no entry of that key (the first's
    value wins a clash; onnxsurgeon's own entries are merged as name maps or not carried).

    Before:  first: x -> pre -> p;   second: img -> net -> logits
    After (connect={"p": "img"}):  x -> pre -> p -> net -> logits

    O(size of both protos); no weight byte is read or copied in memory beyond the second's proto.

    Raises:
        NotFoundError / AmbiguousNameError: a connection or output name does not resolve.
        UsageError: no connection, a second input connected twice, a bad prefix.
        RewriteError: dtypes or shapes of a connection differ; opsets or domain versions that
            cannot be reconciled; an output of unknown type.
    """
    if outputs is not None:
        outputs = name_list(outputs, "merge(outputs=...)")
    f = as_model(first)
    s = as_model(second)
    host = f.proto
    if not connect:
        raise UsageError("merge needs at least one connection FIRST_OUT=SECOND_IN")
    if prefix is not None and not prefix:
        raise UsageError("prefix is empty; give a prefix such as 'net/' or leave it out")
    f_index = GraphIndex(host)
    s_index = GraphIndex(s.proto)
    f_sel = Selector(f_index)
    links: dict[str, str] = {}  # second input -> first tensor
    pairs = list(connect.items()) if isinstance(connect, Mapping) else list(connect)
    for a, b in pairs:
        src, dst = f_sel.resolve(a), _second_input(s_index, b)
        if dst in links:
            raise UsageError(f"second input '{dst}' is connected twice; connect it once")
        links[dst] = src
    f_oracle, s_oracle = TypeOracle(f_index), TypeOracle(s_index)
    for dst, src in links.items():
        check_types(f"cannot connect '{src}' to '{dst}'", src, dst, f_oracle.elem_type(src),
                    s_oracle.elem_type(dst), f_oracle.shape(src), s_oracle.shape(dst))

    # a private copy of the second model (its weights stay external; inline ones are copied)
    block = onnx.ModelProto()
    block.CopyFrom(s.proto)
    label = s.proto.graph.name or "second"
    block, new_host_opset = reconcile(block, host, label)
    opsets_to_add = merge_opsets(block, host, label)
    functions_to_add = merge_functions(block, host)

    first_names = set(all_names(host))
    every = first_names | set(all_names(block))
    taken = NameAllocator(every)
    used_prefix = prefix if prefix is not None else _default_prefix(block, every)
    renames: dict[str, str] = {}
    for name in _second_names(block):
        if name in links:
            renames[name] = links[name]
        elif name in first_names:
            renames[name] = taken.fresh(used_prefix + name)
    first_nodes = {n.name for g in iter_graphs(host.graph) for n in g.node if n.name}

    # outputs of the merged model, typed before anything changes
    consumed = set(links.values())
    s_out_names = [renames.get(o.name, o.name) for o in block.graph.output]
    s_tensors = {renames.get(n, n): n for n in s_index.tensor_names()}
    if outputs is None:
        chosen = list(dict.fromkeys(
            [*s_out_names, *(o for o in f_index.outputs if o not in consumed)]))
    else:
        chosen = []
        for name in outputs:
            if name in f_index.outputs or f_index.is_tensor(name) or name in s_tensors:
                chosen.append(name)
            else:
                try:
                    chosen.extend(f_sel.find_tensors(name) if is_selector(name)
                                  else [f_sel.resolve(name)])
                except NotFoundError:
                    pool = list(s_tensors) + list(f_index.tensor_names())
                    close = difflib.get_close_matches(name, pool, n=3, cutoff=0.5)
                    hint = ("did you mean " + ", ".join(f"'{c}'" for c in close) + "?") \
                        if close else "name tensors of the merged model"
                    raise NotFoundError(f"output '{name}' is in neither model; {hint}") from None
        if len(set(chosen)) != len(chosen):
            raise UsageError(f"outputs {list(outputs)} name a tensor twice; name each once")
    out_vis: list[onnx.ValueInfoProto] = []
    for name in chosen:
        if name in s_tensors and not f_index.is_tensor(name):
            vi = s_oracle.value_info(s_tensors[name])
        else:
            vi = f_oracle.value_info(name)
        vi = renamed_value_info(vi, name)
        if not is_complete(vi):
            raise RewriteError(
                f"the type of output '{name}' is unknown, so it cannot be a graph output; add "
                "value_info for it or pick another output"
            )
        out_vis.append(vi)
    alias = DATA_ALIAS
    k = 1
    while alias in f.data_dirs:
        k += 1
        alias = f"{DATA_ALIAS}-{k}"
    second_has_external = any(is_external(t) for t in iter_tensors(block))
    if second_has_external and s.base_dir is None:
        raise UsageError("the second model uses external data but was not loaded from a file; "
                         "load it with onnxsurgeon.load(path)")
    merged_map = _merged_name_map(host, block, renames, used_prefix)
    host_keys = {p.key for p in host.metadata_props}
    carried = [p for p in block.metadata_props
               if p.key not in host_keys and not p.key.startswith(_OWN_METADATA)]
    merged_fused = _merged_fused(host, block, renames, used_prefix, first_nodes)

    # ------------------------------------------------------------------ mutate (all checked)
    _apply_names(block, renames, used_prefix, taken, first_nodes)
    if second_has_external:
        _relocate(block, s.base_dir, alias)
        f.data_dirs[alias] = s.base_dir  # type: ignore[assignment]
    e = Edit(f_index, follow=False)  # the next verb indexes the model again
    if new_host_opset is not None:
        e.set_default_opset(new_host_opset)
    bg = block.graph
    inits = {t.name for t in bg.initializer} | {st.values.name for st in bg.sparse_initializer}
    # an input with a default value stays an input; an IR 3 weight listed as an input stays
    # listed only while the merged model is IR 3; a connected input's default is dropped
    keep_listed = s.proto.ir_version >= DEFAULT_INPUT_IR or host.ir_version < DEFAULT_INPUT_IR
    e.add_inputs([vi for vi in bg.input if vi.name not in consumed
                  and (vi.name not in inits or keep_listed)])
    e.add_initializers(t for t in bg.initializer if t.name not in consumed)
    e.add_sparse_initializers(st for st in bg.sparse_initializer
                              if st.values.name not in consumed)
    e.add_value_info(vi for vi in bg.value_info if vi.name not in consumed)
    e.insert_nodes(len(host.graph.node), bg.node)
    e.set_outputs(out_vis)
    e.add_functions(functions_to_add)
    e.add_opsets(opsets_to_add)
    e.set_ir_version(max(host.ir_version, block.ir_version))
    e.add_metadata(carried)
    e.hand_on(f)
    set_metadata(host, {key: json.dumps(data, sort_keys=True, separators=(",", ":"))
                        for key, data in ((NAME_MAP_KEY, merged_map), (FUSED_KEY, merged_fused))
                        if data is not None})
    result = MergeResult([vi.name for vi in real_inputs(host)], list(chosen), dict(renames),
                         used_prefix, tuple((src, dst) for dst, src in links.items()))
    add_rewrite(host, result.record())
    return result
