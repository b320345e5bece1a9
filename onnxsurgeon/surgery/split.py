"""split: cut a model into N stages in topological order, each a standalone model.

The stages are new models made by :func:`onnxsurgeon.surgery.extract` on private weight-free
copies, each given back only its own weights: the input model is never modified. Cuts fall between main-graph nodes (the node order is a
topological order); stage k computes the nodes between cut k-1 and cut k. A tensor produced in
one stage and read in a later one is an output of its stage and an input of each stage reading
it; graph inputs are fed to every stage that reads them.

Before:  x -> a -> b -> c -> d -> y
After:   stage 0: x -> a -> b -> t;  stage 1: t -> c -> d -> y      (split(m, stages=2))
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import onnx

from ..errors import UsageError, name_list
from ..index import GraphIndex, body_captures, has_subgraphs
from ..io import Model, as_model
from ..metadata import set_metadata
from ..profile import NodeCost, Shapes, node_costs, param_sizes
from ..protos import is_stub, weightless_copy
from ..record import SplitRecord, replace_last_rewrite
from ..select import Selector
from ._shown import Shown
from .extract import extract

SPLIT_KEY = "onnxsurgeon.split"
"""The metadata entry each stage carries: its place in the split (JSON)."""
BALANCE_WINDOW = 0.1
"""A cut may move this fraction of the mean stage cost off its balanced position to find fewer
bytes crossing it (so no stage costs more than 1 + 2 x this of the mean, where nodes allow)."""


class SplitBy(str, Enum):
    """The cost the stages balance."""

    FLOPS = "flops"
    PARAMS = "params"
    ACTIVATIONS = "activations"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Stage(Shown):
    """One stage: its model, the tensors it reads and writes, its nodes and cost; what
    :func:`split_stage` returns."""

    model: Model
    """The stage (external weights still read from the input's data files until saved)."""
    inputs: list[str]
    outputs: list[str]
    first_node: int
    last_node: int
    flops: int
    macs: int
    param_bytes: int
    """Bytes of the initializers the stage reads first (a weight shared with an earlier stage
    is charged there)."""
    activation_bytes: int
    cost: int
    """The cost the split balances (``by``)."""
    stage: int
    stages: int
    at: list[str]
    """Every cut of the split (an output of the node before it)."""
    by: SplitBy
    dims: dict[str, int]
    crossed_in: list[str]
    """The inputs computed by earlier stages."""

    def record(self) -> SplitRecord:
        """The rewrite record ending the stage's log."""
        return SplitRecord(stage=self.stage, stages=self.stages, at=tuple(self.at),
                           by=str(self.by), dims=dict(self.dims), inputs=tuple(self.crossed_in),
                           outputs=tuple(self.outputs), cost=self.cost)


@dataclass(frozen=True)
class SplitResult:
    """What :func:`split` made.

    Attributes:
        stages: the stages in the order they run.
        by: the cost balanced.
        cuts: the node positions of the cuts (stage k runs nodes ``cuts[k-1]..cuts[k]-1``).
        crossing: per cut, the tensors computed before it and read after it.
        crossing_bytes: per cut, their bytes at the profile's shapes.
        producers: tensor passed between stages -> the stage that computes it.
        at: per cut, an output of the node before it: ``split(model, at=result.at)`` makes the
            same stages again (the split's record, kept in the manifest).
    """

    stages: list[Stage]
    by: SplitBy
    cuts: list[int]
    crossing: list[list[str]]
    crossing_bytes: list[int]
    producers: dict[str, int]
    at: list[str]

    def manifest(self, files: Sequence[str | None]) -> dict[str, Any]:
        """The manifest (``DIR/manifest.json``) naming each stage's file ``files[k]`` (none
        written: ``files`` empty, each ``file`` null)."""
        return {
            "by": str(self.by),
            "stages": [
                {"file": f, "inputs": [{"name": n, "from": self.producers.get(n)}
                                       for n in s.inputs],
                 "outputs": s.outputs, "nodes": [s.first_node, s.last_node],
                 "cost": s.cost, "flops": s.flops, "macs": s.macs, "param_bytes": s.param_bytes,
                 "activation_bytes": s.activation_bytes}
                for f, s in zip(files or [None] * len(self.stages), self.stages, strict=True)],
            "cuts": [{"after_node": c - 1, "at": a, "tensors": t, "bytes": b}
                     for c, a, t, b in zip(self.cuts, self.at, self.crossing,
                                           self.crossing_bytes, strict=True)],
        }


def _reads(node: onnx.NodeProto) -> list[str]:
    names = [n for n in node.input if n]
    if has_subgraphs(node):
        names += [n for n, _ in body_captures(node)]
    return names


def _param_cost(costs: Sequence[NodeCost], index: GraphIndex) -> list[int]:
    """Each initializer's bytes, charged to the first node reading it."""
    seen: set[str] = set()
    out = []
    for c in costs:
        new = [p for p in c.params if p not in seen]
        seen.update(new)
        out.append(param_sizes(index, new)[1])
    return out


def _choose_cuts(cost: Sequence[int], cross: Sequence[int], stages: int) -> list[int]:
    """Cut positions (1..n-1, increasing) balancing ``cost`` and, within the balance window,
    minimising ``cross[p]`` (the bytes crossing a cut before node p). O(n x stages)."""
    n = len(cost)
    prefix = [0]
    for c in cost:
        prefix.append(prefix[-1] + c)
    total = prefix[-1]
    mean = total / stages
    cuts: list[int] = []
    last = 0
    for k in range(1, stages):
        lo_p, hi_p = last + 1, n - (stages - k)   # leave a node for every later stage
        target = k * mean
        window = [p for p in range(lo_p, hi_p + 1)
                  if abs(prefix[p] - target) <= BALANCE_WINDOW * mean]
        if window:
            best = min(window, key=lambda p: (cross[p], abs(prefix[p] - target), p))
        else:
            best = min(range(lo_p, hi_p + 1), key=lambda p: (abs(prefix[p] - target), cross[p], p))
        cuts.append(best)
        last = best
    return cuts


@dataclass(frozen=True)
class _Plan:
    """Where the cuts fall and what each stage reads and writes (computed once per split)."""

    by: SplitBy
    dims: dict[str, int]
    cuts: list[int]
    bounds: list[int]
    crossing: list[list[str]]
    crossing_bytes: list[int]
    producers: dict[str, int]
    at: list[str]
    ins: list[list[str]]
    outs: list[list[str]]
    costs: list[NodeCost]
    param_bytes: list[int]


def _plan(m: Model, stages: int | None, by: SplitBy, at: Sequence[str],
          dims: Mapping[str, int] | None) -> _Plan:
    """The cuts of :func:`split` (see there). O(nodes x stages) after one shape inference."""
    at = name_list(at, "split(at=...)")
    index = GraphIndex(m.proto)
    graph = index.graph
    n = len(graph.node)
    if at:
        if stages is not None and stages != len(at) + 1:
            raise UsageError(f"{len(at)} cut tensors make {len(at) + 1} stages, not {stages}; "
                             "drop --stages or give one --at tensor fewer than the stages")
        stages = len(at) + 1
    if stages is None or stages < 2:
        raise UsageError("split needs --stages N with N >= 2 (or --at tensors to cut at)")
    if stages > n:
        fix = (f"give --stages {n} or fewer" if n >= 2 else
               "a model of fewer than 2 nodes has nothing to split")
        raise UsageError(f"the model has {n} node{'s' if n != 1 else ''}: it cannot make "
                         f"{stages} stages; {fix}")
    shapes = Shapes(index, dict(dims or {}))
    costs = node_costs(m, dims=dims, index=index, shapes=shapes)
    # last reader of each tensor computed by a node (n: a graph output, read "after the end")
    produced_at = {o: i for i, node in enumerate(graph.node) for o in node.output if o}
    last_read: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for name in _reads(node):
            if name in produced_at:
                last_read[name] = i
    graph_outputs = [o.name for o in graph.output]
    for name in graph_outputs:
        if name in produced_at:
            last_read[name] = n
    diff = [0] * (n + 2)
    for name, last in last_read.items():
        p = produced_at[name]
        if last > p:
            size = shapes.nbytes(name)
            diff[p + 1] += size
            diff[last + 1] -= size
    cross, run = [], 0
    for p in range(n + 1):
        run += diff[p]
        cross.append(run)   # bytes of tensors made before node p and read at or after it

    param_bytes = _param_cost(costs, index)
    if at:
        selector = Selector(index)
        cuts = []
        for user in at:
            name = selector.resolve(user)
            if name not in produced_at:
                raise UsageError(f"tensor '{name}' is not computed by a node (a graph input or "
                                 "a weight): cut at a tensor a node computes")
            cuts.append(produced_at[name] + 1)
        if sorted(set(cuts)) != cuts or cuts[-1] >= n:
            raise UsageError(f"cut tensors {list(at)} must be computed in node order by "
                             "different nodes, none by the last node: each stage needs a node")
    else:
        if by is SplitBy.FLOPS:
            cost = [c.flops for c in costs]
        elif by is SplitBy.PARAMS:
            cost = param_bytes
        else:
            cost = [c.activation_bytes for c in costs]
        cuts = _choose_cuts(cost, cross, stages)

    bounds = [0, *cuts, n]
    stage_of = [0] * n
    for k in range(stages):
        for i in range(bounds[k], bounds[k + 1]):
            stage_of[i] = k
    crossing = [[t for t, last in last_read.items()
                 if produced_at[t] < c <= last] for c in cuts]
    producers = {t: stage_of[produced_at[t]] for names in crossing for t in names}
    ins_of, outs_of = [], []
    for k in range(stages):
        lo, hi = bounds[k], bounds[k + 1]
        outs = [t for t, last in last_read.items()
                if lo <= produced_at[t] < hi and (last >= hi or t in graph_outputs)]
        outs.sort(key=lambda t: (t not in graph_outputs, produced_at[t], t))
        ins = sorted({r for i in range(lo, hi) for r in _reads(graph.node[i])
                      if r in produced_at and produced_at[r] < lo},
                     key=lambda t: (produced_at[t], t))
        outs_of.append(outs)
        ins_of.append(ins)
    return _Plan(by=by, dims=dict(dims or {}), cuts=cuts, bounds=bounds, crossing=crossing,
                 crossing_bytes=[cross[c] for c in cuts], producers=producers,
                 at=[next(o for o in graph.node[c - 1].output if o) for c in cuts],
                 ins=ins_of, outs=outs_of, costs=costs, param_bytes=param_bytes)


def _cut(model: Model, plan: _Plan, k: int) -> Stage:
    """Make ``model`` (the split model, or its weight-free copy) stage ``k`` of ``plan``: the
    stage's nodes by :func:`extract`, its split metadata and its record. Mutates model."""
    lo, hi = plan.bounds[k], plan.bounds[k + 1]
    stages = len(plan.bounds) - 1
    extract(model, plan.outs[k], inputs=plan.ins[k])
    meta = {"stage": k, "stages": stages, "nodes": [lo, hi - 1], "inputs": plan.ins[k],
            "outputs": plan.outs[k]}
    set_metadata(model.proto, {SPLIT_KEY: json.dumps(meta, separators=(",", ":"))})
    kept = plan.costs[lo:hi]
    ks = {SplitBy.FLOPS: sum(c.flops for c in kept),
          SplitBy.PARAMS: sum(plan.param_bytes[lo:hi]),
          SplitBy.ACTIVATIONS: sum(c.activation_bytes for c in kept)}
    stage = Stage(
        model=model, inputs=_model_inputs(model.proto), outputs=plan.outs[k],
        first_node=lo, last_node=hi - 1, flops=ks[SplitBy.FLOPS],
        macs=sum(c.macs for c in kept), param_bytes=ks[SplitBy.PARAMS],
        activation_bytes=ks[SplitBy.ACTIVATIONS], cost=ks[plan.by], stage=k, stages=stages,
        at=list(plan.at), by=plan.by, dims=dict(plan.dims), crossed_in=list(plan.ins[k]))
    replace_last_rewrite(model.proto, stage.record())   # the stage logs its split, not extract
    return stage


def _light(m: Model) -> Model:
    """A weight-free copy of ``m`` that still finds its external data (O(graph))."""
    twin = Model(weightless_copy(m.proto), base_dir=m.base_dir, source=m.source,
                 data_dirs=dict(m.data_dirs))
    twin._externals = m._externals
    return twin


def _own_weights(stage: onnx.ModelProto, source: onnx.ModelProto) -> None:
    """Put back the bytes of the stage's inline weights (stubs in the weight-free copy), taken
    from ``source``: each stage holds only its own. Mutates stage (a private copy)."""
    stubs = {t.name for t in stage.graph.initializer if is_stub(t)}
    if not stubs:
        return
    by_name = {t.name: t for t in source.graph.initializer if t.name in stubs}
    for t in stage.graph.initializer:
        if t.name in stubs:
            t.CopyFrom(by_name[t.name])


def split(
    model: Model | onnx.ModelProto, /, *, stages: int | None = None,
    by: SplitBy = SplitBy.FLOPS, at: Sequence[str] = (), dims: Mapping[str, int] | None = None,
) -> SplitResult:
    """Cut ``model`` into stages that run in order and together compute the whole.

    Does not modify ``model``: each stage is a new model made from a weight-free copy of it with
    only the stage's own weights (inline bytes copied once, over all stages; external data kept
    external and streamed on save, so memory stays near the graph's size). Without ``at`` the
    cuts balance ``by`` (from :func:`onnxsurgeon.profile.node_costs` at ``dims``) and, within a
    window of ``BALANCE_WINDOW`` of the mean stage cost, minimise the bytes of the tensors
    crossing each cut. With ``at`` each cut falls right after the node computing each named
    tensor. Each stage's rewrite log continues ``model``'s with a
    :class:`~onnxsurgeon.record.SplitRecord` (``verify --rewrite-log`` proves a stage against
    ``model``; :func:`split_stage` makes it again).

    Before:  x -> a -> b -> c -> d -> y
    After:   stage 0: x -> a -> b -> t;  stage 1: t -> c -> d -> y

    O(nodes x stages) to choose, plus one weight-free copy and extract per stage.

    Args:
        model: the model to split (never modified).
        stages: the number of stages (with ``at``: optional, must be ``len(at) + 1``).
        by: the cost to balance.
        at: tensors (any selector) after whose producers the cuts fall.
        dims: sizes of symbolic dims for the cost model.

    Returns:
        A :class:`SplitResult`.

    Raises:
        UsageError: too few or too many stages for the nodes, a cut tensor that no node computes
            or that gives an empty stage; a symbolic dim without a size.
        NotFoundError / AmbiguousNameError: a name in ``at`` does not resolve.
    """
    m = as_model(model)
    plan = _plan(m, stages, SplitBy(by), at, dims)
    made = []
    for k in range(len(plan.bounds) - 1):
        stage = _cut(_light(m), plan, k)
        _own_weights(stage.model.proto, m.proto)
        made.append(stage)
    return SplitResult(stages=made, by=plan.by, cuts=plan.cuts, crossing=plan.crossing,
                       crossing_bytes=plan.crossing_bytes, producers=plan.producers, at=plan.at)


def split_stage(model: Model | onnx.ModelProto, /, *, at: Sequence[str], stage: int,
                by: SplitBy | str = SplitBy.FLOPS,
                dims: Mapping[str, int] | None = None) -> Stage:
    """Make ``model`` stage ``stage`` of the split cut at ``at``. Mutates model.

    What :func:`split` makes as its stage ``stage`` (the same nodes, inputs, outputs and record),
    made in place: the replay of a stage's :class:`~onnxsurgeon.record.SplitRecord` and the
    recipe's ``split_stage`` step.

    Before:  x -> a -> b -> c -> d -> y                       (split_stage(m, at=["b"], stage=1))
    After:   b -> c -> d -> y

    Raises:
        UsageError: as :func:`split`; ``stage`` is not one of the ``len(at) + 1`` stages.
    """
    at = name_list(at, "split_stage(at=...)")
    if not at:
        raise UsageError("split_stage needs the cut tensors (at=...) of the split")
    if not 0 <= stage <= len(at):
        raise UsageError(f"{len(at)} cut tensors make stages 0..{len(at)}, not {stage}; give "
                         "a stage in that range")
    m = as_model(model)
    return _cut(m, _plan(m, None, SplitBy(by), at, dims), stage)


def _model_inputs(proto: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in proto.graph.initializer}
    return [i.name for i in proto.graph.input if i.name not in inits]
