r"""Unknown flags, caught per subcommand before argparse sees them; list-valued flags.

argparse reports a misspelt flag of a subcommand from the top-level parser ("unrecognized
arguments ... see 'onnxsurgeon --help'"), or not at all when a required option is missing too
(``--opp`` -> "one of the arguments --op --graph --func is required"). :func:`check_flags` walks
the argv the way argparse will, finds the (sub)command each flag belongs to, and refuses the
first unknown one with the closest real flags of that subcommand and its own ``--help``.

Every repeatable flag is a :class:`ListAction`: each value is a comma list (``--map a=b,c=d``),
the flag may be repeated and, where it takes several values, they may follow it
(``--map a=b c=d``); all three give the same list. ``\,`` is a comma inside a name.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from .errors import close_matches
from .selectors import PREFIXES as SELECTOR_PREFIXES

EXIT_CODES_HELP = (
    "exit codes: 0 success; 1 --verify (or verify) found a difference; 2 bad input or usage "
    "(one line on stderr naming the problem and the fix; nothing written); 3 internal error (a "
    "bug: please report it; ONNXSURGEON_DEBUG=1 shows the traceback); 141 standard output closed "
    "early (| head), nothing else reported"
)


LIST_HELP = (
    "lists: every repeatable flag takes a comma list (--map a=b,c=d), the flag repeated or, where "
    "it takes several values, values after it; write '\\,' for a comma inside a name "
    "(--outputs 'a\\,b'); a selector (glob:, re:, op:) takes the rest of its value "
    "(--node a,op:Dropout,Identity)"
)


def split_list(value: str) -> list[str]:
    r"""The items of a comma list: ``'a,b'`` -> ``['a', 'b']``; ``'\,'`` is a literal comma.
    An item that starts a selector (``op:Relu,Neg``, ``re:x{1,3}``, ``glob:``) takes the rest of
    the value: its commas are the selector's."""
    items: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(value):
        char = value[i]
        if not current and value.startswith(SELECTOR_PREFIXES, i):
            items.append(value[i:])
            return items
        if char == "\\" and value[i + 1:i + 2] == ",":
            current.append(",")
            i += 2
            continue
        if char == ",":
            items.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    items.append("".join(current))
    return items


def split_ranges(value: str) -> list[str]:
    """A comma list of ``[NAME=]LO,HI`` items: every two parts make one (``x=0,1,y=-1,1``)."""
    parts = split_list(value)  # a NAME holding '\\,' is kept whole: _range splits at its last '='
    return [",".join(parts[i:i + 2]) for i in range(0, len(parts), 2)]


def whole(value: str) -> list[str]:
    """No splitting: the value is one item (``--regex``: commas are regex syntax)."""
    return [value]


class ListAction(argparse.Action):
    """A repeatable flag: each value is split into items by ``split`` (default
    :func:`split_list`), each item converted by ``item``; the items extend the flag's list
    (starting from a copy of its default, or ``[]``). A bad or empty item is refused in one line
    naming the item and the list it came from."""

    def __init__(self, option_strings: Sequence[str], dest: str, *,
                 item: Callable[[str], Any] = str,
                 split: Callable[[str], list[str]] = split_list, **kwargs: Any) -> None:
        if kwargs.get("type") is not None:
            raise ValueError("ListAction converts with item=, not type=")
        self.item = item
        self.split = split
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        given = [values] if isinstance(values, str) else list(values)
        found = list(getattr(namespace, self.dest, None) or [])
        for value in given:
            parts = self.split(value)
            for part in parts:
                where = f" in the list {value!r}" if len(parts) > 1 else ""
                if not part.strip():
                    raise argparse.ArgumentError(
                        self, f"empty item{where or f' {value!r}'}; separate items with single "
                              "commas ('\\,' is a comma inside a name)")
                try:
                    found.append(self.item(part.strip()))
                except argparse.ArgumentTypeError as exc:
                    raise argparse.ArgumentError(self, f"{exc}{where}") from None
        setattr(namespace, self.dest, found)


class HelpFormatter(argparse.HelpFormatter):
    """Shows an option's default when it has a real one and the help does not say it already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (default is None or default is False or default == [] or default == argparse.SUPPRESS
                or "default" in text or not action.option_strings):
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [s for action in parser._actions for s in action.option_strings]


def _is_value(token: str) -> bool:
    """A token that starts with '-' but is a value: '-', a negative number."""
    if token == "-":
        return True
    try:
        float(token)
    except ValueError:
        return False
    return True


def suggest(flag: str, options: Sequence[str]) -> list[str]:
    """Real flags close to ``flag``: those it abbreviates, then spelling neighbours."""
    longs = [o for o in options if o.startswith("--")]
    prefix = [o for o in longs if flag.startswith("--") and len(flag) > 2 and o.startswith(flag)]
    if prefix:
        return prefix[:3]
    return close_matches(flag, longs, n=2, cutoff=0.6)


def unknown_flag(parser: argparse.ArgumentParser,
                 argv: Sequence[str]) -> tuple[argparse.ArgumentParser, str, list[str]] | None:
    """The first flag in ``argv`` that its (sub)command does not define: (that parser, the
    flag, suggestions), or None."""
    current = parser
    for token in argv:
        if token == "--":
            return None
        if not token.startswith("-") or _is_value(token):
            subs = _subcommands(current)
            if token in subs:
                current = subs[token]
            continue
        known = _options(current)
        flag = token.split("=", 1)[0] if token.startswith("--") else token
        if flag in known or (not token.startswith("--") and token[:2] in known):
            continue
        return current, flag, suggest(flag, known)
    return None


def check_flags(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Exit 2 with one line when ``argv`` holds a flag its subcommand does not know."""
    found = unknown_flag(parser, argv)
    if found is None:
        return
    sub, flag, close = found
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    sub.exit(2, f"{sub.prog}: error: unknown flag '{flag}'; {hint}see '{sub.prog} --help'\n")


# library wording -> the flags a CLI user has (library messages name Python parameters)
_CLI_WORDS: tuple[tuple[str, str], ...] = (
    (r"\buse as_output\b", "use --as-output"),
    (r"\(consumers=\[\.\.\.\]\)", "(--consumers NODE[,NODE...])"),
    (r"\bpass outputs=\[\.\.\.\]", "pass --outputs T[,T...]"),
    (r"\breplace_inputs key\b", "--replace-input key"),
    (r"\breplace_inputs '", "--replace-input '"),
    (r"\bkeep_output_name=False\b", "--rename-output"),
    (r"\bexporter='(\w+)'", r"--exporter \1"),
    (r"\bor another opset\b", "or another --opset"),
    (r"\(framework='(\w+)' if", r"(--framework \1 if"),
    (r"\bpass inputs=\['([^']+)'(?:, \.\.\.)?\]", r"pass --inputs \1"),
    (r"\bpass keep_mismatch=True\b", "pass --keep-mismatch"),
    (r"^output_names gives\b", "--output-names gives"),
)


def cli_words(message: str) -> str:
    """``message`` with the library's parameter names replaced by the CLI's flags."""
    import re

    for pattern, repl in _CLI_WORDS:
        message = re.sub(pattern, repl, message)
    return message


# ------------------------------------------------------------------- the --verify-* group
def verify_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword options of verify's library functions (``verify_log``, ``verify_merge``,
    ``compare``) that a command's ``--verify-*`` flags (:data:`cli_parser.VERIFY_OPTIONS`) ask
    for, with verify's defaults; ``deep`` is the caller's (it also serves ``--html``)."""
    return {"inputs": getattr(args, "verify_inputs", None),
            "samples": getattr(args, "verify_samples", None),
            "seed": getattr(args, "verify_seed", 0),
            "dims": dict(getattr(args, "verify_dims", None) or []) or None,
            "ranges": dict(getattr(args, "ranges", None) or []) or None,
            "rtol": getattr(args, "verify_rtol", None),
            "atol": getattr(args, "verify_atol", None),
            **({"threads": args.verify_threads} if getattr(args, "verify_threads", None) else {})}


def advice(args: argparse.Namespace) -> str | None:
    """What to do about an inconclusive check, in the flags of the command that ran it
    (``args.verify_advice``: its inputs, range and deep flags, set by the parser), leaving out
    what the command line already did (no range advice with real inputs, no deep advice after
    a deep comparison); None when the command declares no flags."""
    flags = getattr(args, "verify_advice", None)
    if not flags:
        return None
    inputs_flag, range_flag, deep_flag = flags
    real = getattr(args, "verify_inputs", None) or (
        getattr(args, "inputs", None) if inputs_flag.startswith("--inputs") else None)
    deep = bool(getattr(args, "verify_deep", False) or getattr(args, "deep", False)
                # against a framework there is no deep comparison to offer
                or getattr(args, "against_tf", None) or getattr(args, "against_torch", None))
    parts = [f"other real inputs ({inputs_flag})" if real else f"real inputs ({inputs_flag})"]
    if not real:
        parts.append(f"another {range_flag}")
    if not deep:
        parts.append(f"{deep_flag} to compare every shared tensor")
    if len(parts) == 1:
        return f"give {parts[0]}"
    return f"give {', '.join(parts[:-1])}{',' if len(parts) > 2 else ''} or {parts[-1]}"


def advised(report: Any, args: argparse.Namespace) -> Any:
    """``report`` with the library's advice (which names ``verify``'s own flags) reworded for
    the command in ``args``: the inconclusive advice by :func:`advice`, and with ``--verify``
    a pair's resolution advice in ``--verify-*`` names (in the reason, the notes and the pairs'
    ``why``)."""
    from dataclasses import replace

    from .verify.informative import RESOLUTION_ADVICE
    from .verify.report import INCONCLUSIVE_ADVICE

    text = advice(args)
    if text is None or text == INCONCLUSIVE_ADVICE:
        return report
    words = {INCONCLUSIVE_ADVICE: text}
    if args.verify_advice[2].startswith("--verify-"):
        words[RESOLUTION_ADVICE] = ("compare the tensors before it (--verify-deep) or give a "
                                    "tighter --verify-atol")

    def reword(line: str | None) -> str | None:
        for old, new in words.items():
            line = line.replace(old, new) if line else line
        return line

    def reworded(p: Any) -> Any:
        why = reword(p.why) if p.why else p.why
        return p if why == p.why else replace(p, why=why)

    pairs = tuple(reworded(p) for p in report.pairs)
    return replace(report, reason=reword(report.reason), pairs=pairs,
                   notes=tuple(str(reword(n)) for n in report.notes))
