"""A session: one model and the index its verbs keep, for a run of verbs nothing else touches.

A verb builds an index of the model it changes, then edits the model through an
:class:`~onnxsurgeon.edit.Edit`, which keeps that index true (its
:class:`~onnxsurgeon.upkeep.Upkeep`: the journal of the edits). Whether the next verb may reuse
that index without proof, and the save may trust the journal's touched set, is a promise only the
code running the verbs can make: nothing else changed the proto between them. A
:class:`Session` is that promise, explicit and scoped::

    with Session(load(path), loaded=True) as s:   # the CLI's command, a recipe's steps
        insert(s.model, "relu1", op="scale")       # indexes through s (load's validated map)
        s.verb_returned()
        copy(s.model, ["relu3"], prefix="c/")      # the index insert kept, no rebuild
        s.verb_returned()
        s.save("out.onnx", check=Check.TOUCHED)    # the journal: what the last verb touched

Verbs find the open session of their model themselves (:func:`indexed`; ``Edit.hand_on`` is the
one place a journal is handed to it), so their signatures stay ``verb(model, ...)``. Without an
open session a verb indexes as :func:`onnxsurgeon.io.indexed` does (load's map only when the
proto provably serializes to the bytes loaded) and its journal goes nowhere: a library caller
that edits the proto between verbs never gets a stale index. The ``Model`` itself carries no
flag that changes what it means.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import onnx

from . import io
from .errors import UsageError
from .index import GraphIndex
from .io import Model, as_model
from .upkeep import Upkeep

__all__ = ["Session", "active", "current_index", "hand_on", "indexed"]

_OPEN: weakref.WeakValueDictionary[int, Session] = weakref.WeakValueDictionary()
"""id of a proto -> the open session editing it (an open session keeps its proto alive, so the
id names that proto only)."""


class Session:
    """One model edited by a run of verbs that nothing else interleaves with.

    Args:
        model: the model (a bare proto is wrapped).
        loaded: ``model`` is as :func:`~onnxsurgeon.io.load` returned it, nothing touched its
            proto since: the first verb reuses load's validated producer map and int graph.
        index: the index the first verb may use (e.g. a copy's, see :meth:`snapshot`).

    The session is open (found by the verbs of its model) from construction until
    :meth:`close` (or the end of a ``with`` block).

    Attributes:
        model: the model edited.
        journal: the last verb's edits of the index it used (its upkeep), for the save's
            touched check; None when no verb handed one on or it could not say.
        handed: how many verbs handed a journal on so far.
    """

    def __init__(self, model: Model | onnx.ModelProto, *, loaded: bool = False,
                 index: GraphIndex | None = None) -> None:
        self.model = as_model(model)
        key = id(self.model.proto)
        if _OPEN.get(key) is not None:
            raise UsageError("a session is already open on this model; close it first (or "
                             "use it: onnxsurgeon.session.active(model))")
        self.journal: Upkeep | None = None
        self.handed = 0
        self._next: GraphIndex | None = index
        """The index the next verb may use as it is: load's or a copy's (the last journal's is
        made from it when asked: :meth:`_kept`)."""
        self._pending: Upkeep | None = None
        """The journal handed on and not yet turned into the next index."""
        self._returned = 0
        self._pristine = loaded and self.model.source is not None and not self.model.warnings
        """The proto is still what load parsed from ``model.source`` (no verb indexed it since,
        load repaired nothing): a :meth:`snapshot` then says its file holds it."""
        if loaded and index is None:
            self._next = io.take_loaded_index(self.model)
        _OPEN[key] = self

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """The caller owns the proto again: verbs stop finding this session."""
        if _OPEN.get(id(self.model.proto)) is self:
            del _OPEN[id(self.model.proto)]
        self._next = self._pending = None

    # ------------------------------------------------------------------ the verbs' side
    def index(self) -> GraphIndex:
        """The index of the model as it is now, for the verb about to change it: the one kept
        by the previous verb's edits (or load's, or the one given), used once; else
        :func:`onnxsurgeon.io.indexed`. O(1) when kept, else O(nodes)."""
        index, self._next = self._kept(), None
        self._pristine = False  # a verb is about to change the proto
        return index if index is not None else io.indexed(self.model)

    def current_index(self) -> GraphIndex:
        """The index of the model as it is now, for a reader between a verb and the save (the
        ``--verify`` staging): like :meth:`index`, without using it up (the next verb and the
        save still see the journal). O(1) when kept."""
        index = self.kept_index()
        if index is None:
            return GraphIndex(self.model.proto)
        return GraphIndex(self.model.proto, _producer=index.producer, _edges=index.edges)

    def kept_index(self) -> GraphIndex | None:
        """The index the next verb gets as it is (load's, the one given, or the one the last
        verb's edits leave: its ``memo["edge_types"]`` holds the types carried on), or None
        when it will build its own. O(1) once the journal's edits are applied."""
        self._next = self._kept()
        return self._next

    def hand_on(self, journal: Upkeep | None) -> None:
        """A verb's last act (through :meth:`onnxsurgeon.edit.Edit.hand_on`): the journal of its
        edits, or None when it cannot say; the next verb's index comes from it."""
        self.journal = self._pending = journal
        self.handed += 1
        self._next = None
        self._pristine = False

    def _kept(self) -> GraphIndex | None:
        """The kept index: the one given or load's, else the one the pending journal's edits
        leave (applied now, from the proto as the verb left it); None: rebuild."""
        journal, self._pending = self._pending, None
        if journal is None:
            return self._next
        state = journal.result()
        if state is None:
            return None
        index = GraphIndex(self.model.proto, _producer=state[0], _edges=state[1])
        types = journal.carried_types()
        if types:
            index.memo["edge_types"] = types
        return index

    # ------------------------------------------------------------------ the owner's side
    def verb_returned(self) -> None:
        """Say that a verb has returned (and nothing touched the proto since): when it handed
        no journal on, nothing kept before it is true any more (a verb may change the proto
        without being able to say how), so the next verb rebuilds and the save checks all."""
        if self.handed == self._returned:
            self.forget()
        self._returned = self.handed

    def forget(self) -> None:
        """Drop the kept index and the journal (the proto changed in a way nobody recorded, or
        a checkpoint reads it): the next verb rebuilds its index and the save checks all."""
        self._next = self._pending = None
        self.journal = None
        self._pristine = False

    def snapshot(self) -> Session:
        """An open session on a private copy of the model (:func:`~onnxsurgeon.io.snapshot`),
        taken before a verb changes it: what ``--verify`` compares the rewrite against. The
        copy's first index reuses (a copy of) this session's kept producer map; taken before any
        verb of a session opened on a loaded model, it is marked as its source file's model
        (``--verify`` then runs that file instead of a serialized copy). O(model) in C.
        Close it when done."""
        twin = io.snapshot(self.model)
        twin._as_source = self._pristine and self.handed == 0
        kept = self.kept_index()
        index = None
        if kept is not None:
            index = GraphIndex(twin.proto, _producer=dict(kept.producer))
        return Session(twin, index=index)

    def save(self, path: str | Path, **options: Any) -> Path:
        """:func:`onnxsurgeon.io.save` of the model, with the journal (``check=Check.TOUCHED``
        then checks what the last verb touched instead of everything)."""
        return io.save(self.model, path, journal=self.journal, **options)


def active(model: Model | onnx.ModelProto) -> Session | None:
    """The open session editing ``model``, if any. O(1)."""
    proto = model.proto if isinstance(model, Model) else model
    return _OPEN.get(id(proto))


def indexed(model: Model | onnx.ModelProto) -> GraphIndex:
    """The index a verb works on: its open session's (:meth:`Session.index`), else
    :func:`onnxsurgeon.io.indexed` (load's map only when provably unchanged)."""
    session = active(model)
    return session.index() if session is not None else io.indexed(model)


def current_index(model: Model | onnx.ModelProto) -> GraphIndex:
    """The index of ``model`` as it is now, for a reader between a verb and the save: its open
    session's (:meth:`Session.current_index`), else a fresh build."""
    session = active(model)
    return session.current_index() if session is not None else GraphIndex(as_model(model).proto)


def hand_on(model: Model | onnx.ModelProto, journal: Upkeep | None) -> None:
    """Hand a verb's journal to the open session of ``model`` (none open: it goes nowhere)."""
    session = active(model)
    if session is not None:
        session.hand_on(journal)
