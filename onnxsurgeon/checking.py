"""The ``onnx.checker`` policy a saved model passes (the guarantee every CLI output carries).

:func:`onnxsurgeon.io.save` applies it through its ``check=`` option, so API users get the same
guarantee as the CLI. The full check (strict shape inference included) costs ~0.2 s per 45k
nodes, several times the surgery itself on large graphs, hence the levels of :class:`Check`.

When a written file fails while the model it was loaded from fails the same check, the failure
is not the rewrite's doing: the file is kept and a warning is returned. Otherwise the file is
not published (a model without external data is checked from its bytes before the rename), or
removed with its data file (one with external data is checked after), and
:class:`OutputCheckError` is raised.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from enum import Enum
from itertools import chain, repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # onnx is imported lazily: the CLI reads FULL_CHECK_MAX_NODES at start-up
    import onnx

    from .index import NodeEdges


class Edits(Protocol):
    """What :func:`check_touched` reads of a verb's edits (an :class:`onnxsurgeon.upkeep.Upkeep`:
    the same layer, so named by its shape here)."""

    validated: bool
    graph: Any
    to_read: int
    fresh_tensors: list[Any]
    stand_ins: list[Any]

    def result(self) -> tuple[dict[str, int], NodeEdges] | None: ...

    def dearer_than_check(self) -> bool: ...

    def holds_unapplied(self) -> list[Any] | None: ...

    def touched(self) -> list[int] | None: ...

FULL_CHECK_MAX_NODES = 20_000
"""Outputs with more nodes than this are not given the full check by ``Check.AUTO`` / ``SMALL``."""


class Check(str, Enum):
    """How :func:`onnxsurgeon.io.save` checks the file it wrote with ``onnx.checker``."""

    OFF = "off"
    """No check."""
    STRUCTURE = "structure"
    """The plain check: SSA, topological order, scoping, op schemas."""
    FULL = "full"
    """The plain check plus strict shape inference."""
    AUTO = "auto"
    """FULL up to :data:`FULL_CHECK_MAX_NODES` nodes, STRUCTURE above (what the CLI runs)."""
    SMALL = "small"
    """FULL up to :data:`FULL_CHECK_MAX_NODES` nodes, nothing above (the default of ``save``:
    on where it is cheap)."""
    TOUCHED = "touched"
    """What the CLI runs: FULL up to :data:`FULL_CHECK_MAX_NODES` nodes; above, the checks of
    :func:`check_touched` when they can vouch for the model (one verb's edits since
    :func:`~onnxsurgeon.io.load`, nothing else changed the proto since), else STRUCTURE."""

    def __str__(self) -> str:
        return self.value


class OutputCheckError(RuntimeError):
    """A written model fails ``onnx.checker`` although the model it came from passes.

    Not a :class:`~onnxsurgeon.errors.SurgeryError`: it means a bug in onnxsurgeon (the CLI
    reports it as an internal error), or an API caller who built an invalid model.
    """


def node_count(model: onnx.ModelProto, limit: int) -> int:
    """Nodes of the main graph plus every nested body; counting stops once past ``limit`` (so a
    large graph is not walked in Python just to be counted)."""
    from .index import iter_graphs

    graph = model.graph
    count = len(graph.node)
    if count > limit:
        return count
    for g in iter_graphs(graph):
        if g is not graph:
            count += len(g.node)
            if count > limit:
                break
    return count


def model_fingerprint(proto: onnx.ModelProto) -> bytes:
    """The model-level fields ``onnx.checker`` reads besides the graph (IR version, opset
    imports, local functions), serialized: :func:`check_touched` vouches only for a model whose
    fields are still those load saw."""
    import onnx

    head = onnx.ModelProto(ir_version=proto.ir_version)
    head.opset_import.extend(proto.opset_import)
    head.functions.extend(proto.functions)
    return head.SerializeToString(deterministic=True)


def check_touched(proto: onnx.ModelProto, upkeep: Edits | None, baseline: bytes | None, *,
                  nodes_checked: range = range(0)) -> bool:
    """Whether ``proto`` passes ``onnx.checker``'s plain check, decided from what its one verb
    touched, without walking the untouched nodes again. True: it does (as far as the rewrite
    can change it). False: these checks cannot vouch for it; run the whole check (which also
    gives the verdict when something here fails).

    It can vouch only for a model :func:`~onnxsurgeon.io.load` validated (SSA, topological
    order, every read defined, every tensor against its shape; ``baseline``: its
    :func:`model_fingerprint` then) and then changed by one verb that told ``upkeep`` (its
    :class:`~onnxsurgeon.upkeep.Upkeep`) every edit, with the IR version, opset imports and
    functions unchanged (IR >= 4, no sparse initializers, no touched node holding a body: an
    inserted one makes the upkeep give up, a rewired one fails ``check_node``). It then
    checks, with onnx.checker's own functions where there is one:

    - the structure where the edits are: :meth:`~onnxsurgeon.upkeep.Upkeep.result` re-reads
      every inserted or rewired node (a copy's nodes: the input, output and name lists the
      verb wrote into them, which re-reading would only rebuild) and refuses a read of a later
      or unknown tensor and an output defined twice (the int dataflow graph of the whole
      edited model stays valid);
    - or, for one splice of many new nodes given their fields and stand-ins (more costly to
      follow than the whole check), :meth:`~onnxsurgeon.upkeep.Upkeep.holds_unapplied` on the
      int dataflow graph before it: every read of and by a new node defined before it, every
      new name defined once, every graph output still produced (nothing renumbered);
    - every inserted or rewired node against its schema (``onnx.checker.check_node`` on the
      node in the proto: op known at the model's opsets, attributes, input and output counts);
      copies the verb made of one node but for their names (``replace``'s sites) by that
      node, once (the upkeep's ``stand_ins``: the schema check reads no name but to tell an
      empty one, and a copy's names are empty where the stand-in's are);
    - the tensors the verb made (``check_tensor``; a copied initializer is a byte copy of one
      load checked against its shape, under a new name checked with the leaves), every graph
      input and output (``check_value_info``), every graph output produced, metadata keys
      unique, the graph named; graph input and initializer names unique and non-empty (load
      checked them; an upkeep told of changed leaves checks them again, or gives up).

    The nodes no edit touched are the input's, byte for byte: a fault in one of them is the
    input's (the whole check reports it as such; ``check=Check.STRUCTURE`` runs it).
    ``nodes_checked``: nodes whose :func:`check_nodes` the caller runs itself. O(touched nodes + graph inputs, outputs and
    initializer names) instead of O(model).
    """
    import onnx

    if (upkeep is None or not upkeep.validated or upkeep.graph is not proto.graph
            or baseline is None or proto.ir_version < 4
            or proto.ir_version > onnx.IR_VERSION or len(proto.graph.sparse_initializer)):
        return False
    if model_fingerprint(proto) != baseline:
        return False  # opsets or functions changed: the whole check reads them all
    state = None
    if upkeep.dearer_than_check():
        # re-reading many new nodes from the proto, or renumbering a splice of many, costs
        # more than the C++ pass; a copy hands over what it wrote: nothing to read back. A
        # splice that provably keeps the node list valid (its graph outputs produced) needs
        # neither: its new nodes are copies of the stand-ins checked below
        held = upkeep.holds_unapplied()
        if held is None:
            return False
        touched: list[int] = []
        stand_ins: list[Any] = held
    else:
        applied = upkeep.touched()  # applies the edits: None when the upkeep gave up
        state = upkeep.result()
        if applied is None or state is None:
            return False
        touched, stand_ins = applied, upkeep.stand_ins
    graph = proto.graph
    keys = [p.key for p in proto.metadata_props]
    if not graph.name or len(set(keys)) != len(keys):
        return False
    outputs = [vi.name for vi in graph.output]
    if state is not None and any(name not in state[0] for name in outputs):
        producer, edges = state
        leaves = set(edges.leaves.values())
        if any(name not in producer and name not in leaves for name in outputs):
            return False
    ctx = _context(proto)
    try:
        for vi in (*graph.input, *graph.output):
            onnx.checker.check_value_info(vi, ctx)
        for t in upkeep.fresh_tensors:
            onnx.checker.check_tensor(t, ctx)
    except Exception:  # noqa: BLE001 - the checker raises several types; the whole check reports
        return False
    if nodes_checked:  # touched is ascending: the nodes in the range are one run of it
        lo, hi = bisect_left(touched, nodes_checked.start), bisect_left(touched, nodes_checked.stop)
        touched = touched[:lo] + touched[hi:]
    return check_nodes(proto, touched, ctx, also=stand_ins)


def _context(proto: onnx.ModelProto) -> Any:
    from onnx.checker import C

    ctx = C.CheckerContext()
    ctx.ir_version = proto.ir_version
    ctx.opset_imports = {d.domain: d.version for d in proto.opset_import}
    return ctx


def check_nodes(proto: onnx.ModelProto, nodes: Iterable[int], ctx: Any = None, *,
                also: Iterable[onnx.NodeProto] = ()) -> bool:
    """Whether main-graph ``nodes`` (indexes), and the nodes ``also`` (stand-ins for copies
    of them, see :meth:`onnxsurgeon.upkeep.Upkeep.spliced`), pass ``onnx.checker.check_node``
    at the model's IR version and opsets (op known, attributes, input and output counts). A
    node holding a body fails here (no outer scope given): the whole check then runs.
    O(those nodes)."""
    import onnx
    from onnx.checker import C

    ctx = ctx if ctx is not None else _context(proto)
    # check_node's own C++ call, on each node's bytes, in one C-level loop (its Python wrapper
    # costs as much as the check)
    serialized = map(onnx.NodeProto.SerializeToString,
                     chain(map(proto.graph.node.__getitem__, nodes), also))
    try:
        deque(map(C.check_node, serialized, repeat(ctx), repeat(C.LexicalScopeContext())), 0)
    except Exception:  # noqa: BLE001 - the checker raises several types; the whole check reports
        return False
    return True


def full_check_for(model: onnx.ModelProto, level: Check) -> bool | None:
    """Whether ``level`` asks for the full check (True), the plain one (False) or none (None)."""
    if level is Check.OFF:
        return None
    if level is Check.FULL or level is Check.STRUCTURE:
        return level is Check.FULL
    small = node_count(model, FULL_CHECK_MAX_NODES) <= FULL_CHECK_MAX_NODES
    if level is Check.SMALL:
        return True if small else None
    return small  # AUTO, TOUCHED (its touched checks are tried by save first)


def checker_failure(model: Path | bytes, *, full: bool) -> str | None:
    """The first line of what ``onnx.checker`` finds wrong with ``model`` (a file's path, where
    the checker also resolves external data, or a serialized model without any), None when it
    passes."""
    import onnx

    try:
        onnx.checker.check_model(model if isinstance(model, bytes) else str(model),
                                 full_check=full)
    except Exception as exc:  # noqa: BLE001 - the checker raises several types
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def judge_failure(first: str, *, full: bool, reference: Path | None,
                  remove: tuple[Path, ...] = ()) -> str:
    """An output that fails the checker with ``first`` (:func:`checker_failure`): the warning to
    give when ``reference`` (the model it came from) fails the same check, so the fault is the
    input's.

    Raises:
        OutputCheckError: else; the files ``remove`` are removed first.
    """
    if reference is not None and checker_failure(reference, full=full) is not None:
        return f"the output fails onnx.checker as the input does ({first[:160]})"
    for p in remove:
        with contextlib.suppress(OSError):
            p.unlink()
    raise OutputCheckError(f"output failed onnx.checker: {first[:300]}")


def check_written(path: Path, *, full: bool, reference: Path | None) -> str | None:
    """Run ``onnx.checker`` on the file at ``path`` (and the data files it names).

    Returns None when it passes, a one-line warning when it fails as ``reference`` (the model it
    came from) does too.

    Raises:
        OutputCheckError: the file fails (and ``reference`` passes or is None); the file and its
            ``.data`` file are removed first.
    """
    first = checker_failure(path, full=full)
    if first is None:
        return None
    return judge_failure(first, full=full, reference=reference,
                         remove=(path, path.with_name(path.name + ".data")))
