"""The public CLI contract: commands, flags, --json shapes, exit codes, no traceback, no partial file."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests import builders
from tests.cli_helpers import assert_refused, cli

ROOT = Path(__file__).resolve().parent.parent


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


from tests.conftest import run as _run  # noqa: E402 - the shared onnxruntime helper


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


X = {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}


def test_inspect_text_and_json(cnn):
    proc = cli("inspect", cnn)
    assert proc.returncode == 0 and "Conv" in proc.stdout and "logits" in proc.stdout
    data = json.loads(cli("inspect", cnn, "--json").stdout)
    assert data["nodes"] == 6 and data["initializers"] == 4
    assert data["inputs"] == [{"name": "x", "dtype": "float", "shape": [1, 3, 8, 8]}]
    assert data["ops"]["Conv"] == 1 and data["opsets"] == {"": 17}
    assert data["weight_bytes_inline"] > 0 and data["weight_bytes_external"] == 0


def test_extract_cli_with_verify_is_exact(cnn, tmp_path):
    out = tmp_path / "logits.onnx"
    proc = cli("extract", cnn, "-o", out, "--outputs", "logits", "--verify")
    assert proc.returncode == 0, proc.stderr
    onnx.checker.check_model(str(out), full_check=True)
    got = _run(out, X)
    assert list(got) == ["logits"]
    np.testing.assert_array_equal(got["logits"], _run(cnn, X)["logits"])


def test_extract_cli_stop_input(cnn, tmp_path):
    out = tmp_path / "head.onnx"
    assert cli("extract", cnn, "-o", out, "--outputs", "logits", "--inputs", "act").returncode == 0
    model = onnx.load(str(out))
    assert [i.name for i in model.graph.input] == ["act"]


def test_copy_cli_json_contract(cnn, tmp_path):
    out = tmp_path / "twin.onnx"
    proc = cli("copy", cnn, "-o", out, "--outputs", "logits", "--prefix", "twin/", "--json",
               "--verify")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout[: proc.stdout.rindex("}") + 1])
    assert {"outputs", "initializers", "nodes", "verify", "output"} <= set(data)
    copy_name = data["outputs"]["logits"]
    assert copy_name.startswith("twin/")
    assert set(data["initializers"]) == {"conv5.weight", "conv5.bias", "fc.weight", "fc.bias"}
    got = _run(out, X)
    np.testing.assert_array_equal(got[copy_name], got["logits"])


def test_copy_shared_adds_no_initializer(cnn, tmp_path):
    out = tmp_path / "shared.onnx"
    assert cli("copy", cnn, "-o", out, "--outputs", "logits", "--weights", "shared").returncode == 0
    assert len(onnx.load(str(out)).graph.initializer) == 4


def test_insert_cli_json_contract_and_verify(cnn, tmp_path):
    out = tmp_path / "l2.onnx"
    proc = cli("insert", cnn, "-o", out, "--at", "act", "--op", "l2_normalize:axis=1", "--json",
               "--verify")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout[: proc.stdout.rindex("}") + 1])
    assert {"processed", "rerouted", "rerouted_outputs", "renamed"} <= set(data)
    assert set(data["rerouted"]) == {"pool", "side"}
    assert data["rerouted_outputs"] == ["act"]
    assert data["processed"] == "act" and data["renamed"] == {"act": "act/pre_l2_normalize"}
    model = onnx.load(str(out))
    assert [o.name for o in model.graph.output] == ["logits", "act", "side_out"]


def test_insert_at_a_graph_output_keeps_its_name_and_says_so(cnn, tmp_path):
    out = tmp_path / "sm.onnx"
    proc = cli("insert", cnn, "-o", out, "--at", "logits", "--op", "softmax:axis=1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "inserted at logits: logits (rerouted 0 consumers; graph output 'logits' keeps its name "
        "and now carries the processed values; the unprocessed tensor is now "
        f"'logits/pre_softmax') -> {out}")
    got, ref = _run(out, X), _run(cnn, X)
    assert list(got) == list(ref) == ["logits", "act", "side_out"]
    e = np.exp(ref["logits"] - ref["logits"].max(axis=1, keepdims=True))
    np.testing.assert_allclose(got["logits"], e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    old = tmp_path / "old.onnx"
    proc = cli("insert", cnn, "-o", old, "--at", "logits", "--op", "softmax:axis=1",
               "--rename-output", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["processed"] == "logits/softmax" and data["rerouted_outputs"] == ["logits"]
    assert data["renamed"] == {}
    assert list(_run(old, X)) == ["logits/softmax", "act", "side_out"]
    proc = cli("insert", cnn, "-o", old, "--at", "logits", "--op", "softmax:axis=1",
               "--rename-output")
    assert "graph output 'logits' is now 'logits/softmax'" in proc.stdout


def test_insert_as_output_keeps_the_rest(cnn, tmp_path):
    out = tmp_path / "feat.onnx"
    proc = cli("insert", cnn, "-o", out, "--at", "act", "--op", "reduce_mean:axes=2|3,keepdims=0",
               "--as-output", "--json")
    assert proc.returncode == 0, proc.stderr
    processed = json.loads(proc.stdout)["processed"]
    got, ref = _run(out, X), _run(cnn, X)
    np.testing.assert_array_equal(got["logits"], ref["logits"])
    np.testing.assert_allclose(got[processed], ref["act"].mean(axis=(2, 3)), rtol=1e-6, atol=1e-7)


def test_reroute_cli(cnn, tmp_path):
    out = tmp_path / "rr.onnx"
    proc = cli("reroute", cnn, "-o", out, "--from", "act", "--to", "conv5_out",
               "--consumers", "side", "--verify", "--json")
    assert proc.returncode == 0, proc.stderr
    got = _run(out, X)
    conv = _run(cnn, X)
    ref_side = 1 / (1 + np.exp(-_run(_save(_expose(builders.tiny_cnn(), "conv5_out"),
                                                  out.parent / "exp.onnx"), X)["conv5_out"]))
    np.testing.assert_allclose(got["side_out"], ref_side, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got["logits"], conv["logits"])


def _expose(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    return model


def test_verify_cli_pass_fail_and_json(cnn, tmp_path):
    proc = cli("verify", cnn, cnn, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is True and {p["reference"] for p in data["pairs"]} == {"logits", "act", "side_out"}
    for key in ("candidate", "max_abs_diff", "max_rel_diff", "ok"):
        assert key in data["pairs"][0]
    bad = builders.tiny_cnn()
    w = onnx.numpy_helper.to_array(bad.graph.initializer[2]) * (1 + 1e-3)
    bad.graph.initializer[2].CopyFrom(onnx.numpy_helper.from_array(w.astype(np.float32), "fc.weight"))
    other = _save(bad, tmp_path / "bad.onnx")
    proc = cli("verify", cnn, other, "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["ok"] is False


def test_verify_with_npz_inputs(cnn, tmp_path):
    np.savez(tmp_path / "in.npz", **X)
    proc = cli("verify", cnn, cnn, "--inputs", tmp_path / "in.npz", "--pair", "logits=logits")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "args, needle",
    [
        (["extract", "{m}", "-o", "{o}", "--outputs", "nope"], "not found"),
        (["extract", "{d}/missing.onnx", "-o", "{o}", "--outputs", "y"], "does not exist"),
        (["extract", "{junk}", "-o", "{o}", "--outputs", "y"], "not an ONNX model"),
        (["insert", "{m}", "-o", "{o}", "--at", "act", "--op", "l3_normalize"], "l3_normalize"),
        (["insert", "{m}", "-o", "{o}", "--at", "act", "--op", "clip:lo=1"], "lo"),
        (["reroute", "{m}", "-o", "{o}", "--from", "act", "--to", "side_out"], "cycle"),
        (["copy", "{m}", "-o", "{o}", "--outputs", "logits", "--weights", "both"], "invalid choice"),
        (["extract", "{m}", "-o", "{m}", "--outputs", "logits"], "input"),
        (["extract", "{m}", "--outputs", "logits"], "required"),
    ],
    ids=["bad-name", "missing-file", "not-onnx", "bad-op", "bad-param", "cycle", "bad-choice",
         "out-is-in", "no-output"],
)
def test_bad_input_is_one_line_exit_2_and_no_file(cnn, tmp_path, args, needle):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\xffnot a model at all" * 10)
    out = tmp_path / "out.onnx"
    argv = [a.format(m=cnn, o=out, d=tmp_path, junk=junk) for a in args]
    assert_refused(argv, needle, inputs=[cnn], out=out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["cnn.onnx", "junk.onnx"])


def test_same_command_gives_byte_identical_files(cnn, tmp_path):
    outs = []
    for k in range(2):
        out = tmp_path / f"c{k}.onnx"
        assert cli("copy", cnn, "-o", out, "--outputs", "logits").returncode == 0
        outs.append(_sha(out))
    assert outs[0] == outs[1]


def test_verify_failure_exits_1(tmp_path):
    # an insert whose rewrite record lies (claims identity) is caught by --rewrite-log
    src = _save(builders.tiny_cnn(), tmp_path / "cnn.onnx")
    out = tmp_path / "l2.onnx"
    assert cli("insert", src, "-o", out, "--at", "act", "--op", "scale:factor=2").returncode == 0
    model = onnx.load(str(out))
    for node in model.graph.node:
        if node.op_type == "Mul":
            node.op_type = "Add"  # tamper: the block no longer computes what the record says
    tampered = _save(model, tmp_path / "tampered.onnx")
    proc = cli("verify", src, tampered, "--rewrite-log")
    assert proc.returncode == 1, proc.stdout + proc.stderr


def test_no_command_prints_help_and_exits_2():
    proc = cli()
    assert proc.returncode == 2 and "extract" in proc.stdout


def _pasted(stdout: str) -> list[str]:
    """The commands the demo prints ('   $ onnxsurgeon ...'), exactly as printed."""
    return [line.strip()[2:] for line in stdout.splitlines() if line.strip().startswith("$ ")]


def paste(command: str) -> subprocess.CompletedProcess[str]:
    """Run a printed command in a shell, as a user pasting it would (from the checkout)."""
    script = f'onnxsurgeon() {{ "{sys.executable}" -m onnxsurgeon "$@"; }}\n{command}'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)


def test_demo_runs_verifies_everything_and_its_commands_run_as_printed():
    proc = cli("demo")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("onnxruntime check: ok") >= 5
    assert "FAILED" not in proc.stdout
    commands = [c for c in _pasted(proc.stdout) if "--func" not in c]
    assert len(commands) >= 5 and all(" -o " in c for c in commands)
    for command in commands:
        out = Path(command.split(" -o ")[1].split()[0])
        before = out.read_bytes() if out.exists() else None
        done = paste(command)
        assert done.returncode == 0, command + "\n" + done.stderr
        if before is not None:  # the demo wrote the same file: the command is what it ran
            assert out.read_bytes() == before, command


# ------------------------------------------------ onnx.checker on large outputs (> 20k nodes)
@pytest.mark.parametrize("blocks", [3, 7000], ids=["small-full-check", "large-plain-check"])
def test_write_checks_full_up_to_20k_nodes_plain_above(tmp_path, blocks):
    from onnxsurgeon import cli as cli_module

    src = _save(builders.chain(blocks), tmp_path / "src.onnx")
    out = tmp_path / "out.onnx"
    model = builders.shape_clash(builders.chain(blocks))
    large = cli_module._node_count(model, cli_module.FULL_CHECK_MAX_NODES)
    assert (large > cli_module.FULL_CHECK_MAX_NODES) == (blocks == 7000)
    onnx.checker.check_model(model)  # structure is fine; only full inference sees the clash
    if blocks == 3:  # full check: caught, output removed
        with pytest.raises(RuntimeError, match="onnx.checker"):
            cli_module._write(model, str(out), str(src))
        assert not out.exists()
    else:  # plain check: passes, output kept
        cli_module._write(model, str(out), str(src))
        assert len(onnx.load(str(out)).graph.node) == 3 * blocks + 1
    # above the limit the plain check still runs: an unknown op is caught and the output is
    # never published (checked before the rename: the path keeps what it held)
    before = out.read_bytes() if out.exists() else None
    model.graph.node.append(onnx.helper.make_node("NoSuchOp", ["x"], ["bad"], name="bad"))
    with pytest.raises(RuntimeError, match="onnx.checker"):
        cli_module._write(model, str(out), str(src))
    assert (out.read_bytes() if out.exists() else None) == before
    expected = {"src.onnx"} | ({"out.onnx"} if before is not None else set())
    assert {p.name for p in tmp_path.iterdir()} == expected  # no temporary file left


def test_extract_cli_over_20k_nodes_passes_checker(tmp_path):
    src = _save(builders.chain(7000), tmp_path / "chain.onnx")  # 21000 nodes
    out = tmp_path / "all.onnx"
    proc = cli("extract", src, "-o", out, "--outputs", "y")
    assert proc.returncode == 0, proc.stderr
    model = onnx.load(str(out))
    assert len(model.graph.node) == 21000 and [o.name for o in model.graph.output] == ["y"]
    onnx.checker.check_model(model)
    feeds = {"x": np.ones((1, 4), np.float32)}
    np.testing.assert_array_equal(_run(out, feeds)["y"], _run(src, feeds)["y"])


def test_verify_on_a_terminal_prints_a_rich_table(cnn):
    import os
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "onnxsurgeon", "verify", str(cnn), str(cnn)],
                            stdout=follower, stderr=follower, cwd=ROOT,
                            env={**os.environ, "COLUMNS": "120"})
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(timeout=120) == 0
    text = b"".join(chunks).decode("utf-8", "replace")
    assert "┃" in text and "max_abs" in text and "logits" in text


def test_list_flags_take_several_values_or_repeats(cnn, tmp_path):
    """`--pair R=C ...` / `--replace-input A=B ...`: both spellings of the contract's '...'."""
    for argv in (["--pair", "logits=logits", "act=act"],
                 ["--pair", "logits=logits", "--pair", "act=act"]):
        proc = cli("verify", cnn, cnn, *argv, "--json")
        assert proc.returncode == 0, proc.stderr
        assert [p["reference"] for p in json.loads(proc.stdout)["pairs"]] == ["logits", "act"]
    out = tmp_path / "rep.onnx"
    proc = cli("copy", cnn, "-o", out, "--outputs", "logits", "--replace-input", "act=conv5_out",
               "--json")
    assert proc.returncode == 0, proc.stderr
    model = onnx.load(str(out))
    copied = json.loads(proc.stdout)["nodes"]
    readers = [n for n in model.graph.node if n.name in copied.values()]
    assert any("conv5_out" in n.input for n in readers)
    # a second pair after the first is parsed as a pair too (and refused: x is not on the path)
    proc = cli("copy", cnn, "-o", out, "--outputs", "logits", "--replace-input", "act=conv5_out",
               "x=x")
    assert proc.returncode == 2 and "'x' is not on the path" in proc.stderr


_STARTUP_PROBE = """
import os, sys
import onnxsurgeon.__main__ as entry
before = sorted(m for m in ("numpy", "onnx") if m in sys.modules)
sys.argv = ["onnxsurgeon", "--version"]
try:
    code = entry.main()
except SystemExit as exc:
    code = exc.code
print(before, os.environ.get("OPENBLAS_NUM_THREADS"), code)
"""


@pytest.mark.parametrize("preset, expected", [(None, "1"), ("3", "3")])
def test_command_line_limits_openblas_threads_before_numpy_loads(preset, expected):
    """The entry point (``python -m onnxsurgeon`` and the ``onnxsurgeon`` script) sets
    OPENBLAS_NUM_THREADS=1 before numpy is imported (importing the package loads neither numpy
    nor onnx), and a value the caller set wins."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    proc = subprocess.run([sys.executable, "-c", _STARTUP_PROBE], capture_output=True, text=True,
                          env=env, check=True)
    assert proc.stdout.splitlines()[-1] == f"[] {expected} 0"


def test_package_names_resolve_lazily():
    import onnxsurgeon
    import onnxsurgeon.closure  # the submodule of the same name does not shadow the function

    assert sorted(onnxsurgeon.__all__) == sorted(onnxsurgeon._HOME_OF)
    for name in onnxsurgeon.__all__:
        assert getattr(onnxsurgeon, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        onnxsurgeon.nope  # noqa: B018


def test_the_program_flushes_everything_before_its_fast_exit(tmp_path):
    """``python -m onnxsurgeon`` ends with ``os._exit`` after the exit handlers and a flush: a
    long JSON answer arrives whole through a pipe, and exit codes are kept."""
    src = tmp_path / "chain.onnx"
    src.write_bytes(builders.chain(400).SerializeToString())
    proc = cli("inspect", src, "--json", "--nodes")
    assert proc.returncode == 0
    assert len(json.loads(proc.stdout)["node_list"]) == 1200
    proc = cli("extract", tmp_path / "missing.onnx", "-o", tmp_path / "o.onnx", "--outputs", "y")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("reader", ["closed pipe", "head -c 0"])
def test_stdout_closed_by_its_reader_is_exit_141_quietly(tmp_path, reader):
    """``onnxsurgeon inspect M | head -c 0``: the reader closing the pipe before the answer is
    written is not a bug: exit 141 (128 + SIGPIPE, as a shell reports), nothing on stderr."""
    import os
    import shlex

    src = tmp_path / "chain.onnx"
    src.write_bytes(builders.chain(400).SerializeToString())
    cmd = [sys.executable, "-m", "onnxsurgeon", "inspect", str(src), "--json", "--nodes"]
    if reader == "closed pipe":
        read_end, write_end = os.pipe()
        os.close(read_end)
        proc = subprocess.run(cmd, stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=120)
        os.close(write_end)
        code, err = proc.returncode, proc.stderr
    else:  # head exits at once, long before the interpreter has started and written anything
        line = f"{shlex.join(cmd)} | head -c 0; exit ${{PIPESTATUS[0]}}"
        proc = subprocess.run(["bash", "-c", line], stderr=subprocess.PIPE, text=True,
                              timeout=120)
        code, err = proc.returncode, proc.stderr
    assert code == 141, err
    assert err == ""
