"""``verify --deep --plot FILE.png``: the error of every shared tensor against its depth.

matplotlib is imported only here, only when a plot is asked for.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .report import DeepResult

_FLOOR = 1e-12
"""Errors of exactly 0 are drawn at this value on the log scale."""


def require_matplotlib() -> None:
    """Raise a one-line :class:`UsageError` when matplotlib is missing (before any work)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot needs matplotlib; install it (pip install matplotlib) or drop "
                         "--plot") from None


def plot_deep(deep: DeepResult, path: str | os.PathLike) -> Path:
    """Draw max abs error (log scale) against depth: informative tensors as dots, the others as
    hollow marks, tensors that differ in red, the first difference annotated. Atomic write."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = Path(path)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    groups = {
        "agrees, informative": [t for t in deep.tensors if t.ok and t.informative],
        "agrees, not informative": [t for t in deep.tensors if t.ok and not t.informative],
        "differs": [t for t in deep.tensors if not t.ok],
    }
    styles: dict[str, dict[str, Any]] = {"agrees, informative": dict(color="tab:blue", marker="o", s=14),
              "agrees, not informative": dict(facecolors="none", edgecolors="tab:gray",
                                              marker="o", s=14),
              "differs": dict(color="tab:red", marker="x", s=22)}
    for label, items in groups.items():
        if items:
            ax.scatter([t.depth for t in items], [max(t.max_abs_diff or 0.0, _FLOOR) for t in items],
                       label=label, **styles[label])
    first = deep.first_difference
    if first is not None:
        ax.annotate(f"first difference: {first.tensor}", (first.depth,
                    max(first.max_abs_diff or 0.0, _FLOOR)), textcoords="offset points",
                    xytext=(8, 8), fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("depth (nodes from the inputs)")
    ax.set_ylabel("max abs error")
    ax.set_title(f"{len(deep.tensors)} shared tensors")
    ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = target.with_name(f".{target.name}.tmp.png")
    try:
        fig.savefig(tmp, dpi=100)
        os.replace(tmp, target)
    except OSError as exc:
        raise UsageError(f"cannot write plot '{target}': {exc}; choose another path") from None
    finally:
        plt.close(fig)
    return target
