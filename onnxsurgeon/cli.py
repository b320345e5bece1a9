"""The ``onnxsurgeon`` command line. Parses, calls one library function, prints.

Exit codes: 0 success; 1 verification failed; 2 bad input or usage (one line on stderr naming the
problem and the fix, no output file left behind); 3 internal error (a bug: please report it; set
ONNXSURGEON_DEBUG=1 for the traceback); 141 standard output was closed before everything was
written (``onnxsurgeon inspect M | head``: the reader's choice, not an error; nothing is printed
on stderr; 141 is what a shell reports for a program a closed pipe stopped, so
``set -o pipefail`` scripts see it).

Every written model is checked with ``onnx.checker`` before the command succeeds: the full check
(strict shape inference included) when the output has at most :data:`FULL_CHECK_MAX_NODES` nodes
(main graph plus nested If/Loop/Scan bodies); above that, the plain structural check only (SSA,
topological order, scoping, op schemas), because full inference over a large graph costs several
times the whole surgery.

This module runs one command and turns its errors into exit codes. The rest of the CLI:
``cli_parser`` (commands and flags), ``cli_verbs`` (the rewriting commands and their shared
skeleton), ``cli_commands`` (inspect, diff, verify, convert, demo, apply, recipe), ``cli_io``
(streams, exit codes, loading and checked saving), ``cli_html`` (the ``--html`` pictures),
``cli_flags`` (unknown flags), ``cli_output`` (what is printed), ``cli_inspect`` (listings) and
``cli_noise`` (framework log capture).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from .checking import FULL_CHECK_MAX_NODES as FULL_CHECK_MAX_NODES
from .cli_commands import (
    _cmd_apply,
    _cmd_convert,
    _cmd_demo,
    _cmd_diff,
    _cmd_inspect,
    _cmd_match,
    _cmd_recipe,
    _cmd_verify,
)
from .cli_flags import EXIT_CODES_HELP as EXIT_CODES_HELP
from .cli_html import _check_html_path
from .cli_io import EXIT_BAD_INPUT as EXIT_BAD_INPUT
from .cli_io import EXIT_INTERNAL as EXIT_INTERNAL
from .cli_io import EXIT_OK as EXIT_OK
from .cli_io import EXIT_PIPE as EXIT_PIPE
from .cli_io import EXIT_VERIFY_FAILED as EXIT_VERIFY_FAILED
from .cli_io import _isolation
from .cli_io import _node_count as _node_count
from .cli_io import _write as _write
from .cli_noise import native_logs
from .cli_parser import build_parser as build_parser
from .cli_split import _cmd_split
from .cli_verbs import (
    _cmd_bypass,
    _cmd_cleanup,
    _cmd_copy,
    _cmd_dims,
    _cmd_extract,
    _cmd_fold,
    _cmd_insert,
    _cmd_merge,
    _cmd_opset,
    _cmd_outputs,
    _cmd_precision,
    _cmd_rename,
    _cmd_replace,
    _cmd_reroute,
    _cmd_set,
    _cmd_toposort,
)
from .errors import SurgeryError, UsageError

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "inspect": _cmd_inspect, "extract": _cmd_extract, "copy": _cmd_copy, "insert": _cmd_insert,
    "reroute": _cmd_reroute, "verify": _cmd_verify, "convert": _cmd_convert, "demo": _cmd_demo,
    "rename": _cmd_rename, "bypass": _cmd_bypass, "merge": _cmd_merge,
    "precision": _cmd_precision,
    "apply": _cmd_apply, "recipe": _cmd_recipe,
    "diff": _cmd_diff,
    "match": _cmd_match, "replace": _cmd_replace,
    "cleanup": _cmd_cleanup, "toposort": _cmd_toposort, "outputs": _cmd_outputs,
    "set": _cmd_set,
    "split": _cmd_split,
    "fold": _cmd_fold, "dims": _cmd_dims, "opset": _cmd_opset,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (see the module docstring)."""
    from .cli_flags import check_flags

    parser = build_parser()
    check_flags(parser, list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        if getattr(args, "verify", True) is False and _isolation(args):
            raise UsageError("--isolate, --timeout and --memory-limit go with --verify; add "
                             "--verify or drop them")
        _check_html_path(args)
        with native_logs(verbose=bool(getattr(args, "verbose", False))):
            return COMMANDS[args.command](args)
    except SurgeryError as exc:
        from .cli_flags import cli_words

        sys.stderr.write(f"onnxsurgeon: error: {cli_words(_one_line(exc))}\n")
        return EXIT_BAD_INPUT
    except ImportError as exc:
        sys.stderr.write(f"onnxsurgeon: error: {missing_package(exc)}\n")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        sys.stderr.write("onnxsurgeon: interrupted; no output was written\n")
        return 130
    except BrokenPipeError:
        return stdout_closed()
    except Exception as exc:  # noqa: BLE001 - the CLI never shows a traceback by default
        if os.environ.get("ONNXSURGEON_DEBUG"):
            raise
        sys.stderr.write(
            f"onnxsurgeon: internal error: {type(exc).__name__}: {_one_line(exc)}; rerun with "
            "ONNXSURGEON_DEBUG=1 for a traceback and report it\n"
        )
        return EXIT_INTERNAL


def stdout_closed() -> int:
    """Standard output was closed by its reader (``| head``): point it at the null device, so
    that the interpreter's final flush does not fail again, and return :data:`EXIT_PIPE`."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file descriptor (captured): nothing to flush
        pass
    return EXIT_PIPE


EXTRAS = {"torch": "torch", "onnxscript": "torch", "tensorflow": "tf", "tf2onnx": "tf",
          "keras": "tf", "ray": "ray", "jsonschema": "schema", "referencing": "schema"}
"""Top-level package -> the ``onnxsurgeon[...]`` extra (pyproject.toml) that installs it."""


def missing_package(exc: ImportError) -> str:
    """The one line for a missing dependency: the package and the one extra that installs it
    (``pip install 'onnxsurgeon[torch]'``), or the package itself when no extra has it."""
    name = getattr(exc, "name", None)
    if not name:
        return f"a package this command needs is missing ({_one_line(exc)}); install it"
    top = name.split(".")[0]
    extra = EXTRAS.get(top)
    how = f"pip install 'onnxsurgeon[{extra}]'" if extra else f"pip install {top}"
    return f"this command needs the package '{top}', which is not installed; {how}"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:500] if text else type(exc).__name__


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
