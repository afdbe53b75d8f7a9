"""torch.compile(model, backend="terrace"): parity with eager, recompiles, fallbacks and registration.

Run by ctest (python_torch_backend) as test_session.py is; exits 77 (skipped), saying why, where
torch 2.1 or later, numpy or the module terrace._terrace is absent (Debian 12 packages torch 1.13).
The zoo's own models (tools/make_models.py) run where torchvision is installed too; CUDA tests
where torch finds a GPU.
"""
import copy
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import torch

    import terrace
    from terrace import torch_backend
    MISSING = None
    if tuple(int(p) for p in re.match(r"(\d+)\.(\d+)", torch.__version__).groups()) < (2, 1):
        MISSING = f"torch {torch.__version__} is older than 2.1, the first the backend supports"
except ImportError as e:  # reported by main as a skip
    MISSING = e

CUDA = MISSING is None and torch.cuda.is_available()

if MISSING is None:
    nn, F = torch.nn, torch.nn.functional

    class MLP(nn.Module):
        """The zoo's mlp (tools/make_models.py), small."""

        def __init__(self, d_in=64, hidden=(32, 16), d_out=4):
            super().__init__()
            dims = (d_in,) + hidden
            self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))
            self.head = nn.Linear(dims[-1], d_out)

        def forward(self, x):
            for layer in self.layers:
                x = F.relu(layer(x))
            return self.head(x)

    class SmallCNN(nn.Module):
        """A ResNet stem and one basic block: conv, batch norm, ReLU (in place), max and average
        pooling, a residual add and a linear head."""

        def __init__(self, classes=10):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16),
                                      nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1))
            self.conv1, self.bn1 = nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
            self.conv2, self.bn2 = nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
            self.head = nn.Linear(16, classes)

        def forward(self, x):
            x = self.stem(x)
            y = F.relu(self.bn1(self.conv1(x)))
            x = F.relu(x + self.bn2(self.conv2(y)))
            return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    class Block(nn.Module):
        """The zoo's transformer layer (bert, gpt2): attention with an optional causal mask,
        LayerNorm, a GELU feed-forward; pre- or post-norm."""

        def __init__(self, hidden=32, heads=4, causal=True, pre_norm=True):
            super().__init__()
            self.heads, self.causal, self.pre_norm = heads, causal, pre_norm
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def attn(self, x):
            b, s, h = x.shape
            q, k, v = self.qkv(x).split(h, dim=-1)
            q, k, v = (t.reshape(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
            scores = q @ k.transpose(-1, -2) / (h // self.heads) ** 0.5
            if self.causal:
                mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
                scores = scores.masked_fill(~mask, float("-inf"))
            return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h))

        def forward(self, x):
            ff = lambda t: self.fc2(F.gelu(self.fc1(t)))  # noqa: E731
            if self.pre_norm:
                x = x + self.attn(self.ln1(x))
                return x + ff(self.ln2(x))
            x = self.ln1(x + self.attn(x))
            return self.ln2(x + ff(x))


def spread_batchnorm(model):
    """Random weights leave BatchNorm's statistics at 0 and 1; give them spread so they matter."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    return model


def assert_close_fp32(test, actual, expected):
    """Equal dtype, shape and device; values within fp32 arithmetic's reordering error."""
    test.assertEqual((actual.dtype, actual.shape, actual.device), (expected.dtype, expected.shape, expected.device))
    if expected.dtype.is_floating_point:
        scale = max(1.0, expected.abs().max().item())
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5 * scale)
    else:
        test.assertTrue(torch.equal(actual, expected), f"{actual} != {expected}")


class BackendTest(unittest.TestCase):
    """Each test starts with no compiled frames and an empty report."""

    def setUp(self):
        torch._dynamo.reset()
        torch_backend.reset_report()
        torch.manual_seed(0)

    def assert_ran_on_terrace(self, graphs=None):
        """Every graph compiled ran on Terrace sessions: none fell back to eager."""
        report = torch_backend.report()
        self.assertEqual(report["fallbacks"], [])
        self.assertTrue(report["graphs"], "no graph was compiled")
        if graphs is not None:
            self.assertEqual(len(report["graphs"]), graphs, report["graphs"])
        for g in report["graphs"]:
            self.assertEqual(g["state"], "terrace", g)
            self.assertGreaterEqual(g["sessions"], 1, g)
        return report

    def check_parity(self, model, *inputs, **compile_kw):
        model = model.eval()
        compiled = torch.compile(model, backend="terrace", **compile_kw)
        with torch.no_grad():
            expected = model(*inputs)
            actual = compiled(*inputs)
        assert_close_fp32(self, actual, expected)
        self.assert_ran_on_terrace()
        return compiled


class ParityTest(BackendTest):

    def test_mlp_matches_eager(self):
        self.check_parity(MLP(), torch.randn(2, 64))

    def test_cnn_with_conv_batchnorm_relu_and_pooling_matches_eager(self):
        self.check_parity(spread_batchnorm(SmallCNN()), torch.randn(2, 3, 32, 32))

    def test_transformer_blocks_match_eager(self):
        for causal, pre_norm in ((True, True), (False, False)):  # gpt2's and bert's
            with self.subTest(causal=causal, pre_norm=pre_norm):
                torch._dynamo.reset()
                torch_backend.reset_report()
                self.check_parity(Block(causal=causal, pre_norm=pre_norm), torch.randn(2, 8, 32))

    def test_the_zoos_models_match_eager(self):
        try:
            sys.path.insert(0, os.path.join(ROOT, "tools"))
            import make_models
        except ImportError as e:
            self.skipTest(f"tools/make_models.py needs {e.name}: {e}")
        finally:
            sys.path.pop(0)
        for name, make in make_models.MODELS.items():
            with self.subTest(model=name):
                torch._dynamo.reset()
                torch_backend.reset_report()
                torch.manual_seed(0)
                model, (input_name, shape) = make(small=True)
                x = torch.randint(0, 100, shape) if input_name == "ids" else torch.randn(*shape)
                self.check_parity(spread_batchnorm(model), x)

    def test_the_dynamo_exporter_gives_the_same_answers(self):
        import importlib.util
        import inspect
        if "dynamo" not in inspect.signature(torch.onnx.export).parameters:
            self.skipTest(f"torch {torch.__version__} has no dynamo ONNX exporter")
        if importlib.util.find_spec("onnxscript") is None:
            self.skipTest("the dynamo ONNX exporter needs onnxscript, which is not installed")
        for model, x in ((MLP(), torch.randn(2, 64)), (Block(), torch.randn(2, 8, 32))):
            with self.subTest(model=type(model).__name__):
                torch._dynamo.reset()
                torch_backend.reset_report()
                self.check_parity(model, x, options={"exporter": "dynamo"})
                self.assertEqual([g["exporter"] for g in torch_backend.report()["graphs"]], ["dynamo"])

    def test_outputs_keep_their_dtypes_devices_and_structure(self):
        def f(x):
            return {"argmax": x.argmax(-1), "positive": x > 0, "wide": (x * 2).double(),
                    "pair": (x.sum(0), x - 1, x.mean())}

        x = torch.randn(3, 5)
        with torch.no_grad():
            actual, expected = torch.compile(f, backend="terrace")(x), f(x)
        self.assertEqual(set(actual), set(expected))
        self.assertIsInstance(actual["pair"], tuple)
        for key in ("argmax", "positive", "wide"):
            assert_close_fp32(self, actual[key], expected[key])
        for a, e in zip(actual["pair"], expected["pair"]):
            assert_close_fp32(self, a, e)
        self.assert_ran_on_terrace()

    def test_outputs_survive_the_next_call(self):
        compiled = torch.compile(MLP().eval(), backend="terrace")
        with torch.no_grad():
            first = compiled(torch.randn(2, 64))
            kept = first.clone()
            compiled(torch.randn(2, 64))
        self.assertTrue(torch.equal(first, kept))
        self.assert_ran_on_terrace()

    def test_weights_changed_after_compiling_are_used(self):
        model, other = MLP().eval(), MLP().eval()
        compiled = torch.compile(model, backend="terrace")
        x = torch.randn(2, 64)
        with torch.no_grad():
            before = compiled(x)
            model.load_state_dict(other.state_dict())  # copies in place
            assert_close_fp32(self, compiled(x), other(x))
        self.assertFalse(torch.allclose(before, other(x)))
        self.assert_ran_on_terrace()

    def test_options_and_mode_reach_the_session(self):
        self.check_parity(MLP(), torch.randn(2, 64), options={"tier": "interp", "threads": 1})
        torch._dynamo.reset()
        self.check_parity(MLP(), torch.randn(2, 64), mode="max-autotune")
        torch._dynamo.reset()
        torch_backend.reset_report()
        compiled = torch.compile(MLP().eval(), backend="terrace", options={"tier": "no-such-tier"})
        with torch.no_grad(), self.assertLogs("terrace.torch", "WARNING"):
            compiled(torch.randn(2, 64))
        (fallback,) = torch_backend.report()["fallbacks"]
        self.assertEqual(fallback["stage"], "load")
        self.assertIn("no-such-tier", fallback["reason"])

    def test_an_unknown_option_is_an_error(self):
        compiled = torch.compile(MLP().eval(), backend="terrace", options={"tiers": "cpu"})
        with torch.no_grad(), self.assertRaisesRegex(Exception, "unknown option.*tiers"):
            compiled(torch.randn(2, 64))


class RecompileTest(BackendTest):

    def test_a_shape_change_recompiles_into_a_new_session(self):
        model = MLP().eval()
        compiled = torch.compile(model, backend="terrace", dynamic=False)
        with torch.no_grad():
            for batch in (2, 5, 2):
                x = torch.randn(batch, 64)
                assert_close_fp32(self, compiled(x), model(x))
        report = self.assert_ran_on_terrace(graphs=2)  # batch 2 again reuses the first graph
        self.assertEqual([g["sessions"] for g in report["graphs"]], [1, 1])

    def test_symbolic_sizes_get_a_session_per_size(self):
        # Dynamo's default: a second size recompiles the graph with the size symbolic; the backend
        # then makes a session per size it meets, and reuses it.
        model = MLP().eval()
        compiled = torch.compile(model, backend="terrace")

        def sessions_after(batches):
            with torch.no_grad():
                for batch in batches:
                    x = torch.randn(batch, 64)
                    assert_close_fp32(self, compiled(x), model(x))
            return sum(g["sessions"] for g in self.assert_ran_on_terrace()["graphs"])

        seen = sessions_after((2, 5, 7))
        self.assertGreaterEqual(seen, 3)
        self.assertEqual(sessions_after((5, 7, 7)), seen)
        self.assertEqual(sessions_after((9,)), seen + 1)

    def test_a_dtype_change_recompiles(self):
        def f(x):
            return torch.relu(x) * 3 + 1

        compiled = torch.compile(f, backend="terrace")
        with torch.no_grad():
            for dtype in (torch.float32, torch.float64, torch.int32):
                x = (torch.randn(4, 3) * 10).to(dtype)
                assert_close_fp32(self, compiled(x), f(x))
        self.assert_ran_on_terrace(graphs=3)


class FallbackTest(BackendTest):

    def compile_expecting_fallback(self, fn, *inputs, stage, reason, **compile_kw):
        """fn compiled runs eagerly, logging one line and reporting stage and reason."""
        compiled = torch.compile(fn, backend="terrace", **compile_kw)
        with self.assertLogs("terrace.torch", "WARNING") as logs:
            out = compiled(*inputs)
        self.assertEqual(len(logs.output), 1, logs.output)
        self.assertEqual(logs.output[0].count("\n"), 0)
        self.assertIn("runs eagerly", logs.output[0])
        (fallback,) = torch_backend.report()["fallbacks"]
        self.assertEqual(fallback["stage"], stage)
        self.assertRegex(fallback["reason"], reason)
        self.assertEqual([g["state"] for g in torch_backend.report()["graphs"]], ["eager"])
        return out

    def test_an_input_written_in_place_runs_eagerly(self):
        def f(x):
            x.add_(1)
            return x * 2

        x = torch.randn(3)
        x_eager = x.clone()
        with torch.no_grad():
            out = self.compile_expecting_fallback(f, x, stage="check", reason="writes the graph's input .* in place")
            expected = f(x_eager)
        assert_close_fp32(self, out, expected)
        assert_close_fp32(self, x, x_eager)  # the mutation happened, as eagerly

    def test_an_op_the_exporter_refuses_runs_eagerly(self):
        def f(x):
            return torch.linalg.eigh(x).eigenvalues * 2

        a = torch.randn(4, 4, dtype=torch.float64)
        a = a + a.T
        with torch.no_grad():
            out = self.compile_expecting_fallback(f, a, stage="export", reason="eigh")
        assert_close_fp32(self, out, f(a))

    def test_a_batchnorm_in_training_mode_runs_eagerly(self):
        model = SmallCNN().train()
        twin = copy.deepcopy(model)
        x = torch.randn(4, 3, 16, 16)
        with torch.no_grad():
            out = self.compile_expecting_fallback(model, x, stage="check", reason="training mode")
            expected = twin(x)
        assert_close_fp32(self, out, expected)
        assert_close_fp32(self, model.bn1.running_mean, twin.bn1.running_mean)  # updated, as eagerly

    def test_autograd_runs_eagerly_and_gradients_flow(self):
        model = MLP()
        x = torch.randn(2, 64)
        out = self.compile_expecting_fallback(model, x, stage="check", reason="autograd is needed")
        out.sum().backward()
        self.assertIsNotNone(model.head.weight.grad)

    def test_a_dtype_terrace_lacks_runs_eagerly(self):
        def f(x):
            return (x * 2).abs()

        x = torch.randn(3, dtype=torch.complex64)
        out = self.compile_expecting_fallback(f, x, stage="check", reason="complex64")
        assert_close_fp32(self, out, f(x))

    def test_a_run_error_runs_the_graph_eagerly_from_then_on(self):
        model = MLP().eval()
        compiled = torch.compile(model, backend="terrace")
        x = torch.randn(2, 64)
        with torch.no_grad():
            compiled(x)
            real_run = terrace.InferenceSession.run

            def failing_run(self, *args, **kw):
                raise terrace.TerraceError("Internal: a failure injected by the test")

            terrace.InferenceSession.run = failing_run
            try:
                with self.assertLogs("terrace.torch", "WARNING"):
                    out = compiled(x)
            finally:
                terrace.InferenceSession.run = real_run
            assert_close_fp32(self, out, model(x))
            assert_close_fp32(self, compiled(x), model(x))
        (fallback,) = torch_backend.report()["fallbacks"]
        self.assertEqual(fallback["stage"], "run")
        self.assertIn("injected by the test", fallback["reason"])
        self.assertEqual(torch_backend.report()["graphs"][0]["state"], "eager")

    def test_strict_raises_instead(self):
        def f(x):
            x.mul_(2)
            return x + 1

        compiled = torch.compile(f, backend="terrace", options={"strict": True})
        with torch.no_grad(), self.assertRaisesRegex(Exception, "TerraceBackendError|in place"):
            compiled(torch.randn(3))


class RegistrationTest(BackendTest):

    def python(self, code, env_extra=None):
        env = dict(os.environ, **(env_extra or {}))
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        return done.stdout

    def test_register_is_idempotent(self):
        from torch._dynamo.backends.registry import lookup_backend
        torch_backend.register()
        torch_backend.register()
        self.assertIs(lookup_backend("terrace"), torch_backend.backend)

    def test_importing_terrace_after_torch_registers_the_backend(self):
        out = self.python("import torch, terrace\n"
                          "from torch._dynamo.backends.registry import lookup_backend\n"
                          "print(lookup_backend('terrace') is terrace.torch_backend.backend)")
        self.assertEqual(out.strip(), "True")

    def test_the_entry_point_in_pyproject_is_found_by_torch(self):
        # pyproject.toml's entry point, installed as pip would (a .dist-info with entry_points.txt):
        # torch.compile(backend="terrace") in a process that never imported terrace finds it.
        with open(os.path.join(ROOT, "pyproject.toml")) as f:
            pyproject = f.read()
        match = re.search(r"\[project\.entry-points\.torch_dynamo_backends\]\s*\nterrace\s*=\s*\"([^\"]+)\"", pyproject)
        self.assertIsNotNone(match, "pyproject.toml declares no torch_dynamo_backends entry point 'terrace'")
        with tempfile.TemporaryDirectory() as site:
            info = os.path.join(site, "terrace_entry_point_test-0.0.dist-info")
            os.mkdir(info)
            with open(os.path.join(info, "METADATA"), "w") as f:
                f.write("Metadata-Version: 2.1\nName: terrace-entry-point-test\nVersion: 0.0\n")
            with open(os.path.join(info, "entry_points.txt"), "w") as f:
                f.write(f"[torch_dynamo_backends]\nterrace = {match.group(1)}\n")
            path = os.pathsep.join([site, os.environ.get("PYTHONPATH", "")])
            out = self.python("import sys, torch\n"
                              "f = torch.compile(lambda x: torch.relu(x) + 1, backend='terrace')\n"
                              "with torch.no_grad():\n"
                              "    y = f(torch.tensor([-1.0, 2.0]))\n"
                              "from terrace import torch_backend\n"
                              "print(y.tolist(), [g['state'] for g in torch_backend.report()['graphs']])",
                              {"PYTHONPATH": path})
        self.assertEqual(out.strip(), "[1.0, 3.0] ['terrace']")


@unittest.skipUnless(CUDA, "torch finds no CUDA device")
class CudaTest(BackendTest):

    def test_cuda_models_match_eager_and_stay_on_the_device(self):
        for model, x in ((MLP(), torch.randn(2, 64)), (spread_batchnorm(SmallCNN()), torch.randn(2, 3, 32, 32)),
                         (Block(), torch.randn(2, 8, 32))):
            with self.subTest(model=type(model).__name__):
                torch._dynamo.reset()
                torch_backend.reset_report()
                self.check_parity(model.cuda(), x.cuda())


if __name__ == "__main__":
    if MISSING is not None:
        print(f"skipped: {MISSING} (the test needs torch >= 2.1, numpy and the module terrace._terrace on PYTHONPATH)")
        sys.exit(77)
    unittest.main(verbosity=2)
