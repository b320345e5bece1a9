"""Sharded verification: per-pair statistics folded in shards and merged equal one loop's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onnxsurgeon as osg
from onnxsurgeon.surgery import insert
from onnxsurgeon.verify import compare
from onnxsurgeon.verify.accumulate import PairAccumulator
from onnxsurgeon.verify.shard import local_map

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "models" / "seed_cnn.onnx"


def _samples(kind: str, n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        ref = rng.standard_normal((3, 5)).astype(np.float32)
        cand = ref.copy()
        if kind == "noisy":
            cand += rng.standard_normal(ref.shape).astype(np.float32) * 1e-3 * (k % 3)
        elif kind == "nan":
            ref[k % 3, 1] = np.nan
            cand[k % 3, 1] = np.nan if k != 4 else 0.0
        elif kind == "constant":
            ref[:] = 0.5
            cand[:] = 0.5
        elif kind == "step":  # sample 0 differs, every later one is the same: varies only via 0
            ref[:] = 1.0 if k == 0 else 0.5
            cand[:] = ref
        elif kind in ("faint", "late"):  # varies, but by less than RESOLUTION tolerances
            ref[:] = 0.5 + rng.uniform(-2e-4, 2e-4, ref.shape).astype(np.float32)
            if kind == "late" and k == 5:  # resolves only with the samples of other shards
                ref[1, 2] += 1e-3
            cand[:] = ref
        elif kind == "ties":
            cand[0, 0] += 1.0  # the same worst difference in every sample: the first must win
        out.append((ref, cand))
    return out


@pytest.mark.parametrize("kind", ["noisy", "nan", "constant", "step", "faint", "late", "ties",
                                  "same"])
@pytest.mark.parametrize("exact", [False, True])
def test_merged_shards_equal_one_pass(kind, exact):
    data = _samples(kind, 7, seed=len(kind))
    whole = PairAccumulator("r", "c", exact=exact)
    for k, (r, c) in enumerate(data):
        whole.add(r, c, k)
    want = whole.result().to_json()
    for cuts in ([3], [1, 2, 6], [6], [1, 2, 3, 4, 5, 6]):
        bounds = [0, *cuts, len(data)]
        merged: PairAccumulator | None = None
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            part = PairAccumulator("r", "c", exact=exact)
            if a > 0:
                part.prime(*data[0])
            for k in range(a, b):
                part.add(*data[k], k)
            if merged is None:
                merged = part
            else:
                merged.merge(part)
        assert merged is not None
        assert merged.result().to_json() == want, cuts
    if kind in ("faint", "late"):
        assert ("below the tolerance's resolution" in (whole.result().why or "")) == (kind == "faint")


def scaled_and_dataset(folder: Path, samples: int) -> tuple[Path, Path]:
    """A candidate whose trunk is scaled by 1.001 (it fails) and a folder of .npz samples."""
    model = osg.load(SEED)
    insert(model, "network/layer_conv5/Relu:0", op="scale", params={"factor": 1.001})
    cand = folder / "cand.onnx"
    osg.save(model, cand)
    data = folder / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    for k in range(samples):
        np.savez(data / f"s{k:02d}.npz",
                 **{"input:0": rng.standard_normal((1, 8, 8, 3)).astype(np.float32)})
    return cand, data


def test_sharded_compare_equals_the_local_report(tmp_path):
    cand, data = scaled_and_dataset(tmp_path, 7)
    for candidate, verdict in ((cand, "fail"), (SEED, "pass")):
        local = compare(SEED, candidate, inputs=data)
        assert [p.verdict for p in local.pairs] == [verdict, verdict]
        for shards in (2, 3, 7):
            sharded = compare(SEED, candidate, inputs=data, shards=local_map, shard_count=shards)
            assert sharded.to_json() == local.to_json()


def test_sharding_needs_an_npz_dataset():
    from onnxsurgeon.errors import UsageError

    with pytest.raises(UsageError, match="sharded verification reads an .npz"):
        compare(SEED, SEED, shards=local_map)
