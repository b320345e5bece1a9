"""``inspect --nodes / --tensors / --grep``: the listing flags and their output. ``--around T``
(with ``--context K``, shared with the HTML neighbourhood) narrows the listing to the producer
and readers of T plus K more node steps."""

from __future__ import annotations

import argparse
from typing import Any


def add_listing_flags(p: argparse.ArgumentParser) -> None:
    """Add --nodes, --tensors, --grep and --limit to the inspect parser."""
    p.add_argument("--nodes", action="store_true",
                   help="list nodes: name, op, inputs, outputs, torch module (nested bodies too)")
    p.add_argument("--tensors", action="store_true",
                   help="list tensors: dtype, shape, kind, producer, consumers, framework names")
    p.add_argument("--grep", metavar="PATTERN",
                   help="only rows matching this case-insensitive regular expression (names, "
                        "ops, modules, framework names); lists both without --nodes/--tensors")
    p.add_argument("--limit", type=int, default=0, metavar="N",
                   help="show at most N rows of each listing (0: all)")


def add_profile_flags(p: argparse.ArgumentParser, dim: Any) -> None:
    """Add --profile, --by and --dim to the inspect parser (``dim`` parses NAME=SIZE)."""
    from .cli_flags import ListAction

    p.add_argument("--profile", action="store_true",
                   help="cost profile: MACs, FLOPs, parameters, weight and activation bytes per "
                        "node (or --by module|op) at the input shapes, with totals")
    p.add_argument("--by", choices=["node", "module", "op"], default=None,
                   help="with --profile: rows per node (default), per PyTorch module path or TF "
                        "scope (with every enclosing one), or per op type")
    p.add_argument("--dim", dest="dims", action=ListAction, item=dim, nargs="+", default=[],
                   metavar="NAME=SIZE", help="with --profile: the size of a symbolic dimension")


def profile_of(model: Any, args: argparse.Namespace) -> Any:
    """The ``Profile`` the flags ask for, or None without --profile."""
    from .errors import UsageError

    if not args.profile:
        if args.by is not None or args.dims:
            raise UsageError("--by and --dim shape a cost profile: add --profile")
        return None
    from .profile import ProfileBy, profile

    return profile(model, by=ProfileBy(args.by or "node"), dims=dict(args.dims))


def wants_listing(args: argparse.Namespace) -> bool:
    """True when the flags ask for a node or tensor listing."""
    return bool(args.nodes or args.tensors or args.grep)


def _which(args: argparse.Namespace) -> tuple[bool, bool]:
    if args.nodes or args.tensors:
        return bool(args.nodes), bool(args.tensors)
    return True, True  # --grep, or --around with --json: both listings


def _rows(model: Any, args: argparse.Namespace) -> tuple[list[Any] | None, list[Any] | None]:
    from .errors import UsageError
    from .listing import Listing

    if args.limit < 0:
        raise UsageError("--limit takes a whole number >= 0")
    listing = Listing(model)
    want_nodes, want_tensors = _which(args)
    # --context K: the producer and readers of T (one node step) plus K more steps
    query = {"grep": args.grep, "around": args.around, "hops": args.context + 1}
    nodes = listing.nodes(**query) if want_nodes else None
    tensors = listing.tensors(**query) if want_tensors else None
    return nodes, tensors


def _cap(rows: list[Any], limit: int) -> list[Any]:
    return rows[:limit] if limit else rows


def listing_text(model: Any, args: argparse.Namespace) -> str:
    """The listing tables the flags ask for, as text."""
    from .listing import nodes_text, tensors_text

    nodes, tensors = _rows(model, args)
    parts = []
    if nodes is not None:
        parts.append(nodes_text(_cap(nodes, args.limit), total=len(nodes)))
    if tensors is not None:
        parts.append(tensors_text(_cap(tensors, args.limit), total=len(tensors)))
    return "\n\n".join(parts)


def listing_json(model: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The listing fields of ``inspect --json`` (``{}`` when no listing is asked for)."""
    if not wants_listing(args) and args.around is None:
        return {}
    nodes, tensors = _rows(model, args)
    out: dict[str, Any] = {"matched": 0}
    if args.around is not None:
        from .select import resolve

        out["tensor"] = resolve(model, args.around)
    if nodes is not None:
        out["node_list"] = [r.to_json() for r in _cap(nodes, args.limit)]
        out["matched"] += len(nodes)
    if tensors is not None:
        out["tensor_list"] = [r.to_json() for r in _cap(tensors, args.limit)]
        out["matched"] += len(tensors)
    return out
