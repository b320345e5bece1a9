"""The architecture's rules, enforced (issue 9; ARCHITECTURE.md): imports point down the layers,
the core never imports converters or a framework, onnxruntime stays in verify/ (and ortinfer.py),
and ruff (docstrings, banned imports) and mypy (core and converters) are clean."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LAYERS: dict[str, float] = {
    "errors": 0, "lazy": 0, "_scan": 0, "nodefields": 0,
    "fast": 0.5,
    "scopes": 0.75,  # scope walks without an index: bodies, captures, Use, OuterScope
    "index": 1, "metadata": 1, "scan": 1, "record_base": 1, "selectors": 1.5, "order": 1.75,
    "protos": 2, "names": 2, "closure": 2, "select": 2, "pattern": 2, "validate": 2, "external": 2,
    "checking": 2, "record": 2, "schema": 2, "outfile": 2, "atomic": 2,
    "splice": 2.25,  # a node list spliced from bytes, and the upkeep following it
    "upkeep": 2.5,  # an index kept true across a verb's edits (follows splices through splice)
    "session": 5.25,  # a model and the index its verbs keep: above io, below the edit API
    "edit_leaves": 5.4,  # the editing API's leaf and model-level calls (Edit inherits them)
    "edit": 5.5,  # the one editing API: above io (hands the journal on), below surgery
    "profile": 5.75,  # the cost model: inspect --profile and split (surgery) use it
    "ortinfer": 3, "datastream": 3,
    "types": 4,
    "saving": 4.75,  # save's path behind io.save: plan, write, verdict
    "io": 5, "processing": 5,
    "surgery": 6, "inspect": 6, "interop": 6, "diff": 6,
    "listing": 4.5,  # queries over types, below io (Model.nodes/tensors/find use it)
    "verify": 7,
    "notebook": 7.5,  # rich display; lower layers reach it only from `_repr_html_` (DISPLAY_HOOK)
    "recipe": 8, "cluster": 8, "demo": 8, "demo_models": 8, "cli": 8, "__main__": 8,
    "cli_flags": 8, "cli_inspect": 8, "cli_noise": 8, "cli_output": 8, "cli_split": 8,
    "cli_parser": 8, "cli_values": 8, "cli_io": 8, "cli_html": 8, "cli_verbs": 8, "cli_commands": 8,
}
"""Top-level module or subpackage of ``onnxsurgeon`` -> layer (ARCHITECTURE.md). An import must
point to a lower layer, or stay inside its own module/subpackage; the orchestration layer (8: the
CLI, recipes, the demo) may also use itself. ``onnxsurgeon/__init__.py`` re-exports up to io."""
ORCHESTRATION = 8
PACKAGE_EXPORTS_UP_TO = 5
CONVERTER_DISPATCHERS = {"onnxsurgeon.cli", "onnxsurgeon.cli_verbs", "onnxsurgeon.cli_commands",
                         "onnxsurgeon.demo", "onnxsurgeon.recipe.command"}
"""The only core modules that may import onnxsurgeon.converters (they dispatch to it)."""
ORT_ALLOWED = ("onnxsurgeon.verify", "onnxsurgeon.ortinfer")
FRAMEWORKS = {"tensorflow", "torch", "tf2onnx", "keras"}


DISPLAY_HOOK = ("_repr_html_", "notebook")
"""A method called ``_repr_html_`` (Jupyter's rich display) may import the notebook layer, from
any layer: it runs only when a notebook shows the object, so the import stays out of every
other path."""


def _display_hook_lines(tree: ast.AST) -> set[int]:
    """Lines of the imports inside a ``_repr_html_`` method."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == DISPLAY_HOOK[0]:
            lines.update(n.lineno for n in ast.walk(node)
                         if isinstance(n, ast.Import | ast.ImportFrom))
    return lines


def _imports(source: str, module: str, is_package: bool) -> list[tuple[str, int]]:
    """(absolute imported module, line) for every import in ``source`` (relative ones resolved;
    ``from . import x`` counts as importing ``<package>.x``)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.append((node.module or "", node.lineno))
                continue
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - (node.level - 1)])
            if node.module:
                found.append((f"{base}.{node.module}", node.lineno))
            else:
                found.extend((f"{base}.{a.name}", node.lineno) for a in node.names)
    return found


def _unit(module: str) -> str:
    """``onnxsurgeon.surgery.copy`` -> ``surgery``; ``onnxsurgeon`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_violations(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Every import of ``source`` (the core module ``module``) that breaks a rule."""
    bad: list[str] = []
    unit = _unit(module)
    hooks = _display_hook_lines(ast.parse(source))
    for target, line in _imports(source, module, is_package):
        if line in hooks and _unit(target) == DISPLAY_HOOK[1]:
            continue
        where = f"{module}:{line} imports {target}"
        top = target.split(".")[0]
        if top in FRAMEWORKS:
            bad.append(f"{where}: the core never imports a framework (converters/ does)")
        if top == "onnxruntime" and not module.startswith(ORT_ALLOWED):
            bad.append(f"{where}: onnxruntime runs only in verify/ and ortinfer.py")
        if top != "onnxsurgeon":
            continue
        to = _unit(target)
        if to == "converters":
            if module not in CONVERTER_DISPATCHERS:
                bad.append(f"{where}: the core never imports converters (the CLI dispatches)")
            continue
        if to in ("", "__version__") or to == unit:
            continue
        if to not in LAYERS:
            bad.append(f"{where}: '{to}' has no layer; add it to ARCHITECTURE.md and LAYERS")
            continue
        if unit == "":
            if LAYERS[to] > PACKAGE_EXPORTS_UP_TO:
                bad.append(f"{where}: the package re-exports only layers up to io")
            continue
        if unit not in LAYERS:
            bad.append(f"{module}: '{unit}' has no layer; add it to ARCHITECTURE.md and LAYERS")
            continue
        mine, theirs = LAYERS[unit], LAYERS[to]
        if theirs > mine or (theirs == mine and mine != ORCHESTRATION):
            bad.append(f"{where}: layer {mine} ({unit}) may not import layer {theirs} ({to})")
    return bad


def _core_modules() -> list[tuple[Path, str]]:
    out = []
    for path in sorted((ROOT / "onnxsurgeon").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((path, ".".join(parts)))
    return out


def test_core_imports_follow_the_layers():
    bad: list[str] = []
    for path, module in _core_modules():
        bad += layer_violations(path.read_text(), module, is_package=path.name == "__init__.py")
    assert bad == []


@pytest.mark.parametrize("module, source, why", [
    ("onnxsurgeon.surgery.copy", "from ..converters import insert_function", "never imports converters"),
    ("onnxsurgeon.types", "import torch", "framework"),
    ("onnxsurgeon.surgery.insert", "import onnxruntime as ort", "onnxruntime runs only"),
    ("onnxsurgeon.index", "from .types import TypeOracle", "layer 1 (index) may not import layer 4"),
    ("onnxsurgeon.surgery.copy", "from ..verify import compare", "layer 6 (surgery) may not import"),
    ("onnxsurgeon.closure", "from . import select", "layer 2 (closure) may not import layer 2"),
    ("onnxsurgeon.surgery.copy", "from ..newthing import x", "has no layer"),
    ("onnxsurgeon.io", "def show():\n    from .notebook import view_html", "layer 5 (io) may not"),
])
def test_the_layer_check_catches_each_kind_of_violation(module, source, why):
    found = layer_violations(source, module)
    assert len(found) == 1 and why in found[0], found


def test_the_cli_may_dispatch_to_converters_and_verify_may_replay_surgery():
    assert layer_violations("from . import converters", "onnxsurgeon.cli") == []
    assert layer_violations("from ..surgery import copy", "onnxsurgeon.verify.log") == []
    assert layer_violations("import onnxruntime", "onnxsurgeon.verify.run") == []
    hook = "class M:\n    def _repr_html_(self):\n        from .notebook import model_html\n"
    assert layer_violations(hook, "onnxsurgeon.io") == []


EXTERNAL_NAMES = {"ExternalRef", "check_inline_tensor", "element_count", "expected_nbytes",
                  "is_external", "iter_tensors", "open_external", "read_tensor",
                  "resolve_external"}


def test_external_data_helpers_are_imported_from_external_not_through_io():
    import onnxsurgeon.io as io_module

    assert not EXTERNAL_NAMES & set(io_module.__all__)
    bad = []
    for path in [*sorted((ROOT / "onnxsurgeon").rglob("*.py")), *sorted((ROOT / "tests").glob("*.py")),
                 *sorted((ROOT / "converters").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.ImportFrom) and (node.module or "").endswith("io")
                    and (node.module or "").split(".")[-1] == "io"):
                bad += [f"{path.name}: {a.name}" for a in node.names if a.name in EXTERNAL_NAMES]
    assert bad == []


def _tool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, input=stdin)


def test_ruff_is_clean_with_docstring_and_banned_import_rules():
    proc = _tool("ruff", "check", ".")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


@pytest.mark.parametrize("path, banned", [
    ("onnxsurgeon/probe.py", "import torch"),
    ("onnxsurgeon/surgery/probe.py", "import onnxruntime"),
    ("onnxsurgeon/surgery/probe.py", "from onnxsurgeon.converters import insert_function"),
])
def test_ruff_bans_framework_converter_and_onnxruntime_imports_in_the_core(path, banned):
    source = f'"""Probe."""\n\n{banned}  # noqa: F401\n'
    proc = _tool("ruff", "check", "--no-cache", "--stdin-filename", path, "-", stdin=source)
    assert proc.returncode == 1 and "TID251" in proc.stdout, proc.stdout
    allowed = _tool("ruff", "check", "--no-cache", "--stdin-filename", "converters/probe.py", "-",
                    stdin=source)
    assert allowed.returncode == 0, allowed.stdout


def test_mypy_is_clean_on_the_core_and_the_converters():
    proc = _tool("mypy")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "converters" in (ROOT / "pyproject.toml").read_text().split("[tool.mypy]")[1]
