"""Running the CLI in a subprocess and checking the bad-input contract (one line on stderr,
exit 2, no traceback, no output file, input untouched) for the verb test modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "onnxsurgeon", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


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
