"""The wheel, built and installed outside the checkout (issue 27; issue 32 reuses it): it builds
without setuptools deprecation or "package would be ignored" warnings, carries every schema,
bundled model and example, and from a fresh venv (the shared venv's packages lent by a ``.pth``
file, nothing downloaded) ``onnxsurgeon demo``, ``demo --files`` and a verb run in a folder
that is no checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.cli_helpers import ROOT

WARNINGS = ("SetuptoolsDeprecationWarning", "Package would be ignored",
            "is absent from the `packages` configuration", "SetuptoolsWarning")


def _tracked_sources(dest: Path) -> Path:
    """The checkout's tracked (and new, unignored) files copied to ``dest``: the build leaves
    nothing in the checkout and sees only what a commit would hold."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(src.read_bytes())
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, str]:
    base = tmp_path_factory.mktemp("wheel")
    src = _tracked_sources(base / "src")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps",
                           "--no-build-isolation", "--no-index", "-w", str(base / "dist"),
                           str(src)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (built,) = (base / "dist").glob("onnxsurgeon-*.whl")
    return built, proc.stdout + proc.stderr


@pytest.mark.slow
def test_the_wheel_builds_without_setuptools_warnings(wheel):
    _, log = wheel
    for needle in WARNINGS:
        assert needle not in log, [ln for ln in log.splitlines() if needle in ln][:5]


@pytest.mark.slow
def test_the_wheel_carries_every_schema_model_and_example(wheel):
    built, _ = wheel
    names = set(zipfile.ZipFile(built).namelist())
    want = [f"onnxsurgeon/schemas/{p.name}" for p in (ROOT / "onnxsurgeon" / "schemas").glob("*.json")]
    want += [f"onnxsurgeon/models/{p.name}" for p in (ROOT / "models").glob("*.onnx")]
    want += [f"onnxsurgeon/examples/{p.name}" for p in (ROOT / "examples").iterdir()
             if p.suffix in (".py", ".yaml", ".ipynb")]
    assert len(want) >= 20 and {"onnxsurgeon/models/seed_cnn.onnx",
                               "onnxsurgeon/examples/mynet.py"} <= set(want)
    assert sorted(set(want) - names) == []
    assert "onnxsurgeon/converters/__init__.py" in names and "onnxsurgeon/py.typed" in names
    metadata = zipfile.ZipFile(built).read("onnxsurgeon-0.1.0.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "Provides-Extra: schema" in metadata and 'jsonschema>=4.18; extra == "schema"' in metadata


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with only the wheel installed; the shared venv's site-packages (numpy,
    onnx, onnxruntime, torch, tensorflow...) reachable through a .pth file."""
    built, _ = wheel
    root = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                   timeout=300)
    python = root / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                   "['purelib'])"], capture_output=True, text=True, check=True)
                   .stdout.strip())
    shared = sysconfig.get_paths()["purelib"]
    (purelib / "_shared_venv.pth").write_text(shared + "\n")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--no-deps", "--no-index", str(built)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return root


def _run(venv: Path, *args: str, cwd: Path, code: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    argv = ([str(venv / "bin" / "python"), "-c", code, *args] if code is not None
            else [str(venv / "bin" / "onnxsurgeon"), *args])
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=900)


@pytest.mark.slow
def test_demo_and_a_verb_run_from_the_installed_wheel_outside_a_checkout(venv, tmp_path):
    where = _run(venv, cwd=tmp_path, code="import onnxsurgeon, onnxsurgeon.converters as c; "
                 "print(onnxsurgeon.__file__); print(c.__file__)")
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(str(venv)) for line in where.stdout.split()), where.stdout

    demo = _run(venv, "demo", cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "FAILED" not in demo.stdout and "skipped" not in demo.stdout
    assert "every rewrite verified" in demo.stdout and "built it" not in demo.stdout
    assert demo.stdout.count(": ok") >= 10    # 5 core steps and 5 TensorFlow/PyTorch steps

    files = _run(venv, "demo", "--files", ".", cwd=tmp_path)
    assert files.returncode == 0, files.stderr
    verb = _run(venv, "extract", "models/seed_cnn.onnx", "-o", "logits.onnx", "--outputs",
                "logits:0", "--verify", "--json", cwd=tmp_path)
    assert verb.returncode == 0, verb.stderr
    data = json.loads(verb.stdout)
    assert data["verify"]["ok"] is True and (tmp_path / "logits.onnx").is_file()
    recipe = _run(venv, "apply", "examples/seed_recipe.yaml", "models/seed_cnn.onnx", "-o",
                  "r.onnx", cwd=tmp_path)
    assert recipe.returncode == 0, recipe.stderr


@pytest.mark.slow
def test_the_readme_cli_tour_runs_from_the_wheel_in_a_demo_files_folder(venv, tmp_path):
    """The README's CLI tour, as written, in a folder that ``demo --files`` filled (no
    checkout: ``onnxsurgeon`` is the wheel's console script; /tmp/ moved into tmp_path)."""
    from tests.test_readme import _blocks

    work = tmp_path / "work"
    work.mkdir()
    assert _run(venv, "demo", "--files", ".", cwd=work).returncode == 0
    tour = _blocks("bash")[2].replace("/tmp/", f"{tmp_path}/")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    proc = subprocess.run(["bash", "-c", f"set -e\n{tour}"], capture_output=True, text=True,
                          cwd=work, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (tmp_path / "logits.onnx").is_file() and (tmp_path / "l2.onnx").is_file()


@pytest.mark.slow
def test_the_demo_without_frameworks_says_what_it_skipped_and_runs_the_bundled_models(venv, tmp_path):
    code = ("import sys\nfor m in ('torch', 'tensorflow'): sys.modules[m] = None\n"
            "from onnxsurgeon.cli import main\nsys.exit(main(['demo']))")
    demo = _run(venv, cwd=tmp_path, code=code)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    out = demo.stdout
    assert ("the TensorFlow steps are skipped: tensorflow is not installed; pip install "
            "'onnxsurgeon[tf]' runs them") in out
    assert "the PyTorch steps are skipped: torch is not installed" in out
    for file in ("tf1_seed.onnx", "torch_cnn.onnx"):   # run from the wheel's bundled copies
        assert str(venv) in next(ln for ln in out.splitlines() if "insert " in ln and file in ln)
    assert out.count("check vs numpy mean of the activation: ok") == 2 and "FAILED" not in out


def test_demo_files_copies_the_bundled_models_and_examples_and_never_overwrites(tmp_path):
    from tests.cli_helpers import cli

    proc = cli("demo", "--files", tmp_path)
    assert proc.returncode == 0, proc.stderr
    for kind in ("models", "examples"):
        for src in (ROOT / kind).iterdir():
            if src.suffix in (".onnx", ".py", ".yaml", ".ipynb"):
                assert (tmp_path / kind / src.name).read_bytes() == src.read_bytes(), src
    assert cli("demo", "--files", tmp_path).returncode == 0      # the same files again: fine
    mine = tmp_path / "examples" / "proc.py"
    mine.write_text("# my own edits\n")
    refused = cli("demo", "--files", tmp_path)
    assert refused.returncode == 2 and "exists and differs from the bundled file" in refused.stderr
    assert mine.read_text() == "# my own edits\n"
