"""The benchmark command runs end to end (a tiny smoke run: no timing is asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_benchmark_command_smoke_run_writes_table_and_chart(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (tmp_path / "RESULTS.md").read_text()
    for job in ("floor: onnx load+save", "onnxsurgeon extract (half)",
                "onnxsurgeon copy (whole, independent)", "onnxsurgeon insert l2_normalize",
                "onnxsurgeon reroute", "onnx.utils.extract_model extract (half)",
                "cp of the data file", "onnxsurgeon insert --share-data",
                "onnxsurgeon copy --share-data"):
        assert f"| {job} |" in text, job
    assert "Versions: python" in text and "load average" in text
    rows = [line for line in text.splitlines() if line.startswith("| distinct |")]
    assert len(rows) == 7  # two floors, four verbs, one peer
    assert (tmp_path / "results.png").stat().st_size > 1000
    assert not list(Path("/tmp").glob("osg-bench-*/distinct120"))  # models deleted afterwards
