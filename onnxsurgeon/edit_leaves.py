"""The leaf and model-level calls of :class:`~onnxsurgeon.edit.Edit` (initializers, inputs,
outputs, value_info, local functions, metadata, opsets, private protos' block I/O): the mixin
:class:`LeafEdits` that ``Edit`` inherits, and ``keep_only``. Each call changes the proto and
tells the upkeep what changed (:meth:`LeafEdits._leaf_edit`), as ``Edit``'s node calls do."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import compress
from operator import attrgetter, not_
from typing import Any

import onnx

from .index import GraphIndex, ListedValueInfo
from .protos import set_default_opset
from .upkeep import Upkeep

_NAME = attrgetter("name")
_RUN_COST = 4.0
"""Relative cost of one slice deletion versus re-adding one kept element (measured, upb)."""


def keep_only(field: Any, keep: Sequence[int]) -> None:
    """Keep the elements of repeated message ``field`` at the ascending positions ``keep``.

    Mutates ``field``. O(len(field)); deletes the dropped runs in place when they are few,
    rebuilds the field otherwise (upb on a 90k-node chain: a slice deletion ~3.5 us per run
    whatever its length, a rebuild ~0.8 us per kept element).
    """
    n = len(field)
    if len(keep) == n:
        return
    runs: list[tuple[int, int]] = []
    prev = -1
    for i in keep:
        if i > prev + 1:
            runs.append((prev + 1, i))
        prev = i
    if prev + 1 < n:
        runs.append((prev + 1, n))
    if len(runs) * _RUN_COST <= len(keep) + 64:
        for start, stop in reversed(runs):
            del field[start:stop]
        return
    kept = list(map(field.__getitem__, keep))
    del field[:]
    field.extend(kept)



def _replace_all(field: Any, items: Iterable[Any]) -> None:
    """Replace the elements of repeated message ``field`` by copies of ``items``."""
    copies = []
    for item in items:
        c = type(item)()
        c.CopyFrom(item)
        copies.append(c)
    del field[:]
    field.extend(copies)


class LeafEdits:
    """The leaf and model-level edits of :class:`~onnxsurgeon.edit.Edit` (its state is set
    by ``Edit.__init__``/``Edit.of``)."""

    index: GraphIndex | None
    model: onnx.ModelProto
    graph: onnx.GraphProto
    upkeep: Upkeep | None
    _leaves: list[str] | None
    _leaves_changed: bool

    def _leaf_edit(self, appended: Sequence[str] | None = None) -> None:
        if self.upkeep is None:
            return
        if appended is None:
            self._leaves_changed = True
        elif not self._leaves_changed:
            self._leaves = [*(self._leaves or ()), *appended]

    # ------------------------------------------------------------------ leaves
    def add_initializers(self, tensors: Iterable[onnx.TensorProto], *, made: bool = False,
                         names: Sequence[str] | None = None) -> None:
        """Append ``tensors`` (copied) to the main graph's initializers, renamed ``names``
        when given; ``made``: their content is the verb's own (a block's weights), so the
        save's output check looks at them."""
        field = self.graph.initializer
        first = len(field)
        field.extend(tensors)
        added = field[first:]
        if names is not None:
            for t, name in zip(added, names, strict=True):
                t.name = name
        self._leaf_edit(list(map(_NAME, added)))
        if made and self.upkeep is not None:
            self.upkeep.created_tensors(added)

    def add_sparse_initializers(self, tensors: Iterable[onnx.SparseTensorProto], *,
                                names: Sequence[str] | None = None) -> None:
        """Append sparse initializers (copied), renamed ``names`` when given."""
        field = self.graph.sparse_initializer
        first = len(field)
        field.extend(tensors)
        if names is not None:
            for st, name in zip(field[first:], names, strict=True):
                st.values.name = name
        if len(field) > first:
            self._leaf_edit()

    def keep_initializers(self, keep: Sequence[int], *, sparse: Sequence[int] | None = None) -> None:
        """Keep only the initializers (and, when given, sparse initializers) at the ascending
        positions ``keep`` (``sparse``). O(initializers)."""
        g = self.graph
        changed = len(keep) != len(g.initializer)
        keep_only(g.initializer, keep)
        if sparse is not None:
            changed = changed or len(sparse) != len(g.sparse_initializer)
            keep_only(g.sparse_initializer, sparse)
        if changed:
            self._leaf_edit()

    def set_sparse_initializers(self, tensors: Sequence[onnx.SparseTensorProto]) -> None:
        """The main graph's sparse initializers are copies of ``tensors`` now."""
        _replace_all(self.graph.sparse_initializer, tensors)
        self._leaf_edit()

    def add_inputs(self, inputs: Sequence[onnx.ValueInfoProto]) -> None:
        """Append graph inputs (copied)."""
        if inputs:
            self.graph.input.extend(inputs)
            self._leaf_edit()

    def set_inputs(self, inputs: Sequence[onnx.ValueInfoProto]) -> None:
        """The main graph's inputs are copies of ``inputs`` now, in that order."""
        _replace_all(self.graph.input, inputs)
        self._leaf_edit()

    # ------------------------------------------------------------------ outputs, value_info
    def add_outputs(self, outputs: Iterable[onnx.ValueInfoProto]) -> None:
        """Append graph outputs (copied). Outputs are no part of the int graph."""
        self.graph.output.extend(outputs)

    def set_outputs(self, outputs: Sequence[onnx.ValueInfoProto]) -> None:
        """The main graph's outputs are ``outputs`` now, in that order."""
        field = self.graph.output
        del field[:]
        field.extend(outputs)

    def set_output(self, k: int, *, name: str | None = None,
                   value: onnx.ValueInfoProto | None = None,
                   retype: onnx.TypeProto | None = None) -> None:
        """Graph output ``k`` becomes a copy of ``value``, and/or gets type ``retype``, and/or
        is named ``name`` (applied in that order)."""
        out = self.graph.output[k]
        if value is not None:
            out.CopyFrom(value)
        if retype is not None:
            out.type.CopyFrom(retype)
        if name is not None:
            out.name = name

    def add_value_info(self, infos: Iterable[onnx.ValueInfoProto]) -> None:
        """Append value_info entries (copied)."""
        self.graph.value_info.extend(infos)

    def keep_value_info(self, keep: Sequence[int]) -> None:
        """Keep only the value_info entries at the ascending positions ``keep``."""
        keep_only(self.graph.value_info, keep)

    def set_value_info(self, infos: Sequence[onnx.ValueInfoProto], *, copy: bool = True) -> None:
        """The main graph's value_info is ``infos`` now (copied first unless ``copy`` is off:
        the caller's entries are fresh or outlive the old field)."""
        if copy:
            _replace_all(self.graph.value_info, infos)
            return
        field = self.graph.value_info
        del field[:]
        field.extend(infos)

    def drop_value_info(self, names: Iterable[str], *,
                        listed: ListedValueInfo | None = None) -> None:
        """Drop the value_info entries of ``names`` (when there is one). ``listed``: the
        entries as they are now, read from the bytes the model was parsed from (the index's
        :attr:`~onnxsurgeon.index.GraphIndex.listed_value_info`, taken before any edit): the
        names are read from it and the kept entries parsed from those bytes in one call,
        instead of a ValueInfo wrapper per entry. O(value_info)."""
        gone = set(names)
        field = self.graph.value_info
        if listed is not None and len(listed.names) != len(field):
            listed = None  # not the entries as they are now
        have = listed.names if listed is not None else list(map(_NAME, field))
        if gone.isdisjoint(have):
            return
        kept = list(map(not_, map(gone.__contains__, have)))  # by C-level maps
        entries = listed.entries(bytes(kept)) if listed is not None else None
        if entries is not None:
            del field[:]
            self.graph.MergeFromString(entries)  # appends exactly the kept entries
            return
        keep_only(field, list(compress(range(len(have)), kept)))

    # ------------------------------------------------------------------ model level
    def add_functions(self, functions: Iterable[onnx.FunctionProto]) -> None:
        """Append local functions (copied)."""
        self.model.functions.extend(functions)

    def rename_function(self, fn: onnx.FunctionProto, name: str) -> None:
        """Local function ``fn`` (of a private proto) is named ``name`` now."""
        fn.name = name

    def keep_functions(self, keep: Sequence[int]) -> None:
        """Keep only the local functions at the ascending positions ``keep``."""
        keep_only(self.model.functions, keep)

    def add_metadata(self, props: Iterable[onnx.StringStringEntryProto]) -> None:
        """Append ``metadata_props`` entries (copied)."""
        self.model.metadata_props.extend(props)

    def add_opsets(self, opsets: Iterable[onnx.OperatorSetIdProto]) -> None:
        """Append opset imports (copied)."""
        self.model.opset_import.extend(opsets)

    def set_default_opset(self, version: int, *, functions: bool = True) -> None:
        """The model (and, with ``functions``, its local functions) import the default domain
        at ``version``."""
        set_default_opset(self.model, version)
        for fn in self.model.functions if functions else ():
            set_default_opset(fn, version)

    def set_ir_version(self, version: int) -> None:
        """The model's IR version is ``version`` now."""
        self.model.ir_version = version

    # ------------------------------------------------------------------ private protos
    def set_block_io(self, only_input: onnx.ValueInfoProto | None = None, *,
                     output_name: str | None = None,
                     input_type: onnx.TypeProto | None = None,
                     append: Sequence[onnx.NodeProto] = ()) -> None:
        """On a private one-input proto: the graph's only input becomes a copy of ``only_input``,
        its input gets ``input_type``, nodes ``append`` are appended and its first output is
        named ``output_name`` (each when given)."""
        g = self.graph
        if only_input is not None:
            kept = onnx.ValueInfoProto()
            kept.CopyFrom(only_input)
            del g.input[:]
            g.input.append(kept)
        if input_type is not None:
            g.input[0].type.CopyFrom(input_type)
        g.node.extend(append)
        if output_name is not None:
            g.output[0].name = output_name

    def set_tensor(self, tensor: onnx.TensorProto, value: onnx.TensorProto) -> None:
        """A tensor of a private proto is ``value`` now (external data read inline)."""
        tensor.CopyFrom(value)
