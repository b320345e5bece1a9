"""Loading and saving models: safe external-data paths, lazy weights, streamed bytes, atomic saves.

Weights stored as external data are never read at load time; :func:`save` copies their bytes from
the source file to the destination in chunks. The checks here do not rely on the installed onnx
version's own (which has had several path bugs): every location is validated by us before any byte
is read.

Security model (see issue 5): a model file is data, never code. :func:`load` parses protobuf only:
it never unpickles, never imports or loads custom-op libraries (it does not create an onnxruntime
session at all), never follows a symlink or hard link out of the model's folder, and never
allocates memory from a declared shape before checking that shape against the bytes present.
External files are opened component by component relative to the model folder with
``O_NOFOLLOW`` (where the OS has ``dir_fd``), and the opened file is checked again with ``fstat``
so a path swapped between the check and the read is refused.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
from google.protobuf.message import DecodeError

from . import scan
from .checking import (
    Check,
    model_fingerprint,
)
from .errors import InvalidModelError, UsageError
from .external import (
    TensorType,
    check_tensors,
    function_tensors,
    iter_tensors,
)
from .index import GraphIndex, NodeEdges, with_initializer_types
from .saving import (  # noqa: F401  (EXTERNAL_THRESHOLD, vouched_by_edits: re-exported)
    EXTERNAL_THRESHOLD,
    EXTERNALIZE_MIN_BYTES,
    PROTOBUF_LIMIT,
    WalkNeeded,
    save_model,
    vouched_by_edits,
)
from .scan import ValueInfos
from .upkeep import Upkeep
from .validate import validate_producers

__all__ = [
    "GraphView", "Model", "as_model", "indexed", "load", "parse_model", "save", "snapshot",
    "take_loaded_index", "validate_tensors",
]
"""External-data helpers (``is_external``, ``read_tensor`` ...) live in :mod:`onnxsurgeon.external`
and are imported from there, not through io."""

if TYPE_CHECKING:
    from .listing import NodeRow, TensorRow

_Fresh = tuple[bytes | None, dict[str, int], NodeEdges | None, ValueInfos | None]
"""What :func:`load` keeps for the first index (:attr:`Model._fresh`)."""


@dataclass
class Model:
    """A model in memory plus where its external data lives.

    Attributes:
        proto: the ``ModelProto`` (source of truth; external tensors keep their references).
        base_dir: the folder external-data locations are relative to (None: no external data).
        source: the file the model was loaded from, if any.
        warnings: one-line notes about repairs made while loading (e.g. nodes re-sorted into
            topological order); the CLI prints them on stderr, the library never does.
    """

    proto: onnx.ModelProto
    base_dir: Path | None = None
    source: Path | None = None
    warnings: list[str] = field(default_factory=list)
    data_dirs: dict[str, Path] = field(default_factory=dict)
    """Extra external-data folders: a location whose first component is a key here is read
    from that folder (set by ``merge`` for the tensors of the second model)."""
    _fresh: _Fresh | None = field(default=None, init=False, repr=False, compare=False)
    """Set by :func:`load`: the bytes parsed (None for weight-heavy protos), the main graph's
    producer map validated from them, its int graph and its value_info entries as read from
    the bytes (:func:`onnxsurgeon.scan.value_info`). :func:`indexed` uses it once, and only after proving the
    proto still serializes to exactly those bytes; :func:`take_loaded_index` hands it, once, to
    the caller that vouches the proto untouched (a :class:`~onnxsurgeon.session.Session`)."""
    _externals: int | None = field(default=None, init=False, repr=False, compare=False)
    """Set by :func:`validate_tensors`: how many tensors were external then."""
    _baseline: bytes | None = field(default=None, init=False, repr=False, compare=False)
    """Set by :func:`load`: the model-level fields it validated (see
    :func:`~onnxsurgeon.checking.check_touched`)."""
    _as_source: bool = field(default=False, init=False, repr=False, compare=False)
    """Set by :meth:`onnxsurgeon.session.Session.snapshot` on a copy of a model as load read it
    (no verb, no repair since): ``source`` holds this very model, so onnxruntime may read that
    file instead of a serialized copy (:class:`onnxsurgeon.verify.run.Staged`)."""

    def __repr__(self) -> str:
        """Short text (the proto's text form could be gigabytes)."""
        g = self.proto.graph
        where = f"{str(self.source)!r}, " if self.source else ""
        return (f"Model({where}{len(g.node)} nodes, {len(g.input)} inputs, {len(g.output)} "
                f"outputs, {len(g.initializer)} initializers)")

    def _repr_html_(self) -> str:
        """A notebook's display: inputs, outputs, opsets, op histogram, weights (no network)."""
        from .notebook import model_html

        return model_html(self)

    def show(self, *, around: str, context: int = 2) -> GraphView:
        """The graph around tensor ``around`` (any selector), ``context`` node steps each way,
        drawn when a notebook displays it (the HTML diff's SVG; nothing is drawn before).

        Raises:
            NotFoundError / AmbiguousNameError: ``around`` names no tensor, or several.
        """
        from .select import resolve

        if context < 0:
            raise UsageError(f"context must be >= 0, got {context}; give 0 or more hops")
        return GraphView(self, resolve(self, around), context)

    # a small read-only view (each call indexes the model as it is now; for many queries keep
    # one onnxsurgeon.listing.Listing)
    def nodes(self, *, grep: str | None = None, around: str | None = None,
              hops: int = 1) -> list[NodeRow]:
        """Every node (nested bodies included): name, op, inputs, outputs, graph, torch module.
        ``grep`` (a case-insensitive regular expression) and ``around`` (a tensor, any
        selector, within ``hops`` node steps) narrow the list. Reads no weight bytes."""
        from .listing import Listing

        return Listing(self).nodes(grep=grep, around=around, hops=hops)

    def tensors(self, *, grep: str | None = None, around: str | None = None,
                hops: int = 1) -> list[TensorRow]:
        """Every main-graph tensor: dtype, shape, kind, producer, consumers, framework names;
        ``grep`` and ``around`` as for :meth:`nodes`."""
        from .listing import Listing

        return Listing(self).tensors(grep=grep, around=around, hops=hops)

    def find(self, name: str) -> TensorRow:
        """The tensor a user name means (ONNX name, framework name, TF ``:0``, node name, torch
        module path), described as in :meth:`tensors`.

        Raises:
            NotFoundError / AmbiguousNameError: with the closest names.
        """
        from .listing import Listing

        return Listing(self).find(name)


@dataclass(frozen=True)
class GraphView:
    """What :meth:`Model.show` returns: the graph around ``tensor`` (an ONNX name), drawn with
    ``context`` hops when a notebook displays it.

    Attributes:
        model: the model drawn (as it is when displayed).
        tensor: the ONNX name of the tensor the view is centred on.
        context: node steps drawn each way.
    """

    model: Model = field(repr=False)
    tensor: str
    context: int = 2

    def _repr_html_(self) -> str:
        from .notebook import view_html

        return view_html(self)


def indexed(model: Model | onnx.ModelProto) -> GraphIndex:
    """A :class:`GraphIndex` of ``model``, reusing the producer map :func:`load` validated when
    the proto is provably unchanged since (it serializes to the very bytes loaded); else a
    fresh build. Load's map is used at most once. O(serialized size) for the comparison,
    instead of a Python pass over the nodes. A verb indexes through
    :func:`onnxsurgeon.session.indexed`: an open session's kept index comes first."""
    if not isinstance(model, Model):
        return GraphIndex(model)
    fresh, model._fresh = model._fresh, None
    if fresh is not None and fresh[0] is not None and model.proto.SerializeToString() == fresh[0]:
        return _loaded(model, fresh)
    return GraphIndex(model.proto)


def take_loaded_index(model: Model) -> GraphIndex | None:
    """The index of load's validated producer map (and int graph), without proving the proto
    unchanged: for the one caller that vouches nothing touched it since :func:`load` (a
    :class:`~onnxsurgeon.session.Session` opened with ``loaded=True``). None when load kept
    none or it was used (once only). O(inputs + initializers)."""
    fresh, model._fresh = model._fresh, None
    return _loaded(model, fresh) if fresh is not None else None


def _loaded(model: Model, fresh: _Fresh) -> GraphIndex:
    index = GraphIndex(model.proto, _producer=fresh[1], _edges=fresh[2], _value_info=fresh[3])
    index.memo["validated"] = True  # load's checks hold for it (see checking.check_touched)
    return index


def snapshot(model: Model) -> Model:
    """A private copy of ``model`` (its proto copied), taken before a verb changes it: what
    ``--verify`` compares the rewrite against, without loading the input again
    (:meth:`onnxsurgeon.session.Session.snapshot` gives the copy load's producer map too).
    O(model) in C."""
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    twin = Model(proto, base_dir=model.base_dir, source=model.source,
                 data_dirs=dict(model.data_dirs))
    twin._externals = model._externals
    return twin


_FRESH_BYTES_PER_NODE = 256
"""load keeps its bytes for :func:`indexed` only when the proto is node-dominated (at most this
many bytes per main-graph node): there the byte comparison (~0.3 us per node) beats the Python
pass it saves (~0.5 us per node). Weight-heavy protos rebuild the index instead: upb serializes
a small initializer in ~3.5 us (60k 16x16 weights: 0.22 s, against 0.03 s for 90k nodes)."""


def as_model(model: Model | onnx.ModelProto) -> Model:
    """Wrap a bare ``ModelProto`` (no external data folder) in a :class:`Model`."""
    return model if isinstance(model, Model) else Model(model)


# ------------------------------------------------------------------------------------ load
def parse_model(data: bytes, label: str) -> onnx.ModelProto:
    """Parse serialized bytes into a ``ModelProto`` (no validation). Only protobuf decoding runs:
    nothing is unpickled, imported or executed."""
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError, RecursionError, MemoryError) as exc:
        if "depth" in str(exc).lower() or isinstance(exc, RecursionError):
            raise InvalidModelError(
                f"'{label}' nests messages deeper than protobuf parses (about 31 levels of "
                "If/Loop/Scan bodies); flatten the control flow or split the model"
            ) from None
        raise InvalidModelError(
            f"'{label}' is not an ONNX model (protobuf parse failed: truncated "
            "or another format); give a complete .onnx file"
        ) from None
    if not proto.HasField("graph") or (len(proto.graph.node) == 0 and len(proto.graph.output) == 0):
        raise InvalidModelError(
            f"'{label}' holds no ONNX graph (not a model file, or an empty one); give a .onnx model"
        )
    if len(proto.opset_import) == 0:
        raise InvalidModelError(
            f"'{label}' declares no opset_import; it is not a valid ONNX model, re-export it"
        )
    return proto


def load(path: str | os.PathLike[str], *, unsorted_functions: bool = False) -> Model:
    """Load an ONNX file without reading external weights; validate it fully.

    Checks every external reference (paths, links, offsets, lengths), every inline tensor against
    its shape, and the graph structure (:func:`onnxsurgeon.validate.validate`: DAG, SSA,
    nesting, recursive functions). Nodes out of topological order are sorted stably and a line
    is added to ``Model.warnings``. O(file size + nodes + edges). External data is looked up in
    the folder of ``path`` as given (a symlinked model file does not move that folder).
    ``unsorted_functions``: a local function body out of topological order is accepted as it
    is (for :func:`onnxsurgeon.surgery.toposort`, which sorts it; load refuses it otherwise).

    Raises:
        NotFoundError / InvalidModelError / UnsafeModelError: one line naming the problem and fix.
    """
    from .errors import NotFoundError

    p = Path(path)
    try:
        st = os.stat(p)
    except OSError:
        raise NotFoundError(f"model file '{p}' does not exist; check the path") from None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidModelError(f"'{p}' is not a file; give the path of a .onnx file")
    if st.st_size == 0:
        raise InvalidModelError(f"'{p}' is empty; give a complete .onnx file")
    if st.st_size > PROTOBUF_LIMIT:
        raise InvalidModelError(
            f"'{p}' is {st.st_size} bytes, over protobuf's 2 GB limit; a valid .onnx file keeps "
            "large weights in external data, re-export it that way"
        )
    try:
        with open(p, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise InvalidModelError(f"cannot read '{p}': {exc.strerror}; check permissions") from None
    proto = parse_model(data, str(p))
    source = Path(os.path.abspath(p))
    model = Model(proto, base_dir=source.parent, source=source)
    # Every tensor error wins over a structural one (the tensors are checked also when the
    # structure is bad), the first in iter_tensors' order. So the tensors that come first (local
    # functions', then the main graph's initializers, whose names and types are read on the
    # way, for validation and the type pass) are checked before the structure, the rest after.
    init_names: list[str] = []
    init_types: list[TensorType] = []
    externals = check_tensors(function_tensors(proto), model.base_dir)
    inits = proto.graph.initializer
    scanned = scan.initializers(data)
    if scanned is not None and len(scanned[0]) == len(inits):
        # read in C from the bytes; the tensors it could not vouch for get the exact check,
        # in order (scan.initializers says why that is the same verdict)
        init_names, init_types, exact = scanned
        externals += check_tensors(map(inits.__getitem__, exact), model.base_dir)
    else:
        externals += check_tensors(inits, model.base_dir, types=init_types, names=init_names)
    try:
        found = validate_producers(proto, initializer_names=init_names, data=data,
                                   unsorted_functions=unsorted_functions)
    except InvalidModelError:
        _check_later_tensors(model, None)  # a bad tensor is reported first, as it always was
        raise
    # the structural pass found the main-graph nodes with attributes: the tensor check looks at
    # those only instead of walking every node again (at their positions after a re-sort)
    externals += _check_later_tensors(model, found.holders)
    model._externals = externals  # as validate_tensors says
    model.warnings.extend(found.warnings)
    model._baseline = model_fingerprint(proto)
    if found.producers is not None:
        cheap = len(data) <= _FRESH_BYTES_PER_NODE * len(proto.graph.node)
        edges = found.edges
        if edges is not None:  # the type pass reads no tensor
            edges = with_initializer_types(edges, proto.graph, init_types)
        listed = found.value_info
        if listed is not None and not cheap:  # the names and types only: the bytes go
            listed = ValueInfos(listed.names, listed.types, None)
        model._fresh = (data if cheap else None, found.producers, edges, listed)
    return model


def _check_later_tensors(model: Model, main_holders: list[int] | None) -> int:
    """:func:`validate_tensors` after the local functions' tensors and the main graph's
    initializers (load checks those first); how many of those tensors are external."""
    return check_tensors(
        iter_tensors(model.proto, main_holders=main_holders, after_initializers=True),
        model.base_dir)


def validate_tensors(model: Model, *, main_holders: list[int] | None = None) -> None:
    """Check every tensor's data against its declared shape and every external reference.
    ``main_holders``: main-graph node indexes with attributes, when known (see
    :func:`iter_tensors`)."""
    model._externals = check_tensors(iter_tensors(model.proto, main_holders=main_holders),
                                     model.base_dir)


# ------------------------------------------------------------------------------------ save
def save(model: Model | onnx.ModelProto, path: str | os.PathLike[str], *,
         external: bool | None = None, check: Check | str = Check.SMALL,
         share_data: bool = False, durable: bool = True,
         journal: Upkeep | None = None) -> Path:
    """Write ``model`` to ``path`` atomically and deterministically.

    External tensors stay external: their bytes are copied from the source data file into one
    fresh data file named ``<output file name>.data`` beside the output (the input's location
    names are never reused), by the kernel where it can (``copy_file_range``), each distinct
    byte range once. With ``share_data`` they are not copied at all: the output names the
    input's data file(s) in place, by a relative path that must stay inside the output folder's
    tree and open the very file validated on load (the same rules as loading); the output then
    needs those files, unchanged, at that place. With ``external=None`` the save switches inline
    tensors to external data by itself when the proto would pass 2 GB. The input file and its
    data files are never written. Files are written invisibly (:mod:`~onnxsurgeon.atomic`: a
    killed save leaves no file behind), flushed to the disk (fsync) and renamed into place only
    when complete, so an interrupted save leaves no partial output, even after a power loss (the
    data file is written with direct I/O where the filesystem takes it, else handed to the disk
    while it is copied, so the flush adds little to the copy; see
    :mod:`~onnxsurgeon.datastream`). ``durable=False`` skips the flushes (and direct I/O): for
    scratch files only, such as verification's staging. Peak memory: the serialized proto plus
    one window.

    The written file is checked with ``onnx.checker`` as ``check`` says (see
    :class:`~onnxsurgeon.checking.Check`; by default the full check for models up to 20,000
    nodes, none above; the CLI uses ``Check.TOUCHED``). A file that fails while the model's
    ``source`` file fails the same check is kept, with a warning appended to ``model.warnings``.
    ``journal``: the edits of the one verb since load (its upkeep, as its
    :class:`~onnxsurgeon.session.Session` holds it; :meth:`~onnxsurgeon.session.Session.save`
    passes it): ``Check.TOUCHED`` then checks what they touched; without it, all.

    Returns:
        The path written.

    Raises:
        UsageError: output is the input or one of its data files, a folder, a link, unwritable;
            with ``share_data``, an input data file outside the output folder's tree.
        InvalidModelError / UnsafeModelError: an external reference fails its checks.
        OutputCheckError: the written file fails ``onnx.checker``: a model without external data
            is checked before the rename and never published (the path keeps what it held);
            one with external data is checked after, and removed with its data file.
    """
    m = as_model(model)
    options = {"external": external, "check": check, "share_data": share_data,
               "durable": durable, "journal": journal}
    try:
        return save_model(m, path, trust_edits=True, **options)  # type: ignore[arg-type]
    except WalkNeeded:  # nothing was written: save as for any model
        return save_model(m, path, trust_edits=False, **options)  # type: ignore[arg-type]
