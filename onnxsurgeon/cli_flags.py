"""Unknown flags, caught per subcommand before argparse sees them.

argparse reports a misspelt flag of a subcommand from the top-level parser ("unrecognized
arguments ... see 'onnxsurgeon --help'"), or not at all when a required option is missing too
(``--opp`` -> "one of the arguments --op --graph --func is required"). :func:`check_flags` walks
the argv the way argparse will, finds the (sub)command each flag belongs to, and refuses the
first unknown one with the closest real flags of that subcommand and its own ``--help``.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence

EXIT_CODES_HELP = (
    "exit codes: 0 success; 1 --verify (or verify) found a difference; 2 bad input or usage "
    "(one line on stderr naming the problem and the fix; nothing written); 3 internal error (a "
    "bug: please report it; ONNXSURGEON_DEBUG=1 shows the traceback)"
)


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
    return difflib.get_close_matches(flag, longs, n=2, cutoff=0.6)


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
