"""Serves an ONNX model over HTTP with Ray Serve: N replicas, one terrace.InferenceSession each.

    PYTHONPATH=python:build/python python examples/ray_serve/serve_model.py models/mlp --replicas 2 --threads 1

Ray starts (or joins, with --address) a cluster and places the replicas on its nodes; Serve's proxy
routes each request to a replica. POST to the route (default http://127.0.0.1:8000/):

- JSON: {"inputs": {"x": [[...], ...]}} (values cast to each input's dtype) returns
  {"outputs": {"output": [[...], ...]}};
- numpy: a .npy body (a model with one input) or .npz (inputs by name) returns the outputs as .npz.

Each answer carries the replica that ran it (header X-Terrace-Replica) and the time the session's
run took there (X-Terrace-Run-Ms). An error in the
request is a 400, anything else Terrace raises a 500; both JSON {"error", "code"}.

On a multi-node cluster every node needs terrace importable (pip install . there) and the model
at the same path; `serve run --working-dir examples/ray_serve serve_model:app model=PATH` also
ships this file (app() below takes model, tier, threads, replicas as strings).
"""
import argparse
import asyncio
import io
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from ray import serve
from starlette.responses import Response

_JSON = "application/json"
_NPZ = "application/x-npz"


def model_path(path):
    """A model file, or a folder holding model.onnx (the zoo's and the CLI's layout), made absolute
    because replicas run in other processes, maybe on other nodes."""
    path = os.path.abspath(path)
    return os.path.join(path, "model.onnx") if os.path.isdir(path) else path


def numpy_dtype(onnx_type):
    """numpy's dtype for a NodeArg type ("tensor(float)"); None for those numpy lacks (bfloat16)."""
    elem = onnx_type[onnx_type.index("(") + 1:-1]
    try:
        return np.dtype({"float": "float32", "double": "float64"}.get(elem, elem))
    except TypeError:
        return None


class BadRequest(ValueError):
    pass


def _error(status, message, code):
    return Response(json.dumps({"error": message, "code": code}), status_code=status, media_type=_JSON)


@serve.deployment(max_ongoing_requests=4)
class TerraceModel:
    """One replica: one session, runs on its own threads so the replica's event loop keeps reading
    requests (run releases the GIL and is safe from many threads)."""

    def __init__(self, model, tier=None, threads=1, runners=1):
        import terrace  # here, not at the top: the replica's process needs it, the driver not
        self._terrace = terrace
        self.session = terrace.InferenceSession(model, tier=tier, threads=threads)
        self.dtypes = {i.name: numpy_dtype(i.type) for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs()]
        # runners: calls of this replica running at once; more than the cores it has only queues.
        self.pool = ThreadPoolExecutor(runners, thread_name_prefix="terrace-run")
        self.replica = serve.get_replica_context().replica_id.unique_id

    def _feed(self, body):
        if body[:6] == b"\x93NUMPY" or body[:2] == b"PK":
            loaded = np.load(io.BytesIO(body), allow_pickle=False)
            if isinstance(loaded, np.ndarray):
                if len(self.dtypes) != 1:
                    raise BadRequest(f"a .npy body feeds a model with one input; this one has "
                                     f"{sorted(self.dtypes)}: send .npz")
                return {next(iter(self.dtypes)): loaded}, True
            with loaded:
                return {name: loaded[name] for name in loaded.files}, True
        try:
            doc = json.loads(body)
        except ValueError as e:
            raise BadRequest(f"the body is neither .npy, .npz nor JSON ({e})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), dict):
            raise BadRequest('JSON bodies are {"inputs": {"NAME": nested lists, ...}}')
        feed = {}
        for name, value in doc["inputs"].items():
            if name not in self.dtypes:
                raise BadRequest(f"no input {name!r}; the model's are {sorted(self.dtypes)}")
            feed[name] = np.asarray(value, dtype=self.dtypes[name])
        return feed, False

    def _run(self, feed):
        t0 = time.perf_counter()
        values = self.session.run(None, feed)
        return values, (time.perf_counter() - t0) * 1e3

    async def __call__(self, request):
        try:
            feed, binary = self._feed(await request.body())
            loop = asyncio.get_running_loop()
            values, run_ms = await loop.run_in_executor(self.pool, self._run, feed)
        except BadRequest as e:
            return _error(400, str(e), "InvalidArgument")
        except self._terrace.TerraceError as e:
            return _error(400 if e.code == "InvalidArgument" else 500, str(e), e.code)
        except (TypeError, ValueError) as e:  # a dtype or shape numpy or Terrace refused
            return _error(400, str(e), "InvalidArgument")
        headers = {"X-Terrace-Replica": self.replica, "X-Terrace-Run-Ms": f"{run_ms:.3f}"}
        if binary:
            out = io.BytesIO()
            np.savez(out, **dict(zip(self.outputs, values)))
            return Response(out.getvalue(), media_type=_NPZ, headers=headers)
        doc = {"outputs": {name: v.tolist() for name, v in zip(self.outputs, values)}}
        return Response(json.dumps(doc), media_type=_JSON, headers=headers)


def build(model, tier=None, threads=1, replicas=2, runners=1, max_ongoing=4):
    """The Serve application: `replicas` copies of TerraceModel, each reserving `threads` CPUs from
    Ray so that Ray does not place more sessions on a node than it has cores."""
    return TerraceModel.options(num_replicas=replicas, max_ongoing_requests=max_ongoing,
                                ray_actor_options={"num_cpus": threads}).bind(model_path(model), tier, threads,
                                                                               runners)


def app(args):
    """For `serve run serve_model:app model=PATH [tier=cpu] [threads=1] [replicas=2]`."""
    return build(args["model"], args.get("tier"), int(args.get("threads", 1)), int(args.get("replicas", 2)))


def start(model, tier=None, threads=1, replicas=2, host="127.0.0.1", port=8000, route="/", address=None,
          num_cpus=None, max_ongoing=4):
    """Starts Ray (or joins the cluster at `address`), Serve's proxy on host:port and the app;
    returns the URL once every replica has its session loaded."""
    import ray

    # Workers get this PYTHONPATH (terrace from a build tree, and this folder), made absolute: their
    # working directory is not ours.
    paths = [os.path.dirname(os.path.abspath(__file__))] + os.environ.get("PYTHONPATH", "").split(os.pathsep)
    path = os.pathsep.join(os.path.abspath(p) for p in paths if p)
    ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    serve.start(http_options={"host": host, "port": port})
    serve.run(build(model, tier, threads, replicas, max_ongoing=max_ongoing), name="terrace", route_prefix=route)
    return f"http://{host}:{port}{route}"


def stop():
    import ray
    serve.shutdown()
    ray.shutdown()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", help="an ONNX file, or a folder with model.onnx")
    p.add_argument("--tier", choices=("interp", "cpu", "gpu"), help="the highest tier (default: the best here)")
    p.add_argument("--threads", type=int, default=1, help="threads per call, and CPUs each replica reserves")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--max-ongoing", type=int, default=4, help="requests one replica holds at once")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--route", default="/")
    p.add_argument("--address", help="a Ray cluster to join (default: start one here)")
    p.add_argument("--num-cpus", type=int, help="CPUs the local Ray offers (default: all)")
    a = p.parse_args(argv)
    url = start(a.model, a.tier, a.threads, a.replicas, a.host, a.port, a.route, a.address, a.num_cpus,
                a.max_ongoing)
    print(f"serving {model_path(a.model)} at {url} ({a.replicas} replicas, {a.threads} thread(s) each); "
          "Ctrl-C stops", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
