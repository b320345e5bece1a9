"""The commands that do not rewrite a model: inspect, diff, verify, convert, demo, and the entry
points of apply and recipe (in :mod:`onnxsurgeon.recipe.command`)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from .cli_flags import advised, verify_options
from .cli_html import _deep_for_page, _write_html
from .cli_io import (
    EXIT_OK,
    _exit_code,
    _framework_step,
    _isolation,
    _load,
    _out,
    _paused_gc,
    _print_report,
    _Progress,
    _ranges,
    _warn,
)
from .errors import UsageError


def _cmd_inspect(args: argparse.Namespace) -> int:
    from .cli_inspect import listing_json, listing_text, profile_of, wants_listing
    from .cli_output import dump
    from .inspect import inspect_model

    if args.around is not None and not args.json and not wants_listing(args):
        return _inspect_around(args)
    if args.html and args.around is None:
        raise UsageError("--html on inspect draws a neighbourhood: add --around TENSOR")
    model = _load(args.model)
    result = inspect_model(model)
    prof = profile_of(model, args)
    if args.json:
        extra = {} if prof is None else {"profile": prof.to_json()}
        _out(dump("inspect", {"model": args.model, **result.to_json(), **listing_json(model, args),
                              **extra}))
    elif prof is not None:
        _out(prof.to_text())
    else:
        _out(listing_text(model, args) if wants_listing(args) else result.to_text())
    if args.html:   # --around with --json or a listing: the page too
        _around_page(args, model)
    return EXIT_OK


def _inspect_around(args: argparse.Namespace) -> int:
    """``inspect --around T`` as text: the nodes within --context hops (and --html's page)."""
    view, lines = _around_page(args, _load(args.model))
    _out("\n".join(lines + [f"  {n.op_type} {n.name}: {', '.join(n.inputs)} -> "
                            f"{', '.join(n.outputs)}" for n in view.nodes]))
    return EXIT_OK


def _around_page(args: argparse.Namespace, model: Any) -> tuple[Any, list[str]]:
    """The neighbourhood of --around and its summary line; writes --html's page when given."""
    from .diff import neighbourhood, render_html
    from .diff.output import write_page
    from .index import GraphIndex
    from .select import resolve

    tensor = resolve(GraphIndex(model.proto), args.around)
    view = neighbourhood(model.proto, tensor, context=args.context)
    lines = [f"{args.around} = tensor '{tensor}': {len(view.nodes)} nodes within "
             f"{args.context} hops"]
    if args.html:
        write_page(render_html(view, title=f"onnxsurgeon inspect: {tensor}",
                               summary=lines[0]), args.html)
    return view, lines


def _cmd_diff(args: argparse.Namespace) -> int:
    before, after = _load(args.before), _load(args.after)
    report = deep = None
    if args.verify:
        from . import verify
        from .record import rewrites

        old, new = rewrites(before.proto), rewrites(after.proto)
        options = {**verify_options(args), **_isolation(args)}
        if len(new) > len(old) and new[:len(old)] == old:
            report = verify.verify_log(before, after, deep=args.verify_deep, **options)
        else:
            report = verify.compare(before, after, deep=args.verify_deep, **options)
        report = advised(report, args)
        deep = _deep_for_page(before, after, args, replay=report.kind != "compare")
        _out(report.to_text())
    _write_html(before, after, args.output, args, summary="", report=report, deep=deep)
    _out(f"drew {args.before} -> {args.after} -> {args.output}")
    if report is None:
        return EXIT_OK
    return _exit_code(report, args)


def _ray_shards(args: argparse.Namespace) -> dict[str, Any]:
    """compare()'s shard options for ``verify --ray`` ({} without it): one shard per CPU."""
    if args.ray is None:
        return {}
    if args.inputs is None or args.rewrite_log or args.against_tf or args.against_torch:
        raise UsageError("--ray shards an --inputs folder of .npz samples between two models; "
                         "give --inputs DIR (and no --rewrite-log / --against-*)")
    if _isolation(args):
        raise UsageError("--ray runs each shard in its own worker process; drop --isolate, "
                         "--timeout and --memory-limit")
    from .cluster import ray_shards

    cpus = max(2, os.cpu_count() or 2)
    quiet = not getattr(args, "verbose", False)
    return {"shards": ray_shards(args.ray or None, cpus, quiet=quiet), "shard_count": cpus}


def _cmd_verify(args: argparse.Namespace) -> int:
    from . import verify

    shards = _ray_shards(args)
    if args.against_tf or args.against_torch:
        if args.against_tf and args.against_torch:
            raise UsageError("give one of --against-tf / --against-torch")
        from . import converters

        candidate = _load(args.candidate)
        with _framework_step(args, "running the framework and onnxruntime"):
            fn = (converters.tf_reference(args.against_tf) if args.against_tf
                  else converters.torch_reference(args.against_torch))
            report = verify.verify_against(
                fn, candidate, inputs=args.inputs, rtol=args.rtol, atol=args.atol,
                seed=args.seed, dims=dict(args.dim) or None, samples=args.samples,
                ranges=_ranges(args), save_inputs=args.save_inputs, threads=args.threads or 0,
                **_isolation(args))
        _print_report(report, args.json)
        return _exit_code(report, args)
    if args.plot and not args.deep:
        raise UsageError("--plot draws the --deep comparison; add --deep")
    if args.plot:
        from .verify.plot import require_matplotlib

        require_matplotlib()
    light = not args.rewrite_log  # compare only runs and reads the models
    reference, candidate = _load(args.reference, light=light), _load(args.candidate, light=light)
    if args.rewrite_log:  # --deep: every tensor on the way to each checked one, layer by layer
        report = verify.verify_log(reference, candidate, inputs=args.inputs, seed=args.seed,
                                   dims=dict(args.dim) or None, samples=args.samples,
                                   ranges=_ranges(args), save_inputs=args.save_inputs,
                                   deep=args.deep, rtol=args.rtol, atol=args.atol,
                                   threads=args.threads or 0, **_isolation(args))
    else:
        report = verify.compare(
            args.reference if shards else reference, args.candidate if shards else candidate,
            pairs=dict(args.pair) or None, inputs=args.inputs,
            rtol=args.rtol, atol=args.atol, seed=args.seed, dims=dict(args.dim) or None,
            samples=args.samples, exact=args.exact, progress=_Progress("verify"),
            ranges=_ranges(args), save_inputs=args.save_inputs, deep=args.deep,
            threads=args.threads or 0, **_isolation(args), **shards,
        )
    if args.plot and report.deep is not None:
        from .verify.plot import plot_deep

        plot_deep(report.deep, args.plot)
    report = advised(report, args)
    _print_report(report, args.json)
    return _exit_code(report, args)


def _cmd_convert(args: argparse.Namespace) -> int:
    if args.framework is None:
        raise UsageError("convert needs a framework: 'convert tf ...' or 'convert torch ...'")
    from . import converters
    from .cli_output import convert_payload, convert_summary, dump
    from .outfile import check_overwrite

    check_overwrite(args.output, force=args.force)
    with _framework_step(args, f"converting {args.source} ({args.framework})"):
        if args.framework == "tf":
            report = converters.cli_convert_tf(args.source, args.output, inputs=args.inputs,
                                               outputs=args.outputs, opset=args.opset,
                                               keep_mismatch=args.keep_mismatch)
        else:
            report = converters.cli_convert_torch(
                args.source, args.output, inputs=args.input, exporter=args.exporter,
                opset=args.opset, dynamic=args.dynamic, output_names=args.output_names,
                keep_mismatch=args.keep_mismatch)
    _out(dump("convert", convert_payload(report, source=args.source)) if args.json
         else convert_summary(report))
    if report.checked and not report.max_excess <= 0:
        _warn(f"the check against {report.framework} failed (max |diff| "
              f"{report.max_abs_diff:.3g}, rtol {report.rtol:g}, atol {report.atol:g}); "
              f"{report.path} was kept (--keep-mismatch) with the mismatch in its metadata")
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo, shown, write_files

    if args.files is not None:
        written = write_files(args.files)
        _out("\n".join(f"wrote {shown(p)}" for p in written))
        _out(f"the README's commands run in {shown(args.files)} (e.g. onnxsurgeon inspect "
             "models/seed_cnn.onnx)")
        return EXIT_OK

    with _framework_step(args, "running the demo (TensorFlow and PyTorch steps take a while)"):
        return run_demo(_out)


def _cmd_apply(args: argparse.Namespace) -> int:
    from .recipe.command import cmd_apply

    options = {k: v for k, v in verify_options(args).items() if v is not None}
    if args.verify_deep:
        options["deep"] = True
    return cmd_apply(args, {**_isolation(args), **options})


def _cmd_recipe(args: argparse.Namespace) -> int:
    from .recipe.command import cmd_recipe

    return cmd_recipe(args)


def _cmd_match(args: argparse.Namespace) -> int:
    """``match``: every site of a selector, or every match of a pattern (``--explain``: the
    near misses too); none is exit 2 with one line. Cyclic GC paused as for a rewrite (a
    framework export makes real garbage: not then)."""
    with _paused_gc(not getattr(args, "framework", None)):
        return _match(args)


def _match(args: argparse.Namespace) -> int:
    from .cli_output import dump, sites_payload
    from .cli_verbs import framework_names
    from .errors import NotFoundError
    from .io import indexed

    model = _load(args.model)
    index = indexed(model)
    framework = framework_names(model)
    misses: list[str] = []
    if args.select is not None:
        from .select import Selector

        found = Selector(index).find(args.select, "tensor")
        sites = [{"nodes": [s.node] if s.node else [], "inputs": {},
                  "outputs": {"tensor": s.tensor} if s.tensor else {}, "matched": s.matched,
                  **({"graph": s.graph} if s.graph else {})} for s in found]
        what = args.select
    else:
        from .cli_verbs import framework_pattern
        from .pattern import find_matches, load_pattern

        pattern = load_pattern(framework_pattern(args, model, args.pattern),
                               any_constant=args.any_constant)
        from .surgery.replace import site_type_lookup

        types = site_type_lookup(index)  # the site types replace compares, the same matches
        result = find_matches(index, pattern, explain=bool(args.explain), types=types)
        if not result.matches and not args.explain:  # the misses for the message
            result = find_matches(index, pattern, explain=True, types=types)
        sites = [m.to_json() for m in result.matches]
        misses = result.misses
        what = args.pattern
        if not sites:
            if args.explain:
                _out("\n".join(f"miss {line}" for line in misses) or "no candidate")
            first = f"; first: {misses[0]}" if misses else ""
            raise NotFoundError(
                f"pattern '{what}' matches nothing in {args.model} ({len(misses)} near misses"
                f"{first}); --explain lists every miss")
    listed = sites_payload(sites, framework)
    if args.json:
        payload: dict[str, Any] = {"model": args.model, "matches": len(listed), "sites": listed}
        if args.explain:
            payload["misses"] = list(misses)
        _out(dump("match", payload))
        return EXIT_OK
    lines = [f"{len(listed)} match{'es' if len(listed) != 1 else ''} of {what}"]
    for k, site in enumerate(listed, 1):
        where = f" [{site['graph']}]" if site.get("graph") else ""
        ins = " ".join(map("=".join, site["inputs"].items()))  # name=tensor, C-level
        outs = " ".join(map("=".join, site["outputs"].items()))
        lines.append(f"  {k}.{where} {', '.join(site['nodes'])}"
                     + (f"  inputs {ins}" if ins else "") + (f"  outputs {outs}" if outs else ""))
    if args.explain:
        lines += [f"  miss {line}" for line in misses]
    _out("\n".join(lines))
    return EXIT_OK
