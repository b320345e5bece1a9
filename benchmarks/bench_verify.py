"""Benchmark: verification against the onnxruntime floor, whole processes (issue 29).

Usage: ``python benchmarks/bench_verify.py [--repeat 2] [--models resnet50,densenet121,...]
[--threads N] [--build-only]``

Models (built once, cached under ``$TMPDIR/onnxsurgeon-bench-verify``; random weights, nothing
downloaded):

* ``resnet50``, ``densenet121``: ``keras.applications`` at 128x128 (BatchNorm statistics from
  one training-mode pass over random images, softmax head), converted by
  :func:`onnxsurgeon.converters.from_tf` (tf2onnx after freezing), opset 17;
* ``mobilenetv3``: ``keras.applications.MobileNetV3Small`` 128x128, converted the same way, then
  renamed whole (``rename --regex '^(.*)$=net/\\1'``): the model a user verifies after a
  renaming pass;
* ``bert``, ``gpt2``: ``transformers`` BERT and GPT-2 from small configs (random weights),
  exported by :func:`onnxsurgeon.converters.from_torch` (opset 17, GPT-2 18), sequence
  length 16;
* ``chain``: the 90k-node chain of ``benchmarks/run.py`` (30,000 x MatMul -> Add -> Relu,
  width 16, one shared weight).

B is a perturbed copy of A: the largest weight scaled by 1.01 plus 1e-3.

Each job is a fresh process under ``/usr/bin/time`` (wall seconds, peak RSS), the rounds
interleaved, median of ``--repeat``:

* floor: two onnxruntime sessions (optimizations off, the same thread count) loading A and B
  from their files, the same samples through each (the .npz ``verify --save-inputs`` wrote);
* ``verify A A``, ``verify A B``, ``verify A B --deep``;
* a verb alone and the same verb with ``--verify`` (``insert --op l2_normalize`` on a mid
  tensor; ``rename --regex`` on the renamed MobileNetV3Small).

Targets (issue 29): ``verify A B`` <= 1.5x the floor (wall and RSS); ``--deep`` <= 3x wall and
2x RSS; verb + ``--verify`` <= verb + 1.5x floor wall. The table goes to
``benchmarks/results_verify.md`` with the load average of the run. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable
SIZE = 128
SEQ = 16

FLOOR = r"""
import sys, numpy as np, onnxruntime as ort
a, b, npz, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
o = ort.SessionOptions()
o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
o.intra_op_num_threads = threads
data = np.load(npz)
samples = {}
for key in data.files:  # one sample: arrays by input name; several: sample<k>/<name>
    head, _, rest = key.partition("/")
    k, name = (head, rest) if head.startswith("sample") and rest else ("", key)
    samples.setdefault(k, {})[name] = data[key]
for path in (a, b):
    s = ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])
    for key in sorted(samples):
        s.run(None, samples[key])
"""
"""The floor process: ``python -c FLOOR A B SAMPLES.npz THREADS``."""


# ------------------------------------------------------------------------------- models
def _keras(name: str, path: Path) -> None:
    import keras
    import numpy as np
    from onnxsurgeon.converters import from_tf

    keras.utils.set_random_seed(0)
    factory = {"resnet50": keras.applications.ResNet50,
               "densenet121": keras.applications.DenseNet121,
               "mobilenetv3": keras.applications.MobileNetV3Small}[name]
    net = factory(weights=None, input_shape=(SIZE, SIZE, 3))
    net(np.random.default_rng(0).random((4, SIZE, SIZE, 3)).astype("float32"), training=True)
    from_tf(net, path, opset=17, check=False)


def _hf(name: str, path: Path) -> None:
    import torch
    import transformers
    from onnxsurgeon.converters import from_torch

    torch.manual_seed(0)
    if name == "bert":
        config = transformers.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=4,
                                         num_attention_heads=4, intermediate_size=512)
        model = transformers.BertModel(config)
    else:
        config = transformers.GPT2Config(vocab_size=1000, n_embd=128, n_layer=4, n_head=4,
                                         n_positions=64, use_cache=False)
        model = transformers.GPT2Model(config)
    model.config.return_dict = False
    model.eval()
    ids = torch.randint(0, 1000, (1, SEQ))
    # GPT-2 at opset 18: at 17 the dynamo exporter writes Split(num_outputs), an opset-18
    # attribute, which onnx.checker refuses
    from_torch(model, (ids,), path, opset=17 if name == "bert" else 18, check=False)


def _chain(path: Path) -> None:
    import onnx

    sys.path.insert(0, str(HERE))
    from run import build_chain  # the 90k-node chain of the main benchmark

    onnx.save(build_chain(30_000, distinct=False, width=16), str(path))  # type: ignore[arg-type]


def _perturb(src: Path, dst: Path) -> None:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(src))
    floats = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    largest = max(floats, key=lambda t: int(np.prod(t.dims)))
    value = numpy_helper.to_array(largest)
    largest.CopyFrom(numpy_helper.from_array((value * 1.01 + 1e-3).astype(value.dtype),
                                             largest.name))
    onnx.save(model, str(dst))


def build(name: str, folder: Path) -> tuple[Path, Path]:
    """(A, B) of model ``name``, built once and cached in ``folder``."""
    a, b = folder / f"{name}.onnx", folder / f"{name}_perturbed.onnx"
    if not a.exists():
        raw = folder / f"{name}_raw.onnx"
        if name in ("resnet50", "densenet121", "mobilenetv3"):
            _keras(name, raw)
        elif name in ("bert", "gpt2"):
            _hf(name, raw)
        else:
            _chain(raw)
        if name == "mobilenetv3":
            subprocess.run([PY, "-m", "onnxsurgeon", "rename", str(raw), "-o", str(a),
                            "--regex", r"^(.*)$=net/\1"], check=True, stdout=subprocess.DEVNULL)
            raw.unlink()
        else:
            raw.rename(a)
    if not b.exists():
        _perturb(a, b)
    return a, b


def verb_of(name: str, model: Path) -> list[str]:
    """The verb measured alone and with --verify on ``model``."""
    import onnx

    if name == "mobilenetv3":
        return ["rename", str(model), "--regex", r"^net/(.*)$=m/\1"]
    proto = onnx.load(str(model), load_external_data=False)
    nodes = [n for n in proto.graph.node if n.op_type in ("Relu", "Add", "Concat", "MatMul")]
    tensor = nodes[len(nodes) // 2].output[0]
    return ["insert", str(model), "--at", tensor, "--op", "l2_normalize"]


# ------------------------------------------------------------------------------ measuring
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""The jobs' environment: bytecode cached, as an installed package has it (without, every
onnxsurgeon process compiles its modules again: ~0.4 s the floor does not pay)."""


def measure(cmd: list[str], timeout: float) -> tuple[float, float, int, float]:
    """(wall seconds, peak RSS MB, exit code, CPU seconds) of one process under /usr/bin/time;
    a process still running after ``timeout`` seconds is stopped: (timeout, nan, -9, nan)."""
    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        proc = subprocess.Popen(["/usr/bin/time", "-f", "%e %M %U %S", "-o", out.name, *cmd],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, env=ENV)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the job's own process group only
            proc.wait()
            return timeout, float("nan"), -9, float("nan")
        wall, rss, user, system = Path(out.name).read_text().split()[-4:]
    return float(wall), int(rss) / 1024, code, float(user) + float(system)


def jobs_of(name: str, a: Path, b: Path, folder: Path, threads: int) -> dict[str, list[str]]:
    npz = folder / f"{name}_samples.npz"
    osg = [PY, "-m", "onnxsurgeon"]
    t = ["--threads", str(threads)]
    if not npz.exists():
        subprocess.run([*osg, "verify", str(a), str(a), "--save-inputs", str(npz), *t],
                       stdout=subprocess.DEVNULL, check=False)
    verb = verb_of(name, a)
    out = folder / f"{name}_out.onnx"
    return {
        "floor": [PY, "-c", FLOOR, str(a), str(b), str(npz), str(threads)],
        "verify A A": [*osg, "verify", str(a), str(a), *t],
        "verify A B": [*osg, "verify", str(a), str(b), *t],
        "verify A B --deep": [*osg, "verify", str(a), str(b), "--deep", *t],
        "verb": [*osg, *verb, "-o", str(out), "--force"],
        "verb --verify": [*osg, *verb, "-o", str(out), "--force", "--verify",
                          "--verify-threads", str(threads)],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--models", default="resnet50,densenet121,mobilenetv3,bert,gpt2,chain")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--job-timeout", type=float, default=300.0,
                        help="seconds after which a job is stopped and shown as '>' that")
    parser.add_argument("--output", default=str(HERE / "results_verify.md"))
    args = parser.parse_args()
    folder = Path(tempfile.gettempdir()) / "onnxsurgeon-bench-verify"
    folder.mkdir(exist_ok=True)
    names = [n for n in args.models.split(",") if n]
    pairs = {n: build(n, folder) for n in names}
    if args.build_only:
        return
    jobs = {n: jobs_of(n, *pairs[n], folder, args.threads) for n in names}
    runs: dict[tuple[str, str], list[tuple[float, float, int, float]]] = {}
    subprocess.run([PY, "-m", "compileall", "-q", str(HERE.parent / "onnxsurgeon")], env=ENV,
                   stdout=subprocess.DEVNULL, check=False)
    loads = [os.getloadavg()[0]]
    started = time.time()
    for _ in range(args.repeat):
        for n in names:  # interleaved: a change of load hits every job alike
            for key, cmd in jobs[n].items():
                runs.setdefault((n, key), []).append(measure(cmd, args.job_timeout))
                loads.append(os.getloadavg()[0])
    lines = [
        "# verification against the onnxruntime floor (issue 29)",
        "",
        f"`python benchmarks/bench_verify.py --repeat {args.repeat} --threads {args.threads}`: "
        f"whole processes, median of {args.repeat} interleaved rounds, {args.threads} "
        f"onnxruntime threads; {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; {time.time() - started:.0f} s; 1-min load average "
        f"{min(loads):.1f}..{max(loads):.1f} during the run (the machine was shared).",
        "",
        "Floor: two onnxruntime sessions (optimizations off) from the files + the same samples "
        "through each. Targets: `verify A B` <= 1.5x floor wall and RSS; `--deep` <= 3x wall, "
        "2x RSS; verb + `--verify` <= verb + 1.5x floor wall.",
        "",
        "| model | job | wall s | CPU s | peak RSS MB | exit | vs floor (wall, CPU, RSS) | target |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for n in names:
        med = {key: (statistics.median(r[0] for r in runs[(n, key)]),
                     statistics.median(r[1] for r in runs[(n, key)]),
                     runs[(n, key)][-1][2],
                     statistics.median(r[3] for r in runs[(n, key)])) for key in jobs[n]}
        fw, fr, fc = med["floor"][0], med["floor"][1], med["floor"][3]
        for key, (wall, rss, code, cpu) in med.items():
            target = ""
            if key == "verify A B":
                target = "met" if wall <= 1.5 * fw and rss <= 1.5 * fr else "missed"
            elif key == "verify A B --deep":
                target = "met" if wall <= 3 * fw and rss <= 2 * fr else "missed"
            elif key == "verb --verify":
                limit = med["verb"][0] + 1.5 * fw
                target = f"{'met' if wall <= limit else 'missed'} (limit {limit:.2f} s)"
            ratio = ("" if key in ("floor", "verb")
                     else f"{wall / fw:.2f}x, {cpu / fc:.2f}x, {rss / fr:.2f}x")
            shown = f"> {wall:.0f} (stopped)" if code == -9 else f"{wall:.2f}"
            lines.append(f"| {n} | {key} | {shown} | {cpu:.2f} | {rss:.0f} | {code} | {ratio} "
                         f"| {target} |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.output).write_text(text)


if __name__ == "__main__":
    main()
