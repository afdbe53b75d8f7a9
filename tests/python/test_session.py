"""terrace.InferenceSession from Python: numpy in and out, metadata, errors, threads, reports.

Run by ctest (python_session) with PYTHONPATH at python/ and the build tree's python/; exits 77
(skipped) where numpy, onnx or the compiled module terrace._terrace is absent.
"""
import os
import subprocess
import sys
import tempfile
import unittest

import gil_counter

try:
    import numpy as np
    from onnx import TensorProto, helper

    import terrace
    MISSING = None
except ImportError as e:  # reported by main as a skip
    MISSING = e


def make_model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def add_relu_model():
    """y = Relu(x + b), s = x + b; x of shape [N, 4] (N symbolic)."""
    f = TensorProto.FLOAT
    return make_model(
        [helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
        [helper.make_tensor_value_info("x", f, ["N", 4]), helper.make_tensor_value_info("b", f, [4])],
        [helper.make_tensor_value_info("y", f, ["N", 4]), helper.make_tensor_value_info("s", f, ["N", 4])])


def identity_model(elem_type, shape):
    return make_model([helper.make_node("Identity", ["x"], ["y"])],
                      [helper.make_tensor_value_info("x", elem_type, shape)],
                      [helper.make_tensor_value_info("y", elem_type, shape)])


class AddReluSession(unittest.TestCase):
    """One session of add_relu_model and its inputs x [3, 4] and b [4], for a test class."""

    @classmethod
    def setUpClass(cls):
        cls.sess = terrace.InferenceSession(add_relu_model())
        rng = np.random.default_rng(0)
        cls.x = rng.standard_normal((3, 4)).astype(np.float32)
        cls.b = rng.standard_normal(4).astype(np.float32)


class InferenceSessionTest(AddReluSession):

    def feed(self):
        return {"x": self.x, "b": self.b}

    def test_add_relu_matches_numpy(self):
        y, s = self.sess.run(None, self.feed())
        np.testing.assert_allclose(s, self.x + self.b, rtol=1e-6)
        np.testing.assert_allclose(y, np.maximum(self.x + self.b, 0), rtol=1e-6)
        self.assertEqual(y.dtype, np.float32)

    def test_loads_from_a_path_as_from_bytes(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.onnx")
            with open(path, "wb") as f:
                f.write(add_relu_model())
            (y,) = terrace.InferenceSession(path, tier="interp").run(["y"], self.feed())
        np.testing.assert_allclose(y, np.maximum(self.x + self.b, 0), rtol=1e-6)

    def test_inputs_and_outputs_have_names_shapes_and_types(self):
        ins, outs = self.sess.get_inputs(), self.sess.get_outputs()
        self.assertEqual([(a.name, a.shape, a.type) for a in ins],
                         [("x", ["N", 4], "tensor(float)"), ("b", [4], "tensor(float)")])
        self.assertEqual([(a.name, a.shape, a.type) for a in outs],
                         [("y", ["N", 4], "tensor(float)"), ("s", ["N", 4], "tensor(float)")])

    def test_output_names_choose_and_order_outputs(self):
        s, y = self.sess.run(["s", "y"], self.feed())
        np.testing.assert_allclose(s, self.x + self.b, rtol=1e-6)
        np.testing.assert_allclose(y, np.maximum(s, 0), rtol=1e-6)
        self.assertEqual(len(self.sess.run(["y"], self.feed())), 1)

    def test_unknown_output_name_raises_naming_it(self):
        with self.assertRaises(terrace.TerraceError) as cm:
            self.sess.run(["nope"], self.feed())
        self.assertEqual(cm.exception.code, "InvalidArgument")
        self.assertIn("nope", str(cm.exception))

    def test_wrong_shape_raises_invalid_argument(self):
        with self.assertRaises(terrace.TerraceError) as cm:
            self.sess.run(None, {"x": np.zeros((3, 5), np.float32), "b": self.b})
        self.assertEqual(cm.exception.code, "InvalidArgument")
        self.assertIsInstance(cm.exception, terrace.errors.InvalidArgument)
        self.assertIsInstance(cm.exception, ValueError)
        self.assertIn("'x'", cm.exception.message)

    def test_wrong_dtype_and_missing_input_raise(self):
        with self.assertRaises(terrace.errors.InvalidArgument):
            self.sess.run(None, {"x": self.x.astype(np.float64), "b": self.b})
        with self.assertRaises(terrace.TerraceError) as cm:
            self.sess.run(None, {"x": self.x})
        self.assertEqual(cm.exception.code, "InvalidArgument")
        self.assertIn("'b'", str(cm.exception))
        with self.assertRaises(terrace.errors.InvalidArgument):
            self.sess.run(None, {"x": self.x, "b": self.b, "extra": self.b})

    def test_unsupported_dtype_is_a_type_error(self):
        with self.assertRaisesRegex(TypeError, "complex64"):
            self.sess.run(None, {"x": self.x.astype(np.complex64), "b": self.b})
        with self.assertRaises(TypeError):
            self.sess.run(None, {"x": np.array([["a"] * 4] * 3), "b": self.b})

    def test_non_contiguous_input_is_copied_and_right(self):
        wide = np.ascontiguousarray(np.repeat(self.x, 2, axis=1))
        strided, fortran = wide[:, ::2], np.asfortranarray(self.x)
        for x in (strided, fortran):
            (s,) = self.sess.run(["s"], {"x": x, "b": self.b})
            np.testing.assert_allclose(s, self.x + self.b, rtol=1e-6)

    def test_outputs_are_writable_arrays_not_copied(self):
        y, _ = self.sess.run(None, self.feed())
        self.assertTrue(y.flags.writeable and y.flags.c_contiguous)
        self.assertIsNotNone(y.base)  # over the session's own buffer, held by a capsule

    def test_scalar_input(self):
        f = TensorProto.FLOAT
        model = make_model([helper.make_node("Mul", ["x", "x"], ["y"])],
                           [helper.make_tensor_value_info("x", f, [])],
                           [helper.make_tensor_value_info("y", f, [])])
        sess = terrace.InferenceSession(model)
        self.assertEqual(sess.get_inputs()[0].shape, [])
        (y,) = sess.run(None, {"x": np.array(3.0, np.float32)})
        self.assertEqual(y.shape, ())
        self.assertEqual(float(y), 9.0)

    def test_every_numpy_dtype_round_trips(self):
        types = {np.bool_: TensorProto.BOOL, np.int8: TensorProto.INT8, np.int16: TensorProto.INT16,
                 np.int32: TensorProto.INT32, np.int64: TensorProto.INT64, np.uint8: TensorProto.UINT8,
                 np.uint16: TensorProto.UINT16, np.uint32: TensorProto.UINT32, np.uint64: TensorProto.UINT64,
                 np.float16: TensorProto.FLOAT16, np.float32: TensorProto.FLOAT,
                 np.float64: TensorProto.DOUBLE}
        for dtype, elem in types.items():
            with self.subTest(dtype=dtype.__name__):
                sess = terrace.InferenceSession(identity_model(elem, [2, 3]), tier="interp")
                x = (np.arange(6).reshape(2, 3) % 2 if dtype is np.bool_ else np.arange(6).reshape(2, 3)).astype(dtype)
                (y,) = sess.run(None, {"x": x})
                self.assertEqual(y.dtype, x.dtype)
                np.testing.assert_array_equal(y, x)
                self.assertFalse(np.shares_memory(x, y))  # an input passed through is copied out

    def test_constant_output_is_a_copy(self):
        c = helper.make_tensor("c", TensorProto.FLOAT, [2], [1.0, 2.0])
        model = make_model([helper.make_node("Identity", ["c"], ["y"])], [],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [c])
        sess = terrace.InferenceSession(model)
        (y,) = sess.run(None, {})
        y[:] = 0  # must not write the model's constant
        np.testing.assert_array_equal(sess.run(None, {})[0], [1.0, 2.0])

    def test_eight_threads_get_their_own_answers(self):
        sess = terrace.InferenceSession(add_relu_model())
        rng = np.random.default_rng(1)
        xs = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(8)]

        def calls(x):
            for _ in range(40):
                y, s = sess.run(None, {"x": x, "b": self.b})
                np.testing.assert_allclose(s, x + self.b, rtol=1e-6)
                np.testing.assert_allclose(y, np.maximum(x + self.b, 0), rtol=1e-6)

        self.assertEqual(gil_counter.errors_from_threads(calls, xs), [])

    def test_run_lets_other_threads_hold_the_gil(self):
        f = TensorProto.FLOAT
        model = make_model([helper.make_node("MatMul", ["a", "a"], ["y"])],
                           [helper.make_tensor_value_info("a", f, [512, 512])],
                           [helper.make_tensor_value_info("y", f, [512, 512])])
        sess = terrace.InferenceSession(model, tier="interp", threads=1)
        a = np.ones((512, 512), np.float32)
        ticks = gil_counter.ticks_during(lambda: sess.run(None, {"a": a}))
        self.assertGreater(max(ticks), 1000, ticks)

    def test_report_and_explain(self):
        self.sess.run(None, self.feed())
        self.assertTrue(self.sess.wait_until_settled(timeout=60))
        report = self.sess.report()
        self.assertIsInstance(report, dict)
        self.assertIn("regions", report)
        self.assertIn("region 0", self.sess.explain())

    def test_bad_options_and_models_raise(self):
        with self.assertRaises(terrace.errors.InvalidArgument):
            terrace.InferenceSession(add_relu_model(), tier="tpu")
        with self.assertRaises(terrace.errors.InvalidArgument):
            terrace.InferenceSession(add_relu_model(), threads=0)
        with self.assertRaises(terrace.errors.InvalidModel):
            terrace.InferenceSession(b"not an onnx model")
        with self.assertRaises(terrace.TerraceError) as cm:
            terrace.InferenceSession("/nonexistent/model.onnx")
        self.assertIn(cm.exception.code, ("IoError", "InvalidModel"))


class MainTest(unittest.TestCase):
    """python -m terrace: help, a run from .npy files with outputs written, a bad input named."""

    def terrace_main(self, *args):
        return subprocess.run([sys.executable, "-m", "terrace", *args], capture_output=True, text=True, timeout=120)

    def test_help(self):
        r = self.terrace_main("--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("usage: python -m terrace", r.stdout)

    def test_runs_a_model_on_npy_inputs_and_writes_its_outputs(self):
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "model.onnx")
            with open(model, "wb") as f:
                f.write(add_relu_model())
            x = np.arange(8, dtype=np.float32).reshape(2, 4) - 4
            b = np.ones(4, np.float32)
            np.save(os.path.join(d, "x.npy"), x)
            np.save(os.path.join(d, "b.npy"), b)
            out = os.path.join(d, "out")
            r = self.terrace_main(d, "--input", "x=" + os.path.join(d, "x.npy"), "--input",
                                  "b=" + os.path.join(d, "b.npy"), "--repeat", "3", "--output-dir", out, "--report")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("output y: float32[2, 4]", r.stdout)
            self.assertIn("3 calls: first", r.stdout)
            self.assertIn("region 0", r.stdout)
            np.testing.assert_array_equal(np.load(os.path.join(out, "y.npy")), np.maximum(x + b, 0))

    def test_an_input_the_model_lacks_is_named(self):
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "model.onnx")
            with open(model, "wb") as f:
                f.write(add_relu_model())
            np.save(os.path.join(d, "z.npy"), np.ones(4, np.float32))
            r = self.terrace_main(model, "--input", "z=" + os.path.join(d, "z.npy"))
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("the model has no input of that name", r.stderr)


class ImportTest(unittest.TestCase):
    """import terrace never imports torch (terrace.torch_backend neither, until it compiles), and
    works after any torch was imported: Debian 12's 1.13 has no torch.compile to register with."""

    def python(self, code):
        # From this folder: "-c" puts the working directory on sys.path, for test_session.
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           cwd=os.path.dirname(os.path.abspath(__file__)))
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.strip()

    def test_importing_terrace_does_not_import_torch(self):
        self.assertEqual(self.python("import sys, terrace, terrace.torch_backend; print('torch' in sys.modules)"),
                         "False")

    def test_terrace_imports_after_torch(self):
        import importlib.util
        if importlib.util.find_spec("torch") is None:
            self.skipTest("torch is not installed")
        out = self.python("import torch, terrace, numpy as np\n"
                          "from test_session import add_relu_model\n"
                          "(y, s) = terrace.InferenceSession(add_relu_model()).run(None, "
                          "{'x': -np.ones((1, 4), np.float32), 'b': np.full(4, 2, np.float32)})\n"
                          "print(y.tolist())")
        self.assertEqual(out, "[[1.0, 1.0, 1.0, 1.0]]")


if __name__ == "__main__":
    if MISSING is not None:
        print(f"skipped: {MISSING} (the test needs numpy, onnx and the module terrace._terrace on PYTHONPATH)")
        sys.exit(77)
    unittest.main(verbosity=2)
