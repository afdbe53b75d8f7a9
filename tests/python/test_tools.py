"""InferenceSession.validate(), .bench() and .warmup_state(): the CLI's validate and bench from Python.

Run by ctest (python_tools) as test_session.py is; exits 77 (skipped) where numpy, onnx or the
module is absent.
"""
import os
import subprocess
import sys
import unittest

import gil_counter

try:
    import numpy as np
    from onnx import TensorProto, helper

    import terrace
    from test_session import add_relu_model, make_model
    MISSING = None
except ImportError as e:  # reported by main as a skip
    MISSING = e


def has_tier1():
    return terrace.InferenceSession(add_relu_model()).warmup_state()["top_tier"] != "interp"


class ValidateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sess = terrace.InferenceSession(add_relu_model())

    def test_validate_checks_each_tier_with_errors_per_output(self):
        r = self.sess.validate()
        self.assertTrue(r["passed"], r)
        tiers = {t["tier"]: t for t in r["tiers"]}
        self.assertEqual(set(tiers), {"interp", "cpu", "gpu"})
        self.assertTrue(tiers["interp"]["passed"])
        self.assertEqual([o["name"] for o in tiers["interp"]["outputs"]], ["y", "s"])
        for o in tiers["interp"]["outputs"]:
            self.assertEqual((o["max_abs_err"], o["passed"]), (0, True))
        self.assertGreater(r["calls"], 1)
        if has_tier1():
            self.assertIn("cpu", tiers["cpu"]["tiers_ran"])

    def test_validate_takes_a_feed_dims_and_one_tier(self):
        b = np.array([1, -1, 2, -2], np.float32)
        r = self.sess.validate({"b": b}, tiers="interp", calls=2, dims={"N": 7})
        self.assertEqual(r["calls"], 2)
        self.assertEqual([t["tier"] for t in r["tiers"]], ["interp"])
        self.assertTrue(r["passed"])

    def test_validate_finds_a_miscompile(self):
        if not has_tier1():
            self.skipTest("tier 1 is not built here")
        # Faults are read when the process starts its tiers: a child process with TERRACE_FAULT.
        code = ("import sys, terrace; sys.path.insert(0, %r); from test_session import add_relu_model; "
                "r = terrace.InferenceSession(add_relu_model()).validate(tiers='cpu'); "
                "print(r['passed'], r['tiers'][0]['failures'])" % os.path.dirname(__file__))
        env = dict(os.environ, TERRACE_FAULT="miscompile:cpu")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.startswith("False"), out.stdout)
        self.assertIn("demoted", out.stdout)

    def test_validate_bad_arguments_raise(self):
        with self.assertRaisesRegex(terrace.errors.InvalidArgument, "tpu"):
            self.sess.validate(tiers="tpu")
        with self.assertRaisesRegex(terrace.errors.InvalidArgument, "dims nope=3: no graph input has a symbolic dim"):
            self.sess.validate(dims={"nope": 3})
        with self.assertRaisesRegex(terrace.errors.InvalidArgument, "'z', which is not a graph input"):
            self.sess.validate({"z": np.zeros(4, np.float32)})
        with self.assertRaisesRegex(terrace.errors.InvalidArgument, "input 'b' is float64"):
            self.sess.validate({"b": np.zeros(4, np.float64)})
        with self.assertRaises(terrace.errors.InvalidArgument):
            self.sess.validate(calls=0)
        with self.assertRaisesRegex(terrace.errors.InvalidArgument, "input 'x' is \\[N,4\\] in the model"):
            self.sess.validate(shapes={"x": (2, 5)})


class BenchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sess = terrace.InferenceSession(add_relu_model())

    def test_bench_reports_the_timeline_steady_state_and_break_even(self):
        r = self.sess.bench(calls=12, dims={"N": 16})
        self.assertGreaterEqual(len(r["calls"]), 12)
        for c in r["calls"]:
            self.assertGreater(c["ms"], 0)
            self.assertTrue(set(c["tiers"]) <= {"interp", "cpu", "gpu"}, c)
        st = r["steady"]
        self.assertLessEqual(st["min_ms"], st["p50_ms"])
        self.assertLessEqual(st["p50_ms"], st["p90_ms"])
        self.assertLessEqual(st["p90_ms"], st["p99_ms"])
        self.assertLessEqual(st["p99_ms"], st["max_ms"])
        self.assertEqual(r["baseline"]["tier"], "interp")
        self.assertTrue(r["break_even_call"] == "never" or isinstance(r["break_even_call"], int))
        self.assertEqual(r["inputs"][0]["shape"], [16, 4])
        self.assertTrue(all(c["equal"] for c in r["checks"]), r["checks"])
        self.assertEqual({c["output"] for c in r["checks"]}, {"y", "s"})

    def test_bench_takes_a_feed_duration_and_threads(self):
        x = np.ones((2, 4), np.float32)
        r = self.sess.bench({"x": x}, duration=0.2, concurrency=2)
        self.assertEqual(r["concurrency"], 2)
        self.assertEqual(r["duration_s"], 0.2)
        self.assertEqual([i["shape"] for i in r["inputs"]], [[2, 4], [4]])
        self.assertGreaterEqual(len(r["calls"]), 1)

    def test_bench_lets_other_threads_hold_the_gil(self):
        with gil_counter.counting() as count:
            self.sess.bench(calls=5, baseline_calls=2)
        self.assertGreater(count[0], 1000)

    def test_bench_bad_arguments_raise(self):
        for kwargs, text in (({"calls": 0}, "calls"), ({"concurrency": 0}, "concurrency"),
                             ({"duration": -1}, "duration"), ({"dims": {"nope": 2}}, "dims nope=2"),
                             ({"input_feed": {"x": np.zeros((3, 5), np.float32)}}, "'x'")):
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                with self.assertRaisesRegex(terrace.errors.InvalidArgument, text):
                    self.sess.bench(**kwargs)


class WarmupStateTest(unittest.TestCase):
    def test_regions_settle_on_the_top_tier(self):
        sess = terrace.InferenceSession(add_relu_model())
        state = sess.warmup_state()
        self.assertEqual(state["calls"], 0)
        self.assertEqual(len(state["regions"]), 1)
        self.assertEqual(state["regions"][0]["ops"], "Add,Relu")
        if state["top_tier"] == "interp":
            self.skipTest("tier 1 is not built here: every region is settled from the start")
        self.assertFalse(state["settled"])
        self.assertEqual(state["regions"][0]["state"], "interpreting")
        feed = {"x": np.ones((2, 4), np.float32), "b": np.ones(4, np.float32)}
        for _ in range(10):
            sess.run(None, feed)
            sess.wait_until_settled(60)
        state = sess.warmup_state()
        self.assertTrue(state["settled"], state)
        self.assertEqual(state["compiling"], 0)
        self.assertEqual(state["calls"], 10)
        self.assertEqual(state["regions"][0]["tier"], state["top_tier"])
        self.assertEqual(state["regions"][0]["validation"], "passed")

    def test_on_the_interpreter_it_is_settled_at_once(self):
        state = terrace.InferenceSession(add_relu_model(), tier="interp").warmup_state()
        self.assertEqual(state["top_tier"], "interp")
        self.assertTrue(state["settled"])

    def test_a_model_without_regions_is_settled(self):
        model = make_model([], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])])
        state = terrace.InferenceSession(model).warmup_state()
        self.assertEqual(state["regions"], [])
        self.assertTrue(state["settled"])


if __name__ == "__main__":
    if MISSING is not None:
        print(f"skipped: {MISSING} (the test needs numpy, onnx and the module terrace._terrace on PYTHONPATH)")
        sys.exit(77)
    unittest.main(verbosity=2)
