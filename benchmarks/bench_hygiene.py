"""Benchmark: constant folding (+ cleanup) against onnxsim, onnxslim and onnx-graphsurgeon.

Usage: ``python benchmarks/bench_hygiene.py [--chain-blocks N] [--timeout S] [--skip-peers-on-chain]
[--models NAME ...]``

Models (built here, random weights, nothing downloaded):

* ``bert``: a 2-layer BERT from a config (``transformers.BertModel``, eager attention; GPT-2's
  mask code uses ``aten::diff``, which the TorchScript exporter cannot export), exported by
  torch's TorchScript exporter with its constant folding off at static shapes (1x16): full of
  Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains;
* ``bert_dynamic``: the same BERT exported with a dynamic batch and sequence length: its Shape
  chains read static dims (hidden size, heads) of partly dynamic shapes;
* ``keras_cnn``: the bundled Keras CNN converted by tf2onnx (``models/keras_cnn.onnx``);
* ``torch_bn_cnn``: Conv/BatchNorm/ReLU x2, pooling, Dropout, Linear, exported by torch's
  dynamo exporter without its optimizer (the BatchNormalization nodes stay in the file);
* ``chain``: benchmarks/run.py's MatMul/Add/Relu chain (90k nodes by default): nothing folds;
  every MatMul + Add(constant bias) fuses into a Gemm (as onnxsim does).

Contenders, each a whole process under ``/usr/bin/time -v`` (wall time and peak RSS):

* the floor: ``python -c "import onnx; onnx.save(onnx.load(IN), OUT)"``;
* ``onnxsurgeon fold`` (then ``onnxsurgeon cleanup`` in a second process when that command
  exists; both processes' times add up, the larger peak counts);
* ``onnxsim.simplify``, ``onnxslim.slim``, onnx-graphsurgeon's
  ``gs.import_onnx(m); g.fold_constants().cleanup()``.

For each result: node count, and whether its outputs agree with the original's (onnxruntime,
graph optimizations off, the same seeded inputs, max abs diff <= 1e-4). Results go to
``benchmarks/results_hygiene.md`` with the command line. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable

PEERS = {
    "floor (onnx load+save)": "import onnx,sys; onnx.save(onnx.load(sys.argv[1]), sys.argv[2])",
    "onnxsim": ("import onnx,sys,onnxsim; m,_=onnxsim.simplify(onnx.load(sys.argv[1])); "
                "onnx.save(m, sys.argv[2])"),
    "onnxslim": ("import onnx,sys,onnxslim; onnx.save(onnxslim.slim(onnx.load(sys.argv[1])), "
                 "sys.argv[2])"),
    "onnx-graphsurgeon": ("import onnx,sys,onnx_graphsurgeon as gs; g=gs.import_onnx("
                          "onnx.load(sys.argv[1])); g.fold_constants().cleanup(); "
                          "onnx.save(gs.export_onnx(g), sys.argv[2])"),
}


def _timed(argv: list[str], timeout: float) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MB, error text or "") of one process under /usr/bin/time -v."""
    start = time.perf_counter()
    job = subprocess.Popen(["/usr/bin/time", "-v", *argv], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
    try:
        _, stderr = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)  # the timed process too, not only /usr/bin/time
        job.communicate()
        return timeout, float("nan"), f"timeout after {timeout:.0f} s"
    proc = subprocess.CompletedProcess(argv, job.returncode, "", stderr)
    wall = time.perf_counter() - start
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    rss = int(found.group(1)) / 1024 if found else float("nan")
    err = "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["failed"])[0][:120]
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "Command" not in ln
                 and not ln.startswith("\t")]
        err = (lines[-1] if lines else "failed")[:120]
    return wall, rss, err


def _has_cleanup() -> bool:
    proc = subprocess.run([PY, "-m", "onnxsurgeon", "cleanup", "--help"], capture_output=True,
                          cwd=ROOT)
    return proc.returncode == 0


def _ours(src: Path, out: Path, timeout: float, cleanup: bool) -> tuple[float, float, str]:
    folded = out.with_name(out.stem + ".fold.onnx") if cleanup else out
    wall, rss, err = _timed([PY, "-m", "onnxsurgeon", "fold", str(src), "-o", str(folded)],
                            timeout)
    if err or not cleanup:
        return wall, rss, err
    w2, r2, err = _timed([PY, "-m", "onnxsurgeon", "cleanup", str(folded), "-o", str(out)],
                         timeout)
    return wall + w2, max(rss, r2), err


def _nodes(path: Path) -> int:
    import onnx

    return len(onnx.load(str(path), load_external_data=False).graph.node)


def _agree(src: Path, out: Path) -> str:
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        a = ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
        b = ort.InferenceSession(str(out), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - a peer's output onnxruntime refuses
        return f"no ({str(exc).splitlines()[0][:60]})"
    rng = np.random.default_rng(0)
    feeds = {}
    for i in a.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if "int" in i.type:
            feeds[i.name] = rng.integers(0, 50, shape).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    names = [o.name for o in a.get_outputs()]
    ra = a.run(names, feeds)
    try:
        rb = b.run(names, {k: v for k, v in feeds.items()
                           if k in {i.name for i in b.get_inputs()}})
    except Exception as exc:  # noqa: BLE001
        return f"no ({str(exc).splitlines()[0][:60]})"
    worst = max(float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64))))
                if x.size else 0.0 for x, y in zip(ra, rb, strict=True))
    return "yes" if worst <= 1e-4 else f"no (max abs diff {worst:.3g})"


def build_models(folder: Path, chain_blocks: int) -> dict[str, Path]:
    """Each benchmark model written in a child process (so this one stays small)."""
    code = f"""
import sys, warnings
sys.path.insert(0, {str(HERE)!r})
from pathlib import Path
folder = Path({str(folder)!r})
import onnx
from run import build_chain
onnx.save(build_chain({chain_blocks}, distinct=False, width=4), folder / "chain.onnx")
import torch, transformers
torch.manual_seed(0)
cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                              intermediate_size=128, vocab_size=100, max_position_embeddings=32,
                              attn_implementation="eager")
model = transformers.BertModel(cfg).eval()
class Wrap(torch.nn.Module):
    def __init__(self, m):
        super().__init__(); self.m = m
    def forward(self, ids):
        return self.m(input_ids=ids).last_hidden_state
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(Wrap(model), (torch.zeros(1, 16, dtype=torch.long),), str(folder / "bert.onnx"),
                      dynamo=False, do_constant_folding=False, input_names=["ids"],
                      output_names=["hidden"], opset_version=17)
    torch.onnx.export(Wrap(model), (torch.zeros(2, 16, dtype=torch.long),),
                      str(folder / "bert_dynamic.onnx"), dynamo=False, do_constant_folding=False,
                      input_names=["ids"], output_names=["hidden"], opset_version=17,
                      dynamic_axes={{"ids": {{0: "batch", 1: "seq"}}, "hidden": {{0: "batch", 1: "seq"}}}})
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.f = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
            torch.nn.Dropout(0.1), torch.nn.Linear(16, 10))
    def forward(self, x):
        return self.f(x)
cnn = Net().eval()
for bn in (cnn.f[1], cnn.f[4]):
    bn.running_mean.uniform_(-0.5, 0.5); bn.running_var.uniform_(0.5, 2.0)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(cnn, (torch.zeros(1, 3, 16, 16),), str(folder / "torch_bn_cnn.onnx"),
                      dynamo=True, optimize=False, input_names=["x"], output_names=["y"],
                      opset_version=18)
"""
    subprocess.run([PY, "-c", code], check=True, cwd=ROOT, capture_output=True)
    return {"bert": folder / "bert.onnx", "bert_dynamic": folder / "bert_dynamic.onnx",
            "keras_cnn": ROOT / "models" / "keras_cnn.onnx",
            "torch_bn_cnn": folder / "torch_bn_cnn.onnx", "chain": folder / "chain.onnx"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain-blocks", type=int, default=30000, help="3 nodes per block")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--skip-peers-on-chain", action="store_true")
    parser.add_argument("--models", nargs="+", metavar="NAME",
                        help="only these models (bert, bert_dynamic, keras_cnn, torch_bn_cnn, chain)")
    args = parser.parse_args()
    cleanup = _has_cleanup()
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        models = build_models(folder, args.chain_blocks)
        for label, src in models.items():
            if args.models and label not in args.models:
                continue
            before = _nodes(src)
            contenders = ["floor (onnx load+save)", "onnxsurgeon fold"
                          + (" + cleanup" if cleanup else ""), "onnxsim", "onnxslim",
                          "onnx-graphsurgeon"]
            for who in contenders:
                if label == "chain" and args.skip_peers_on_chain and who in PEERS \
                        and not who.startswith("floor"):
                    rows.append(f"| {label} | {before} | {who} | - | - | - | skipped |")
                    continue
                out = folder / f"{label}.{len(rows)}.onnx"
                if who.startswith("onnxsurgeon"):
                    wall, rss, err = _ours(src, out, args.timeout, cleanup)
                else:
                    wall, rss, err = _timed([PY, "-c", PEERS[who], str(src), str(out)],
                                            args.timeout)
                if err:
                    rows.append(f"| {label} | {before} | {who} | - | {wall:.2f} | {rss:.0f} | "
                                f"failed: {err} |")
                    continue
                rows.append(f"| {label} | {before} | {who} | {_nodes(out)} | {wall:.2f} | "
                            f"{rss:.0f} | {_agree(src, out)} |")
                print(rows[-1], flush=True)
    text = "\n".join([
        "# Constant folding against peers (issue 30)", "",
        f"Command: `python benchmarks/bench_hygiene.py {' '.join(sys.argv[1:])}`".rstrip() + "",
        "", f"Machine: {platform.platform()}, Python {platform.python_version()}; whole processes "
        "under `/usr/bin/time -v`, one run each, the 2 cores shared with other jobs.",
        "onnxsurgeon " + ("fold then cleanup (two processes)" if cleanup else
                          "fold alone (the cleanup command is not in this tree; the lead re-runs "
                          "after the merge)") + ".", "",
        "| model | nodes before | contender | nodes after | wall s | peak RSS MB | outputs agree |",
        "|---|---|---|---|---|---|---|", *rows, ""])
    (HERE / "results_hygiene.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
