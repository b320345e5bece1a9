"""The architecture corpus (tests/corpus_models) through every verb, by the CLI, judged by onnxruntime.

Per model: extract (a middle tensor and an output, each equal to the original's), copy (the twin
equals the original exactly), insert (a rerouted identity keeps every output, a scale as an output
doubles the tensor), verify (an identical rewrite passes; a 1% change of one weight deep in the
model fails with exit 1, and --deep names that weight at the node reading it), rename (one tensor; every name prefixed as onnx.compose.add_prefix
does), bypass (equals the model with that node replaced by Identity) and diff (a page naming
the removed node). No call may exit 3. Tensors are picked by the gauntlet's plan (make_plan), so
the same checks run on any model; the PyTorch exports are ``slow`` and ``torch``.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnxsurgeon.closure import closure
from onnxsurgeon.index import GraphIndex
from tests import corpus_models as cm
from tests.test_gauntlet import Plan, checked, cli, clis, exact, make_plan, ok, out_path, run

FLOAT = onnx.TensorProto.FLOAT
UNARY_FIRST = ("Relu", "Sigmoid", "Erf", "Tanh", "Softmax", "Gelu", "Sqrt", "Identity")


def _param(name: str):
    marks = [pytest.mark.slow, pytest.mark.torch] if cm.REGISTRY[name].torch else []
    return pytest.param(name, id=name, marks=marks)


MODELS = [_param(n) for n in cm.REGISTRY]


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpus_models")


@cache
def _built(name: str, folder: Path) -> Plan:
    return make_plan(cm.build(name, folder))


@pytest.fixture()
def plan(request: pytest.FixtureRequest, corpus_dir: Path) -> Plan:
    p = _built(request.param, corpus_dir)
    assert p.candidates, f"{request.param}: no computed float tensor of known rank"
    return p


_REFERENCE: dict[tuple[Path, tuple[str, ...]], dict[str, np.ndarray]] = {}


def reference(plan: Plan, extra: list[str] = ()) -> dict[str, np.ndarray]:
    """The original model's outputs (and tensors ``extra``) on the plan's feeds, run once."""
    key = (plan.path, tuple(extra))
    if key not in _REFERENCE:
        _REFERENCE[key] = run(plan.path, plan.feeds, list(extra))
    return _REFERENCE[key]


def not_internal(proc) -> None:
    assert proc.returncode != 3, f"exit 3 (internal error): {proc.args[3:]}\n{proc.stderr[-2000:]}"


def quiet(procs) -> None:
    """No warning leaked to stderr (the library never prints; numpy's RuntimeWarnings included)."""
    for proc in procs:
        assert "Warning" not in proc.stderr, f"{proc.args[3:5]}: {proc.stderr[-1500:]}"


# ------------------------------------------------------------------------------ what each check works on
def deep_weight(path: Path) -> str:
    """A weight deep in the model: of the float initializers of rank >= 2 that some graph output
    is computed from, the one first read nearest the middle of the node list (as many nodes
    between it and the inputs as between it and the outputs)."""
    graph = onnx.load(str(path)).graph
    index = GraphIndex(onnx.load(str(path)))
    live = closure(index, [o.name for o in graph.output]).nodes
    weights = {t.name for t in graph.initializer if t.data_type == FLOAT and len(t.dims) >= 2}
    first: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for name in node.input:
            if i in live and name in weights:
                first.setdefault(name, i)
    assert first, f"{path.name}: no float weight matrix reaches an output"
    middle = len(graph.node) / 2
    return min(first, key=lambda name: (abs(first[name] - middle), name))


def perturbed(path: Path, weight: str, dst: Path) -> Path:
    """``path`` with initializer ``weight`` scaled by 1.01, written with onnx alone."""
    model = onnx.load(str(path))
    t = next(t for t in model.graph.initializer if t.name == weight)
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(1.01), weight))
    onnx.save_model(model, str(dst))
    return dst


def shapes(path: Path, kind: str) -> dict[str, list[int | str]]:
    """Graph inputs (``kind`` "input") or outputs of ``path``: name -> dims (dim_param or value)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    return {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in getattr(graph, kind)}


def bypass_target(plan: Plan) -> tuple[str, int]:
    """(node name, input slot) of a main-graph node whose output has the type and static shape of
    a computed input: unary activations first, else the one nearest the middle."""
    graph = onnx.load(str(plan.path), load_external_data=False).graph
    found: list[tuple[int, int, str, int]] = []
    for i, node in enumerate(graph.node):
        if not node.name or len(node.output) != 1 or node.output[0] not in plan.shape:
            continue
        out = node.output[0]
        for k, name in enumerate(node.input):
            if (name in plan.shape and plan.shape[name] == plan.shape[out] and None not in plan.shape[out]
                    and plan.dtype.get(name) == plan.dtype.get(out)):
                found.append((0 if node.op_type in UNARY_FIRST[:-1] else 1, abs(i - len(graph.node) // 2),
                              node.name, k))
                break
    assert found, f"{plan.path.name}: no node keeps its input's shape"
    _, _, name, k = min(found)
    return name, k


def with_identity(path: Path, node_name: str, slot: int) -> onnx.ModelProto:
    """The model with node ``node_name`` replaced by Identity(input ``slot``): what bypass must compute."""
    model = onnx.load(str(path))
    for node in model.graph.node:
        if node.name == node_name:
            src, out = node.input[slot], node.output[0]
            node.Clear()
            node.CopyFrom(onnx.helper.make_node("Identity", [src], [out], name=node_name))
    return model


# ------------------------------------------------------------------------------ extract, copy, insert
@pytest.mark.parametrize("plan", MODELS, indirect=True)
def test_corpus_extract_copy_insert(plan, tmp_path):
    before = plan.path.read_bytes()
    mid, last = plan.middle, plan.last
    want = reference(plan, [mid])
    ex_mid, ex_last = out_path(plan, tmp_path, "ex_mid"), out_path(plan, tmp_path, "ex_last")
    cp, ins_id, ins_scale = (out_path(plan, tmp_path, t) for t in ("copy", "ins_id", "ins_scale"))
    procs = clis(("extract", plan.path, "-o", ex_mid, "--outputs", mid, "--verify", "--json"),
                 ("extract", plan.path, "-o", ex_last, "--outputs", last, "--verify", "--json"),
                 ("copy", plan.path, "-o", cp, "--outputs", last, "--prefix", "twin/", "--verify", "--json"),
                 ("insert", plan.path, "-o", ins_id, "--at", mid, "--op", "identity", "--verify", "--json"),
                 ("insert", plan.path, "-o", ins_scale, "--at", mid, "--op", "scale:factor=2", "--as-output",
                  "--verify", "--json"))
    quiet(procs)
    for path in (ex_mid, ex_last, cp, ins_id, ins_scale):
        checked(path)
    exact(run(ex_mid, plan.feeds)[mid], want[mid], f"extract {mid}")
    exact(run(ex_last, plan.feeds)[last], want[last], f"extract {last}")
    # dynamic axes survive: the extracted model's inputs keep the original's symbolic dims
    assert shapes(ex_last, "input") == {k: v for k, v in shapes(plan.path, "input").items()
                                        if k in shapes(ex_last, "input")}
    twin = json.loads(procs[2].stdout)["outputs"][last]
    got = run(cp, plan.feeds)
    exact(got[twin], want[last], "copy twin")
    for o in plan.outputs:
        exact(got[o], want[o], f"copy: original output {o}")
    assert json.loads(procs[3].stdout)["rerouted"], f"identity at {mid} rerouted nothing"
    got = run(ins_id, plan.feeds)
    for o in plan.outputs:
        exact(got[o], want[o], f"identity insert: output {o}")
    processed = json.loads(procs[4].stdout)["processed"]
    got = run(ins_scale, plan.feeds)
    exact(got[processed], want[mid] * np.float32(2), "scale insert")
    for o in plan.outputs:
        exact(got[o], want[o], f"scale insert as output: output {o}")
    assert plan.path.read_bytes() == before


# ------------------------------------------------------------------------------ verify
@pytest.mark.parametrize("plan", MODELS, indirect=True)
def test_corpus_verify_identical_passes_deep_weight_change_fails(plan, tmp_path):
    same = out_path(plan, tmp_path, "same")
    ok(cli("insert", plan.path, "-o", same, "--at", plan.middle, "--op", "identity"))
    weight = deep_weight(plan.path)
    changed = perturbed(plan.path, weight, out_path(plan, tmp_path, "changed"))
    want, moved = reference(plan), run(changed, plan.feeds)
    # beyond verify's float32 tolerance (rtol 1e-4, atol 1e-5) on the plan's inputs: a fair negative case
    assert any(not np.allclose(moved[o], want[o], rtol=1e-4, atol=1e-5) for o in plan.outputs), \
        f"a 1% change of {weight} moved no output beyond float32 tolerance"
    # the identical rewrite passes at other sizes of the symbolic dims too (dynamic axes)
    dims = sorted({d for dims in shapes(plan.path, "input").values() for d in dims if isinstance(d, str)})
    sizes = [f"{d}={3 + 2 * k}" for k, d in enumerate(dims)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        passed, failed, deep = pool.map(lambda a: cli("verify", plan.path, *a, "--json"),
                                        [(same, *(["--dim", *sizes] if sizes else [])), (changed,),
                                         (changed, "--deep")])
    for proc in (passed, failed, deep):
        not_internal(proc)
    quiet((passed, failed, deep))
    assert passed.returncode == 0 and json.loads(passed.stdout)["ok"] is True, passed.stderr[-1500:]
    for pair in json.loads(passed.stdout)["pairs"]:
        assert not sizes or pair["shape"] != list(want[pair["reference"]].shape), "--dim changed no shape"
    assert failed.returncode == 1, f"verify missed a 1% change of {weight}: exit {failed.returncode}\n{failed.stdout[-1500:]}"
    report = json.loads(failed.stdout)
    assert report["ok"] is False and any(not p["ok"] for p in report["pairs"])
    # --deep finds where: the first differing tensor is made by a node reading the changed weight
    assert deep.returncode == 1, deep.stderr[-1500:]
    divergence = json.loads(deep.stdout)["divergence"]
    assert divergence["differing_weights"] == [weight], divergence
    graph = onnx.load(str(plan.path), load_external_data=False).graph
    assert weight in next(n for n in graph.node if n.name == divergence["node"]).input, divergence


# ------------------------------------------------------------------------------ rename, bypass, diff
@pytest.mark.parametrize("plan", MODELS, indirect=True)
def test_corpus_rename_bypass_diff(plan, tmp_path):
    mid = next(t for t in plan.candidates[len(plan.candidates) // 2:] + plan.candidates if t not in plan.outputs)
    want = reference(plan, [mid])
    one, every, byp = (out_path(plan, tmp_path, t) for t in ("rename_one", "rename_all", "bypass"))
    node, slot = bypass_target(plan)
    procs = clis(("rename", plan.path, "-o", one, "--map", f"{mid}=corpus/renamed", "--verify", "--json"),
                 # no --verify here: its check of every renamed pair takes 15 s on the T5 encoder
                 # (a deep comparison per uninformative pair); the numbers are checked below
                 ("rename", plan.path, "-o", every, "--regex", "^(.+)$=pre/\\1", "--json"),
                 ("bypass", plan.path, "-o", byp, "--node", node, "--input", str(slot), "--verify", "--json"))
    quiet(procs)
    checked(one)
    got = run(one, plan.feeds, ["corpus/renamed"])
    exact(got["corpus/renamed"], want[mid], "renamed tensor")
    for o in plan.outputs:
        exact(got[o], want[o], f"rename one: output {o}")
    # every name prefixed (onnx.compose.add_prefix): inputs and outputs too, bodies included
    renamed = checked(every)
    assert [i.name for i in renamed.graph.input] == [f"pre/{n}" for n in plan.feeds]
    assert [o.name for o in renamed.graph.output] == [f"pre/{o}" for o in plan.outputs]
    got = run(every, {f"pre/{k}": v for k, v in plan.feeds.items()})
    for o in plan.outputs:
        exact(got[f"pre/{o}"], want[o], f"rename all: output {o}")
    bypassed = checked(byp)
    assert node not in [n.name for n in bypassed.graph.node]
    expect = run(with_identity(plan.path, node, slot), plan.feeds)
    got = run(byp, plan.feeds)
    for o in plan.outputs:
        exact(got[o], expect[o], f"bypass {node}: output {o}")
    page = tmp_path / "diff.html"
    proc = cli("diff", plan.path, byp, "-o", page)
    not_internal(proc)
    quiet([ok(proc)])
    assert node in page.read_text(encoding="utf-8")
