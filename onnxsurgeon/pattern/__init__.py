"""Structural patterns: a small ONNX graph P found everywhere it occurs in a model.

A pattern is an ONNX graph (an ``.onnx`` file, the ONNX text syntax of a whole model or of a bare
graph, or bytes), read by :func:`load_pattern`; :func:`find_matches` lists every place of a model
where it occurs, the main graph first, then each If/Loop/Scan body. The matching rules (op types
and attributes, commutative inputs, variadic arity, pattern inputs and constants, several
outputs, outside readers, no overlaps) and the cost are in :mod:`onnxsurgeon.pattern.match`.
"""

from __future__ import annotations

from .load import INLINE_PREFIX, Pattern, graph_constant, load_pattern, pattern_bytes
from .match import COMMUTATIVE, Match, Matches, find_matches

__all__ = ["COMMUTATIVE", "INLINE_PREFIX", "Match", "Matches", "Pattern", "find_matches",
           "graph_constant", "load_pattern", "pattern_bytes"]
