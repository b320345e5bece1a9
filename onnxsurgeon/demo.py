"""``onnxsurgeon demo``: the two seed questions answered on the bundled models, each step proven.

1. "Copy the logits layer and every tensor and op it depends on": extract the logits closure,
   then copy it inside the model with independent weights.
2. "Take the activation act, compute v = func(act), feed v to the rest of the network": insert
   l2_normalize at the activation; and the graph_editor way — build v as a new output, then
   reroute the activation's consumers to it.
Every step is written to a file in a fresh folder and verified with onnxruntime.
"""

from __future__ import annotations

import shlex
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .demo_models import DEMO_MODELS, bundled_dir, bundled_files
from .errors import UsageError
from .io import Model, load, save

MODELS_DIR = bundled_dir("models")
"""The bundled models: ``onnxsurgeon/models`` of an installed wheel, models/ of a checkout."""


def _source_model(name: str, folder: Path, out: Callable[[str], None]) -> Path:
    """The bundled model, else (said through ``out``) one built now into ``folder``."""
    committed = MODELS_DIR / name
    if committed.is_file():
        return committed
    path = folder / name
    save(Model(DEMO_MODELS[name]()), path)
    out(f"(no bundled {name} in {MODELS_DIR}: built it from onnxsurgeon.demo_models into {path})")
    return path


def write_files(dest: str | Path) -> list[Path]:
    """Copy the bundled models and examples into ``dest/models`` and ``dest/examples`` (the
    README's commands name them so), creating the folders; files already there with other
    contents are refused before anything is written. Returns the written paths."""
    root = Path(dest)
    plan = [(src, root / kind / src.name) for kind, files in bundled_files().items()
            for src in files]
    if not plan:
        raise UsageError(f"no bundled models or examples found beside {MODELS_DIR}; reinstall "
                         "onnxsurgeon")
    for src, target in plan:
        if target.exists() and (not target.is_file() or target.read_bytes() != src.read_bytes()):
            raise UsageError(f"'{target}' exists and differs from the bundled file; choose "
                             "another DIR or move it away")
    for src, target in plan:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(src.read_bytes())
    return [target for _, target in plan]


def shown(path: str | Path) -> str:
    """``path`` as the printed commands give it: relative to the working folder when inside it
    (``models/seed_cnn.onnx``), else absolute."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def command(*args: str | Path) -> str:
    """An ``onnxsurgeon`` command line that runs as printed when pasted into a shell (paths
    through :func:`shown`, every argument shell-quoted where needed)."""
    words = [shown(a) if isinstance(a, Path) else a for a in args]
    return "onnxsurgeon " + " ".join(shlex.quote(w) for w in words)


class _Steps:
    def __init__(self, out: Callable[[str], None], folder: Path) -> None:
        self.out = out
        self.folder = folder
        self.failed = 0

    def run(self, title: str, cli: list[str | Path], source: Path, target: str,
            rewrite: Callable[[Model], Any], describe: Callable[[Any], str]) -> Path:
        from .verify import verify_log

        model = load(source)
        result = rewrite(model)
        path = self.folder / target
        save(model, path)
        report = verify_log(load(source), load(path))
        self.failed += 0 if report.ok else 1
        self.out(f"\n== {title}")
        self.out(f"   $ {command(*cli)}")
        self.out(f"   {describe(result)}")
        self.out(f"   onnxruntime check: {report.summary() if report.ok else 'FAILED: ' + report.summary()}")
        return path


def run_demo(out: Callable[[str], None]) -> int:
    """Run every demo step, print a report through ``out``; 0 when every check passed, else 1."""
    from .inspect import inspect_model
    from .surgery import Weights, copy, extract, insert, reroute

    folder = Path(tempfile.mkdtemp(prefix="onnxsurgeon-demo-"))
    steps = _Steps(out, folder)
    src = _source_model("seed_cnn.onnx", folder, out)
    info = inspect_model(load(src))
    out(f"onnxsurgeon demo — model {src.name}: {info.nodes} nodes, {info.initializers} "
        f"initializers, inputs {[t.name for t in info.inputs]}, outputs {[t.name for t in info.outputs]}")
    out(f"outputs are written to {folder}")
    act = "network/layer_conv5/Relu"

    steps.run(
        "Seed 1a: extract the logits closure as a standalone model",
        ["extract", src, "-o", folder / "logits.onnx", "--outputs", "logits:0", "--verify"],
        src, "logits.onnx",
        lambda m: extract(m, ["logits:0"]),
        lambda r: f"kept {r.kept_nodes} nodes, dropped {r.removed_nodes} nodes and "
                  f"{len(r.removed_initializers)} initializers; outputs {list(r.outputs)}",
    )
    steps.run(
        "Seed 1b: copy the logits layer and everything it depends on (independent weights)",
        ["copy", src, "-o", folder / "twin.onnx", "--outputs", "logits:0", "--prefix", "twin/",
         "--verify"],
        src, "twin.onnx",
        lambda m: copy(m, ["logits:0"], weights=Weights.INDEPENDENT, prefix="twin/"),
        lambda r: f"copied {len(r.nodes)} nodes and {len(r.initializers)} initializers; "
                  + ", ".join(f"{k} -> {v}" for k, v in r.outputs.items()),
    )
    steps.run(
        "Seed 2a: v = l2_normalize(act) feeds the rest of the network",
        ["insert", src, "-o", folder / "l2.onnx", "--at", act, "--op", "l2_normalize:axis=1",
         "--verify"],
        src, "l2.onnx",
        lambda m: insert(m, act, op="l2_normalize", params={"axis": 1}),
        lambda r: f"processed tensor {r.processed}; rerouted {list(r.rerouted)}",
    )
    v_path = steps.run(
        "Seed 2b (graph_editor style), step 1: build v = clip(act, 0, 1) as a new output",
        ["insert", src, "-o", folder / "features.onnx", "--at", act, "--op", "clip:min=0,max=1",
         "--as-output", "--verify"],
        src, "features.onnx",
        lambda m: insert(m, act, op="clip", params={"min": 0.0, "max": 1.0}, as_output=True),
        lambda r: f"new output {r.processed}",
    )
    processed = [o.name for o in load(v_path).proto.graph.output][-1]
    steps.run(
        "Seed 2b, step 2: reroute_ts — the consumers of act read v instead",
        ["reroute", v_path, "-o", folder / "rerouted.onnx", "--from", act, "--to", processed,
         "--consumers", "network/flatten/Reshape,network/aux/pool", "--verify"],
        v_path, "rerouted.onnx",
        lambda m: reroute(m, act, processed, consumers=["network/flatten/Reshape", "network/aux/pool"]),
        lambda r: f"rerouted {list(r.rerouted)}",
    )
    framework_steps(out, steps)
    out("")
    if steps.failed:
        out(f"demo finished: {steps.failed} check(s) FAILED")
        return 1
    out("demo finished: every rewrite verified with onnxruntime")
    return 0


def framework_steps(out: Callable[[str], None], steps: _Steps) -> None:
    """The seed scenarios from TensorFlow and PyTorch, when converters have a demo to offer."""
    from .converters import demo as framework_demo

    steps.failed += framework_demo.run(out, steps.folder, MODELS_DIR)
