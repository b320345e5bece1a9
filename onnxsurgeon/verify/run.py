"""Running models in onnxruntime: the only module of the core that imports onnxruntime.

Rules kept here:

* A session is always created from a file path. A model is staged once per verification into a
  private temporary folder with :func:`onnxsurgeon.io.save` (external data streamed, inline weights
  moved out above 2 GB), so protobuf's 2 GB limit never applies and external data always works.
* Graph optimizations are disabled and only the CPU provider is used, so a rewrite that should be
  exact is compared bit for bit.
* At most one session per model is alive at once; the caller decides when it ends (``with``).
* Intermediate tensors are exposed as extra graph outputs in bounded batches. Their declared type
  is the element type only (from :class:`~onnxsurgeon.types.TypeOracle`; onnxruntime infers the
  rest, and a shape would only risk merge warnings). Tensors numpy cannot hold (bfloat16, float8)
  are exposed through an exact ``Cast`` to float32.
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
from ..errors import InvalidModelError
from ..external import is_external, iter_tensors
from ..index import GraphIndex
from ..io import Model, as_model, load, save
from ..names import NameAllocator
from ..types import TypeOracle
from ._worker import ort_log_severity

if TYPE_CHECKING:
    from .isolate import IsolatedRunner, Limits

DEFAULT_BATCH = 32
"""Most intermediate tensors exposed by one session."""

_WIDEN = {TensorProto.BFLOAT16}
for _name in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0",
              "FLOAT4E2M1"):
    if hasattr(TensorProto, _name):
        _WIDEN.add(getattr(TensorProto, _name))

ModelLike = Model | onnx.ModelProto | str | os.PathLike
"""What the verification functions accept: a model in memory or the path of a .onnx file."""


class ModelRunError(InvalidModelError):
    """onnxruntime could not load or run a model (the message names the model and the cause)."""


def to_model(model: ModelLike) -> Model:
    """A :class:`Model` for ``model``: paths are loaded (external weights stay on disk)."""
    if isinstance(model, (str, os.PathLike)):
        return load(model)
    return as_model(model)


def new_session(path: Path, *, threads: int = 0) -> Any:
    """An onnxruntime session for the file ``path``: CPU, optimizations off, no log lines
    (:func:`~onnxsurgeon.verify._worker.ort_log_severity`)."""
    import onnxruntime as ort

    severity = ort_log_severity()  # onnxruntime's own (coloured) lines stay off stderr
    ort.set_default_logger_severity(severity)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = severity
    if threads:
        options.intra_op_num_threads = threads
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises several unrelated types
        raise ModelRunError(
            f"onnxruntime cannot load model '{path.name}': {_first_line(exc)}; check the model "
            "with 'onnxsurgeon inspect' and onnx.checker"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[-1] if text else type(exc).__name__)[:300]


def _unchanged_source(model: Model) -> Path | None:
    """``model.source`` when the proto in memory equals that file and keeps weights external
    (running it in place avoids copying the weights); None otherwise."""
    if model.source is None or not any(is_external(t) for t in iter_tensors(model.proto)):
        return None
    try:
        on_disk = onnx.load(str(model.source), load_external_data=False)
    except Exception:  # noqa: BLE001 - any unreadable file just means "stage a copy"
        return None
    return Path(model.source) if on_disk == model.proto else None


class Workspace:
    """A private temporary folder holding staged models; removed on :meth:`close` / ``with``."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="onnxsurgeon-verify-"))
        self._count = 0

    def fresh_path(self, stem: str) -> Path:
        self._count += 1
        return self.dir / f"{self._count:03d}-{stem}.onnx"

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Staged:
    """One model written once into a :class:`Workspace`, ready for sessions and variants.

    Variants (the same model with extra outputs) are written beside the staged file and share its
    external data file, so exposing intermediates never copies weights again.

    Attributes:
        model: the model as given (its proto is never modified).
        index: a :class:`GraphIndex` of ``model``.
        oracle: a :class:`TypeOracle` over that index.
        path: the staged file.
        label: a name for messages ("reference", "candidate", ...).
        limits: when set, every session runs in a child process under these limits
            (see :mod:`onnxsurgeon.verify.isolate`).
    """

    def __init__(self, model: Model, workspace: Workspace, label: str, *, threads: int = 0,
                 limits: Limits | None = None) -> None:
        self.model = model
        self.label = label
        self.threads = threads
        self.limits = limits
        self.workspace = workspace
        self.index = GraphIndex(model.proto)
        self.oracle = TypeOracle(self.index)
        self._path: Path | None = None
        self._proto: onnx.ModelProto | None = None
        self.source_path = _unchanged_source(model)
        self.output_names = [o.name for o in model.proto.graph.output]
        self.input_names = self.index.input_names()  # inputs with a default value included

    @property
    def path(self) -> Path:
        """The staged copy (written on first use: variants need the weights beside them)."""
        if self._path is None:
            self._path = save(self.model, self.workspace.fresh_path(self.label), check=Check.OFF)
        return self._path

    def base_path(self) -> Path:
        """A file computing the graph outputs: the source file itself when the model in memory
        is unchanged and keeps its weights external (no copy), else the staged copy."""
        return self.source_path if self.source_path is not None else self.path

    def _staged_proto(self) -> onnx.ModelProto:
        if self._proto is None:
            self._proto = onnx.load(str(self.path), load_external_data=False)
        return self._proto

    def is_tensor(self, name: str) -> bool:
        return self.index.is_tensor(name)

    def elem_type(self, name: str) -> int:
        return self.oracle.elem_type(name)

    def write_variant(self, names: Sequence[str]) -> tuple[Path, dict[str, str]]:
        """A file of this model whose outputs are exactly ``names`` (any main-graph tensors).

        Returns the path and, per requested name, the output name to read (a float32 ``Cast`` of
        it for types numpy cannot hold).
        """
        proto = self._staged_proto()
        graph = proto.graph
        saved_outputs = list(graph.output)
        n_nodes = len(graph.node)
        alloc: NameAllocator | None = None
        read_as: dict[str, str] = {}
        known = {o.name: o for o in saved_outputs}
        try:
            del graph.output[:]
            for name in names:
                elem = self.elem_type(name)
                if elem in _WIDEN:
                    alloc = alloc or NameAllocator.for_model(proto)
                    wide = alloc.fresh(f"{name}__as_float")
                    graph.node.append(helper.make_node(
                        "Cast", [name], [wide], name=alloc.fresh(f"{name}__cast"),
                        to=TensorProto.FLOAT))
                    graph.output.append(helper.make_tensor_value_info(wide, TensorProto.FLOAT, None))
                    read_as[name] = wide
                    continue
                if name in known and known[name].type.WhichOneof("value") is not None:
                    graph.output.append(known[name])
                else:
                    vi = onnx.ValueInfoProto(name=name)
                    if elem:
                        vi = helper.make_tensor_value_info(name, elem, None)
                    graph.output.append(vi)
                read_as[name] = name
            path = self.workspace.fresh_path(f"{self.label}-variant")
            path.write_bytes(proto.SerializeToString(deterministic=True))
        finally:
            del graph.output[:]
            graph.output.extend(saved_outputs)
            del graph.node[n_nodes:]
        return path, read_as

    @contextlib.contextmanager
    def session(self, names: Sequence[str] | None = None) -> Iterator[Runner | IsolatedRunner]:
        """A live session computing ``names`` (default: the graph outputs). One at a time."""
        wanted = list(self.output_names if names is None else names)
        needs_variant = names is not None and wanted != self.output_names
        if not needs_variant and any(self.elem_type(n) in _WIDEN for n in wanted):
            needs_variant = True
        if needs_variant:
            path, read_as = self.write_variant(wanted)
        else:
            path, read_as = self.base_path(), {n: n for n in wanted}
        runner: Runner | IsolatedRunner
        if self.limits is not None:
            from .isolate import IsolatedRunner

            runner = IsolatedRunner(path, read_as, self.label, self.limits, self.workspace.dir,
                                    threads=self.threads)
        else:
            runner = Runner(new_session(path, threads=self.threads), read_as, self.label)
        try:
            yield runner
        finally:
            runner.close()
            if path not in (self._path, self.source_path):
                with contextlib.suppress(OSError):
                    path.unlink()

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


class Runner:
    """A live onnxruntime session plus the names it returns."""

    def __init__(self, session: Any, read_as: dict[str, str], label: str) -> None:
        self._session: Any = session
        self.read_as = read_as
        self.label = label
        self._inputs = {i.name for i in session.get_inputs()}
        # inputs with a default value (IR >= 4): fed when given
        self._optional = {i.name for i in session.get_overridable_initializers()}

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; returns requested name -> array. Raises :class:`ModelRunError`."""
        feed = {k: v for k, v in feeds.items() if k in self._inputs or k in self._optional}
        missing = sorted(self._inputs - set(feed))
        if missing:
            raise ModelRunError(
                f"{self.label} model needs input(s) {missing[:8]} that were not given; add them "
                "to the inputs file"
            )
        names = list(self.read_as.values())
        try:
            outs = self._session.run(names, feed)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises several unrelated types
            raise ModelRunError(
                f"onnxruntime failed running the {self.label} model: {_first_line(exc)}; check the "
                "inputs (dtype, shape, value ranges) and the model"
            ) from None
        by_name = dict(zip(names, outs, strict=True))
        return {req: by_name[got] for req, got in self.read_as.items()}

    def close(self) -> None:
        self._session = None
