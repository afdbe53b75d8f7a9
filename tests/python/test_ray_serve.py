"""examples/ray_serve: a model served by Ray Serve replicas (one terrace session each), answers
checked against a local session by the example's own load test, on 127.0.0.1.

Run by ctest (python_ray_serve) under TERRACE_EXTRA_PYTHON, a venv made from the module's Python
with `pip install "ray[serve]"`; exits 77 (skipped), saying why, where ray[serve], numpy, onnx or
the module terrace._terrace is absent (Debian 12 packages no ray). Starts its own local Ray with 2
CPUs and 2 replicas of 1 thread each; asserts answers, never timings.
"""
import http.client
import io
import json
import os
import socket
import sys
import tempfile
import unittest
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "ray_serve"))

try:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    import terrace
    import load_test
    import serve_model  # imports ray.serve
    MISSING = None
except ImportError as e:  # reported by main as a skip
    MISSING = e

REPLICAS = 2


def two_input_model():
    """y = Relu(x W + b) * scale and z = x + scale, x [N, 8] and scale [1]: two inputs so that the
    .npz path and the .npy refusal are both exercised."""
    f = TensorProto.FLOAT
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Mul", ["r", "scale"], ["y"]),
             helper.make_node("Add", ["x", "scale"], ["z"])]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", f, ["N", 8]), helper.make_tensor_value_info("scale", f, [1])],
        [helper.make_tensor_value_info("y", f, ["N", 4]), helper.make_tensor_value_info("z", f, ["N", 8])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayServeTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = os.path.join(cls.tmp.name, "model.onnx")
        with open(cls.model, "wb") as f:
            f.write(two_input_model())
        # max_ongoing 1: a replica holds one request at a time, so 4 concurrent clients need both.
        # address "local": a Ray of the test's own, never a cluster this machine may already run.
        cls.url = serve_model.start(cls.tmp.name, threads=1, replicas=REPLICAS, port=free_port(), address="local",
                                    num_cpus=REPLICAS, max_ongoing=1)

    @classmethod
    def tearDownClass(cls):
        serve_model.stop()
        cls.tmp.cleanup()

    def post(self, body, content_type):
        u = urllib.parse.urlsplit(self.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        try:
            conn.request("POST", u.path, body=body, headers={"Content-Type": content_type})
            r = conn.getresponse()
            return r.status, r.getheader("Content-Type"), r.read()
        finally:
            conn.close()

    def test_load_test_answers_match_a_local_session(self):
        for fmt in ("json", "npz"):
            with self.subTest(fmt=fmt):
                bodies, expected = load_test.prepare(self.model, fmt, {"N": 3}, distinct=8, threads=1)
                s = load_test.load(self.url, bodies, expected, requests=40, concurrency=4, warmup=4)
                self.assertEqual(s["failures"], [])
                self.assertEqual(s["answered"], 40)
                self.assertEqual(len(s["replicas"]), REPLICAS, s["replicas"])  # both replicas answered

    def test_load_test_catches_a_wrong_answer(self):
        # The check is live: outputs other than the session's fail every request.
        bodies, expected = load_test.prepare(self.model, "json", {"N": 2}, distinct=2, threads=1)
        wrong = [{k: v + np.float32(0.01) for k, v in e.items()} for e in expected]
        s = load_test.load(self.url, bodies, wrong, requests=6, concurrency=2)
        self.assertEqual(s["failed"], 6)
        self.assertIn("max abs error", s["failures"][0])

    def test_load_test_main(self):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            rc = load_test.main([self.model, "--url", self.url, "--requests", "10", "--concurrency", "2",
                                 "--warmup", "2", "--format", "npz", "--dim", "N=2", "--json", out.name])
            self.assertEqual(rc, 0)
            with open(out.name) as f:
                s = json.load(f)
        self.assertEqual((s["answered"], s["failed"]), (10, 0))
        self.assertLessEqual(s["min_ms"], s["p50_ms"])
        self.assertLessEqual(s["p50_ms"], s["p99_ms"])

    def test_json_values_are_the_sessions(self):
        x = np.arange(16, dtype=np.float32).reshape(2, 8) / 7
        scale = np.array([0.5], np.float32)
        status, ctype, body = self.post(json.dumps({"inputs": {"x": x.tolist(), "scale": scale.tolist()}}),
                                        "application/json")
        self.assertEqual(status, 200, body)
        self.assertTrue(ctype.startswith("application/json"))
        out = json.loads(body)["outputs"]
        np.testing.assert_allclose(np.array(out["z"], np.float32), x + scale, rtol=1e-6)
        want = terrace.InferenceSession(self.model, threads=1).run(["y"], {"x": x, "scale": scale})[0]
        np.testing.assert_allclose(np.array(out["y"], np.float32), want, rtol=1e-5, atol=1e-6)

    def test_bad_requests_are_400_with_the_reason(self):
        npy = io.BytesIO()
        np.save(npy, np.zeros((1, 8), np.float32))
        cases = [
            (npy.getvalue(), "application/octet-stream", "one input"),       # .npy for a two-input model
            (b'{"inputs": {"w": [1]}}', "application/json", "no input 'w'"),
            (b'{"inputs": {"x": [[1, 2]], "scale": [1]}}', "application/json", "dim 1"),  # Terrace's shape check
            (b"not json", "application/json", "neither"),
        ]
        for body, ctype, reason in cases:
            with self.subTest(reason=reason):
                status, rtype, answer = self.post(body, ctype)
                self.assertEqual(status, 400, answer)
                doc = json.loads(answer)
                self.assertEqual(doc["code"], "InvalidArgument")
                self.assertIn(reason, doc["error"])


if __name__ == "__main__":
    if MISSING is not None:
        print(f"skipped: {MISSING} (the test needs ray[serve], numpy, onnx and the module terrace._terrace on "
              "PYTHONPATH: a venv with `pip install \"ray[serve]\"`, given to cmake as -DTERRACE_EXTRA_PYTHON)")
        sys.exit(77)
    unittest.main(verbosity=2)
