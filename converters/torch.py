"""PyTorch -> ONNX with ``torch.onnx`` (dynamo or TorchScript exporter), keeping module paths.

The name map (``metadata_props['onnxsurgeon.name_map']``) records, for every submodule whose
forward returns one tensor, the ONNX tensor holding that output (``conv5`` -> ``conv2d``,
``layer4.1`` -> ``/layer4/layer4.1/relu_1/Relu_output_0``). It is found by value: the module's
output captured with a forward hook on the example inputs is matched against every ONNX tensor,
preferring tensors the exporter attributes to that module. Modules the exporter dropped (Dropout,
Identity) map to the tensor carrying their value. A module whose value no ONNX tensor holds (a
``conv`` the exporter fused with the batch norm after it) is in no name map;
``metadata_props['onnxsurgeon.fused_names']`` lists it with the module to use instead.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import torch

from onnxsurgeon.errors import UsageError
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.select import CALL_SEP, Selector, node_module

from .check import CheckOutcome, check_notes, outcome_message, run_check
from .common import (
    ATOL,
    RTOL,
    ConversionError,
    ConversionMismatchError,
    ConversionReport,
    ValueIndex,
    check_or_raise,
    compare_outputs,
    example_array,
    finish,
    kept_mismatch,
    run_all_tensors,
    run_onnx,
)

EXPORTERS = ("dynamo", "torchscript")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence exporter warnings and progress text for the duration of an export."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(io.StringIO()):
            yield


@contextlib.contextmanager
def _eval_mode(module: torch.nn.Module) -> Iterator[None]:
    was = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was)


def _flatten(obj: Any) -> list[torch.Tensor]:
    """Tensors of a (nested) forward result in the exporters' output order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        return [t for v in obj.values() for t in _flatten(v)]
    if hasattr(obj, "to_tuple"):
        return [t for v in obj.to_tuple() for t in _flatten(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _flatten(v)]
    return []


def _as_args(example_inputs: Any) -> tuple[Any, ...]:
    if isinstance(example_inputs, tuple):
        return example_inputs
    if isinstance(example_inputs, list):
        return tuple(example_inputs)
    return (example_inputs,)


def _export(module: torch.nn.Module, args: tuple[Any, ...], *, exporter: str, opset: int | None,
            input_names: Sequence[str] | None, output_names: Sequence[str] | None,
            dynamic_axes: Mapping[str, Any] | None, hint: str | None = None) -> onnx.ModelProto:
    """``module`` exported on ``args``; an exporter failure is a :class:`ConversionError` ending
    in ``hint`` (default: try the other exporter or another opset)."""
    if exporter not in EXPORTERS:
        raise UsageError(f"exporter '{exporter}' is unknown; use one of {list(EXPORTERS)}")
    names = list(input_names) if input_names else None
    if names is None and exporter == "torchscript":
        params = [p for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        names = [p.name for p in params[: len(args)]] or None
    try:
        with _quiet(), torch.no_grad():
            if exporter == "dynamo":
                prog = torch.onnx.export(
                    module, args, dynamo=True, opset_version=opset or 18, input_names=names,
                    output_names=list(output_names) if output_names else None,
                    dynamic_axes=dict(dynamic_axes) if dynamic_axes else None, verbose=False,
                )
                if prog is None:
                    raise ConversionError(f"torch.onnx returned no program for {_label(module)}")
                return prog.model_proto
            buf = io.BytesIO()
            torch.onnx.export(
                module, args, buf,  # type: ignore[arg-type]  # file objects work
                dynamo=False, opset_version=opset or 17, input_names=names,
                output_names=list(output_names) if output_names else None,
                dynamic_axes=dict(dynamic_axes) if dynamic_axes else None,
            )
            return onnx.load_from_string(buf.getvalue())
    except (UsageError, ConversionError):
        raise
    except Exception as exc:  # noqa: BLE001 - exporters raise anything
        root: BaseException = exc
        while root.__cause__ is not None:
            root = root.__cause__
        lines = [ln for ln in str(root).strip().splitlines() if ln.strip()]
        first = lines[0].strip() if lines else ""
        other = "torchscript" if exporter == "dynamo" else "dynamo"
        raise ConversionError(
            f"torch.onnx ({exporter}) could not export {_label(module)}: "
            f"{type(root).__name__}: {first[:300]}; "
            + (hint or f"try exporter='{other}' or another opset")
        ) from exc


def _label(module: torch.nn.Module) -> str:
    """What the user calls the exported thing: the function's name for a wrapped function."""
    if isinstance(module, _Wrap):
        return f"function '{getattr(module.fn, '__name__', 'function')}'"
    return type(module).__name__


def _module_values(
    module: torch.nn.Module, args: tuple[Any, ...]
) -> tuple[list[np.ndarray], dict[str, np.ndarray], dict[str, list[str]]]:
    """The module's flat outputs, every submodule's single-tensor output (forward hooks), and for
    each submodule the submodules that read its output (in call order). A submodule called
    several times gives one value per call, keyed ``path#0``, ``path#1``... (``path`` alone
    would be ambiguous)."""
    calls: dict[str, list[np.ndarray]] = {}
    outputs: dict[str, torch.Tensor] = {}
    inputs: dict[str, list[torch.Tensor]] = {}
    order: list[str] = []
    handles = []

    def hook_for(path: str) -> Callable[..., None]:
        def hook(_mod: Any, inp: Any, out: Any) -> None:
            inputs[path] = _flatten(inp)
            if path not in order:
                order.append(path)
            if isinstance(out, torch.Tensor) and out.dtype.is_floating_point:
                outputs[path] = out
                calls.setdefault(path, []).append(out.detach().cpu().numpy().copy())
        return hook

    for path, sub in module.named_modules():
        if path:
            handles.append(sub.register_forward_hook(hook_for(path)))
    try:
        with torch.no_grad():
            result = module(*args)
    finally:
        for h in handles:
            h.remove()
    captured: dict[str, np.ndarray] = {}
    for path, values in calls.items():
        if len(values) == 1:
            captured[path] = values[0]
        else:
            captured.update((f"{path}{CALL_SEP}{k}", v) for k, v in enumerate(values))
    readers: dict[str, list[str]] = {}
    for path, out in outputs.items():
        readers[path] = [p for p in order if p != path and not path.startswith(p + ".")
                         and any(t is out for t in inputs.get(p, ()))]
    return [t.detach().cpu().numpy() for t in _flatten(result)], captured, readers


def module_name_map(model: onnx.ModelProto, values: Mapping[str, np.ndarray],
                    onnx_values: Mapping[str, np.ndarray]) -> dict[str, str]:
    """Module path -> ONNX tensor with the module's output value (see the module docstring)."""
    index = GraphIndex(model)
    sel = Selector(index)
    order = {o: i for i, node in enumerate(model.graph.node) for o in node.output}
    producer_module = {o: node_module(node) or "" for node in model.graph.node for o in node.output}
    vindex = ValueIndex(onnx_values)
    result: dict[str, str] = {}
    for path, value in values.items():
        cands = vindex.matches(value)
        if not cands:
            continue
        base = path.split(CALL_SEP)[0]
        outs = set(sel.module_outputs(base))

        def key(c: str, path: str = base, outs: set[str] = outs) -> tuple[int, int, int]:
            pm = producer_module.get(c, "")
            inside = pm == path or pm.startswith(path + ".")
            return (0 if c in outs else 1, 0 if inside else 1, -order.get(c, -1))

        best = min(cands, key=key)
        if best != path:
            result[path] = best
    return dict(sorted(result.items()))


def from_torch(
    module: torch.nn.Module,
    example_inputs: Any,
    path: str | os.PathLike[str],
    *,
    exporter: str = "dynamo",
    dynamic_axes: Mapping[str, Any] | None = None,
    opset: int | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    check: bool = True,
    rtol: float = RTOL,
    atol: float = ATOL,
    keep_mismatch: bool = False,
) -> ConversionReport:
    """Export ``module`` to ONNX at ``path`` with a module-path name map and a numeric check.

    The module runs in eval mode during export and checks (its mode is restored afterwards).

    Args:
        module: the ``torch.nn.Module``.
        example_inputs: a tensor or a tuple of positional tensors.
        path: the ``.onnx`` file to write.
        exporter: ``"dynamo"`` (torch.export based; opset >= 18) or ``"torchscript"``.
        dynamic_axes: ``{name: {axis: "symbol"}}`` for dims that vary, keyed by input names
            (and output names, to name an output's dims).
        opset: ONNX opset (18 for dynamo, 17 for torchscript when None).
        input_names / output_names: ONNX names of graph inputs / outputs (one name per
            tensor the module returns; without them the exporter's own names, e.g. ``2037``).
        check: run onnxruntime against PyTorch on ``example_inputs`` and raise
            :class:`ConversionMismatchError` beyond ``rtol``/``atol``.
        keep_mismatch: with ``check``, write the model even when it is beyond the tolerance;
            the check's numbers are recorded in ``metadata_props['onnxsurgeon.conversion_check']``
            (``"ok": false``) and in the report's ``notes``.

    Returns:
        A :class:`ConversionReport`.
    """
    if not isinstance(module, torch.nn.Module):
        raise UsageError(f"from_torch needs a torch.nn.Module, got {type(module).__name__}")
    args = _as_args(example_inputs)
    with _eval_mode(module):
        model = _export(module, args, exporter=exporter, opset=opset, input_names=input_names,
                        output_names=output_names, dynamic_axes=dynamic_axes)
        ref, values, readers = _module_values(module, args)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    graph_inputs = [i.name for i in model.graph.input]
    if len(graph_inputs) != len(tensors):
        raise ConversionError(
            f"the ONNX model has inputs {graph_inputs} for {len(tensors)} example tensors; "
            "pass only tensor inputs (wrap other arguments in the module)"
        )
    if output_names and len(output_names) != len(ref):
        raise UsageError(
            f"output_names gives {len(output_names)} names but the module returns {len(ref)} "
            "tensors; give one name per output"
        )
    feeds = {n: t.detach().cpu().numpy() for n, t in zip(graph_inputs, tensors, strict=True)}
    max_abs = excess = float("nan")
    verdict, why = None, None
    notes: list[str] = []
    if check:
        outcome = _check(module, args, model, feeds, ref, rtol=rtol, atol=atol)
        max_abs, excess, verdict = outcome.max_abs, outcome.excess, outcome.verdict
        why = outcome.why if verdict == "inconclusive" else None
        if verdict == "fail":
            err = ConversionMismatchError(
                outcome_message("PyTorch -> ONNX conversion", outcome, rtol=rtol, atol=atol,
                                names=[o.name for o in model.graph.output]),
                {"max_abs_diff": outcome.max_abs, "max_excess": outcome.excess,
                 "output": model.graph.output[outcome.output or 0].name})
            if not keep_mismatch:
                raise err
            max_abs, excess, verdict, kept = kept_mismatch(err, rtol=rtol, atol=atol)
            notes.append(kept)
        notes.extend(check_notes(outcome, path, "--against-torch FILE.py:FACTORY"))
    fused: dict[str, dict[str, str]] = {}
    try:
        onnx_values = {**run_all_tensors(model, feeds), **feeds}
        name_map = module_name_map(model, values, onnx_values)
        fused = _fused_modules(model, name_map, values, readers, onnx_values)
    except Exception as exc:  # noqa: BLE001 - the map is best effort; selectors still use metadata
        name_map = {}
        notes.append(f"no name map: {type(exc).__name__}: {exc}"[:300])
    return finish(
        model, path, framework="pytorch", framework_version=torch.__version__.split("+")[0],
        exporter=f"torch.onnx {exporter}", name_map=name_map, max_abs=max_abs, excess=excess,
        checked=check, rtol=rtol, atol=atol, notes=notes, fused=fused, verdict=verdict, why=why,
    )


def _check(module: torch.nn.Module, args: tuple[Any, ...], model: onnx.ModelProto,
           feeds: Mapping[str, np.ndarray], ref: Sequence[np.ndarray], *, rtol: float,
           atol: float) -> CheckOutcome:
    """The conversion check (:func:`~.check.run_check`) on the example inputs and variations of
    them (floats redrawn, integers permuted), in eval mode without gradients; the first sample's
    framework outputs are ``ref`` (already computed)."""
    names = list(feeds)
    positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    base = [feeds[n] for n in names]

    def pair(arrays: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        got = run_onnx(model, dict(zip(names, arrays, strict=True)))
        actual = [got[o.name] for o in model.graph.output]
        if all(a is b for a, b in zip(arrays, base, strict=True)):
            expected = list(ref)
        else:
            call = list(args)
            for i, a in zip(positions, arrays, strict=True):
                call[i] = torch.from_numpy(np.ascontiguousarray(a)).to(args[i].device)
            with _eval_mode(module), torch.no_grad():
                expected = [t.detach().cpu().numpy() for t in _flatten(module(*call))]
        if len(actual) != len(expected):
            raise ConversionError(
                f"the ONNX model has {len(actual)} outputs but the module returns "
                f"{len(expected)} tensors; return tensors only")
        return actual, expected

    return run_check(pair, base, names=[o.name for o in model.graph.output], rtol=rtol,
                     atol=atol)


def _fused_modules(model: onnx.ModelProto, name_map: Mapping[str, str],
                   values: Mapping[str, np.ndarray], readers: Mapping[str, list[str]],
                   onnx_values: Mapping[str, np.ndarray]) -> dict[str, dict[str, str]]:
    """Modules whose output value no ONNX tensor holds (``conv`` fused with the ``bn`` after it)
    -> ``{"op", "node", "use"}``: the first module downstream (single readers, up to 8 steps)
    whose output exists, as ``use``, and the ONNX node making it. Such modules are in no name
    map: no tensor carries their value. Outputs that cannot identify a tensor (constant,
    size < 2) get no entry. O(modules x 8)."""
    vindex = ValueIndex(onnx_values)
    producer = {o: node for node in model.graph.node for o in node.output}
    fused: dict[str, dict[str, str]] = {}
    for path, value in values.items():
        if path in name_map or not vindex.absent(value):
            continue
        entry: dict[str, str] = {}
        nxt = path
        for _ in range(8):
            users = [u for u in readers.get(nxt, []) if not u.startswith(nxt + ".")]
            outer = [u for u in users if not any(u.startswith(v + ".") for v in users)]
            if len(outer) != 1:
                break
            nxt = outer[0]
            target = name_map.get(nxt) or (nxt if nxt in producer else None)
            if target:
                entry["use"] = nxt
                if target in producer:
                    entry.update(op=producer[target].op_type, node=producer[target].name)
                break
        fused[path] = entry
    return dict(sorted(fused.items()))


class _Wrap(torch.nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def _run_on_activation(module: torch.nn.Module, x: torch.Tensor,
                       shape: Sequence[int | str | None], np_dtype: Any) -> list[torch.Tensor]:
    """The function's result on example data of the activation's type. A function that fails
    in PyTorch itself (written for another rank, say) is the user's to fix, whichever exporter
    runs: the message says so instead of suggesting another exporter."""
    try:
        with torch.no_grad():
            return _flatten(module(x))
    except Exception as exc:  # noqa: BLE001 - user code raises anything
        text = " ".join(str(exc).split())[:300]
        dims = ", ".join(str(d) for d in shape)
        raise UsageError(
            f"{_label(module)} fails in PyTorch on the activation ({np.dtype(np_dtype).name} "
            f"[{dims}], rank {len(shape)}; run on an example of shape {list(x.shape)}): "
            f"{type(exc).__name__}: {text}; write it for a tensor of that rank and shape"
        ) from exc


def export_torch_function(func: Any, *, elem_type: int, shape: Sequence[int | str | None],
                          opset: int, exporter: str | None = None,
                          check: bool = True) -> onnx.ModelProto:
    """A PyTorch callable on one tensor as an ONNX model with input ``x`` and output ``y``.

    Symbolic dims of ``shape`` stay symbolic. ``exporter`` defaults to dynamo for opset >= 18 and
    TorchScript below (dynamo cannot write older opsets).
    """
    from onnx import helper

    exporter = exporter or ("dynamo" if opset >= 18 else "torchscript")
    module = func if isinstance(func, torch.nn.Module) else _Wrap(func)
    np_dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    x = torch.from_numpy(example_array(shape, np_dtype, seed=0, sym_size=3))
    dyn = {i: (d if isinstance(d, str) else f"d{i}") for i, d in enumerate(shape)
           if not (isinstance(d, int) and d >= 0)}
    with _eval_mode(module):
        want = _run_on_activation(module, x, shape, np_dtype)
        # the block's opset is the host model's: only the exporter can change
        other = "torchscript" if exporter == "dynamo" else "dynamo"
        hint = (f"try exporter='{other}'" if other == "torchscript" or opset >= 18 else
                f"the model is at opset {opset}, below the dynamo exporter's 18: write the "
                "function with ops the torchscript exporter supports")
        model = _export(module, (x,), exporter=exporter, opset=opset, input_names=["x"],
                        output_names=["y"], dynamic_axes={"x": dyn} if dyn else None, hint=hint)
    if len(model.graph.output) != 1 or len(want) != 1:
        raise UsageError(f"the torch function returns {len(want)} tensors; return exactly one")
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for i, d in enumerate(shape):
        if isinstance(d, str) and i < len(dims):
            dims[i].ClearField("dim_value")
            dims[i].dim_param = d
    if check:
        got = run_onnx(model, {"x": x.numpy()})["y"]
        max_abs, excess = compare_outputs([got], [want[0].numpy()], rtol=RTOL, atol=ATOL)
        check_or_raise("torch function -> ONNX block", max_abs, excess, rtol=RTOL, atol=ATOL)
    return model


__all__ = ["EXPORTERS", "export_torch_function", "from_torch", "module_name_map"]
