"""The CLI gauntlet: every verb, with --verify and --json, on realistic models (tests/gauntlet_models).

Tensors are picked from each model's node list (first / middle / last computed float tensors, a
pair of same-type tensors for reroute) with the core's queries (GraphIndex, closure, TypeOracle),
so the same checks run on any model. Each rewritten file
must pass onnx.checker (full), load in onnxruntime, and keep its numeric invariants: a copy equals
its original exactly, outputs a rewrite does not reach are bit-identical, extracted tensors equal
the original's.

The helper-built models run by default; the PyTorch / transformers exports are ``slow``.

A check that needs something of a model (module scopes, a same-type pair, a body capture, ...)
is parametrized at collection time over the models whose registry entry declares that feature
(gauntlet_models.REGISTRY); test_declared_features_are_true holds every declaration to the built
model, so no case is skipped and no tag can silently drop a model from a check.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxsurgeon.closure import closure, downstream_nodes
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.types import TypeOracle, shape_of
from tests import gauntlet_models as gm
from tests.conftest import run as conftest_run
from tests.conftest import session

ROOT = Path(__file__).resolve().parent.parent
FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}


def models(*needs: str) -> list:
    """pytest params: the registered models declaring every feature in ``needs`` (slow ones marked)."""
    return [pytest.param(n, id=n, marks=[pytest.mark.slow] if gm.REGISTRY[n].slow else [])
            for n in gm.with_features(*needs)]


ALL_MODELS = models()


# ------------------------------------------------------------------------------ helpers
def cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "onnxsurgeon", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def clis(*calls: tuple[object, ...]) -> list[subprocess.CompletedProcess[str]]:
    """Independent CLI calls, two at a time (each is one mostly single-threaded process)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        return [ok(p) for p in pool.map(lambda c: cli(*c), calls)]


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.args[3:]}\n{proc.stderr[-2000:]}\n{proc.stdout[-1500:]}"
    return proc


def run(path: Path, feeds: dict[str, np.ndarray], extra: list[str] = ()) -> dict[str, np.ndarray]:
    """All graph outputs of `path` (plus main-graph tensors `extra`, exposed as outputs)."""
    return conftest_run(path, feeds, extra, only_model_inputs=True)


def checked(path: Path) -> onnx.ModelProto:
    onnx.checker.check_model(str(path), full_check=True)
    session(path)
    return onnx.load(str(path), load_external_data=False)


def exact(a: np.ndarray, b: np.ndarray, what: str) -> None:
    if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):  # sequences, maps (ZipMap)
        assert a == b, what
        return
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    assert np.array_equal(a, b, equal_nan=True), f"{what}: max diff {np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64)))}"


def across_cut(a: np.ndarray, b: np.ndarray, what: str) -> None:
    """Equal for a value computed across a cut or splice: bit-identical, except float16, which
    onnxruntime's CPU provider computes in float32 and rounds differently at graph boundaries."""
    if isinstance(a, np.ndarray) and a.dtype == np.float16:
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=1e-3, atol=2.5e-3, err_msg=what)
    else:
        exact(a, b, what)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------ the plan
@dataclass
class Plan:
    path: Path
    feeds: dict[str, np.ndarray]
    outputs: list[str]
    candidates: list[str]  # computed float tensors of the main graph, in node order
    rank: dict[str, int]
    shape: dict[str, tuple]
    dtype: dict[str, int]
    downstream: dict[str, set[str]]  # tensor -> graph outputs it reaches
    pair: tuple[str, str] | None  # (A, B): consumers of A may read B (B upstream, same type)
    unknown_rank: list[str]  # computed tensors neither onnx nor onnxruntime can give a rank

    @property
    def first(self) -> str:
        return self.candidates[0]

    @property
    def middle(self) -> str:
        return self.candidates[len(self.candidates) // 2]

    @property
    def last(self) -> str:
        return self.outputs[0]

    def channel_axis(self, name: str) -> int:
        return 1 if self.rank.get(name, 0) == 4 else -1


def _feeds(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    inits = {t.name for t in graph.initializer}
    feeds = {}
    for vi in graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 2 for d in tt.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.integer):
            feeds[vi.name] = rng.integers(0, 8, shape).astype(dtype)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _reaches(index: GraphIndex, output: str) -> set[str]:
    """Tensors the graph output ``output`` is computed from (itself included): every tensor read,
    in a slot or captured by a body, by a node of its closure."""
    reads = {output}
    captures = index.captures
    for i in closure(index, [output]).nodes:
        reads.update(n for n in index.graph.node[i].input if n)
        reads.update(name for name, _ in captures.get(i, ()))
    return reads


def make_plan(path: Path) -> Plan:
    """The tensors each check works on, found by the core's queries: ``downstream_nodes`` of the
    feeds (computed tensors), ``closure`` (what reaches each output) and ``TypeOracle``
    (value_info, then onnx inference, then onnxruntime's static types for contrib ops)."""
    model = onnx.load(str(path))
    index = GraphIndex(model)
    graph = index.graph
    feeds = _feeds(graph)
    live = downstream_nodes(index, feeds)
    order = [o for i, node in enumerate(graph.node) if i in live for o in node.output if o]
    outputs = [o.name for o in graph.output]
    downstream: dict[str, set[str]] = {}  # tensor -> graph outputs it reaches
    for out in outputs:
        for t in _reaches(index, out):
            downstream.setdefault(t, set()).add(out)
    oracle = TypeOracle(index)
    rank, shape, dtype = {}, {}, {}
    # a tensor whose rank nobody can infer statically is not a fair target for a verb that must
    # declare it as a graph output; test_unknown_rank covers those
    unknown_rank: list[str] = []
    for t in order:
        vi = oracle.value_info(t)
        if vi is None or not vi.type.HasField("tensor_type"):
            continue
        dtype[t] = vi.type.tensor_type.elem_type
        dims = shape_of(vi)
        if dims is not None:
            rank[t] = len(dims)
            shape[t] = tuple(d if isinstance(d, int) or d else None for d in dims)
        elif dtype[t]:
            unknown_rank.append(t)
    cands = [t for t in order if dtype.get(t) in FLOATS and rank.get(t, 0) >= 1 and t in downstream]
    pair = None
    for j in range(len(cands) - 1, 0, -1):
        a = cands[j]
        if a in outputs or None in shape.get(a, (None,)):
            continue
        i = index.producer[a]
        reads_a = set(graph.node[i].input) | {n for n, _ in index.captures.get(i, ())}
        match = [b for b in cands[:j] if shape.get(b) == shape[a] and dtype[b] == dtype[a]
                 and b not in reads_a]
        if match and j >= len(cands) // 3:
            pair = (a, match[0])
            break
    return Plan(path, feeds, outputs, cands, rank, shape, dtype, downstream, pair, unknown_rank)


@pytest.fixture(scope="session")
def gauntlet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gauntlet_models")


@cache
def _built(name: str, folder: Path) -> Plan:
    return make_plan(gm.build(name, folder))


@pytest.fixture()
def plan(request: pytest.FixtureRequest, gauntlet_dir: Path) -> Plan:
    p = _built(request.param, gauntlet_dir)
    assert p.candidates, f"{request.param}: no computed tensor of known rank to test"
    return p


@cache
def _reference(path: Path, extra: tuple[str, ...]) -> dict[str, np.ndarray]:
    return run(path, _built_feeds(path), list(extra))


def _built_feeds(path: Path) -> dict[str, np.ndarray]:
    return _feeds(onnx.load(str(path), load_external_data=False).graph)


def reference(plan: Plan, extra: list[str] = ()) -> dict[str, np.ndarray]:
    return _reference(plan.path, tuple(extra))


def out_path(plan: Plan, tmp_path: Path, tag: str) -> Path:
    return tmp_path / f"{plan.path.stem}.{tag}.onnx"


def per_model(*needs: str):
    """Run the check on every model that declares all of ``needs`` (every model when none)."""
    def mark(fn):
        fn.needs = needs
        return pytest.mark.parametrize("plan", models(*needs), indirect=True)(fn)
    return mark


# ------------------------------------------------------------------------------ inspect
@per_model()
def test_inspect_text_and_json(plan):
    text_proc, json_proc = clis(("inspect", plan.path), ("inspect", plan.path, "--json"))
    assert plan.last in text_proc.stdout
    data = json.loads(json_proc.stdout)
    assert [o["name"] for o in data["outputs"]] == plan.outputs
    assert data["nodes"] >= len(onnx.load(str(plan.path), load_external_data=False).graph.node)


# ------------------------------------------------------------------------------ extract
@per_model()
def test_extract_first_middle_last_and_stop(plan, tmp_path):
    before = sha(plan.path)
    targets = [plan.first, plan.middle, plan.last]
    # stop at a tensor half way up to the output: the output from the stop's value
    above = [c for c in plan.candidates if plan.last in plan.downstream[c] and c != plan.last]
    stop = above[len(above) // 2] if above else None
    want = reference(plan, targets + ([stop] if stop else []))
    dsts = [out_path(plan, tmp_path, f"extract{i}") for i in range(len(targets))]
    calls = [("extract", plan.path, "-o", d, "--outputs", t, "--verify", "--json") for d, t in zip(dsts, targets, strict=True)]
    stop_dst = out_path(plan, tmp_path, "extract_stop")
    if stop:
        calls.append(("extract", plan.path, "-o", stop_dst, "--outputs", plan.last, "--inputs", stop,
                      "--verify", "--json"))
    procs = clis(*calls)
    for proc, dst, t in zip(procs[:len(targets)], dsts, targets, strict=True):
        assert json.loads(proc.stdout)["outputs"] == [t]
        checked(dst)
        exact(run(dst, plan.feeds)[t], want[t], f"extract {t}")
    if stop:
        m = checked(stop_dst)
        assert stop in [i.name for i in m.graph.input]
        feeds = dict(plan.feeds, **{stop: want[stop]})
        across_cut(run(stop_dst, feeds)[plan.last], want[plan.last], "extract with stop")
    assert sha(plan.path) == before


# ------------------------------------------------------------------------------ copy
@per_model()
@pytest.mark.parametrize("weights", ["independent", "shared"])
def test_copy_output_and_intermediate(plan, tmp_path, weights):
    want = reference(plan, [plan.middle])
    dst = out_path(plan, tmp_path, f"copy_{weights}")
    proc = ok(cli("copy", plan.path, "-o", dst, "--outputs", f"{plan.last},{plan.middle}",
                  "--weights", weights, "--prefix", "twin/", "--verify", "--json"))
    renames = json.loads(proc.stdout)
    assert set(renames["outputs"]) == {plan.last, plan.middle}
    checked(dst)
    got = run(dst, plan.feeds)
    for o in plan.outputs:
        exact(got[o], want[o], f"original output {o}")
    for orig, twin in renames["outputs"].items():
        exact(got[twin], want[orig], f"copy {twin} of {orig}")
    vproc = ok(cli("verify", plan.path, dst, "--json"))
    assert json.loads(vproc.stdout)["ok"] is True


# ------------------------------------------------------------------------------ insert
def _l2(x: np.ndarray, axis: int) -> np.ndarray:
    x64 = x.astype(np.float64)
    return x64 / np.sqrt(np.maximum((x64 * x64).sum(axis=axis, keepdims=True), 1e-12))


@per_model()
def test_insert_as_output_l2_scale_identity(plan, tmp_path):
    at = plan.middle
    want = reference(plan, [at])
    axis = plan.channel_axis(at)
    ops = (f"l2_normalize:axis={axis}", "scale:factor=2", "identity")
    dsts = [out_path(plan, tmp_path, "insert_" + op.split(":")[0]) for op in ops]
    procs = clis(*[("insert", plan.path, "-o", dst, "--at", at, "--op", op, "--as-output", "--verify", "--json")
                   for op, dst in zip(ops, dsts, strict=True)])
    for op, dst, proc in zip(ops, dsts, procs, strict=True):
        res = json.loads(proc.stdout)
        checked(dst)
        got = run(dst, plan.feeds)
        for o in plan.outputs:
            across_cut(got[o], want[o], f"{op}: untouched output {o}")
        v = got[res["processed"]]
        if op.startswith("l2"):
            np.testing.assert_allclose(v.astype(np.float64), _l2(want[at], axis), rtol=2e-2, atol=2e-3)
        else:
            exact(v, want[at] * np.asarray(2, want[at].dtype) if op.startswith("scale") else want[at], op)


@per_model()
def test_insert_rerouted_identity_and_scale(plan, tmp_path):
    at = plan.middle
    want = reference(plan, [at])
    dst, dst_scale = out_path(plan, tmp_path, "insert_id"), out_path(plan, tmp_path, "insert_scale")
    proc, _ = clis(("insert", plan.path, "-o", dst, "--at", at, "--op", "identity", "--verify", "--json"),
                   ("insert", plan.path, "-o", dst_scale, "--at", at, "--op", "scale:factor=0.5", "--verify",
                    "--json"))
    res = json.loads(proc.stdout)
    assert res["rerouted"] or plan.last == at, "identity at a consumed tensor rerouted nothing"
    checked(dst)
    got = run(dst, plan.feeds)
    for o in plan.outputs:
        across_cut(got[o], want[o], f"identity insert: output {o}")
    assert json.loads(ok(cli("verify", plan.path, dst, "--json")).stdout)["ok"] is True
    dst = dst_scale
    checked(dst)
    got = run(dst, plan.feeds)
    for o in plan.outputs:
        if o not in plan.downstream.get(at, ()):
            across_cut(got[o], want[o], f"scale insert: untouched output {o}")


@per_model()
def test_insert_graph_block(plan, tmp_path):
    at = plan.middle
    dt = plan.dtype[at]
    dims = [f"d{i}" for i in range(plan.rank[at])]
    block = onnx.helper.make_model(
        onnx.helper.make_graph(
            [onnx.helper.make_node("Abs", ["x"], ["a"]), onnx.helper.make_node("Neg", ["a"], ["y"])],
            "block", [onnx.helper.make_tensor_value_info("x", dt, dims)],
            [onnx.helper.make_tensor_value_info("y", dt, dims)]),
        opset_imports=[onnx.helper.make_opsetid("", 13)])
    block.ir_version = 7
    bpath = tmp_path / "block.onnx"
    onnx.save_model(block, str(bpath))
    want = reference(plan, [at])
    dst = out_path(plan, tmp_path, "insert_graph")
    res = json.loads(ok(cli("insert", plan.path, "-o", dst, "--at", at, "--graph", bpath,
                            "--as-output", "--verify", "--json")).stdout)
    checked(dst)
    got = run(dst, plan.feeds)
    exact(got[res["processed"]], -np.abs(want[at]), "graph block")
    for o in plan.outputs:
        across_cut(got[o], want[o], f"graph block: untouched output {o}")


# ------------------------------------------------------------------------------ reroute
@per_model("same_shape_pair")
def test_reroute_same_type(plan, tmp_path):
    a, b = plan.pair
    want = reference(plan, [a, b])
    dst = out_path(plan, tmp_path, "reroute")
    res = json.loads(ok(cli("reroute", plan.path, "-o", dst, "--from", a, "--to", b, "--verify", "--json")).stdout)
    assert res["rerouted"] or res["rerouted_outputs"]
    checked(dst)
    got = run(dst, plan.feeds)
    for o in plan.outputs:
        if o not in plan.downstream.get(a, ()):
            across_cut(got[o], want[o], f"reroute: untouched output {o}")
    log = ok(cli("verify", plan.path, dst, "--rewrite-log", "--json"))
    assert json.loads(log.stdout)["ok"] is True


# ------------------------------------------------------------------------------ names users type
def module_names(path: Path) -> list[str]:
    """The PyTorch module paths the exporter recorded, preferred first: repeated blocks such as
    'layer2.0' or 'm.h.0', then the others (top-level child modules first), in node order."""
    from onnxsurgeon.select import node_module

    seen: dict[str, None] = {}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        full = node_module(node)
        if not full:
            continue
        parts = full.split(".")
        for k in range(1, len(parts) + 1):
            seen.setdefault(".".join(parts[:k]))
    blocks = [p for p in seen if p.split(".")[-1].isdigit() and p.count(".") >= 1]
    return blocks + [p for p in seen if p not in blocks]


@cache
def _module_choice(path: Path) -> tuple[str | None, str | None]:
    """(the first module path that names exactly one tensor, the preferred module path when it
    is ambiguous), resolved by the library's Selector."""
    from onnxsurgeon.errors import AmbiguousNameError, NotFoundError
    from onnxsurgeon.index import GraphIndex
    from onnxsurgeon.select import Selector

    names = module_names(path)
    selector = Selector(GraphIndex(onnx.load(str(path), load_external_data=False)))
    ambiguous = None
    for i, name in enumerate(names):
        try:
            selector.resolve(name)
        except AmbiguousNameError:
            ambiguous = name if i == 0 else ambiguous
            continue
        except NotFoundError:
            continue
        return name, ambiguous
    return None, ambiguous


def module_path(path: Path) -> str | None:
    """A module path that names one tensor (None for non-torch models)."""
    return _module_choice(path)[0]


def ambiguous_module(path: Path) -> str | None:
    """The preferred module path when it hands several tensors on (None otherwise)."""
    return _module_choice(path)[1]


@per_model("module_scopes")
def test_module_path_names(plan, tmp_path):
    name = module_path(plan.path)
    dst, dst2 = out_path(plan, tmp_path, "extract_module"), out_path(plan, tmp_path, "insert_module")
    p1, p2 = clis(("extract", plan.path, "-o", dst, "--outputs", name, "--verify", "--json"),
                  ("insert", plan.path, "-o", dst2, "--at", name, "--op", "identity", "--as-output",
                   "--verify", "--json"))
    (tensor,) = json.loads(p1.stdout)["outputs"]
    checked(dst)
    exact(run(dst, plan.feeds)[tensor], reference(plan, [tensor])[tensor], f"module {name} -> {tensor}")
    res = json.loads(p2.stdout)
    exact(run(dst2, plan.feeds)[res["processed"]], reference(plan, [tensor])[tensor], "insert at module")


@per_model("ambiguous_module")
def test_ambiguous_module_path_lists_the_candidates(plan, tmp_path):
    """A module that hands several tensors on (TorchScript's 'lstm': the GRU reads the time-major
    tensor, a Shape node the batch-first one) is refused: exit 2, one line listing the tensors
    made inside it and read outside it, no file; naming one of them then works."""
    from onnxsurgeon.select import node_module

    name = ambiguous_module(plan.path)
    if plan.path.stem == "recurrent_ts":
        assert name == "lstm"
    dst = out_path(plan, tmp_path, "amb")
    proc = cli("extract", plan.path, "-o", dst, "--outputs", name)
    assert proc.returncode == 2, f"exit {proc.returncode}: {proc.stderr}"
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line and not dst.exists()
    assert f"module '{name}'" in line and "name one of them" in line, line
    listed = ast.literal_eval(re.search(r"\[[^\]]*\]", line).group(0))
    assert len(listed) >= 2, line
    graph = onnx.load(str(plan.path), load_external_data=False).graph

    def inside(node: onnx.NodeProto) -> bool:
        mod = node_module(node) or ""
        return mod == name or mod.startswith(name + ".")

    outputs = {o.name for o in graph.output}
    for t in listed:
        (producer,) = [n for n in graph.node if t in n.output]
        assert inside(producer), f"{t} is not made inside module {name}"
        assert t in outputs or any(t in n.input and not inside(n) for n in graph.node), \
            f"{t} is not read outside module {name}"
    ok(cli("extract", plan.path, "-o", dst, "--outputs", listed[0], "--verify"))
    checked(dst)


# ------------------------------------------------------------------------------ cross-checks
@per_model("same_shape_pair")
def test_copy_with_replace_input_equals_reroute(plan, tmp_path):
    """copy --replace-input A=B computes what reroute --from A --to B computes."""
    a, b = plan.pair
    target = next(o for o in plan.outputs if o in plan.downstream[a])  # make_plan: A reaches one
    rr, cp = out_path(plan, tmp_path, "rr"), out_path(plan, tmp_path, "cp")
    _, proc = clis(("reroute", plan.path, "-o", rr, "--from", a, "--to", b),
                   ("copy", plan.path, "-o", cp, "--outputs", target, "--replace-input", f"{a}={b}",
                    "--verify", "--json"))
    renames = json.loads(proc.stdout)
    checked(cp)
    got_cp, got_rr = run(cp, plan.feeds), run(rr, plan.feeds)
    exact(got_cp[renames["outputs"][target]], got_rr[target], "copy with replacement vs reroute")
    want = reference(plan)
    for o in plan.outputs:
        exact(got_cp[o], want[o], f"original output {o} after copy")


def captured(path: Path) -> str | None:
    """A main-graph tensor read inside an If/Loop/Scan body (an outer capture), if any."""
    index = GraphIndex(onnx.load(str(path), load_external_data=False))
    for i in sorted(index.captures):
        for name in sorted({name for name, _ in index.captures[i]}):
            if name in index.producer:
                return name
    return None


@per_model("body_capture")
def test_insert_at_a_tensor_bodies_capture(plan, tmp_path):
    at = captured(plan.path)
    want = reference(plan, [at])
    dst = out_path(plan, tmp_path, "insert_captured")
    ok(cli("insert", plan.path, "-o", dst, "--at", at, "--op", "identity", "--verify", "--json"))
    checked(dst)
    got = run(dst, plan.feeds)
    for o in plan.outputs:
        across_cut(got[o], want[o], f"identity at captured {at}: output {o}")
    dst = out_path(plan, tmp_path, "insert_captured_scale")
    ok(cli("insert", plan.path, "-o", dst, "--at", at, "--op", "scale:factor=0", "--verify", "--json"))
    checked(dst)
    got = run(dst, plan.feeds)
    moved = [o for o in plan.outputs if isinstance(want[o], np.ndarray) and not np.array_equal(got[o], want[o])]
    assert moved, f"scaling captured {at} by 0 changed no output: the bodies still read the original"
    dst = out_path(plan, tmp_path, "copy_captured")
    renames = json.loads(ok(cli("copy", plan.path, "-o", dst, "--outputs", plan.last, "--verify", "--json")).stdout)
    exact(run(dst, plan.feeds)[renames["outputs"][plan.last]], want[plan.last], "copy through a body")


@per_model("unknown_rank")
def test_unknown_rank_tensors_succeed_or_refuse_cleanly(plan, tmp_path):
    """A tensor whose rank nobody can infer (a Loop-carried value) cannot become a typed graph
    output: each verb either succeeds (valid model) or exits 2 with one line and no file."""
    t = plan.unknown_rank[0]
    for verb, extra in (("extract", ["--outputs", t]), ("copy", ["--outputs", t]),
                        ("insert", ["--at", t, "--op", "identity", "--as-output"])):
        dst = out_path(plan, tmp_path, f"unknown_{verb}")
        proc = cli(verb, plan.path, "-o", dst, *extra, "--verify", "--json")
        if proc.returncode == 0:
            checked(dst)
        else:
            assert proc.returncode == 2, f"{verb}: exit {proc.returncode}: {proc.stderr}"
            assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
            assert t in proc.stderr and not dst.exists()


# ------------------------------------------------------------------------------ contract extras
@per_model()
def test_deterministic_multi_output_extract_and_verify(plan, tmp_path):
    """Same command, byte-identical file; several outputs at once; `verify` pairs the model's
    own outputs by name with the original."""
    outs = list(dict.fromkeys([plan.first, plan.last]))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = tmp_path / "a" / "det.onnx", tmp_path / "b" / "det.onnx"  # same name: same data file name
    pa, _ = clis(*[("extract", plan.path, "-o", d, "--outputs", ",".join(outs), "--json") for d in (a, b)])
    assert json.loads(pa.stdout)["outputs"] == outs
    assert sha(a) == sha(b), "the same extract gave two different files"
    data_a, data_b = a.with_name("det.onnx.data"), b.with_name("det.onnx.data")
    assert data_a.exists() == data_b.exists() and (not data_a.exists() or sha(data_a) == sha(data_b))
    checked(a)
    want = reference(plan, outs)
    got = run(a, plan.feeds)
    for o in outs:
        exact(got[o], want[o], f"multi-output extract {o}")
    report = json.loads(ok(cli("verify", plan.path, a, "--json")).stdout)
    assert report["ok"] is True and plan.last in [p["reference"] for p in report["pairs"]]


def named_readers(plan: Plan) -> list[str]:
    """The names of the named nodes reading the pair's source (the tensor reroute moves away from)."""
    if plan.pair is None:
        return []
    index = GraphIndex(onnx.load(str(plan.path), load_external_data=False))
    readers = sorted({use.node for use in index.uses_of(plan.pair[0]) if use.slot >= 0})
    return [index.graph.node[i].name for i in readers if index.graph.node[i].name]


@per_model("same_shape_pair", "named_consumers")
def test_reroute_one_named_consumer(plan, tmp_path):
    a, b = plan.pair
    readers = named_readers(plan)
    dst = out_path(plan, tmp_path, "reroute_one")
    res = json.loads(ok(cli("reroute", plan.path, "-o", dst, "--from", a, "--to", b, "--consumers", readers[0],
                            "--verify", "--json")).stdout)
    assert res["rerouted"] == [readers[0]]
    new = checked(dst)
    node = next(n for n in new.graph.node if n.name == readers[0])
    assert b in node.input and a not in node.input


# ------------------------------------------------------------------------------ the registry is true
def model_features(plan: Plan) -> set[str]:
    """The features the built model really has, found by the helpers the checks use."""
    facts = {
        "module_scopes": module_path(plan.path) is not None,
        "ambiguous_module": ambiguous_module(plan.path) is not None,
        "same_shape_pair": plan.pair is not None,
        "named_consumers": bool(named_readers(plan)),
        "body_capture": captured(plan.path) is not None,
        "unknown_rank": bool(plan.unknown_rank),
    }
    assert set(facts) == gm.FEATURES, "model_features must decide every feature tag"
    return {f for f, present in facts.items() if present}


@pytest.mark.parametrize("name", ALL_MODELS)
def test_declared_features_are_true(name, gauntlet_dir):
    """Declared tags == what the model has: a wrong tag fails here instead of running a check on
    a model without its feature, a missing tag fails instead of silently leaving a model out."""
    plan = _built(name, gauntlet_dir)
    declared, found = gm.REGISTRY[name].features, model_features(plan)
    assert declared == found, (f"{name}: declared but absent {sorted(declared - found)}, "
                               f"present but undeclared {sorted(found - declared)}")
    if plan.pair is not None:  # the reroute checks rely on this (make_plan picks A among outputs' ancestors)
        assert plan.downstream.get(plan.pair[0])


def test_every_check_runs_on_some_model():
    """No check's model list is empty (an empty list would make pytest skip it)."""
    checks = {n: fn for n, fn in globals().items() if n.startswith("test_") and hasattr(fn, "needs")}
    assert len(checks) >= 13
    for n, fn in checks.items():
        (mark,) = [m for m in fn.pytestmark if m.name == "parametrize" and m.args[0] == "plan"]
        assert mark.args[1], f"{n} (needs {fn.needs}) runs on no model"
        assert [p.values[0] for p in mark.args[1]] == gm.with_features(*fn.needs)
    for feature in gm.FEATURES:
        assert gm.with_features(feature), f"no model declares {feature}"
