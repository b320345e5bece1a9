"""Regenerate the committed core demo models (deterministic: same bytes every run).

    python models/make_models.py            # writes models/*.onnx next to this script

Framework-exported models are written by models/make_framework_models.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx

from onnxsurgeon.demo_models import DEMO_MODELS

HERE = Path(__file__).resolve().parent


def main(folder: Path = HERE) -> int:
    for name, build in DEMO_MODELS.items():
        path = folder / name
        path.write_bytes(build().SerializeToString(deterministic=True))
        onnx.checker.check_model(str(path), full_check=True)
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
