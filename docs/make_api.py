"""The API reference, generated from the docstrings by pdoc (issue 32).

    python docs/make_api.py              # writes docs/api/ (git-ignored): open docs/api/index.html
    python docs/make_api.py -o DIR

Covers ``onnxsurgeon``, ``onnxsurgeon.surgery``, ``onnxsurgeon.verify`` and
``onnxsurgeon.converters`` (Google docstrings). Strict, as CI runs it (.ci/run): every warning
pdoc or an import raises fails the build (pdoc warns about an ``__all__`` name that does not
resolve and an annotation it cannot evaluate; it renders a reference it cannot resolve as plain
code, without a warning), every name in the four ``__all__`` must be documented on its module's
page, and none of it may import TensorFlow or PyTorch (converters load them on first use).
Exit 0 when all hold, else 1 with one line per problem on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import warnings
from pathlib import Path

MODULES = ("onnxsurgeon", "onnxsurgeon.surgery", "onnxsurgeon.verify", "onnxsurgeon.converters")
FRAMEWORKS = ("torch", "tensorflow", "tf2onnx", "keras")


def build(out: Path) -> list[str]:
    """Write the reference to ``out``; the problems found (empty: all is well)."""
    problems: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import pdoc
        import pdoc.render

        modules = [importlib.import_module(name) for name in MODULES]
        for module in modules:
            for name in module.__all__:    # a lazy package's verb, not its submodule of that name
                if not hasattr(module, name):
                    problems.append(f"{module.__name__}.{name} is in __all__ but does not resolve")
        problems += [f"importing {MODULES} loaded {f}; the converters must import it lazily"
                     for f in FRAMEWORKS if f in sys.modules]
        pdoc.render.configure(docformat="google")
        pdoc.pdoc(*MODULES, output_directory=out)
    problems += [f"warning: {w.message} ({w.filename}:{w.lineno})" for w in caught]
    for module in modules:
        page = out.joinpath(*module.__name__.split(".")).with_suffix(".html")
        ids = set(re.findall(r'id="([^"]+)"', page.read_text(encoding="utf-8")))
        problems += [f"{module.__name__}.{name} is in __all__ but not documented in {page}"
                     for name in module.__all__ if name not in ids]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path,
                        default=Path(__file__).resolve().parent / "api",
                        help="the folder to write (default: docs/api)")
    args = parser.parse_args(argv)
    problems = build(args.output)
    for line in problems:
        print(f"make_api: {line}", file=sys.stderr)
    if not problems:
        print(f"API reference: {args.output / 'index.html'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
