"""`vkinfer bench --ray`: vkinfer.benchmark.fleet on a local Ray cluster started by the test (two nodes on this
machine, 1 CPU each): jobs benchmarked on their nodes with the node's conditions, models sent as bytes, a failing
job as an error record, jobs spread over the alive nodes; without Ray, a clear error. Ray's startup makes this file
take ~10 s on 2 cores."""

import os
import shutil
import socket
import sys
import tempfile
import time

import pytest
from support.small_model import small_qmodel

from vkinfer.benchmark import fleet, records
from vkinfer.benchmark.load import BadInput

RUNS = 3


@pytest.fixture(scope="module")
def cluster():
    """A Ray cluster of two nodes on this machine, 1 CPU each (ray.cluster_utils.Cluster: two raylets), with this
    process connected to it; no dashboard, no usage stats, no auth token in $HOME, and Ray's files (its sessions and
    the ray_current_cluster address file, which Cluster writes in Ray's default directory) under a temporary
    directory with a short path (Ray's sockets), not /tmp/ray; shut down and removed after."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in ("RAY_USAGE_STATS_ENABLED", "RAY_AUTH_MODE", "RAY_TMPDIR")}
    tmp = tempfile.mkdtemp(prefix="vkray-")
    os.makedirs(os.path.join(tmp, "ray"))
    os.environ.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", RAY_TMPDIR=tmp)
    c = None
    try:
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        c.add_node(num_cpus=1)
        ray.init(address=c.address, log_to_driver=False, logging_level="warning")
        c.wait_for_nodes()
        yield ray
    finally:
        ray.shutdown()
        if c is not None:
            c.shutdown()
        for _ in range(25):  # Ray's exiting processes may still write their session files for a moment
            shutil.rmtree(tmp, ignore_errors=True)
            time.sleep(0.2)
            if not os.path.exists(tmp):
                break
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _node_ids(ray) -> list[str]:
    return sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])


def test_two_jobs_each_on_its_node_with_its_conditions(cluster, tmp_path):
    path = tmp_path / "small.onnx"
    path.write_bytes(small_qmodel())
    n1, n2 = _node_ids(cluster)
    jobs = [{"model": str(path), "device": "cpu", "threads": 1, "node": n1},
            # not a file anywhere: the bytes travel with the job
            {"model": "elsewhere/other.onnx", "data": small_qmodel(seed=1), "device": "cpu", "threads": 1, "node": n2}]
    seen = []
    recs = fleet.run("auto", jobs, {"runs": RUNS, "warmup": 1, "peers": []}, on_records=seen.extend)
    assert [r["model"] for r in recs] == [str(path), "elsewhere/other.onnx"]
    assert sorted(r["model"] for r in seen) == sorted(r["model"] for r in recs)  # as each job finished
    assert [r["conditions"]["ray_node_id"] for r in recs] == [n1, n2]
    for r in recs:
        records.validate(r)
        assert (r["engine"], r["device"], r["threads"], r["status"], r["error"]) == ("vkinfer", "cpu", 1, "ok", None)
        assert len(r["latencies_ms"]) == RUNS and r["runs"] == RUNS and r["warmup"] == 1
        assert r["min_ms"] <= r["p50_ms"] <= r["max_ms"]
        assert r["model_bytes"] == len(small_qmodel()) and r["macs"] > 0
        c = r["conditions"]
        assert c["hostname"] == socket.gethostname() and c["threads"] == 1
        assert c["versions"]["vkinfer"] and c["cpu_model"]


def test_a_bad_model_is_an_error_record(cluster):
    jobs = [{"model": "bad.onnx", "data": b"not a model at all", "device": "cpu", "threads": 1, "peers": []},
            {"model": "good.onnx", "data": small_qmodel(), "device": "cpu", "threads": 1, "peers": []}]
    bad, good = fleet.run("auto", jobs, {"runs": 2, "warmup": 0, "spread": False})
    records.validate(bad)
    assert bad["status"] == "error" and bad["model"] == "bad.onnx" and bad["latencies_ms"] == []
    assert "bad.onnx" in bad["error"] and "not a readable ONNX or .tflite model" in bad["error"]
    assert "vkinfer-fleet-" not in bad["error"]  # the node's temporary file is not named
    assert bad["conditions"]["ray_node_id"] in _node_ids(cluster)
    assert records.validate(good)["status"] == "ok"


def test_a_job_past_its_timeout_is_cancelled(cluster):
    jobs = [{"model": "slow.onnx", "data": small_qmodel(), "device": "cpu", "threads": 1, "peers": []}]
    (r,) = fleet.run("auto", jobs, {"runs": 10**7, "warmup": 0, "timeout_s": 1.0, "spread": False})
    records.validate(r)
    assert r["status"] == "error" and "more than 1 s" in r["error"]


def test_a_crashed_worker_is_an_error_record(cluster, monkeypatch):
    def crash(*args):  # nested: Ray sends it by value, and the worker dies in it
        os._exit(3)

    monkeypatch.setattr(fleet, "_remote_job", crash)
    jobs = [{"model": "crash.onnx", "data": b"x", "device": "cpu", "peers": ["onnxruntime"]}]
    recs = fleet.run("auto", jobs, {"runs": 1, "spread": False})
    assert [(r["engine"], r["status"]) for r in recs] == [("vkinfer", "error"), ("onnxruntime", "error")]
    assert all(records.validate(r)["error"].startswith("the job failed on its Ray node (") for r in recs)
    assert recs[0]["conditions"]["hostname"] is None  # Ray chose the node: the caller does not know which


def test_jobs_spread_over_the_alive_nodes(cluster):
    nodes = fleet.alive_nodes()
    assert sorted(n["node_id"] for n in nodes) == _node_ids(cluster)
    assert [n["cpus"] for n in nodes] == [1.0, 1.0] and all(n["hostname"] for n in nodes)
    recs = fleet.run("auto", [{"model": "s.onnx", "data": small_qmodel(), "peers": []}], {"runs": 1, "warmup": 0})
    assert sorted(records.validate(r)["conditions"]["ray_node_id"] for r in recs) == _node_ids(cluster)
    assert [r["status"] for r in recs] == ["ok", "ok"]
    jobs = [{"model": "a.onnx"}, {"model": "b.onnx", "node": "n9"}, {"model": "c.onnx"}]
    assert fleet.spread(jobs, ["n1", "n2"]) == [
        {"model": "a.onnx", "node": "n1"}, {"model": "c.onnx", "node": "n1"},
        {"model": "a.onnx", "node": "n2"}, {"model": "c.onnx", "node": "n2"}, {"model": "b.onnx", "node": "n9"}]
    (r,) = fleet.run("auto", [{"model": "x.onnx", "data": small_qmodel(), "peers": [], "node": "ab" * 28}],
                     {"runs": 1, "spread": False})
    assert r["status"] == "error" and "not an alive node" in r["error"]


def test_bench_job_without_ray():
    job = {"model": "m.onnx", "devices": ["cpu"], "threads": 1, "peers": ["onnxruntime"]}
    recs = fleet.bench_job(job, small_qmodel(), 2, 0, extra_conditions={"ray_node_id": "x"})
    assert [(r["engine"], r["status"]) for r in recs] == [("vkinfer", "ok"), ("onnxruntime", "ok")]
    assert recs[1]["agreement"]["identical_fraction"] == 1.0 and recs[0]["conditions"]["ray_node_id"] == "x"
    bad = fleet.bench_job(job, b"\0" * 10, 2, 0)
    assert [(r["engine"], r["status"]) for r in bad] == [("vkinfer", "error"), ("onnxruntime", "error")]
    assert bad[0]["conditions"]["hostname"] == socket.gethostname()
    before = os.sched_getaffinity(0)
    cpu = sorted(before)[-1]
    (pinned,) = fleet.bench_job({**job, "peers": []}, small_qmodel(), 2, 0, pin=[cpu])
    assert pinned["status"] == "ok" and pinned["conditions"]["affinity"] == [cpu]
    assert pinned["conditions"]["pinned_cpus"] == [cpu] and os.sched_getaffinity(0) == before  # restored


@pytest.mark.parametrize("jobs, args, match", [
    ([{"model": "m.onnx", "threads": 0}], {}, "job 0 \\(m.onnx\\): 'threads' must be a positive integer"),
    ([{"model": "m.onnx", "gpu": 1}], {}, "job 0: unknown key\\(s\\) gpu"),
    ([{"device": "cpu"}], {}, "job 0: 'model' must be a model path"),
    ([{"model": "m.onnx"}], {"runs": 0}, "runs must be at least 1"),
    ([{"model": "/no/such/model.onnx"}], {}, "/no/such/model.onnx: cannot read model"),
])
def test_bad_jobs_are_clear_errors(jobs, args, match):
    with pytest.raises(BadInput, match=match):
        fleet.run("auto", jobs, args)


def test_an_address_where_no_cluster_answers(monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a process not connected yet
    monkeypatch.setattr(ray, "init", lambda **kw: pytest.fail("ray.init must not be tried"))
    with pytest.raises(fleet.FleetUnavailable, match=r"^--ray 127.0.0.1:1: no Ray cluster answers there \("):
        fleet.run("127.0.0.1:1", [{"model": "m.onnx", "data": b"x"}], {})


def test_without_ray_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    monkeypatch.setitem(sys.modules, "ray.util.scheduling_strategies", None)
    with pytest.raises(fleet.FleetUnavailable, match=r"^--ray needs the fleet extra: pip install vkinfer\[fleet\]$"):
        fleet.run("local", [{"model": "m.onnx", "data": b"x"}], {})
