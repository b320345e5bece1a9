"""Structural patterns: a small ONNX graph P found everywhere it occurs in a model.

A pattern is an ONNX graph (an ``.onnx`` file, the ONNX text syntax of a whole model or of a bare
graph, or bytes), read by :func:`load_pattern`. :func:`find_matches` lists every place of a
model where it occurs, the main graph first, then each If/Loop/Scan body, by these rules:

* a pattern node matches a node of equal op type and domain whose inputs match its inputs; an
  attribute the pattern node sets must be equal (a graph node leaving it out has the schema's
  default), one it leaves out matches any value;
* commutative ops (Add, Mul, Max, Min, Sum, Mean, And, Or, Xor, Equal) match their inputs in any
  order (every order up to four inputs, else in order);
* variadic ops (Concat, Sum, Max, ...): a pattern node matches only nodes with as many inputs
  (after trailing omitted ones): write one pattern per arity;
* a pattern graph input matches any tensor, the same one everywhere it is used (two pattern
  inputs may match the same tensor);
* a pattern initializer or Constant output matches a constant (an initializer or a Constant
  node's output) of equal value (dtype, shape, values; NaN equals NaN); named in
  ``any_constant``, any constant of the same dtype and rank (its *shape class*);
* a pattern with several graph outputs matches when all of them are found: the output nodes are
  the anchors, the first found walking backwards from the first, the others among the readers of
  tensors already bound (the first reader that matches wins);
* a match whose inner tensors (computed by a matched node and not a pattern output) are read by a
  node outside it, or are graph outputs, is not a match; nor is one whose inputs are computed
  from its own outputs;
* matches never overlap: anchors are tried in node order (topological) and the first match wins.

Cost: O(nodes) C-level passes to bucket the nodes by op type, plus for each anchor candidate a
walk bounded by the pattern's size (candidates x pattern size); no Python object per node.
Graph constants are compared only when a candidate reaches them.
"""

from __future__ import annotations

from .load import INLINE_PREFIX, Pattern, graph_constant, load_pattern, pattern_bytes
from .match import COMMUTATIVE, Match, Matches, find_matches

__all__ = ["COMMUTATIVE", "INLINE_PREFIX", "Match", "Matches", "Pattern", "find_matches",
           "graph_constant", "load_pattern", "pattern_bytes"]
