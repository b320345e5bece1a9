"""The save path behind :func:`onnxsurgeon.io.save` (its contract is documented there): the plan
(:class:`_Plan`: the target, the external-data layout, the check), checked before any byte is
written; the writing (data file, then model file, both atomic); the verdict of ``onnx.checker``;
the tensors re-pointed while writing restored whatever happens."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from itertools import chain, compress
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from onnx import TensorProto

from .atomic import AtomicFile, write_behind
from .checking import (
    Check,
    check_touched,
    check_written,
    checker_failure,
    full_check_for,
    judge_failure,
)
from .datastream import RangeWriter, release_cache, shared_location
from .errors import SurgeryError, UsageError
from .external import ExternalRef, attr_tensors, is_external, iter_tensors, resolve_external
from .upkeep import Upkeep

if TYPE_CHECKING:
    import onnx


class Model(Protocol):
    """What a save reads of :class:`onnxsurgeon.io.Model` (defined in layer 5, above this one)."""

    proto: onnx.ModelProto
    base_dir: Path | None
    source: Path | None
    warnings: list[str]
    data_dirs: dict[str, Path]
    _externals: int | None
    _baseline: bytes | None

PROTOBUF_LIMIT = 2**31 - 1
"""Largest serialized ModelProto protobuf allows."""
EXTERNAL_THRESHOLD = 1_800_000_000
"""Above this many bytes of model proto, save moves large tensors to external data by itself."""
EXTERNALIZE_MIN_BYTES = 1024
"""Tensors smaller than this stay inline when saving switches to external data."""
_CHECK_BYTES_MAX = PROTOBUF_LIMIT - (1 << 20)
"""onnx.checker refuses serialized bytes near 2 GB (it checks the path of such a file)."""


def vouched_by_edits(model: Model, journal: Upkeep | None,
                     nodes_checked: range = range(0)) -> bool:
    """Whether ``model`` passes ``onnx.checker``'s plain check as far as the one verb since
    :func:`load` changed it, as its ``journal`` (the verb's upkeep, from its session) says
    (:func:`~onnxsurgeon.checking.check_touched`; ``nodes_checked``: nodes whose schema check
    the caller runs); False: run the whole check."""
    return check_touched(model.proto, journal, model._baseline, nodes_checked=nodes_checked)


def _edits_inline(model: Model, upkeep: Upkeep | None) -> bool:
    """Whether the tensors ``model``'s verb made (its journal ``upkeep``), and those in the
    attributes of the nodes it inserted or rewired, are all inline. O(touched nodes), or
    O(tensors made) when every touched node is a copy."""
    if upkeep is None:
        return False
    if upkeep.to_read == 0 and upkeep.rewired == 0:
        # every touched node is a copy of one of the model's own, attributes and all (said
        # ``written``): their tensors are as inline as load found the model's
        return not any(map(is_external, upkeep.fresh_tensors))
    touched = upkeep.touched()
    if touched is None:
        return False
    nodes = model.proto.graph.node
    made = chain(upkeep.fresh_tensors, chain.from_iterable(
        attr_tensors(n) for n in map(nodes.__getitem__, touched) if n.attribute))
    return not any(map(is_external, made))


def _trust_held(model: Model, journal: Upkeep | None) -> bool:
    """Whether the edits save trusted to be inline (no walk over every tensor) are: the upkeep
    followed every one and none made an external tensor. False: the save walks after all.
    When applying the edits costs more than the checker the save runs anyway
    (:meth:`~onnxsurgeon.upkeep.Upkeep.dearer_than_check`), the edits as said (none given up)
    are the trust: their structure is the checker's to judge."""
    if journal is None or not _edits_inline(model, journal):
        return False
    if journal.to_read == 0 and journal.rewired == 0 and journal.dearer_than_check():
        return journal.ok
    return journal.touched() is not None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class WalkNeeded(Exception):
    """A save that trusted its verb's edits to have made no external tensor finds it cannot
    vouch for them: it starts again, walking every tensor."""


@dataclass
class _Plan:
    """What a save writes, decided (and checked) before any byte is written.

    Attributes:
        out / folder / data_name: the output, its folder and its data file's name.
        full: the checker run after the file is published (True: full, False: plain, None:
            none); the verdict may settle it before (:func:`_publish_checked`).
        no_walk: the tensors were not walked: trusted to be inline (see :func:`_plan`).
        tensors: every tensor of the model ([] with ``no_walk``).
        refs: id of an external tensor -> its validated reference.
        to_write: the tensors whose bytes go into the new data file, in order.
        relocated: id of a tensor -> the location of the input's own data file
            (``share_data``).
        payload: the serialized model when it is final already (no tensor re-pointed).
        durable: fsync before publishing.
        journal: the verb's edits the save may trust (see :func:`save`).
    """

    out: Path
    folder: Path
    data_name: str
    full: bool | None
    no_walk: bool
    tensors: list[TensorProto]
    refs: dict[int, ExternalRef]
    to_write: list[TensorProto] = field(default_factory=list)
    relocated: dict[int, str] = field(default_factory=dict)
    payload: bytes | None = None
    durable: bool = True
    journal: Upkeep | None = None


def _target(m: Model, path: str | os.PathLike[str]) -> tuple[Path, Path, Path]:
    """The output path, its folder and its data file's path, refused when the output is a
    folder, a link, the input or would overwrite the input."""
    out = Path(path)
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"output folder '{folder}' does not exist; create it first")
    if out.is_symlink():
        raise UsageError(f"output path '{out}' is a symbolic link; choose a plain file path")
    if out.exists() and out.is_dir():
        raise UsageError(f"output path '{out}' is a folder; give a file name ending in .onnx")
    data_path = folder / (out.name + ".data")
    if m.source is not None:
        src = Path(m.source)
        if _same_file(out, src) or Path(os.path.abspath(out)) == Path(os.path.abspath(src)):
            raise UsageError(
                f"output '{out}' is the input model; write to another file (the input is never "
                "modified)"
            )
        if _same_file(data_path, src):
            raise UsageError(
                f"output data file '{data_path}' would overwrite the input model; choose "
                "another output name"
            )
    return out, folder, data_path


def _plan(m: Model, path: str | os.PathLike[str], *, external: bool | None, check: Check | str,
          share_data: bool, trust_edits: bool, durable: bool,
          journal: Upkeep | None = None) -> _Plan:
    """Decide what :func:`save` writes and check everything it can before writing: the
    output path, every external reference, the data file's path. ``trust_edits``: the model is
    the loaded one plus one verb's edits, all inline; its tensors are not walked (~0.5 us per
    node), which the verdict confirms while the file is written."""
    try:
        level = Check(check)
    except ValueError:
        raise UsageError(
            f"check={check!r} is not a check level; use one of {[c.value for c in Check]}"
        ) from None
    out, folder, data_path = _target(m, path)
    proto = m.proto
    full = full_check_for(proto, level)
    touched = full is False and level is Check.TOUCHED
    no_walk = (trust_edits and touched and external is not True and m._externals == 0
               and journal is not None and journal.validated
               and not any(map(is_external, journal.fresh_tensors)))
    if touched and not no_walk and vouched_by_edits(m, journal):
        full = None  # vouched for by the checks of what the verb touched
    tensors = [] if no_walk else list(iter_tensors(proto))
    externals = list(compress(tensors, map(_EXTERNAL.__eq__, map(_LOCATION, tensors))))
    files: dict[tuple[str, ...], os.stat_result] = {}
    refs = {id(t): resolve_external(t, m.base_dir, _files=files, aliases=m.data_dirs)
            for t in externals}
    for ref in refs.values():
        if _same_file(ref.path, out) or _same_file(ref.path, data_path):
            raise UsageError(
                f"output '{out}' would overwrite the input's data file '{ref.path.name}'; "
                "write to another folder or file name"
            )
    plan = _Plan(out, folder, data_path.name, full, no_walk, tensors, refs, durable=durable,
                 journal=journal)
    if external is None:  # a model loaded with external data keeps its big tensors external
        external = bool(externals) or bool(m._externals)  # (e.g. fold's values, issue 30)
        if not external:  # serialize now (ByteSize would walk the whole proto just to size it)
            plan.payload = proto.SerializeToString(deterministic=True)
            if len(plan.payload) > EXTERNAL_THRESHOLD:
                external, plan.payload = True, None
                plan.tensors = tensors = list(iter_tensors(proto)) if no_walk else tensors
    if share_data:
        places: dict[Path, str] = {}
        for t in externals:
            ref = refs[id(t)]
            if ref.path not in places:
                places[ref.path] = shared_location(ref, folder, t.name)
            plan.relocated[id(t)] = places[ref.path]
        externals = []
    plan.to_write = externals + ([
        t for t in tensors
        if not is_external(t) and t.HasField("raw_data")
        and len(t.raw_data) >= EXTERNALIZE_MIN_BYTES] if external else [])
    if plan.to_write and data_path.is_symlink():
        raise UsageError(
            f"data file path '{data_path}' is a symbolic link; remove it or choose another "
            "output name"
        )
    if plan.to_write and data_path.exists() and not data_path.is_file():
        raise UsageError(f"data file path '{data_path}' is not a file; choose another output name")
    return plan


_Saved = list[tuple[TensorProto, bytes | None, list[tuple[str, str]], Any]]
"""The tensors a save re-pointed and what they read before (see :func:`_point`)."""


def save_model(m: Model, path: str | os.PathLike[str], *, external: bool | None,
          check: Check | str, share_data: bool, trust_edits: bool, durable: bool,
          journal: Upkeep | None) -> Path:
    """:func:`~onnxsurgeon.io.save`: plan, write, verdict (raises :class:`WalkNeeded`, having published
    nothing, when a trusting plan's checks then fail)."""
    plan = _plan(m, path, external=external, check=check, share_data=share_data,
                 trust_edits=trust_edits, durable=durable, journal=journal)
    saved: _Saved = []
    try:
        full = _write(m, plan, saved)
    except SurgeryError:
        raise
    except OSError as exc:
        raise UsageError(
            f"cannot write '{plan.out}': {exc.strerror}; check the folder and free space"
        ) from None
    finally:  # the model is restored whatever the writing raised
        _restore(saved)
    if full is not None:
        late = check_written(plan.out, full=full, reference=m.source)
        if late is not None:
            m.warnings.append(late)
    return plan.out


def _write(m: Model, plan: _Plan, saved: _Saved) -> bool | None:
    """Write the data file (when there are bytes to copy) and the model file, judge them
    (:func:`_publish_checked`, for a model without external data) and publish both. Returns
    the check still to run on the published file. The tensors re-pointed are in ``saved``."""
    data_file: AtomicFile | None = None
    model_file: AtomicFile | None = None
    writer: RangeWriter | None = None
    try:
        for t in plan.tensors:
            if id(t) in plan.relocated:
                _point(t, [(e.key, plan.relocated[id(t)] if e.key == "location" else e.value)
                           for e in t.external_data], saved)
        if plan.to_write:
            data_path = plan.folder / plan.data_name
            if plan.durable and data_path.is_file():
                release_cache(data_path)  # the file being replaced: its pages serve the copy
            data_file = AtomicFile(plan.folder, plan.data_name, durable=plan.durable)
            writer = RangeWriter(data_file.fd, direct=plan.durable)
            for t in plan.to_write:
                if is_external(t):
                    start, length = writer.copy(plan.refs[id(t)], t.name), plan.refs[id(t)].length
                else:
                    inline = t.raw_data
                    start, length = writer.write(inline), len(inline)
                _point(t, [("location", plan.data_name), ("offset", str(start)),
                           ("length", str(length))], saved)
            writer.finish()
            data_file.finish()
        payload, plan.payload = plan.payload, None
        if payload is None or plan.to_write:
            payload = m.proto.SerializeToString(deterministic=True)
        if len(payload) > PROTOBUF_LIMIT:
            raise UsageError(
                f"model is {len(payload)} bytes, over protobuf's 2 GB limit even with weights "
                "external; save with external=True"
            )
        model_file = AtomicFile(plan.folder, plan.out.name, durable=plan.durable)
        full = plan.full
        if (not plan.to_write and not plan.relocated and (full is not None or plan.no_walk)
                and len(payload) < _CHECK_BYTES_MAX):
            _publish_checked(m, plan, model_file, payload)
            full = None  # judged before publishing: nothing is left to check
        else:
            if plan.no_walk and not _trust_held(m, plan.journal):
                raise WalkNeeded
            model_file.file.write(payload)
            model_file.finish()
        del payload
        if data_file is not None:
            data_file.commit()
        model_file.commit()
        return full
    finally:
        if writer is not None:
            writer.close()
        for pending in (model_file, data_file):
            if pending is not None:
                pending.close()


def _publish_checked(m: Model, plan: _Plan, model_file: AtomicFile, payload: bytes) -> None:
    """Write ``payload`` (a model without external data) while it is judged from these bytes,
    before it is published: an output that fails is never seen (else the checker reads the
    path, where it finds the data files, after the rename). The write and fsync run in a thread
    for a large payload (they release the interpreter).

    Raises:
        WalkNeeded: a trusting plan whose edits cannot be vouched for.
        OutputCheckError: the bytes fail the checker while the input passes.
    """
    first: str | None = None
    full = plan.full
    join = write_behind(model_file, payload)
    try:
        if not plan.no_walk:
            first = checker_failure(payload, full=bool(full))
        else:
            said = _verdict(m, plan.journal)
            if said == "walk":
                raise WalkNeeded
            if said == "vouched":
                full = None  # vouched for by the checks of what the verb touched
            else:
                first = checker_failure(payload, full=False)
    finally:
        join()
    if first is not None:  # published only when the input fails the same way
        m.warnings.append(judge_failure(first, full=bool(full), reference=m.source))


def _verdict(m: Model, journal: Upkeep | None) -> str:
    """What the checks of a save that trusted its verb's edits say: "walk" (the trust does not
    hold: save again, walking every tensor), "vouched" (the checks of what the verb touched
    vouch for the output) or "check" (run the checker on the bytes)."""
    if not _trust_held(m, journal):
        return "walk"
    return "vouched" if vouched_by_edits(m, journal) else "check"


def _point(t: TensorProto, entries: list[tuple[str, str]], saved: _Saved) -> None:
    """Make ``t`` read ``entries``; what it read before goes to ``saved`` (:func:`_restore`
    puts it back after the save, so the model is unchanged)."""
    saved.append((
        t,
        t.raw_data if not is_external(t) else None,
        [(e.key, e.value) for e in t.external_data],
        t.data_location if t.HasField("data_location") else None,
    ))
    del t.external_data[:]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in entries:
        entry = t.external_data.add()
        entry.key, entry.value = key, value


def _restore(saved_state: _Saved) -> None:
    """Point the tensors a save re-pointed back at what they read before (see :func:`_point`)."""
    for t, raw, entries, location in saved_state:
        del t.external_data[:]
        for key, value in entries:
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        if location is None:  # restore presence too: the in-memory bytes stay identical
            t.ClearField("data_location")
        else:
            t.data_location = location
        if raw is not None:
            t.raw_data = raw


_LOCATION = attrgetter("data_location")
_EXTERNAL = TensorProto.EXTERNAL
