"""The README's code blocks are run as written (paths under /tmp moved into tmp_path)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
