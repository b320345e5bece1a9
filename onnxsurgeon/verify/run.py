"""Running models in onnxruntime: the only module of the core that imports onnxruntime.

Rules kept here:

* A model is staged once per verification (:class:`Staged`): its index is built (or reused from
  the verb that made it, :func:`onnxsurgeon.session.current_index`) once, and it is serialized once.
  A light model without external data is handed to onnxruntime as bytes (nothing written); a
  heavier one (over :data:`SESSION_BYTES_LIMIT`) is written once to a scratch file and runs from
  it (onnxruntime holds less of a model it reads from a file, and no bytes stay in Python: one
  copy of the weights per session), unless its heavy weights are its heavy source file's
  (:meth:`Staged._reference`: light bytes referencing them, read in place, and shared by all the
  sessions of a :class:`Workspace`, :class:`~.light.SharedWeights`); one with external data runs
  from its unchanged source file, else from a copy saved into a private
  temporary folder without fsync (:func:`onnxsurgeon.io.save` ``durable=False``: external data
  streamed, inline weights moved out above 2 GB), so protobuf's 2 GB limit never applies.
* Intermediate tensors are exposed as extra graph outputs appended to those bytes (a serialized
  ``GraphProto`` merges into the one before it; for a heavy model, to a kernel copy of its
  scratch file), so exposing them never parses the model again. Their declared type is what the model declares (element type only), else none:
  onnxruntime infers it, and the session's output types are then known to :attr:`Staged.oracle`
  (onnx shape inference runs only for what neither says). Tensors numpy cannot hold (bfloat16,
  float8) are exposed through an exact ``Cast`` to float32.
* Graph optimizations are disabled and only the CPU provider is used, so a rewrite that should be
  exact is compared bit for bit.
* The last session a model used stays open for the next request it can serve (the same tensors
  or fewer); at most one idle session per model of a :class:`Workspace`. A session may be opened
  with more tensors than its first request (``also``): what a later request of the same
  verification is likely to need, so that request reuses it instead of building another.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..checking import Check
from ..external import is_external, iter_tensors
from ..index import GraphIndex
from ..io import EXTERNAL_THRESHOLD, Model, as_model, save
from ..names import NameAllocator
from ..session import current_index
from ..types import TypeOracle, known_value_info
from .light import Framing, SharedWeights, framing, needed_nodes, pruned_bytes, referenced_bytes
from .sessions import (  # noqa: F401  (re-exported: their home before sessions)
    COUNTS,
    ModelRunError,
    Runner,
    _first_line,
    default_threads,
    new_session,
)

if TYPE_CHECKING:
    from .isolate import IsolatedRunner, Limits

SESSION_BYTES_LIMIT = 16 * 2**20
"""Largest model (without external data) handed to onnxruntime as bytes. A heavier one is
written once to its staged file and every session loads from a file: given bytes, onnxruntime
keeps about 2.3x the model's size besides them; given a file, 1.4x (measured on 100 MB of
float32 weights, optimizations off), and the bytes need not stay in Python."""

DEFAULT_BATCH = 32
"""Most intermediate tensors exposed by one session."""

_WIDEN = {TensorProto.BFLOAT16}
for _name in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0",
              "FLOAT4E2M1"):
    if hasattr(TensorProto, _name):
        _WIDEN.add(getattr(TensorProto, _name))

ModelLike = Model | onnx.ModelProto | str | os.PathLike
"""What the verification functions accept: a model in memory or the path of a .onnx file."""


def to_model(model: ModelLike) -> Model:
    """A :class:`Model` for ``model``: paths are loaded (external weights stay on disk; heavy
    inline weights are left in the file, :func:`~.light.load_light`)."""
    if isinstance(model, (str, os.PathLike)):
        from .light import load_light

        return load_light(model)
    return as_model(model)


def _unchanged_source(model: Model, external: bool) -> Path | None:
    """``model.source`` when the proto in memory equals that file and keeps weights external,
    or is vouched to be that file's (``Model._as_source``: the copy ``--verify`` takes before
    the verb); running it in place avoids serializing or copying the weights. None otherwise."""
    if model.source is not None and model._as_source and Path(model.source).is_file():
        return Path(model.source)
    if model.source is None or not external:
        return None
    try:
        on_disk = onnx.load(str(model.source), load_external_data=False)
    except Exception:  # noqa: BLE001 - any unreadable file just means "stage a copy"
        return None
    return Path(model.source) if on_disk == model.proto else None


class Workspace:
    """A private temporary folder holding staged models, and the one idle session kept for
    reuse; both are released on :meth:`close` / ``with``."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="onnxsurgeon-verify-"))
        self._count = 0
        self._idle: dict[int, tuple[Staged, tuple[str, ...], Runner | IsolatedRunner]] = {}
        self.weights = SharedWeights()  # weights read in place, one copy for all sessions

    def fresh_path(self, stem: str) -> Path:
        self._count += 1
        return self.dir / f"{self._count:03d}-{stem}.onnx"

    def take(self, staged: Staged, names: Sequence[str]) -> Runner | IsolatedRunner | None:
        """``staged``'s idle session when it computes every one of ``names`` (it is then in use,
        no longer idle), else None."""
        idle = self._idle.get(id(staged))
        if idle is None or idle[0] is not staged or not set(names) <= set(idle[1]):
            return None
        del self._idle[id(staged)]
        return idle[2]

    def release(self, staged: Staged) -> None:
        """Close ``staged``'s idle session (one that cannot serve the next request: closed
        before the session that replaces it opens, so a model's weights are held once)."""
        old = self._idle.pop(id(staged), None)
        if old is not None:
            old[2].close()

    def keep(self, staged: Staged, runner: Runner | IsolatedRunner) -> None:
        """Keep ``runner`` (no longer in use) as ``staged``'s idle session, closing the one
        before."""
        old = self._idle.pop(id(staged), None)
        self._idle[id(staged)] = (staged, tuple(runner.read_as), runner)
        if old is not None:
            old[2].close()

    def close(self) -> None:
        for _, _, runner in self._idle.values():
            runner.close()
        self._idle.clear()
        self.weights.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_ORT_TYPES = {f"tensor({name})": value for name, value in (
    ("float", TensorProto.FLOAT), ("double", TensorProto.DOUBLE), ("float16", TensorProto.FLOAT16),
    ("bfloat16", TensorProto.BFLOAT16), ("int8", TensorProto.INT8), ("int16", TensorProto.INT16),
    ("int32", TensorProto.INT32), ("int64", TensorProto.INT64), ("uint8", TensorProto.UINT8),
    ("uint16", TensorProto.UINT16), ("uint32", TensorProto.UINT32),
    ("uint64", TensorProto.UINT64), ("bool", TensorProto.BOOL), ("string", TensorProto.STRING))}
"""onnxruntime's names of tensor types (``NodeArg.type``) -> ONNX element types."""


class _Types(TypeOracle):
    """The types of a staged model's tensors, cheapest source first: what the model declares
    (:func:`~onnxsurgeon.types.known_value_info`), what onnxruntime inferred for the outputs of
    a session of this model (:meth:`learn`), then the :class:`~onnxsurgeon.types.TypeOracle`'s
    onnx shape inference (once)."""

    def __init__(self, index: GraphIndex) -> None:
        super().__init__(index)
        self.learned: dict[str, tuple[int, Any]] = {}
        """Tensor -> (element type, shape or None) onnxruntime gave it (:meth:`learn`); its
        ValueInfo is made when asked for (:meth:`_learned`): most are only asked their type."""
        self._made: dict[str, onnx.ValueInfoProto] = {}
        self._elems: dict[str, int] = {}
        self._infos: dict[str, onnx.ValueInfoProto | None] = {}
        """:meth:`declared_elem` and :meth:`value_info` answers, until a session says more."""

    def learn(self, session: Any) -> None:
        """Record the tensor types onnxruntime gives the outputs of ``session``."""
        declared = self.index.outputs
        before = len(self.learned)
        for arg in session.get_outputs():
            elem = _ORT_TYPES.get(arg.type)
            if elem is not None and arg.name not in self.learned:
                # a graph output shows its declaration, and an unknown rank reads as [] as a
                # scalar does: the element type only, then (onnx inference says the rest)
                shape = None if arg.name in declared or not arg.shape else arg.shape
                self.learned[arg.name] = (elem, shape)
        if len(self.learned) != before:
            self._elems.clear()
            self._infos.clear()

    def _learned(self, name: str) -> onnx.ValueInfoProto | None:
        """The ValueInfo of what onnxruntime said of ``name`` (None: nothing)."""
        made = self._made.get(name)
        if made is None and name in self.learned:
            elem, shape = self.learned[name]
            # a name onnxruntime gives a dim is its own (``unk__3``): unknown here
            dims = None if shape is None else [d if isinstance(d, int) else None for d in shape]
            made = self._made[name] = helper.make_tensor_value_info(name, elem, dims)
        return made

    def declared_elem(self, name: str) -> int:
        """The element type the model or a session says, without inference (0: neither)."""
        elem = self._elems.get(name)
        if elem is None:
            elem = self._elems[name] = self._declared_elem(name)
        return elem

    def _declared_elem(self, name: str) -> int:
        index = self.index
        vi = known_value_info(index, name)
        if vi is None and name in self.learned:
            return int(self.learned[name][0])
        if vi is None:
            vi = index.value_info.get(name)
            for kind, at in (("input", index.inputs), ("output", index.outputs)):
                if vi is None and name in at:
                    vi = getattr(index.graph, kind)[at[name]]
        if vi is None or not vi.type.HasField("tensor_type"):
            return 0
        return int(vi.type.tensor_type.elem_type)

    def value_info(self, name: str) -> onnx.ValueInfoProto | None:
        if name in self._infos:
            return self._infos[name]
        found = self._infos[name] = self._value_info(name)
        return found

    def _value_info(self, name: str) -> onnx.ValueInfoProto | None:
        vi = known_value_info(self.index, name)
        if vi is not None:
            return vi
        learned = self._learned(name)
        if learned is not None and learned.type.tensor_type.HasField("shape"):
            return learned
        return super().value_info(name) or learned

    def elem_type(self, name: str) -> int:
        return self.declared_elem(name) or super().elem_type(name)


class Staged:
    """One model staged once for sessions and variants (see the module docstring).

    Variants (the same model with extra outputs) are its serialized bytes plus those outputs;
    with external data they are written beside the staged file and share its data file, so
    exposing intermediates never copies weights again.

    Attributes:
        model: the model as given (its proto is never modified).
        index: a :class:`GraphIndex` of ``model`` (the one its verb handed on, when it did).
        oracle: the types of its tensors (declared, then learned from sessions, then inferred).
        label: a name for messages ("reference", "candidate", ...).
        limits: when set, every session runs in a child process under these limits
            (see :mod:`onnxsurgeon.verify.isolate`).
    """

    def __init__(self, model: Model, workspace: Workspace, label: str, *, threads: int = 0,
                 limits: Limits | None = None, index: GraphIndex | None = None) -> None:
        """``index``: an index of ``model`` its caller already holds (else one is made)."""
        self.model = model
        self.label = label
        self.threads = threads
        self.limits = limits
        self.workspace = workspace
        self.index = index if index is not None else current_index(model)
        self.oracle = _Types(self.index)
        self._path: Path | None = None
        self._bytes: bytes | None = None
        self._heavy = False  # inline weights over SESSION_BYTES_LIMIT: sessions from a file
        self._referenced = False  # sessions from light bytes referencing the source's weights
        self.shared: dict[str, Any] = {}
        """Initializer -> the value the sessions share (:class:`~.light.SharedWeights`): one
        value is one range of one file, so two initializers given the same value are equal."""
        self._external = any(map(is_external, iter_tensors(model.proto)))
        # external data read in place by onnxruntime: sessions from the proto's bytes, their
        # locations relative to the model's folder (no copy of the weights is staged)
        self.folder = (model.base_dir if self._external and not model.data_dirs
                       and limits is None else None)
        self._source: list[Path | None] = []  # computed on first use
        self.output_names = [o.name for o in model.proto.graph.output]
        self.kept: dict[str, list[Any]] = {}
        """Values of tensors a comparison's runs computed besides what it read, one per sample
        of :attr:`kept_feeds` (:meth:`kept_runs`): the settling after it reads them instead of
        running the samples again."""
        self.kept_feeds: Sequence[Any] | None = None
        self._framing: tuple[bytes, Framing | None] | None = None  # of the bytes it was read from
        self.input_names = self.index.input_names()  # inputs with a default value included

    @property
    def path(self) -> Path:
        """A file of the model (written on first use, without fsync: a scratch copy)."""
        if self._path is None:
            if self._in_memory() and not self._external and not self._referenced:
                self._path = self.workspace.fresh_path(self.label)
                self._path.write_bytes(self._serialized())
            elif self._path is None:  # not written by _in_memory (a heavy model) either
                self._path = save(self.model, self.workspace.fresh_path(self.label),
                                  check=Check.OFF, durable=False)
        return self._path

    @property
    def source_path(self) -> Path | None:
        """The model's unchanged source file with external data (see :func:`_unchanged_source`)."""
        if not self._source:
            self._source.append(_unchanged_source(self.model, self._external))
        return self._source[0]

    def _in_memory(self) -> bool:
        """Whether sessions load this model from bytes (no external data, or external data read
        from :attr:`folder`; at most :data:`SESSION_BYTES_LIMIT`). A heavier model without
        external data is written to its staged file once here, its bytes not kept."""
        if self._heavy:
            return False
        if self._external:
            if self.folder is None:
                return False
            if self._bytes is None:
                data = self.model.proto.SerializeToString()
                if len(data) > SESSION_BYTES_LIMIT:
                    self.folder = None
                    return False
                self._bytes = data
                self.shared = self.workspace.weights.of(self.model.proto, self.folder)
            return True
        if self._bytes is None and self.source_path is not None:  # the file holds the model
            if self._reference(vouched=True):
                return True
            if self.source_path.stat().st_size > SESSION_BYTES_LIMIT:
                self._heavy, self._path = True, self.source_path  # sessions from it, no copy
                return False
            self._bytes = self.source_path.read_bytes()
        if self._bytes is None and self._reference():
            return True
        if self._bytes is None:
            try:
                data = self.model.proto.SerializeToString()
            except ValueError:  # over protobuf's limit: staged on disk, weights external
                self._external = True
                return False
            if len(data) > EXTERNAL_THRESHOLD:
                self._external = True
                return False
            if len(data) > SESSION_BYTES_LIMIT:
                self._heavy = True
                self._path = self.workspace.fresh_path(self.label)
                self._path.write_bytes(data)
                return False
            self._bytes = data
        return True

    def _reference(self, *, vouched: bool = False) -> bool:
        """Whether sessions load this model from light bytes whose heavy weights are references
        into its heavy source file, shared by the workspace's sessions
        (:func:`~.light.referenced_bytes`; ``vouched``: the model is that file's)."""
        found = None if self.limits is not None else referenced_bytes(
            self.model, self.workspace.weights, limit=SESSION_BYTES_LIMIT, vouched=vouched)
        if found is None:
            return False
        self._bytes, self.folder, self.shared = found
        self._referenced = True
        return True

    def _serialized(self) -> bytes:
        """The bytes sessions and variants start from: the model's own (in memory), or the
        staged copy's (whose locations name the staged data file)."""
        if self._in_memory():
            assert self._bytes is not None
            return self._bytes
        if self._bytes is None:
            self._bytes = self.path.read_bytes()
        return self._bytes

    def base(self) -> Path | bytes:
        """What computes the graph outputs: the source file itself when the model in memory is
        unchanged and keeps its weights external (no copy), the bytes in memory, else the
        staged copy."""
        if self._in_memory():
            return self._serialized()
        if self.source_path is not None:
            return self.source_path
        return self.path

    def is_tensor(self, name: str) -> bool:
        return self.index.is_tensor(name)

    def elem_type(self, name: str) -> int:
        return self.oracle.elem_type(name)

    def _variant(self, names: Sequence[str], typed: bool) -> tuple[Path | bytes, dict[str, str]]:
        """A model computing ``names`` too (any main-graph tensors) and the output to read for
        each (a float32 ``Cast`` of it for types numpy cannot hold). Outputs are declared with
        the element type the model says (``typed``: inferred when it does not), else none."""
        pruned = self._pruned(names)
        outputs = set() if pruned is not None else set(self.output_names)
        extra = onnx.ModelProto()
        graph = extra.graph
        alloc: NameAllocator | None = None
        read_as: dict[str, str] = {}
        for name in names:
            elem = self.elem_type(name) if typed else self.oracle.declared_elem(name)
            if elem in _WIDEN:
                alloc = alloc or NameAllocator.for_model(self.model.proto)
                wide = alloc.fresh(f"{name}__as_float")
                graph.node.append(helper.make_node(
                    "Cast", [name], [wide], name=alloc.fresh(f"{name}__cast"),
                    to=TensorProto.FLOAT))
                graph.output.append(helper.make_tensor_value_info(wide, TensorProto.FLOAT, None))
                read_as[name] = wide
                continue
            if name not in outputs:
                vi = graph.output.add()  # helper.make_tensor_value_info(name, elem, None)
                vi.name = name
                if elem:
                    vi.type.tensor_type.elem_type = elem
                outputs.add(name)
            read_as[name] = name
        if not graph.output and not graph.node:
            return self.base(), read_as
        added = extra.SerializeToString(deterministic=True)
        if self._in_memory() and self.limits is None:
            return (pruned if pruned is not None else self._serialized()) + added, read_as
        path = self.workspace.fresh_path(f"{self.label}-variant")
        if self._heavy:  # the staged file copied by the kernel, never read into memory
            shutil.copyfile(self.path, path)
            with open(path, "ab") as f:
                f.write(added)
        else:
            path.write_bytes((pruned if pruned is not None else self._serialized()) + added)
        return path, read_as

    def _pruned(self, names: Sequence[str]) -> bytes | None:
        """The model's bytes through the last node ``names`` need, without graph outputs
        (:func:`~.light.pruned_bytes`: a deep batch of early tensors runs only the start of the
        model), or None; only for a model handed to onnxruntime as bytes (a heavy one's file
        is never read into memory)."""
        nodes = needed_nodes(self.index, names)
        if nodes is None or not self._in_memory():
            return None
        data = self._serialized()
        if self._framing is None or self._framing[0] is not data:
            self._framing = (data, framing(data))
        framed = self._framing[1]
        return None if framed is None else pruned_bytes(data, nodes, framed)

    def _open(self, wanted: list[str]) -> Runner | IsolatedRunner:
        """A new session computing ``wanted``."""
        if self.limits is not None:
            from .isolate import IsolatedRunner

            model, read_as = self._variant(wanted, typed=True)
            if isinstance(model, bytes):  # pragma: no cover - isolated variants are files
                model = self.path
            return IsolatedRunner(model, read_as, self.label, self.limits, self.workspace.dir,
                                  threads=self.threads)
        try:
            model, read_as = self._variant(wanted, typed=False)
            session = new_session(model, threads=self.threads, label=self.label,
                                  folder=self.folder, initializers=self.shared)
        except ModelRunError:  # outputs onnxruntime could not type by itself: say them
            model, read_as = self._variant(wanted, typed=True)
            session = new_session(model, threads=self.threads, label=self.label,
                                  folder=self.folder, initializers=self.shared)
        self.oracle.learn(session)
        if any(read_as[n] == n and self.oracle.declared_elem(n) in _WIDEN for n in wanted):
            model, read_as = self._variant(wanted, typed=False)  # now known: cast them
            session = new_session(model, threads=self.threads, label=self.label,
                                  folder=self.folder, initializers=self.shared)
        self._drop(model)
        return Runner(session, read_as, self.label)

    def _drop(self, model: Path | bytes) -> None:
        if isinstance(model, Path) and model not in (self._path, self.source_path):
            with contextlib.suppress(OSError):
                model.unlink()

    @contextlib.contextmanager
    def session(self, names: Sequence[str] | None = None, *, also: Sequence[str] = (),
                read: Sequence[str] = ()) -> Iterator[Runner | IsolatedRunner]:
        """A live session computing ``names`` (default: the graph outputs): the workspace's
        idle one when it is this model's and computes them, else a new one computing ``also``
        besides (for later requests); kept idle after. ``read``: tensors (of ``also``) its runs
        return too when the session computes them."""
        wanted = list(dict.fromkeys(self.output_names if names is None else names))
        runner = self.workspace.take(self, wanted)
        if runner is None:
            self.workspace.release(self)
        if runner is None and also:
            try:
                runner = self._open(list(dict.fromkeys([*wanted, *also])))
            except ModelRunError:
                runner = None  # what a later request might need: not worth a failure now
        if runner is None:
            runner = self._open(wanted)
        wanted += [n for n in dict.fromkeys(read) if n in runner.read_as and n not in wanted]
        try:
            yield runner.only(wanted)
        finally:
            self.workspace.keep(self, runner)

    def kept_runs(self, feeds: Sequence[Any], names: Sequence[str],
                  ) -> list[dict[str, Any]] | None:
        """The values of ``names`` for each sample of ``feeds`` from :attr:`kept` (what a run of
        a session computing them would return), or None when one was not kept for these
        very samples."""
        if self.kept_feeds is not feeds or not all(n in self.kept for n in names):
            return None
        return [{n: self.kept[n][k] for n in names} for k in range(len(feeds))]

    def drop_kept(self) -> None:
        """Forget :attr:`kept` (their memory is released)."""
        self.kept, self.kept_feeds = {}, None

    def run(self, feeds: Mapping[str, np.ndarray], names: Sequence[str] | None = None,
            *, batch: int = DEFAULT_BATCH) -> dict[str, np.ndarray]:
        """Values of ``names`` (default: graph outputs) for one sample, ``batch`` per session."""
        wanted = list(self.output_names if names is None else dict.fromkeys(names))
        if names is None or len(wanted) <= batch:
            with self.session(None if names is None else wanted) as runner:
                return runner.run(feeds)
        values: dict[str, np.ndarray] = {}
        for start in range(0, len(wanted), batch):
            with self.session(wanted[start:start + batch]) as runner:
                values.update(runner.run(feeds))
        return values
