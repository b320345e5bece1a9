"""Running the CLI (in a subprocess, or in-process with ``cli.main``) and checking the bad-input
contract (one line on stderr, exit 2, no traceback, no output file, input untouched)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: object, cwd: Path | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m onnxsurgeon *args`` in ``cwd`` (default: the repository root)."""
    return subprocess.run([sys.executable, "-m", "onnxsurgeon", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd or ROOT, timeout=timeout)


def cli_main(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """``onnxsurgeon *argv`` in-process: (exit code, stdout, stderr). argparse's own exits
    (usage errors, --help) count as the code they exit with."""
    from onnxsurgeon import cli

    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_refused(args: list[object], needle: str, *, inputs: list[Path], out: Path) -> None:
    """``onnxsurgeon *args`` exits 2 with one stderr line containing ``needle``; ``out`` is not
    written and every file in ``inputs`` is byte-identical afterwards."""
    before = [p.read_bytes() for p in inputs]
    proc = cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()
    assert [p.read_bytes() for p in inputs] == before


def replace_cli(capsys: pytest.CaptureFixture[str], folder: Path, host: object,
                pattern: str | bytes | Path, replacement: str | bytes | Path | None = None,
                *flags: object) -> tuple[int, str, str, Path]:
    """``onnxsurgeon replace`` in-process on ``host`` (a ModelProto, saved as m.onnx in
    ``folder``) with P and R given as text (written to p.txt and r.txt) or as files (R: P when
    None): (exit code, stdout, stderr, the output path out.onnx)."""
    import onnx

    path, out = folder / "m.onnx", folder / "out.onnx"
    onnx.save(host, path)  # type: ignore[arg-type]
    files = []
    for name, source in (("p.txt", pattern), ("r.txt", replacement)):
        if isinstance(source, (str, bytes)):
            file = folder / name
            file.write_bytes(source.encode() if isinstance(source, str) else source)
            source = file
        files.append(source)
    code, stdout, err = cli_main(capsys, "replace", path, "-o", out, "--pattern", files[0],
                                 "--replacement", files[1] or files[0], *flags)
    return code, stdout, err, out
