"""Ray: the same fleet and verification work as Ray tasks on a local instance, compared with the
local results (byte-identical outputs; exactly merged verification statistics)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_helpers import cli as run_cli

ray = pytest.importorskip("ray")  # the 'ray' extra, part of 'all' (CI installs it)

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "models" / "seed_cnn.onnx"

pytestmark = pytest.mark.slow  # starting Ray takes 5-20 s on a shared 2-core machine


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module (2 CPUs, no dashboard), shut down afterwards."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


def cli(*args: Any) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=600)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fleet_with_a_typo(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A recipe extracting 'aux:0' and three models in a non-alphabetical order: the seed, a
    file that is not ONNX, and the seed with 'aux:0' renamed 'auxx:0' (the recipe misspells the
    tensor there, as far as that model knows)."""
    import onnxsurgeon as osg
    from onnxsurgeon.surgery import rename

    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(SEED, src / "z_seed.onnx")
    (src / "broken.onnx").write_bytes(b"\x00" * 10)
    model = osg.load(SEED)
    rename(model, {"aux:0": "auxx:0"})
    osg.save(model, src / "a_renamed.onnx")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"onnxsurgeon": 1, "steps": [
        {"extract": {"outputs": ["aux:0"]}}]}))
    return recipe, [src / "z_seed.onnx", src / "broken.onnx", src / "a_renamed.onnx"]


def test_apply_ray_alone_starts_a_private_instance_quietly(tmp_path):
    """`apply ... --ray` with no cluster running: a private local instance (not "auto", which
    exits 3 on a machine without a cluster), no Ray log line on stderr, the JSON lines in input
    order with their index, the failing model's line with the single command's did-you-mean.
    (First in this module: no local_ray instance is running yet.)"""
    recipe, models = fleet_with_a_typo(tmp_path)
    proc = cli("apply", recipe, *models, "-o", f"{tmp_path}/out/", "--ray", "--json")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [d["index"] for d in lines] == [0, 1, 2]
    assert [d["model"] for d in lines] == [str(m) for m in models]
    assert [d["status"] for d in lines] == ["ok", "failed", "failed"]
    single = cli("apply", recipe, models[2], "-o", tmp_path / "single.onnx")
    assert single.returncode == 2
    hint = single.stderr.strip().split("; ", 1)[1]
    assert hint.startswith("did you mean 'auxx:0'") and lines[2]["error"].endswith(hint)
    local = tmp_path / "local.onnx"
    assert cli("apply", recipe, SEED, "-o", local).returncode == 0
    assert sha(tmp_path / "out" / "z_seed.onnx") == sha(local)


def test_verify_ray_alone_starts_a_private_instance_quietly(tmp_path):
    """`verify ... --inputs DIR --ray`: a private local instance, Ray's lines off stderr, the
    report a local run's."""
    from tests.test_shard import scaled_and_dataset

    cand, data = scaled_and_dataset(tmp_path, 4)
    proc = cli("verify", SEED, cand, "--inputs", data, "--ray", "--json")
    assert proc.returncode == 1 and proc.stderr == ""
    assert json.loads(proc.stdout) == json.loads(cli("verify", SEED, cand, "--inputs", data,
                                                     "--json").stdout)


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_address_without_a_cluster_is_one_line_and_exit_2(tmp_path):
    """A Ray address nobody answers at is a dependency's failure: exit 2, one line saying
    what to do, within seconds (Ray alone waits minutes), for apply and verify alike."""
    from tests.test_shard import scaled_and_dataset

    recipe, models = fleet_with_a_typo(tmp_path)
    cand, data = scaled_and_dataset(tmp_path, 2)
    port = _closed_port()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        for args in (["apply", recipe, models[0], models[2], "-o", f"{tmp_path}/out/"],
                     ["verify", SEED, cand, "--inputs", data]):
            proc = run_cli(*args, "--ray", address, timeout=60)
            assert proc.returncode == 2, proc.stderr
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and f"--ray {address}: no Ray cluster answers" in lines[0]
            assert "ray start --head" in lines[0]
    assert not (tmp_path / "out").exists()
    proc = subprocess.run([sys.executable, "-m", "onnxsurgeon", "verify", SEED, cand, "--inputs",
                           data, "--ray", "auto"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}"})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"--ray auto (RAY_ADDRESS=127.0.0.1:{port}): no Ray cluster answers" in proc.stderr
    proc = run_cli("apply", recipe, "--ray", *models, "-o", f"{tmp_path}/out/", timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "took '" in proc.stderr and "put --ray after the files" in proc.stderr


def test_apply_fleet_on_ray_is_byte_identical_to_local(local_ray, tmp_path):
    from onnxsurgeon.recipe.fleet import run_fleet

    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(SEED, src / "seed.onnx")
    shutil.copy(ROOT / "models" / "tf1_seed.onnx", src / "tf1.onnx")
    (src / "broken.onnx").write_bytes(b"\x00" * 10)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"onnxsurgeon": 1, "steps": [
        {"copy": {"outputs": ["logits:0"], "prefix": "twin/"}},
        {"insert": {"at": "twin/logits:0", "op": "softmax"}},
        {"verify": {}}]}))
    models = [str(src / n) for n in ("seed.onnx", "broken.onnx", "tf1.onnx")]
    results: dict[str, list[dict[str, Any]]] = {}
    for mode in ("local", "ray"):
        lines: list[str] = []
        code = run_fleet(str(recipe), models, str(tmp_path / mode) + "/", jobs=2,
                         ray="" if mode == "ray" else None, as_json=True, options={},
                         out=lines.append)
        assert code == 1
        results[mode] = sorted((json.loads(line) for line in lines), key=lambda d: d["model"])
    for local, remote in zip(results["local"], results["ray"], strict=True):
        assert local["status"] == remote["status"] and local["model"] == remote["model"]
        assert local.get("error") == remote.get("error")
        if local["status"] == "ok":
            assert remote["verify"] == local["verify"] and remote["steps"] == local["steps"]
            name = Path(local["model"]).name
            assert sha(tmp_path / "ray" / name) == sha(tmp_path / "local" / name)
    assert [d["status"] for d in results["ray"]] == ["failed", "ok", "ok"]


def test_apply_cli_ray_connects_to_a_running_instance(local_ray, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"onnxsurgeon": 1, "steps": [
        {"extract": {"outputs": ["aux:0"]}}]}))
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    shutil.copy(SEED, a / "seed.onnx")
    shutil.copy(SEED, b / "other.onnx")
    proc = cli("apply", recipe, a / "seed.onnx", b / "other.onnx", "-o", f"{tmp_path}/out/",
               "--ray", "auto", "--json")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert {d["status"] for d in lines} == {"ok"} and len(lines) == 2
    local = tmp_path / "local.onnx"
    assert cli("apply", recipe, SEED, "-o", local).returncode == 0
    assert sha(tmp_path / "out" / "seed.onnx") == sha(local) == sha(tmp_path / "out" / "other.onnx")


def test_verify_sharded_on_ray_equals_local(local_ray, tmp_path):
    """Shards of an .npz folder folded by Ray workers and merged: the report equals a local
    run's, statistics, verdicts and divergence included; through the API and the CLI."""
    from onnxsurgeon.cluster import ray_shards
    from onnxsurgeon.verify import compare
    from tests.test_shard import scaled_and_dataset

    cand, data = scaled_and_dataset(tmp_path, 6)
    local = compare(SEED, cand, inputs=data)
    remote = compare(SEED, cand, inputs=data, shards=ray_shards(None, 2), shard_count=3)
    assert remote.to_json() == local.to_json() and not local.ok
    proc = cli("verify", SEED, cand, "--inputs", data, "--ray", "auto", "--json")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""  # not Ray's "Connecting to existing Ray cluster" lines
    assert json.loads(proc.stdout) == json.loads(cli("verify", SEED, cand, "--inputs", data,
                                                     "--json").stdout)
    proc = cli("verify", SEED, cand, "--ray")
    assert proc.returncode == 2 and "--ray shards an --inputs folder" in proc.stderr


def test_a_task_ray_cannot_run_is_that_tasks_failure(local_ray):
    """A worker that dies (a real crash, no retry) fails its own task only: the fleet's
    ``failed`` line for it, the others' results as usual; without ``failed`` it is a
    ClusterError (exit 2), not a Ray traceback."""
    from onnxsurgeon.cluster import ClusterError, ray_map

    def crash_on_two(x: int) -> int:
        if x == 2:
            import os

            os._exit(7)
        return x * 10

    got = dict(ray_map(crash_on_two, [(1,), (2,), (3,)], address=None, cpus=2,
                       failed=lambda k, reason: reason))
    assert got[0] == 10 and got[2] == 30
    assert got[1].startswith("Ray could not run task 2: ")
    with pytest.raises(ClusterError, match="Ray could not run task 1: .*run without --ray"):
        list(ray_map(crash_on_two, [(2,)], address=None, cpus=2, ordered=True))
