"""The README's code blocks are run as written (paths under /tmp moved into tmp_path)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_readme_has_the_two_commands_and_ci_runs_the_test_one():
    blocks = _blocks("bash")
    assert "onnxsurgeon demo" in blocks[0]
    test_cmd = blocks[1].strip()
    assert "pytest" in test_cmd and "pip install torch==2.13.0" in test_cmd
    ci = (ROOT / ".ci" / "run").read_text()
    proc = subprocess.run(
        ["awk", "/<!-- test-command -->/{getline; getline; print; exit}", "README.md"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )
    assert proc.stdout.strip() == test_cmd and "test-command" in ci


def test_readme_cli_tour_runs(tmp_path):
    tour = _blocks("bash")[2].replace("/tmp/", f"{tmp_path}/")
    script = f'onnxsurgeon() {{ "{sys.executable}" -m onnxsurgeon "$@"; }}\nset -e\n{tour}'
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for name in ("logits", "head", "twin", "l2", "feat", "rr"):
        assert (tmp_path / f"{name}.onnx").is_file(), name
    assert '"processed"' in proc.stdout and '"initializers"' in proc.stdout


def test_readme_api_tour_runs(tmp_path, monkeypatch):
    code = _blocks("python")[0].replace("/tmp/", f"{tmp_path}/")
    monkeypatch.chdir(ROOT)
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "api_twin.onnx").is_file() and (tmp_path / "api_l2.onnx").is_file()


def _framework_block() -> str:
    blocks = [b for b in _blocks("bash") if "onnxsurgeon convert torch" in b]
    assert len(blocks) == 1, "the README's 'From a framework' block moved or was split"
    return blocks[0]


@pytest.mark.slow
@pytest.mark.tf
@pytest.mark.torch
def test_readme_framework_block_runs(tmp_path):
    """Converts, splices a torch function in and checks against both frameworks, as printed
    (``onnxsurgeon`` and ``python`` are this interpreter; /tmp/ moved into tmp_path)."""
    pytest.importorskip("torch")
    pytest.importorskip("tf2onnx")
    block = _framework_block().replace("/tmp/", f"{tmp_path}/")
    script = (f'onnxsurgeon() {{ "{sys.executable}" -m onnxsurgeon "$@"; }}\n'
              f'python() {{ "{sys.executable}" "$@"; }}\nset -e\n{block}')
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "converted pytorch" in out and f"-> {tmp_path}/net.onnx" in out
    assert (f"inserted at conv5: conv2d/normalize (rerouted 1 consumers) -> "
            f"{tmp_path}/net_l2.onnx") in out
    assert out.count("ok: 3/3 pairs agree") == 1      # insert --verify
    assert out.count("ok: 1/1 pairs agree") == 2      # --against-torch, --against-tf
    assert "converted tensorflow" in out and f"-> {tmp_path}/tfnet.onnx" in out
    for name in ("net.onnx", "net_l2.onnx", "mynet.keras", "tfnet.onnx"):
        assert (tmp_path / name).exists(), name


def test_readme_selectors_block_runs_on_the_bundled_transformer(tmp_path):
    """The Selectors block, as printed: selectors on the seed CNN, then LayerNorm fusion, every
    Dropout removed and a probe per layer output on models/tiny_bert.onnx (counts from its
    config: 2 layers -> 5 LayerNorms, 5 Dropouts, 2 layer outputs)."""
    (block,) = [b for b in _blocks("bash") if "models/tiny_bert.onnx" in b]
    script = (f'onnxsurgeon() {{ "{sys.executable}" -m onnxsurgeon "$@"; }}\nset -e\n'
              + block.replace("/tmp/", f"{tmp_path}/"))
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert '"matches": 5' in out
    assert f"replaced 5 matches of {tmp_path}/ln.txt by {tmp_path}/layernorm.txt" in out
    removed = [ln for ln in out.splitlines() if ln.startswith("removed ")]
    assert len(removed) == 1 and removed[0].count("/Dropout") == 5
    assert "inserted at 2 sites matching re:bert" in out
    assert out.count("ok: ") == 4          # probes, replace, bypass and insert --verify
    import onnx

    ops = [n.op_type for n in onnx.load(tmp_path / "bert_ln.onnx").graph.node]
    assert ops.count("LayerNormalization") == 5 and "Pow" not in ops
    ops = [n.op_type for n in onnx.load(tmp_path / "bert_nodrop.onnx").graph.node]
    assert "Dropout" not in ops
    outputs = [o.name for o in onnx.load(tmp_path / "bert_probes.onnx").graph.output]
    assert len(outputs) == 3
