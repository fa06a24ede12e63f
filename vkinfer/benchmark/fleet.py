"""`vkinfer bench --ray ADDRESS`: a benchmark fleet on a Ray cluster.

Every job is one ``bench_model`` call (vkinfer.benchmark.schedule) on one node of the cluster: its models travel as
bytes (the nodes need not share a file system), the node creates the engines, times them and evaluates ``conditions()``
itself (its CPU, its Vulkan devices, its versions, its hostname), and the records come back to the caller, which
writes them. The nodes need vkinfer (and the peers to compare with) installed, and the same Ray and Python
versions as the caller, as Ray requires.

A job is a dict:

- ``model`` (str, required): a model file on the caller's machine, read here and sent as bytes; it is the records'
  ``model`` field. ``data`` (bytes, optional): the model's bytes, when they do not come from that file.
- ``device`` (str or list of str, default ``"cpu"``): vkinfer's device(s) on the node (cpu, vulkan, auto, ...).
- ``threads`` (int, default 1).
- ``peers`` (list of str, optional): the peer engines; default ``bench_args["peers"]``, else the model's default
  peer (onnxruntime for .onnx, litert for .tflite), as ``vkinfer bench``.
- ``node`` (str, optional): the Ray node id (hex) to run on. A job without one runs on every alive node when
  ``bench_args["spread"]`` is true (the default), else on a node Ray chooses.

``bench_args``: ``runs`` (default 50), ``warmup`` (default 5), ``peers`` (list or None), ``pin`` (CPUs to pin the
benchmarking worker to on each node, or None), ``spread`` (default True), ``timeout_s`` (per job, default None:
no limit; a job past it is cancelled and becomes an error record).

Addresses are Ray's (``ray.init(address=...)``): ``"local"`` starts a new single-node Ray instance on this machine
for the run and stops it afterwards; ``"auto"`` connects to the cluster that ``ray start`` runs on this machine (or
``RAY_ADDRESS``); ``"HOST:PORT"`` connects to that cluster's head (GCS) and ``"ray://HOST:10001"`` through Ray
Client (a HOST:PORT where nothing listens is refused at once, before Ray would retry it for minutes). When this
process is already connected to Ray (``ray.is_initialized()``), that connection is used and kept, whatever the
address.

The jobs of one node run one at a time (so they do not time each other's load), the nodes in parallel; each job is a
Ray task that reserves ``threads`` CPUs of its node (at most the node's CPUs). A job that fails on its node (a model
that does not load, a worker that crashes, a node that dies, a timeout) gives ``"error"`` records with the message,
one per engine it would have run; the other jobs still run. Records' ``conditions`` gain ``ray_node_id`` and
``ray_node_ip``. ``create_cold_ms`` is cold for the Ray worker process, which Ray reuses between jobs.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import records
from .load import BadInput

DEFAULT_RUNS = 50
DEFAULT_WARMUP = 5
FLEET_MISSING = "--ray needs the fleet extra: pip install vkinfer[fleet]"
_JOB_KEYS = frozenset({"model", "data", "device", "threads", "peers", "node"})
_ARG_KEYS = frozenset({"runs", "warmup", "peers", "pin", "spread", "timeout_s"})


class FleetUnavailable(BadInput):
    """Ray is not installed (the fleet extra), or the cluster cannot be reached."""


def _ray():
    try:
        import ray
    except ImportError:
        raise FleetUnavailable(FLEET_MISSING) from None
    return ray


# --------------------------------------------------------------------------------------------- on the node


def _default_peers(model: str, data: bytes | None) -> list[str]:
    tflite = model.lower().endswith(".tflite") or (data is not None and data[4:8] == b"TFL3")
    return ["litert" if tflite else "onnxruntime"]


def _error_records(job: dict[str, Any], message: str, runs: int, warmup: int,
                   cond: dict[str, Any]) -> list[dict[str, Any]]:
    """One "error" record per engine the job would have measured."""
    engines = [("vkinfer", d) for d in job["devices"]] + [(p, "cpu") for p in job["peers"]]
    return [records.new_record(job["model"], name, dev, job["threads"], status="error", error=message, runs=runs,
                               warmup=warmup, conditions=dict(cond)) for name, dev in engines]


def bench_job(job: dict[str, Any], data: bytes, runs: int, warmup: int, pin: list[int] | None = None,
              extra_conditions: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Benchmark one normalized job here (the body of the Ray task, callable without Ray): the model's bytes are
    written to a temporary file and loaded as ``vkinfer bench`` loads files, the records carry this machine's
    conditions plus `extra_conditions`; any failure gives error records instead of an exception."""
    from .load import load_model
    from .schedule import bench_model

    threads = job["threads"]
    cond: dict[str, Any] | None = None
    old = None
    try:
        if pin is not None:
            old = os.sched_getaffinity(0)
            os.sched_setaffinity(0, pin)
        cond = _conditions(threads, pin, extra_conditions)  # after pinning: its affinity is the pinned one
        with tempfile.TemporaryDirectory(prefix="vkinfer-fleet-") as tmp:
            path = Path(tmp) / (Path(job["model"]).name or "model")
            path.write_bytes(data)
            try:
                model = load_model(str(path))
            except BadInput as e:
                raise BadInput(str(e).replace(str(path), job["model"])) from None
        model.path = job["model"]
        return bench_model(model, job["devices"], job["peers"], threads, runs, warmup, cond)
    except Exception as e:  # noqa: BLE001 - a failed job is its records, never a crash of the fleet
        if cond is None:
            cond = _conditions(threads, pin, extra_conditions)
        return _error_records(job, str(e) if isinstance(e, BadInput) else f"{type(e).__name__}: {e}", runs, warmup,
                              cond)
    finally:
        if old is not None:
            os.sched_setaffinity(0, old)


def _conditions(threads: int, pin: list[int] | None, extra: dict[str, Any] | None) -> dict[str, Any]:
    """conditions() here plus `extra`; what went wrong instead, should that fail."""
    from .conditions import conditions, git_commit, vulkan_devices

    try:
        cond = conditions(threads, pin, vulkan=vulkan_devices(), commit=git_commit())
    except Exception as e:  # noqa: BLE001 - still report the job
        cond = {"hostname": socket.gethostname(), "conditions_error": f"{type(e).__name__}: {e}"}
    cond.update(extra or {})
    return cond


def _remote_job(job: dict[str, Any], data: bytes, runs: int, warmup: int,
                pin: list[int] | None) -> list[dict[str, Any]]:
    import ray

    ctx = ray.get_runtime_context()
    extra = {"ray_node_id": ctx.get_node_id(), "ray_node_ip": ray.util.get_node_ip_address()}
    return bench_job(job, data, runs, warmup, pin, extra)


# --------------------------------------------------------------------------------------------- on the caller


def _normalize(job: Any, i: int, bench_args: dict[str, Any]) -> dict[str, Any]:
    """The job with every key set and checked; BadInput naming job `i` and the key."""
    if not isinstance(job, dict):
        raise BadInput(f"fleet job {i}: must be a dict, not {type(job).__name__}")
    unknown = sorted(set(job) - _JOB_KEYS)
    if unknown:
        raise BadInput(f"fleet job {i}: unknown key(s) {', '.join(unknown)} (one of {', '.join(sorted(_JOB_KEYS))})")
    model = job.get("model")
    if not isinstance(model, str) or not model:
        raise BadInput(f"fleet job {i}: 'model' must be a model path (a non-empty string)")
    devices = job.get("device", "cpu")
    devices = [devices] if isinstance(devices, str) else devices
    if not isinstance(devices, list) or not devices or not all(isinstance(d, str) and d for d in devices):
        raise BadInput(f"fleet job {i} ({model}): 'device' must be a device name or a list of them")
    threads = job.get("threads", 1)
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise BadInput(f"fleet job {i} ({model}): 'threads' must be a positive integer, got {threads!r}")
    data = job.get("data")
    if data is not None and not isinstance(data, bytes | bytearray):
        raise BadInput(f"fleet job {i} ({model}): 'data' must be bytes")
    peers = job.get("peers", bench_args.get("peers"))
    if peers is None:
        peers = _default_peers(model, data)
    if not isinstance(peers, list) or not all(isinstance(p, str) for p in peers):
        raise BadInput(f"fleet job {i} ({model}): 'peers' must be a list of engine names")
    node = job.get("node")
    if node is not None and (not isinstance(node, str) or not node):
        raise BadInput(f"fleet job {i} ({model}): 'node' must be a Ray node id (hex string)")
    return {"model": model, "data": bytes(data) if data is not None else None, "devices": list(devices),
            "threads": threads, "peers": list(peers), "node": node}


def _check_args(bench_args: Any) -> tuple[int, int, list[int] | None, bool, float | None]:
    if not isinstance(bench_args, dict):
        raise BadInput(f"fleet bench_args must be a dict, not {type(bench_args).__name__}")
    unknown = sorted(set(bench_args) - _ARG_KEYS)
    if unknown:
        raise BadInput(f"fleet bench_args: unknown key(s) {', '.join(unknown)} (one of {', '.join(sorted(_ARG_KEYS))})")
    runs, warmup = bench_args.get("runs", DEFAULT_RUNS), bench_args.get("warmup", DEFAULT_WARMUP)
    if not isinstance(runs, int) or isinstance(runs, bool) or runs < 1:
        raise BadInput(f"fleet bench_args: runs must be at least 1, got {runs!r}")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise BadInput(f"fleet bench_args: warmup must be 0 or more, got {warmup!r}")
    pin = bench_args.get("pin")
    if pin is not None and (not isinstance(pin, list | tuple) or not pin or
                            not all(isinstance(c, int) and c >= 0 for c in pin)):
        raise BadInput(f"fleet bench_args: pin must be a list of CPU numbers, got {pin!r}")
    timeout = bench_args.get("timeout_s")
    if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
        raise BadInput(f"fleet bench_args: timeout_s must be a positive number of seconds, got {timeout!r}")
    return runs, warmup, (sorted(pin) if pin is not None else None), bool(bench_args.get("spread", True)), timeout


def alive_nodes() -> list[dict[str, Any]]:
    """The alive nodes of the cluster this process is connected to (``ray.init`` first): ``node_id`` (hex),
    ``hostname``, ``ip`` and ``cpus``, sorted by hostname then id."""
    ray = _ray()
    out = [{"node_id": n["NodeID"], "hostname": n.get("NodeManagerHostname"), "ip": n.get("NodeManagerAddress"),
            "cpus": float(n.get("Resources", {}).get("CPU", 0.0))} for n in ray.nodes() if n.get("Alive")]
    return sorted(out, key=lambda n: (str(n["hostname"]), n["node_id"]))


def spread(jobs: list[dict[str, Any]], node_ids: list[str]) -> list[dict[str, Any]]:
    """Every job without a ``node`` once per node of `node_ids` (node by node, in the jobs' order), so each node
    benchmarks its own devices; jobs that name a node are kept as they are (after the spread ones)."""
    fixed = [j for j in jobs if j.get("node") is not None]
    free = [j for j in jobs if j.get("node") is None]
    return [{**j, "node": n} for n in node_ids for j in free] + fixed


def _probe(address: str) -> None:
    """FleetUnavailable at once when HOST:PORT (or ray://HOST:PORT) does not accept connections: Ray itself retries
    an unreachable head for minutes."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # local, auto, or something for Ray to judge
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except (OSError, ValueError, OverflowError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or type(e).__name__
        raise FleetUnavailable(f"--ray {address}: no Ray cluster answers there ({why})") from None


def _connect(ray, address: str) -> bool:
    """Connect to `address` unless already connected; True when this call connected (and must disconnect)."""
    if ray.is_initialized():
        return False
    if not isinstance(address, str) or not address.strip():
        raise BadInput("--ray needs an address: local, auto, HOST:PORT or ray://HOST:PORT")
    address = address.strip()
    _probe(address)
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="warning",
                 configure_logging=True)
    except Exception as e:  # noqa: BLE001 - ConnectionError, ValueError, RuntimeError... all mean "cannot reach"
        raise FleetUnavailable(f"--ray {address}: cannot connect to a Ray cluster ({type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''})") from None
    return True


def run(address: str, jobs: list[dict[str, Any]], bench_args: dict[str, Any], *,
        on_records: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """Run `jobs` on the Ray cluster at `address` (see the module's docstring for jobs, bench_args and
    addresses) and return every record, job by job in the order of the (spread) jobs. `on_records`, when given, is
    called with each job's records as soon as the job finishes (in the order they finish: a caller that writes them
    there keeps the finished ones when the run is interrupted). BadInput (FleetUnavailable when Ray is missing or
    unreachable) for bad jobs or arguments; failures on the nodes are error records."""
    runs, warmup, pin, do_spread, timeout = _check_args(bench_args)
    if not isinstance(jobs, list):
        raise BadInput(f"fleet jobs must be a list, not {type(jobs).__name__}")
    norm = [_normalize(j, i, bench_args) for i, j in enumerate(jobs)]
    datas: dict[str, bytes] = {}
    for j in norm:
        if j["data"] is None and j["model"] not in datas:
            try:
                datas[j["model"]] = Path(j["model"]).read_bytes()
            except OSError as e:
                raise BadInput(f"{j['model']}: cannot read model: {e.strerror or e}") from None
    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    owned = _connect(ray, address)
    try:
        nodes = {n["node_id"]: n for n in alive_nodes()}
        if do_spread:
            norm = spread(norm, list(nodes))
        refs = {m: ray.put(d) for m, d in datas.items()}
        remote = ray.remote(_remote_job)
        max_cpus = max((n["cpus"] for n in nodes.values()), default=1.0)
        queues: dict[str | None, list[int]] = {}
        for k, j in enumerate(norm):
            queues.setdefault(j["node"], []).append(k)
        results: dict[int, list[dict[str, Any]]] = {}
        inflight: dict[Any, tuple[int, float]] = {}

        def done(k: int, recs: list[dict[str, Any]]) -> None:
            results[k] = recs
            if on_records is not None:
                on_records(recs)

        def fail(k: int, message: str) -> None:
            j = norm[k]
            where = {"hostname": nodes.get(j["node"], {}).get("hostname"), "ray_node_id": j["node"],
                     "ray_address": address}  # what the caller knows of the node
            done(k, _error_records(j, message, runs, warmup, where))

        def submit(node: str | None) -> None:
            while queues.get(node):
                k = queues[node].pop(0)
                j = norm[k]
                if node is not None and node not in nodes:
                    fail(k, f"Ray node {node} is not an alive node of the cluster at {address}")
                    continue
                cpus = min(float(j["threads"]), nodes[node]["cpus"] if node is not None else max_cpus)
                opts: dict[str, Any] = {"num_cpus": cpus, "max_retries": 0}
                if node is not None:
                    opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
                job = {key: v for key, v in j.items() if key != "data"}
                data = j["data"] if j["data"] is not None else refs[j["model"]]
                ref = remote.options(**opts).remote(job, data, runs, warmup, pin)
                inflight[ref] = (k, time.monotonic())
                return

        for node in list(queues):
            submit(node)
        while inflight:
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0 if timeout is not None else None)
            for ref in ready:
                k, _ = inflight.pop(ref)
                try:
                    recs = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - a crashed worker or a lost node: this job's records
                    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                    fail(k, f"the job failed on its Ray node ({type(e).__name__}: {first})")
                else:
                    done(k, recs)
                submit(norm[k]["node"])
            if timeout is not None:
                now = time.monotonic()
                for ref, (k, t0) in list(inflight.items()):
                    if now - t0 > timeout:
                        ray.cancel(ref, force=True)
                        del inflight[ref]
                        fail(k, f"the job took more than {timeout:g} s on its Ray node and was cancelled")
                        submit(norm[k]["node"])
        return [r for k in range(len(norm)) for r in results[k]]
    finally:
        if owned:
            ray.shutdown()
