"""Surgery verbs: each validates everything first, then mutates the model in place.

The verbs are imported on first use (PEP 562): a command that runs one verb does not load the
others (~10 ms of start-up on every command)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_package

if TYPE_CHECKING:
    from .bypass import BypassResult as BypassResult
    from .bypass import bypass as bypass
    from .cleanup import CleanupResult as CleanupResult
    from .cleanup import cleanup as cleanup
    from .copy import CopyResult as CopyResult
    from .copy import Weights as Weights
    from .copy import copy as copy
    from .dims import DimsResult as DimsResult
    from .dims import dims as dims
    from .extract import ExtractResult as ExtractResult
    from .extract import extract as extract
    from .fold import FoldResult as FoldResult
    from .fold import fold as fold
    from .insert import InsertResult as InsertResult
    from .insert import insert as insert
    from .merge import MergeResult as MergeResult
    from .merge import merge as merge
    from .opset import OpsetResult as OpsetResult
    from .opset import opset as opset
    from .outputs import OutputsResult as OutputsResult
    from .outputs import outputs as outputs
    from .precision import PrecisionResult as PrecisionResult
    from .precision import Target as Target
    from .precision import precision as precision
    from .rename import RenameResult as RenameResult
    from .rename import rename as rename
    from .replace import ReplaceResult as ReplaceResult
    from .replace import replace as replace
    from .reroute import RerouteResult as RerouteResult
    from .reroute import reroute as reroute
    from .setvalues import SetResult as SetResult
    from .setvalues import set_values as set_values
    from .toposort import ToposortResult as ToposortResult
    from .toposort import toposort as toposort

_HOME_OF = {
    "bypass": "bypass", "BypassResult": "bypass",
    "copy": "copy", "CopyResult": "copy", "Weights": "copy",
    "dims": "dims", "DimsResult": "dims",
    "extract": "extract", "ExtractResult": "extract",
    "fold": "fold", "FoldResult": "fold",
    "insert": "insert", "InsertResult": "insert",
    "merge": "merge", "MergeResult": "merge",
    "precision": "precision", "PrecisionResult": "precision", "Target": "precision",
    "opset": "opset", "OpsetResult": "opset",
    "rename": "rename", "RenameResult": "rename",
    "replace": "replace", "ReplaceResult": "replace",
    "reroute": "reroute", "RerouteResult": "reroute",
    "cleanup": "cleanup", "CleanupResult": "cleanup",
    "toposort": "toposort", "ToposortResult": "toposort",
    "outputs": "outputs", "OutputsResult": "outputs",
    "set_values": "setvalues", "SetResult": "setvalues",
    "split": "split", "SplitResult": "split", "SplitBy": "split", "Stage": "split",
    "split_stage": "split",
}

__all__ = sorted(_HOME_OF)
__getattr__, __dir__ = lazy_package(__name__, _HOME_OF)
