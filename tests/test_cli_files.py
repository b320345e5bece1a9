"""Files a user can lose: an existing non-ONNX file is never overwritten without --force (judged by
its bytes, not its name), and reroute says how many nodes it left unused (--prune removes them)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from onnxsurgeon.outfile import looks_like_onnx
from tests import builders
from tests.cli_helpers import cli_main as run

ROOT = Path(__file__).resolve().parent.parent
VICTIM = b"import os\nprint('my precious script')\n"


COMMANDS = {
    "extract": ["extract", "{m}", "-o", "{o}", "--outputs", "logits"],
    "copy": ["copy", "{m}", "-o", "{o}", "--outputs", "logits"],
    "insert": ["insert", "{m}", "-o", "{o}", "--at", "act", "--op", "identity"],
    "reroute": ["reroute", "{m}", "-o", "{o}", "--from", "act", "--to", "conv5_out"],
    "convert": ["convert", "torch", "net.py:build", "-o", "{o}", "--input", "x:1x3"],
}


@pytest.mark.parametrize("name", ["victim.py", "victim.onnx", "notes"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_existing_file_that_is_not_onnx_is_refused_unless_forced(cnn, tmp_path, capsys,
                                                                     command, name):
    victim = tmp_path / name  # the extension does not matter: the bytes do
    victim.write_bytes(VICTIM)
    argv = [a.format(m=cnn, o=victim) for a in COMMANDS[command]]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err == (f"onnxsurgeon: error: output '{victim}' exists and is not an ONNX model; "
                   "choose another -o path, or add --force to overwrite it\n")
    assert victim.read_bytes() == VICTIM
    if command != "convert":
        code, out, err = run(capsys, *argv, "--force")
        assert code == 0, err
        onnx.checker.check_model(str(victim))


def test_an_existing_onnx_model_and_an_empty_file_are_overwritten(cnn, tmp_path, capsys):
    out = tmp_path / "out.onnx"
    out.write_bytes(builders.tied_weights().SerializeToString())
    assert run(capsys, "extract", cnn, "-o", out, "--outputs", "logits")[0] == 0
    assert [o.name for o in onnx.load(str(out)).graph.output] == ["logits"]
    empty = tmp_path / "empty.onnx"
    empty.touch()
    assert run(capsys, "extract", cnn, "-o", empty, "--outputs", "logits")[0] == 0


def test_a_folder_as_output_is_refused(cnn, tmp_path, capsys):
    code, _, err = run(capsys, "extract", cnn, "-o", tmp_path, "--outputs", "logits", "--force")
    assert code == 2 and "is a folder; give a file path" in err


def test_looks_like_onnx_reads_bytes():
    assert looks_like_onnx(ROOT / "models" / "seed_cnn.onnx")
    assert looks_like_onnx(ROOT / "models" / "torch_cnn.onnx")
    assert not looks_like_onnx(ROOT / "README.md")
    assert not looks_like_onnx(ROOT / "pyproject.toml")
    assert not looks_like_onnx(ROOT / "onnxsurgeon" / "schemas" / "extract.json")


def test_looks_like_onnx_refuses_a_truncated_model(tmp_path):
    data = (ROOT / "models" / "seed_cnn.onnx").read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    assert not looks_like_onnx(cut)


def test_reroute_counts_unused_nodes_and_prune_removes_them(cnn, tmp_path, capsys):
    out = tmp_path / "rr.onnx"
    code, text, _ = run(capsys, "reroute", cnn, "-o", out, "--from", "act", "--to", "conv5_out")
    assert code == 0
    assert text == (f"rerouted 2 consumers and 1 graph outputs of act to conv5_out; 1 nodes are "
                    f"now unused (no output depends on them; --prune removes them) -> {out}\n")
    assert "relu5" in [n.name for n in onnx.load(str(out)).graph.node]
    code, text, _ = run(capsys, "reroute", cnn, "-o", out, "--from", "act", "--to", "conv5_out",
                        "--prune", "--verify")
    assert code == 0
    assert (f"rerouted 2 consumers and 1 graph outputs of act to conv5_out; pruned 1 unused "
            f"nodes and 0 initializers -> {out}") in text.splitlines()
    assert "relu5" not in [n.name for n in onnx.load(str(out)).graph.node]
