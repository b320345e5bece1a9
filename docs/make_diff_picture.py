"""Regenerate docs/diff_example.png, the picture in the README: the page that
``onnxsurgeon insert ... --verify --html`` writes for models/seed_cnn.onnx, screenshotted in
headless Chromium (Debian's ``chromium``). Run from the repository root:

    python docs/make_diff_picture.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.browser import Browser  # noqa: E402

OUT = ROOT / "docs" / "diff_example.png"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "insert.html"
        subprocess.run(
            [sys.executable, "-m", "onnxsurgeon", "insert", str(ROOT / "models" / "seed_cnn.onnx"),
             "-o", "l2.onnx", "--at", "network/layer_conv5/Relu", "--op", "l2_normalize:axis=1",
             "--verify", "--html", "insert.html", "--context", "1"],
            cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        with Browser() as browser:
            view = browser.open(page, width=900, height=700)
            view.screenshot(OUT)
    try:  # a palette PNG is a third of the size (Pillow comes with matplotlib, a dev extra)
        from PIL import Image

        Image.open(OUT).convert("RGB").quantize(colors=64).save(OUT, optimize=True)
    except ImportError:
        pass
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
