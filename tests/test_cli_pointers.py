"""Messages that point the right way (issue 27): a missing framework names the one extra that
installs it, a function that fails on the activation is the function's to fix (not the
exporter's or framework's), and a missing function name lists the file's own functions."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.cli_helpers import ROOT, assert_refused, cli

SEED = ROOT / "models" / "seed_cnn.onnx"
ACT = "network/layer_conv5/Relu:0"

WITHOUT = textwrap.dedent("""
    import sys
    sys.modules[{module!r}] = None      # the import fails for real, as when it is not installed
    from onnxsurgeon.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def _without(module: str, *args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT.format(module=module), *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.mark.parametrize(("module", "argv", "extra"), [
    ("torch", ["convert", "torch", "examples/mynet.py:build", "--input", "x:1x3x32x32"], "torch"),
    ("tensorflow", ["convert", "tf", "missing.keras"], "tf"),
    ("torch", ["insert", SEED, "--at", ACT, "--func", "examples/proc.py:normalize",
               "--framework", "torch"], "torch"),
])
def test_a_missing_framework_names_the_one_extra(tmp_path, module, argv, extra):
    out = tmp_path / "o.onnx"
    proc = _without(module, *argv, "-o", out)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"pip install 'onnxsurgeon[{extra}]'" in lines[0] and f"'{module}'" in lines[0]
    other = "tf" if extra == "torch" else "torch"
    assert f"[{other}]" not in lines[0] and "Traceback" not in proc.stderr
    assert not out.exists()


def test_a_missing_function_name_lists_the_files_functions(tmp_path):
    src = tmp_path / "proc.py"
    src.write_text(textwrap.dedent("""
        import json
        import os
        from pathlib import Path

        import numpy as np

        def normalize(a):
            return a

        class Scale:
            pass
    """))
    out = tmp_path / "o.onnx"
    assert_refused(["insert", SEED, "-o", out, "--at", ACT, "--func", f"{src}:normalise",
                    "--framework", "torch"],
                   f"'{src}' defines no 'normalise'; it defines ['normalize', 'Scale']",
                   inputs=[SEED, src], out=out)


WRONG_RANK = textwrap.dedent("""
    def swap(a):                     # written for rank-3 tensors; the activation has rank 4
        return a.permute(0, 2, 1)

    def tf_swap(a):
        import tensorflow as tf

        return tf.transpose(a, [0, 2, 1])
""")


@pytest.mark.torch
@pytest.mark.parametrize("exporter", [None, "torchscript", "dynamo"])
def test_a_torch_function_of_the_wrong_rank_is_the_functions_to_fix(tmp_path, exporter):
    pytest.importorskip("torch")
    src = tmp_path / "fn.py"
    src.write_text(WRONG_RANK)
    out = tmp_path / "o.onnx"
    args = ["insert", SEED, "-o", out, "--at", ACT, "--func", f"{src}:swap", "--framework",
            "torch", *(["--exporter", exporter] if exporter else [])]
    assert_refused(args, "function 'swap' fails in PyTorch on the activation (float32 "
                   "[batch, 6, 8, 8], rank 4", inputs=[SEED, src], out=out)
    line = cli(*args).stderr
    assert "write it for a tensor of that rank and shape" in line
    assert "exporter" not in line and "--framework" not in line, line


@pytest.mark.slow
@pytest.mark.tf
def test_a_tf_function_of_the_wrong_rank_does_not_suggest_torch(tmp_path):
    pytest.importorskip("tf2onnx")
    src = tmp_path / "fn.py"
    src.write_text(WRONG_RANK)
    out = tmp_path / "o.onnx"
    args = ["insert", SEED, "-o", out, "--at", ACT, "--func", f"{src}:tf_swap", "--framework",
            "tf"]
    assert_refused(args, "function 'tf_swap' fails in TensorFlow on the activation (float32 "
                   "[batch, 6, 8, 8], rank 4)", inputs=[SEED, src], out=out)
    line = cli(*args).stderr
    assert "--framework torch" not in line and "write it for a tensor of that rank" in line
