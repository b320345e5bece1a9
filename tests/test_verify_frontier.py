"""A pair that cannot show a difference is settled by its nearest informative frontier, and all
the open pairs of one report by one deep pass (issue 29)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.surgery import insert, rename
from onnxsurgeon.verify import compare, verify_log
from onnxsurgeon.verify.run import COUNTS

F = TensorProto.FLOAT
WIDTH = 16
DEPTH = 6


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def saturated_head(head: str) -> onnx.ModelProto:
    """x -> DEPTH x (MatMul, Tanh) -> logits (MatMul, huge gain) -> head: a softmax of huge
    logits (one-hot), or a Clip at +-1e-3 of them (every element at a bound)."""
    rng = np.random.default_rng(5)
    nodes, inits, h = [], [], "x"
    for i in range(DEPTH):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((WIDTH, WIDTH)) / 4).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("MatMul", [h, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Tanh", [f"m{i}"], [f"t{i}"], name=f"tanh{i}")]
        h = f"t{i}"
    inits.append(numpy_helper.from_array(
        (rng.standard_normal((WIDTH, 10)) * 1e4).astype(np.float32), "head_w"))
    nodes.append(helper.make_node("MatMul", [h, "head_w"], ["logits"], name="fc"))
    if head == "softmax":
        nodes.append(helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1))
    else:
        inits += [numpy_helper.from_array(np.array(-1e-3, np.float32), "lo"),
                  numpy_helper.from_array(np.array(1e-3, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", ["logits", "lo", "hi"], ["y"], name="clip"))
    return _model(nodes, [helper.make_tensor_value_info("x", F, [1, WIDTH])],
                  [helper.make_tensor_value_info("y", F, [1, 10])], inits)


def clone(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


@pytest.mark.parametrize("head", ["softmax", "clip"])
def test_a_saturated_output_is_settled_by_its_logits_only(head):
    ref = saturated_head(head)
    report = compare(ref, clone(ref))
    (pair,) = report.pairs
    assert not pair.informative and "saturated" in (pair.why or "")
    assert report.verdict == "pass" and "'logits'" in (pair.evidence or "")
    # only the frontier (the logits) was run; the pair itself is listed with it
    assert report.deep is not None and not report.deep.forced
    assert [t.tensor for t in report.deep.tensors] == ["logits", "y"]
    assert report.deep.batches == 1
    # --deep still compares every shared tensor
    deep = compare(ref, clone(ref), deep=True)
    assert deep.verdict == "pass" and deep.deep is not None and deep.deep.forced
    assert len(deep.deep.tensors) == 2 * DEPTH + 2


@pytest.mark.parametrize("room", ["everything", "the frontier"])
def test_settling_reads_the_values_the_comparing_runs_kept(room, monkeypatch):
    """The sessions comparing the pairs compute the tensors settling will need (all of them
    when they fit, else the frontier: the logits) and their values are kept: settling runs no
    sample again. The report is the one of settling by its own runs, and a failure behind the
    frontier still gets its own sessions."""
    import importlib

    from onnxsurgeon.verify import run

    compare_module = importlib.import_module("onnxsurgeon.verify.compare")
    runs: Counter[str] = Counter()
    real = run.Runner.run

    def counted(self, feeds):
        runs[self.label] += 1
        return real(self, feeds)

    monkeypatch.setattr(run.Runner, "run", counted)
    if room == "the frontier":  # the logits (40 bytes) fit, their ancestors do not
        monkeypatch.setattr(compare_module, "SPECULATIVE_BYTES", 100)
    ref = saturated_head("softmax")
    cand = clone(ref)
    w = next(t for t in cand.graph.initializer if t.name == "w3")
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * np.float32(1.5), "w3"))
    reports = {}
    for kept in ("kept", "not kept"):
        if kept == "not kept":
            monkeypatch.setattr(compare_module, "KEPT_BYTES", 0)
        for other in ("same", "changed"):
            runs.clear()
            reports[kept, other] = compare(ref, clone(ref) if other == "same" else cand)
            if other == "same":  # settled by the logits the comparing runs kept
                assert reports[kept, other].verdict == "pass"
                assert runs == Counter({"reference": 2, "candidate": 2} if kept == "kept" else
                                       {"reference": 4, "candidate": 4})
            elif kept == "kept" and room == "everything":
                # the node check of the first difference reads the kept values too
                assert runs == Counter({"reference": 2, "candidate": 2, "node": 1})
    assert reports["kept", "changed"].verdict == "fail"
    for other in ("same", "changed"):
        assert (reports["kept", other].to_json() == reports["not kept", other].to_json())


@pytest.mark.parametrize("deep", [False, True])
def test_kept_values_stop_once_every_pair_fails(deep, monkeypatch):
    """A pair that fails needs no settling: once every pair fails, the comparing runs stop
    keeping (and fetching) the tensors kept for it (``--deep`` compares them all: kept on).
    Same report."""
    import importlib

    from onnxsurgeon.verify import shard

    compare_module = importlib.import_module("onnxsurgeon.verify.compare")
    kept: Counter[str] = Counter()
    real = shard._keep

    def counted(staged, feeds, values, names, **kwargs):
        kept[staged.label] += 1
        return real(staged, feeds, values, names, **kwargs)

    monkeypatch.setattr(shard, "_keep", counted)
    ref = saturated_head("softmax")
    cand = clone(ref)
    w = next(t for t in cand.graph.initializer if t.name == "head_w")
    w.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(w), "head_w"))  # flips the winner
    report = compare(ref, cand, deep=deep)
    assert report.verdict == "fail" and report.pairs[0].worst_sample == 0
    samples = 2 if deep else 0  # sample 0 fails the only pair: not kept, nor sample 1
    assert kept == (Counter({"reference": samples, "candidate": samples}) if deep else Counter())
    monkeypatch.setattr(compare_module, "KEPT_BYTES", 0)
    assert compare(ref, cand, deep=deep).to_json() == report.to_json()
    assert sum(kept.values()) == 2 * samples  # nothing kept without room


def test_a_change_behind_an_agreeing_frontier_is_still_found():
    """The logits agree within tolerance although a weight before them moved by 1e-6: the
    frontier alone cannot clear the pair, so the tensors behind it are compared, as before."""
    ref = saturated_head("softmax")
    cand = clone(ref)
    w = next(t for t in cand.graph.initializer if t.name == "w0")
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * np.float32(1.01), "w0"))
    report = compare(ref, cand)
    assert report.verdict == "fail", report.to_text()
    assert "'m0'" in (report.pairs[0].evidence or "")


def test_rewrites_settle_the_frontier_behind_the_rewrite_site():
    """insert after the logits' input: the check compares the saturated output, settled by the
    logits (the same graph computes it from them) without comparing the chain before, nor
    opening a session for them (each costs a model load: 5 s on the 90k-node chain)."""
    ref = saturated_head("softmax")
    new = clone(ref)
    insert(new, f"t{DEPTH - 1}", op="identity")
    before = COUNTS.copy()
    report = verify_log(ref, new)
    assert report.verdict == "pass", report.to_text()
    downstream = next(p for p in report.pairs if p.check == "downstream")
    assert not downstream.informative and "'logits'" in (downstream.evidence or "")
    assert report.deep is not None and [t.tensor for t in report.deep.tensors] == ["logits", "y"]
    # the check's own sessions computed the logits beside the output (one step behind it):
    # the original, the rewritten model, the block and the cut original, none for settling
    assert COUNTS["sessions"] - before["sessions"] == 4
    assert report.deep.batches == 0


def saturated_taps(n: int) -> onnx.ModelProto:
    """x -> n x (Mul by w_i -> a_i -> Mul by 1e4 -> Sigmoid -> s_i (a graph output, saturated
    at 0 or 1)), the chain continuing from a_i: n outputs that cannot show a difference."""
    rng = np.random.default_rng(2)
    nodes, inits, outs, h = [], [], [], "x"
    inits.append(numpy_helper.from_array(np.array(1e4, np.float32), "gain"))
    for i in range(n):
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, (1, WIDTH)).astype(np.float32),
                                             f"w{i}"))
        nodes += [helper.make_node("Mul", [h, f"w{i}"], [f"a{i}"], name=f"mul{i}"),
                  helper.make_node("Mul", [f"a{i}", "gain"], [f"g{i}"], name=f"gain{i}"),
                  helper.make_node("Sigmoid", [f"g{i}"], [f"s{i}"], name=f"sig{i}")]
        outs.append(helper.make_tensor_value_info(f"s{i}", F, [1, WIDTH]))
        h = f"a{i}"
    return _model(nodes, [helper.make_tensor_value_info("x", F, [1, WIDTH])], outs, inits)


def test_many_open_pairs_cost_one_deep_pass():
    """A whole-model rename of a model with 24 saturated outputs: every renamed tensor is a
    pair, so the 24 open pairs are settled in one pass by the pairs beside them (before: one
    deep comparison per open pair, each over all its ancestors)."""
    n = 24
    ref = saturated_taps(n)
    new = clone(ref)
    rename(new, regex={"^(.*)$": r"net/\1"})
    before = COUNTS.copy()
    report = verify_log(ref, new)
    assert report.verdict == "pass", report.to_text()
    blind = [p for p in report.pairs if not p.informative]
    assert len(blind) >= n and all(p.evidence for p in blind)
    assert COUNTS["deep passes"] - before["deep passes"] == 1
    # one session per model for the pairs; settling needed none (the pairs were compared)
    assert COUNTS["sessions"] - before["sessions"] <= 2


def saturated_chain(n: int) -> onnx.ModelProto:
    """x -> n x (Mul by 1e4 -> Sigmoid -> s_i, a graph output): every tensor after the first
    Mul is saturated (0 or 1), so no pair on the chain can show a difference by itself."""
    inits = [numpy_helper.from_array(np.array(1e4, np.float32), "gain")]
    nodes, outs, h = [], [], "x"
    for i in range(n):
        nodes += [helper.make_node("Mul", [h, "gain"], [f"g{i}"], name=f"gain{i}"),
                  helper.make_node("Sigmoid", [f"g{i}"], [f"s{i}"], name=f"sig{i}")]
        outs.append(helper.make_tensor_value_info(f"s{i}", F, [1, WIDTH]))
        h = f"s{i}"
    return _model(nodes, [helper.make_tensor_value_info("x", F, [1, WIDTH])], outs, inits)


def test_one_pass_walks_each_node_once(monkeypatch):
    """A whole-model rename of a chain of saturated tensors: every open pair walks back over
    the open pairs before it to the input (the issue's MobileNetV3Small: 430 such walks took
    most of `rename --regex --verify`). One pass compares each node (and weight) once,
    whatever the number of walks crossing it: linear in the model, not quadratic."""
    from onnxsurgeon.verify import deepen

    n = 12
    ref = saturated_chain(n)
    new = clone(ref)
    rename(new, regex={"^(.*)$": r"net/\1"})
    real = deepen.same_step
    calls: Counter[tuple[str, str]] = Counter()

    def counted(ref_, cand_, a, b, mapping):
        calls[(a, b)] += 1
        return real(ref_, cand_, a, b, mapping)

    monkeypatch.setattr(deepen, "same_step", counted)
    report = verify_log(ref, new)
    assert report.verdict == "pass", report.to_text()
    assert sum(not p.informative for p in report.pairs) >= n
    assert calls and max(calls.values()) == 1, calls.most_common(3)


def test_one_wave_classifies_each_tensor_once(monkeypatch):
    """The walks back of the open pairs of a saturated chain cross each other (each walks over
    every open pair before it): one wave looks at each tensor once, whatever the number of walks
    crossing it (n walks of up to 2n tensors each were n**2 looks), and each pass names the
    tensors it stopped at first."""
    from onnxsurgeon.verify import deepen

    n = 40
    ref = saturated_chain(n)
    new = clone(ref)
    rename(new, regex={"^(.*)$": r"net/\1"})
    looks: Counter[tuple[str, str]] = Counter()
    real = deepen._Walker._kind

    def counted(self, a, b):
        looks[(a, b)] += 1
        return real(self, a, b)

    monkeypatch.setattr(deepen._Walker, "_kind", counted)
    report = verify_log(ref, new)
    assert report.verdict == "pass", report.to_text()
    blind = [p for p in report.pairs if not p.informative]
    assert len(blind) >= n and all(p.evidence for p in blind)
    assert looks and max(looks.values()) == 1, looks.most_common(3)
    assert sum(looks.values()) <= 2 * n + 2


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "bool", "complex64"])
def test_bit_identical_sides_report_what_the_element_wise_comparison_does(dtype, monkeypatch):
    """Exact pairs whose sides hold the same bits (every pair of a rename) are folded in a few
    passes; the report is the element-wise comparison's (NaN, Inf, -0.0 and zeros included),
    also after a later sample that differs."""
    from onnxsurgeon.verify import accumulate

    rng = np.random.default_rng(3)
    base = rng.standard_normal((3, 50)).astype(np.float32)
    base[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    base[1, :] = 0.0
    if dtype == "int64":
        base = np.nan_to_num(base * 1000, posinf=2**40, neginf=-(2**40))
    samples = [base.astype(dtype) if dtype != "bool" else base > 0, (base * 2).astype(dtype)]
    later = samples[1].copy()
    later.reshape(-1)[7] = later.reshape(-1)[7] + 1 if dtype != "bool" else not later.reshape(-1)[7]

    def fold(rounds):
        acc = accumulate.PairAccumulator("r", "c", exact=True, dtype=dtype)
        for k, (r, c) in enumerate(rounds):
            acc.add(r, c.copy(), k)
        return acc.result()

    for rounds in ([(s, s) for s in samples], [(samples[0], samples[0]), (samples[1], later)]):
        fast = fold(rounds)
        monkeypatch.setattr(accumulate, "_same_bits", lambda a, b: False)
        slow = fold(rounds)
        monkeypatch.undo()
        assert fast.cosine == pytest.approx(slow.cosine, abs=1e-15)
        assert replace(fast, cosine=None) == replace(slow, cosine=None)


def test_threads_default_to_the_cores_and_the_flags_set_them(tmp_path, capsys):
    """onnxruntime sessions take the machine's cores by default; `verify --threads N` and a
    verb's `--verify-threads N` set them."""
    from onnxsurgeon.verify.run import default_threads

    from .cli_helpers import cli_main

    path = tmp_path / "m.onnx"
    onnx.save(saturated_head("softmax"), str(path))
    cores = f"sessions with {default_threads()} threads"
    before = COUNTS.copy()
    assert compare(str(path), str(path)).ok
    assert COUNTS[cores] > before[cores]
    one = "sessions with 1 threads"
    before = COUNTS.copy()
    code, _, err = cli_main(capsys, "verify", path, path, "--threads", "1")
    assert code == 0, err
    assert COUNTS[one] - before[one] == COUNTS["sessions"] - before["sessions"] > 0
    before = COUNTS.copy()
    code, _, err = cli_main(capsys, "rename", path, "-o", tmp_path / "r.onnx", "--regex",
                            "^(.*)$=n/\\1", "--verify", "--verify-threads", "1")
    assert code == 0, err
    assert COUNTS[one] - before[one] == COUNTS["sessions"] - before["sessions"] > 0


def test_a_heavy_model_runs_from_one_staged_file_and_keeps_no_bytes():
    """Over SESSION_BYTES_LIMIT (inline weights), sessions load from the staged file (onnxruntime
    keeps less of it) and no serialized copy stays in Python; verdicts, deep comparison and
    divergence are the same as from bytes."""
    from onnxsurgeon.io import Model
    from onnxsurgeon.verify.run import SESSION_BYTES_LIMIT, Staged, Workspace

    dim = 2048
    w = np.random.default_rng(0).standard_normal((dim, dim)).astype(np.float32) / dim
    ref = _model([helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                  helper.make_node("Tanh", ["m"], ["y"], name="tanh")],
                 [helper.make_tensor_value_info("x", F, [1, dim])],
                 [helper.make_tensor_value_info("y", F, [1, dim])],
                 [numpy_helper.from_array(w, "w")])
    assert ref.ByteSize() > SESSION_BYTES_LIMIT
    with Workspace() as ws:
        staged = Staged(Model(ref), ws, "heavy")
        assert isinstance(staged.base(), type(staged.path)) and staged._bytes is None
        with staged.session(["m", "y"]) as runner:
            values = runner.run({"x": np.ones((1, dim), np.float32)})
        assert staged._bytes is None and set(values) == {"m", "y"}
        assert [p.name for p in ws.dir.iterdir()] == [staged.path.name]  # the variant is gone
    cand = clone(ref)
    cand.graph.initializer[0].CopyFrom(numpy_helper.from_array(w * np.float32(1.01), "w"))
    report = compare(ref, cand, deep=True)
    assert report.verdict == "fail" and report.divergence is not None
    assert report.divergence.node == "mm" and report.deep.first_difference.tensor == "m"


@pytest.mark.parametrize("case", ["light", "heavy", "re-sorted"])
def test_a_verbs_verify_runs_the_input_file_for_the_original(case, tmp_path, capsys,
                                                             monkeypatch):
    """`insert ... --verify` compares against the input as load read it: that very file, so
    its sessions read the file (its bytes when light; when heavy, light bytes whose weights are
    references into it) instead of a serialized copy of the proto; the rewritten model comes
    from memory. An input load repaired (nodes re-sorted)
    is not its file's model: staged from memory too."""
    from onnxsurgeon.verify import run

    from .cli_helpers import cli_main

    dim = 2048 if case == "heavy" else WIDTH
    w = (np.random.default_rng(0).standard_normal((dim, dim)) / dim).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Tanh", ["m"], ["y"], name="tanh")]
    if case == "re-sorted":
        nodes.reverse()
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [1, dim])],
                   [helper.make_tensor_value_info("y", F, [1, dim])],
                   [numpy_helper.from_array(w, "w")])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    staged: dict[str, tuple[object, object, object]] = {}
    real = run.Staged._open

    def recorded(self, wanted):
        runner = real(self, wanted)
        staged.setdefault(self.label, (self.source_path, self._path,
                                       self.folder if self._referenced else None))
        return runner

    monkeypatch.setattr(run.Staged, "_open", recorded)
    code, out, err = cli_main(capsys, "insert", path, "-o", tmp_path / "o.onnx", "--at", "m",
                              "--op", "identity", "--verify")
    assert code == 0, err
    assert "pairs agree" in out
    source, file, referenced = staged["original"]
    if case == "re-sorted":
        assert source is None
    else:
        assert source == path
        assert file is None  # nothing staged on disk
        assert referenced == (tmp_path.resolve() if case == "heavy" else None)
    assert staged["rewritten"][0] is None
