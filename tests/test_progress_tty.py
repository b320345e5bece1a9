"""Progress on a terminal (issue 10, point 4): commands that run a framework for seconds name
their phase on stderr when stderr is a terminal (a pseudo-terminal here), keep the framework's
log noise off it, and say nothing extra when stderr is a pipe or a file. Every other phase (load,
rewrite, --verify, save) is named once it has run for ONNXSURGEON_PHASE_AFTER seconds."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_with_tty_stderr(argv: list[str], timeout: float = 600,
                        env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run ``python -m onnxsurgeon *argv`` with stderr on a pseudo-terminal and stdout on a pipe:
    (exit code, stdout, what the terminal received with its CRLF line ends made LF)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "onnxsurgeon", *argv], cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
                            env={**os.environ, **(env or {})})
    os.close(slave)
    received = bytearray()
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                proc.kill()
                raise AssertionError(f"no output for {timeout} s: {argv}")
            try:
                chunk = os.read(master, 4096)
            except OSError:   # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            received += chunk
        out = proc.stdout.read().decode() if proc.stdout else ""
        code = proc.wait(timeout=timeout)
    finally:
        os.close(master)
        if proc.stdout:
            proc.stdout.close()
    return code, out, received.decode().replace("\r\n", "\n")


@pytest.mark.slow
@pytest.mark.torch
def test_framework_phases_show_on_a_terminal_only(tmp_path):
    pytest.importorskip("torch")
    net = tmp_path / "net.onnx"
    convert = ["convert", "torch", "examples/mynet.py:build", "-o", str(net), "--input",
               "x:1x3x32x32", "--exporter", "dynamo"]
    code, out, tty = run_with_tty_stderr(convert)
    assert code == 0, tty
    # exactly the phase line: torch.onnx's warnings ("torchvision is not installed ...") are
    # captured while the framework runs
    assert tty == "onnxsurgeon: converting examples/mynet.py:build (torch) ...\n"
    assert out.startswith("converted pytorch ")
    against = ["verify", "-", str(net), "--against-torch", "examples/mynet.py:build"]
    code, out, tty = run_with_tty_stderr(against)
    assert code == 0, tty
    assert tty == "onnxsurgeon: running the framework and onnxruntime ...\n"
    assert "ok: 1/1 pairs agree" in out
    # stderr not a terminal: no phase line, no noise
    piped = subprocess.run([sys.executable, "-m", "onnxsurgeon", *against], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
    assert piped.returncode == 0 and piped.stderr == ""
    assert "ok: 1/1 pairs agree" in piped.stdout


def test_verify_progress_bar_on_a_terminal_only(tmp_path):
    """A verification over many samples draws its bar on a terminal, nothing on a pipe."""
    model = ROOT / "models" / "seed_cnn.onnx"
    argv = ["verify", str(model), str(model), "--samples", "6"]
    code, out, tty = run_with_tty_stderr(argv)
    assert code == 0, tty
    assert tty.endswith("verify [##############################] 6/6\n"), tty
    assert "\rverify [" in tty
    piped = subprocess.run([sys.executable, "-m", "onnxsurgeon", *argv], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
    assert piped.returncode == 0 and piped.stderr == "" and piped.stdout == out


def test_rewrite_phases_are_named_once_they_run_long_on_a_terminal_only(tmp_path):
    """With ONNXSURGEON_PHASE_AFTER=0 every phase counts as long: each is named, in order; with
    the default (2 s) a quick command says nothing; on a pipe nothing is said either way."""
    out = tmp_path / "q.onnx"
    argv = ["insert", "models/seed_cnn.onnx", "-o", str(out), "--at", "network/layer_conv5/Relu:0",
            "--op", "identity", "--verify"]
    code, stdout, tty = run_with_tty_stderr(argv, env={"ONNXSURGEON_PHASE_AFTER": "0"})
    assert code == 0, tty
    assert tty == ("onnxsurgeon: loading models/seed_cnn.onnx ...\n"
                   "onnxsurgeon: insert: rewriting ...\n"
                   "onnxsurgeon: insert: verifying the rewrite ...\n"
                   f"onnxsurgeon: saving {out} ...\n")
    assert stdout.endswith(f"(rerouted 2 consumers) -> {out}\n")
    quick = ["extract", "models/seed_cnn.onnx", "-o", str(out), "--outputs", "logits:0"]
    code, _, tty = run_with_tty_stderr(quick)
    assert (code, tty) == (0, "")
    piped = subprocess.run([sys.executable, "-m", "onnxsurgeon", *argv], cwd=ROOT,
                           capture_output=True, text=True, timeout=600,
                           env={**os.environ, "ONNXSURGEON_PHASE_AFTER": "0"})
    assert (piped.returncode, piped.stderr, piped.stdout) == (0, "", stdout)
