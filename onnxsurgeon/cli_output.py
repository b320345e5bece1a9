"""What the CLI prints after a command: the ``--json`` objects (see ``onnxsurgeon/schemas/``) and
the one-line human summaries. Pure functions of the results; the CLI writes them.

A rewriting verb's fields come from its result alone (``<verb>_payload(result)``: the result
carries every resolved name), so the command's ``--json`` and a recipe step's ``result`` in
``apply --json`` are the same object."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .schema import stamp

if TYPE_CHECKING:
    from .surgery import (
        BypassResult,
        CleanupResult,
        CopyResult,
        DimsResult,
        ExtractResult,
        FoldResult,
        InsertResult,
        MergeResult,
        OpsetResult,
        OutputsResult,
        RenameResult,
        ReplaceResult,
        RerouteResult,
        SetResult,
        ToposortResult,
    )


_COMPACT_SITES = 1000
"""A document listing more sites than this is written compact, one line: ``json`` indents in
Python (~1.3 s for 15,000 sites), writes compact in C. Same keys, same values."""


def dump(command: str, payload: Mapping[str, Any]) -> str:
    """The ``--json`` text of ``command``: ``payload`` stamped with its schema, indented (compact
    when it lists more than :data:`_COMPACT_SITES` sites)."""
    sites = payload.get("sites")
    if isinstance(sites, list) and len(sites) > _COMPACT_SITES:
        return json.dumps(stamp(command, payload), separators=(",", ":"))
    return json.dumps(stamp(command, payload), indent=2)


def verify_json(report: Any) -> dict[str, Any] | None:
    """A verification report as ``verify --json`` prints it (None without a report)."""
    return None if report is None else stamp("verify", report.to_json())


def extract_payload(result: ExtractResult) -> dict[str, Any]:
    """The ``extract --json`` fields of an ``ExtractResult``."""
    return {"outputs": list(result.outputs), "inputs": list(result.inputs),
            "nodes": result.kept_nodes, "kept_nodes": result.kept_nodes,
            "removed_nodes": result.removed_nodes,
            "removed_initializers": len(result.removed_initializers)}


def copy_payload(result: CopyResult) -> dict[str, Any]:
    """The ``copy --json`` fields of a ``CopyResult``."""
    return {"outputs": dict(result.outputs), "initializers": dict(result.initializers),
            "nodes": dict(result.nodes), "weights": result.weights.value,
            "prefix": result.prefix, "copied_nodes": len(result.nodes),
            "copied_initializers": len(result.initializers)}


def insert_payload(result: InsertResult, *, block: str | None = None) -> dict[str, Any]:
    """The ``insert --json`` fields of an ``InsertResult``; ``block`` says how the block was
    given when the result cannot (``"func"``: a framework function, spliced as a graph). The
    top-level site fields are the first site's; ``sites`` lists every site (a selector)."""
    return {"at": result.at, "block": block or result.block, "processed": result.processed,
            "as_output": result.as_output, "rerouted": list(result.rerouted),
            "rerouted_outputs": list(result.rerouted_outputs), "renamed": dict(result.renamed),
            "block_nodes": list(result.block_nodes),
            "sites": [{"at": r.at, "processed": r.processed, "rerouted": list(r.rerouted),
                       "rerouted_outputs": list(r.rerouted_outputs), "renamed": dict(r.renamed),
                       "block_nodes": list(r.block_nodes), **({"graph": r.graph} if r.graph
                                                             else {})}
                      for r in result.each()]}


def reroute_payload(result: RerouteResult) -> dict[str, Any]:
    """The ``reroute --json`` fields of a ``RerouteResult``."""
    return {"from": result.source, "to": result.target, "rerouted": list(result.rerouted),
            "rerouted_outputs": list(result.rerouted_outputs),
            "unused_nodes": result.unused_nodes, "pruned_nodes": result.pruned_nodes,
            "pruned_initializers": result.pruned_initializers,
            **({"graph": result.graph} if result.graph else {})}


def rename_payload(result: RenameResult) -> dict[str, Any]:
    """The ``rename --json`` fields of a ``RenameResult``."""
    return {"renamed": dict(result.renamed),
            **({"bodies": {k: dict(v) for k, v in result.bodies.items()}} if result.bodies
               else {})}


def bypass_payload(result: BypassResult) -> dict[str, Any]:
    """The ``bypass --json`` fields of a ``BypassResult``."""
    return {"removed": list(result.removed), "rerouted": list(result.rerouted),
            "rerouted_outputs": list(result.rerouted_outputs), "modules": dict(result.modules),
            "pruned": list(result.pruned),
            "pruned_initializers": list(result.pruned_initializers),
            **({"bodies": {k: dict(v) for k, v in result.bodies.items()}} if result.bodies
               else {})}


def sites_payload(sites: list[dict[str, Any]], framework: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Pattern sites as ``match`` / ``replace --json`` list them: the framework names of each
    site's bound tensors (converters' name map) and nodes (torch module paths) under
    ``framework`` when it has any."""
    if not framework:
        return [dict(site) for site in sites]
    out = []
    for site in sites:
        bound = [*site.get("inputs", {}).values(), *site.get("outputs", {}).values()]
        if not site.get("graph"):
            bound += site.get("nodes", [])
        names = {t: framework[t] for t in bound if t in framework}
        out.append({**site, "framework": names} if names else dict(site))
    return out


def replace_payload(result: ReplaceResult,
                    framework: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The ``replace --json`` fields of a ``ReplaceResult``."""
    return {"matches": len(result.sites),
            "sites": sites_payload(result.site_json(), framework or {}),
            "removed_constants": list(result.removed_constants),
            "tolerance": None if result.tolerance is None else list(result.tolerance)}


def merge_payload(result: MergeResult, *, second: str) -> dict[str, Any]:
    """The ``merge --json`` fields of a ``MergeResult``; ``second`` is the second model's path
    as given."""
    return {"second": second, "inputs": list(result.inputs), "outputs": list(result.outputs),
            "renamed": dict(result.renamed), "prefix": result.prefix}


def fold_payload(result: FoldResult) -> dict[str, Any]:
    """The ``fold --json`` fields of a ``FoldResult``."""
    return {"folded": list(result.folded), "removed": list(result.removed),
            "kept": list(result.kept), "body_folded": list(result.body_folded),
            "max_bytes": result.max_bytes, "fuse": result.fuse,
            "fused": list(map(dict, result.fused))}


def dims_payload(result: DimsResult) -> dict[str, Any]:
    """The ``dims --json`` fields of a ``DimsResult``."""
    return {"shapes": dict(result.shapes), "batch": result.batch or None,
            "rewritten": dict(result.rewritten)}


def opset_payload(result: OpsetResult) -> dict[str, Any]:
    """The ``opset --json`` fields of an ``OpsetResult``."""
    return {"from": result.source, "to": result.target, "changed": list(result.changed)}


def _finite(x: float) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def convert_payload(report: Any, *, source: str) -> dict[str, Any]:
    """A converters ``ConversionReport`` as the ``convert --json`` object."""
    excess = _finite(report.max_excess)
    verdict = str(getattr(report, "verdict", "pass" if report.checked else "unchecked"))
    return {
        "framework": report.framework, "framework_version": report.framework_version,
        "exporter": report.exporter, "source": source, "output": str(report.path),
        "opset": int(report.opset), "inputs": list(report.inputs), "outputs": list(report.outputs),
        "name_map": dict(report.name_map),
        "fused": {k: dict(v) for k, v in getattr(report, "fused", {}).items()},
        "check": {"checked": bool(report.checked), "max_abs_diff": _finite(report.max_abs_diff),
                  "max_excess": excess, "rtol": report.rtol, "atol": report.atol,
                  "ok": bool(report.checked) and excess is not None and excess <= 0
                  and verdict == "pass",   # as verify: true only for pass
                  "verdict": verdict, "why": getattr(report, "why", None)},
        "notes": list(report.notes),
    }


def convert_summary(report: Any) -> str:
    """A few readable lines instead of the report object."""
    within = "within" if report.max_excess <= 0 else "BEYOND"
    check = (f"max |diff| vs {report.framework} {report.max_abs_diff:.2e} ({within} rtol "
             f"{report.rtol:g}, atol {report.atol:g})" if report.checked else "not checked")
    if getattr(report, "verdict", "") == "inconclusive":   # it could not have seen a difference
        check = (f"inconclusive: max |diff| vs {report.framework} {report.max_abs_diff:.2e}, but "
                 f"{report.why}")
    lines = [f"converted {report.framework} {report.framework_version} with {report.exporter} "
             f"(opset {report.opset}) -> {report.path}",
             f"  inputs  {', '.join(report.inputs)}",
             f"  outputs {', '.join(report.outputs)}",
             f"  check   {check}",
             f"  name map {len(report.name_map)} framework names (onnxsurgeon inspect "
             f"{report.path} --tensors lists them)"]
    fused = getattr(report, "fused", {})
    if fused:
        lines.append(f"  fused   {len(fused)} framework names have no ONNX tensor (their op was "
                     f"fused into another; onnxsurgeon inspect {report.path} lists them)")
    lines += [f"  note: {n}" for n in report.notes]
    return "\n".join(lines)


def insert_summary(at: str, result: Any, *, as_output: bool, output: str) -> str:
    """What ``insert`` did, naming every graph output it touched (one line per site when a
    selector matched several)."""
    sites = getattr(result, "sites", ())
    if sites:
        lines = [f"inserted at {len(sites)} sites matching {at} -> {output}"]
        lines += ["  " + insert_summary(r.at, r, as_output=as_output, output=output)
                  .rsplit(" -> ", 1)[0] for r in sites]
        return "\n".join(lines)
    if as_output:
        return f"inserted at {at}: {result.processed} (as a new graph output) -> {output}"
    parts = [f"rerouted {len(result.rerouted)} consumers"]
    for name in result.rerouted_outputs:
        if name in result.renamed:
            parts.append(f"graph output '{name}' keeps its name and now carries the processed "
                         f"values; the unprocessed tensor is now '{result.renamed[name]}'")
        else:
            parts.append(f"graph output '{name}' is now '{result.processed}'")
    return f"inserted at {at}: {result.processed} ({'; '.join(parts)}) -> {output}"


def reroute_summary(source: str, target: str, result: Any, *, output: str) -> str:
    """What ``reroute`` did, with the nodes left unused or pruned."""
    outs = f" and {len(result.rerouted_outputs)} graph outputs" if result.rerouted_outputs else ""
    text = f"rerouted {len(result.rerouted)} consumers{outs} of {source} to {target}"
    if result.pruned_nodes or result.pruned_initializers:
        text += (f"; pruned {result.pruned_nodes} unused nodes and "
                 f"{result.pruned_initializers} initializers")
    elif result.unused_nodes:
        text += (f"; {result.unused_nodes} nodes are now unused (no output depends on them; "
                 "--prune removes them)")
    return f"{text} -> {output}"


# ---- hygiene verbs (issue 30): cleanup, toposort, outputs, set
def cleanup_payload(result: CleanupResult) -> dict[str, Any]:
    """The ``cleanup --json`` fields of a ``CleanupResult``: counts and names, by kind."""
    return {"removed": {"nodes": list(result.nodes), "body_nodes": list(result.body_nodes),
                        "initializers": list(result.initializers),
                        "value_info": list(result.value_info),
                        "functions": list(result.functions), "opsets": list(result.opsets)},
            "counts": result.counts()}


def toposort_payload(result: ToposortResult) -> dict[str, Any]:
    """The ``toposort --json`` fields of a ``ToposortResult``."""
    return {"moved": dict(result.moved)}


def outputs_payload(result: OutputsResult) -> dict[str, Any]:
    """The ``outputs --json`` fields of an ``OutputsResult``."""
    return {"added": list(result.added), "removed": list(result.removed),
            "pruned_nodes": list(result.pruned_nodes),
            "pruned_initializers": list(result.pruned_initializers)}


def set_payload(result: SetResult) -> dict[str, Any]:
    """The ``set --json`` fields of a ``SetResult``."""
    return {"attrs": dict(result.attrs), "weights": dict(result.weights),
            "digests": dict(result.digests), "reshape": result.reshape}


def precision_payload(result: Any, auto: Any = None) -> dict[str, Any]:
    """The ``precision --json`` fields of a ``PrecisionResult`` (and of ``--auto-block``'s
    ``AutoBlock``, null without it)."""
    return {"to": result.to, "keep_io_types": result.keep_io_types,
            "blocked": list(result.blocked),
            "kept": [{"node": n, "why": why, "framework": result.framework.get(n)}
                     for n, why in result.kept.items()],
            "converted": result.converted, "initializers": result.initializers,
            "clipped": list(result.clipped), "casts": list(result.casts),
            "budget": None if result.budget is None else list(result.budget),
            "auto_block": None if auto is None else {
                "rounds": auto.rounds, "met": auto.met, "budget": [auto.rtol, auto.atol],
                "worst": {k: (v if v != float("inf") else None) for k, v in auto.worst.items()}}}
