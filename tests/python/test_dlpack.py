"""terrace.Tensor, DLPack both ways, run(output_type="tensor") and IOBinding, from many threads.

Run by ctest (python_dlpack) as test_session.py is; exits 77 (skipped) where numpy, onnx or the
module is absent. CPU paths run everywhere; CUDA ones need torch with a GPU and skip saying so.
"""
import ctypes
import sys
import unittest

import gil_counter

try:
    import numpy as np
    from onnx import TensorProto, helper

    import terrace
    from test_session import AddReluSession, add_relu_model, make_model
    MISSING = None
except ImportError as e:  # reported by main as a skip
    MISSING = e
    AddReluSession = unittest.TestCase  # so that the classes below still define

try:
    import torch
    CUDA = torch.cuda.is_available()
    NO_TORCH, NO_CUDA = None, None if CUDA else "torch finds no CUDA device"
except ImportError:
    torch, CUDA = None, False
    NO_TORCH = NO_CUDA = "torch is not installed"


class Producer:
    """A DLPack producer that is not a numpy array (as another library's tensor is): it hands on
    what its array's __dlpack__ makes, passing the consumer's arguments through (numpy 1.x takes
    no max_version and makes a pre-1.0 capsule, which a consumer asking for 1.0 must take)."""

    def __init__(self, array, device=None, **fixed):
        self.array, self.device, self.fixed = array, device, fixed

    def __dlpack__(self, **kw):
        kw.update(self.fixed)
        if isinstance(self.array, np.ndarray):
            kw.pop("max_version", None)
        return self.array.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.device or self.array.__dlpack_device__()


class OldProducer(Producer):
    """A producer from before DLPack 1.0, whose __dlpack__ refuses max_version (TypeError)."""

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__(stream=stream)


def capsule_name(capsule):
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get_name(capsule).decode()


class DLPackTest(AddReluSession):

    def expect(self, x=None):
        x = self.x if x is None else x
        return np.maximum(x + self.b, 0), x + self.b

    def test_tensor_outputs_go_to_numpy_through_dlpack_without_a_copy(self):
        y, s = self.sess.run(None, {"x": self.x, "b": self.b}, output_type="tensor")
        self.assertIsInstance(y, terrace.Tensor)
        self.assertEqual((y.shape, y.dtype, y.device), ((3, 4), "float32", "cpu"))
        self.assertEqual(y.__dlpack_device__(), (1, 0))
        arr = np.from_dlpack(y)
        np.testing.assert_allclose(arr, self.expect()[0], rtol=1e-6)
        self.assertEqual(arr.ctypes.data, y.data_ptr())  # numpy reads Terrace's buffer
        self.assertEqual(y.numpy().ctypes.data, y.data_ptr())
        del y
        np.testing.assert_allclose(arr, self.expect()[0], rtol=1e-6)  # the capsule keeps it alive

    def test_a_dlpack_input_is_read_in_place(self):
        t = terrace.Tensor.from_dlpack(Producer(self.x))
        self.assertEqual(t.data_ptr(), self.x.ctypes.data)
        y, s = self.sess.run(None, {"x": Producer(self.x), "b": t.__class__.from_dlpack(Producer(self.b))})
        np.testing.assert_allclose(y, self.expect()[0], rtol=1e-6)
        np.testing.assert_allclose(s, self.expect()[1], rtol=1e-6)

    def test_a_producer_that_refuses_max_version_is_asked_without_it(self):
        for _ in range(2):  # the second time, known as such
            t = terrace.Tensor.from_dlpack(OldProducer(self.x))
            self.assertEqual(t.data_ptr(), self.x.ctypes.data)
            (y,) = self.sess.run(["y"], {"x": OldProducer(self.x), "b": self.b})
            np.testing.assert_allclose(y, self.expect()[0], rtol=1e-6)

    def test_a_versioned_capsule_goes_both_ways(self):
        (y,) = self.sess.run(["y"], {"x": self.x, "b": self.b}, output_type="tensor")
        self.assertEqual(capsule_name(y.__dlpack__(max_version=(1, 0))), "dltensor_versioned")
        self.assertEqual(capsule_name(y.__dlpack__()), "dltensor")
        again = terrace.Tensor.from_dlpack(Producer(y))  # asks for 1.0: y makes a versioned capsule
        self.assertEqual(again.data_ptr(), y.data_ptr())
        np.testing.assert_array_equal(again.numpy(), y.numpy())

    def test_copy_true_and_dl_device(self):
        (y,) = self.sess.run(["y"], {"x": self.x, "b": self.b}, output_type="tensor")
        copied = terrace.Tensor.from_dlpack(Producer(y, copy=True))
        self.assertNotEqual(copied.data_ptr(), y.data_ptr())
        np.testing.assert_array_equal(copied.numpy(), y.numpy())
        self.assertEqual(capsule_name(y.__dlpack__(dl_device=(1, 0))), "dltensor")
        with self.assertRaises(BufferError):
            y.__dlpack__(dl_device=(2, 0))
        with self.assertRaisesRegex(ValueError, "stream"):
            y.__dlpack__(stream=1)

    def test_a_strided_dlpack_input_is_copied_and_right(self):
        wide = np.ascontiguousarray(np.repeat(self.x, 2, axis=1))
        strided = wide[:, ::2]
        t = terrace.Tensor.from_dlpack(Producer(strided))
        self.assertNotEqual(t.data_ptr(), strided.ctypes.data)
        np.testing.assert_array_equal(t.numpy(), self.x)
        (s,) = self.sess.run(["s"], {"x": Producer(strided), "b": self.b})
        np.testing.assert_allclose(s, self.expect()[1], rtol=1e-6)

    def test_an_output_tensor_feeds_the_next_run(self):
        (s,) = self.sess.run(["s"], {"x": self.x, "b": self.b}, output_type="tensor")
        (y,) = self.sess.run(["y"], {"x": s, "b": self.b})
        np.testing.assert_allclose(y, np.maximum(self.x + 2 * self.b, 0), rtol=1e-5)

    def test_every_dtype_round_trips_through_dlpack(self):
        types = {np.int8: TensorProto.INT8, np.int16: TensorProto.INT16, np.int32: TensorProto.INT32,
                 np.int64: TensorProto.INT64, np.uint8: TensorProto.UINT8, np.uint16: TensorProto.UINT16,
                 np.uint32: TensorProto.UINT32, np.uint64: TensorProto.UINT64, np.float16: TensorProto.FLOAT16,
                 np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}
        for dtype, elem in types.items():
            with self.subTest(dtype=dtype.__name__):
                model = make_model([helper.make_node("Identity", ["x"], ["y"])],
                                   [helper.make_tensor_value_info("x", elem, [2, 3])],
                                   [helper.make_tensor_value_info("y", elem, [2, 3])])
                sess = terrace.InferenceSession(model, tier="interp")
                x = np.arange(6).reshape(2, 3).astype(dtype)
                (y,) = sess.run(None, {"x": Producer(x)}, output_type="tensor")
                self.assertEqual(y.dtype, np.dtype(dtype).name)
                out = np.from_dlpack(y)
                self.assertEqual(out.dtype, x.dtype)
                np.testing.assert_array_equal(out, x)
                self.assertFalse(np.shares_memory(out, x))  # an input passed through is copied out

    def test_bad_dlpack_inputs_raise_naming_what_is_wrong(self):
        with self.assertRaisesRegex(TypeError, "__dlpack__"):
            terrace.Tensor.from_dlpack(object())
        with self.assertRaisesRegex(TypeError, "input 'x': DLPack dtype"):
            self.sess.run(None, {"x": Producer(self.x.astype(np.complex64)), "b": self.b})
        with self.assertRaises(terrace.errors.InvalidArgument) as cm:
            self.sess.run(None, {"x": Producer(self.x.astype(np.float64)), "b": self.b})
        self.assertIn("'x'", str(cm.exception))
        with self.assertRaises(terrace.errors.InvalidArgument):
            self.sess.run(None, {"x": Producer(np.zeros((3, 5), np.float32)), "b": self.b})
        with self.assertRaisesRegex(terrace.errors.InvalidArgument, "device type 4"):
            self.sess.run(None, {"x": Producer(self.x, device=(4, 0)), "b": self.b})
        with self.assertRaises(ValueError):
            self.sess.run(None, {"x": self.x, "b": self.b}, output_type="torch")

    @unittest.skipIf(CUDA, "a GPU is here: the CUDA tests below run instead")
    def test_a_cuda_tensor_without_a_gpu_is_not_implemented(self):
        with self.assertRaises(terrace.errors.NotImplemented) as cm:
            self.sess.run(None, {"x": Producer(self.x, device=(2, 0)), "b": self.b})
        self.assertIsInstance(cm.exception, NotImplementedError)
        self.assertIn("input 'x' is a CUDA tensor", str(cm.exception))

    def test_threads_run_one_session_with_dlpack_feeds_and_tensor_outputs(self):
        sess = terrace.InferenceSession(add_relu_model())
        rng = np.random.default_rng(2)
        xs = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(8)]

        def calls(x):
            for _ in range(30):
                y, s = sess.run(None, {"x": Producer(x), "b": self.b}, output_type="tensor")
                np.testing.assert_allclose(np.from_dlpack(s), x + self.b, rtol=1e-6)
                np.testing.assert_allclose(np.from_dlpack(y), np.maximum(x + self.b, 0), rtol=1e-6)

        self.assertEqual(gil_counter.errors_from_threads(calls, xs), [])


class IOBindingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sess = terrace.InferenceSession(add_relu_model())
        cls.x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
        cls.b = np.full(4, 0.25, np.float32)

    def test_bound_inputs_and_outputs(self):
        binding = self.sess.io_binding()
        binding.bind_input("x", Producer(self.x))
        binding.bind_input("b", terrace.Tensor.from_dlpack(Producer(self.b)))
        binding.bind_output("s")
        self.sess.run_with_iobinding(binding)
        (s,) = binding.get_outputs()
        self.assertIsInstance(s, terrace.Tensor)
        self.assertEqual(s.device, "cpu")
        np.testing.assert_allclose(np.from_dlpack(s), self.x + self.b, rtol=1e-6)
        binding.bind_output("y", device="cpu")
        self.sess.run_with_iobinding(binding)
        s, y = binding.copy_outputs_to_cpu()
        np.testing.assert_allclose(y, np.maximum(self.x + self.b, 0), rtol=1e-6)

    def test_no_output_bound_means_all(self):
        binding = self.sess.io_binding()
        binding.bind_input("x", self.x)
        binding.bind_input("b", self.b)
        self.sess.run_with_iobinding(binding)
        self.assertEqual(len(binding.get_outputs()), 2)

    def test_bad_bindings_raise_naming_what_is_wrong(self):
        binding = self.sess.io_binding()
        with self.assertRaisesRegex(terrace.errors.InvalidArgument, "bind_input names 'z', which is not a graph input \\(inputs: x, b\\)"):
            binding.bind_input("z", self.x)
        with self.assertRaisesRegex(terrace.errors.InvalidArgument, "'z' is not an output"):
            binding.bind_output("z")
        with self.assertRaisesRegex(terrace.errors.InvalidArgument, "device"):
            binding.bind_output("y", device="tpu")
        with self.assertRaises(terrace.errors.InvalidArgument):
            binding.get_outputs()
        binding.bind_input("x", self.x)
        with self.assertRaisesRegex(terrace.errors.InvalidArgument, "'b'"):
            self.sess.run_with_iobinding(binding)  # b was never bound

    @unittest.skipIf(CUDA, "a GPU is here: test_cuda_outputs_stay_on_the_device runs instead")
    def test_a_cuda_output_without_tier_2_is_not_implemented(self):
        binding = self.sess.io_binding()
        binding.bind_input("x", self.x)
        binding.bind_input("b", self.b)
        binding.bind_output("y", device="cuda")
        with self.assertRaises(terrace.errors.NotImplemented):
            self.sess.run_with_iobinding(binding)

    def test_run_with_iobinding_lets_other_threads_hold_the_gil(self):
        f = TensorProto.FLOAT
        model = make_model([helper.make_node("MatMul", ["a", "a"], ["y"])],
                           [helper.make_tensor_value_info("a", f, [512, 512])],
                           [helper.make_tensor_value_info("y", f, [512, 512])])
        sess = terrace.InferenceSession(model, tier="interp", threads=1)
        binding = sess.io_binding()
        binding.bind_input("a", Producer(np.ones((512, 512), np.float32)))
        ticks = gil_counter.ticks_during(lambda: sess.run_with_iobinding(binding))
        self.assertGreater(max(ticks), 1000, ticks)
        self.assertEqual(float(binding.copy_outputs_to_cpu()[0][0, 0]), 512.0)


@unittest.skipIf(NO_TORCH is not None, NO_TORCH or "")
class TorchCpuTest(unittest.TestCase):
    """torch CPU tensors in and out, without copies."""

    def test_torch_tensors_in_and_out(self):
        sess = terrace.InferenceSession(add_relu_model())
        x, b = torch.randn(3, 4), torch.randn(4)
        t = terrace.Tensor.from_dlpack(x)
        self.assertEqual(t.data_ptr(), x.data_ptr())
        y, s = sess.run(None, {"x": x, "b": b}, output_type="tensor")
        ty = torch.from_dlpack(y)
        self.assertEqual(ty.data_ptr(), y.data_ptr())
        torch.testing.assert_close(ty, torch.relu(x + b))
        torch.testing.assert_close(torch.from_dlpack(s), x + b)


@unittest.skipIf(NO_CUDA is not None, NO_CUDA or "")
class CudaDLPackTest(unittest.TestCase):
    """torch CUDA tensors in, device tensors out (tier 2)."""

    @classmethod
    def setUpClass(cls):
        cls.sess = terrace.InferenceSession(add_relu_model())
        cls.x = torch.randn(3, 4, device="cuda")
        cls.b = torch.randn(4, device="cuda")

    def test_cuda_inputs_give_the_cpu_answer(self):
        y, s = self.sess.run(None, {"x": self.x, "b": self.b})
        np.testing.assert_allclose(s, (self.x + self.b).cpu().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y, torch.relu(self.x + self.b).cpu().numpy(), rtol=1e-5, atol=1e-6)

    def test_cuda_outputs_stay_on_the_device(self):
        binding = self.sess.io_binding()
        binding.bind_input("x", self.x)
        binding.bind_input("b", self.b)
        binding.bind_output("y", device="cuda")
        for _ in range(30):  # past the warm-up: tier 2's own device tensors
            self.sess.run_with_iobinding(binding)
            self.sess.wait_until_settled(60)
        (y,) = binding.get_outputs()
        self.assertEqual(y.device, "cuda:0")
        out = torch.from_dlpack(y)
        self.assertTrue(out.is_cuda)
        torch.testing.assert_close(out, torch.relu(self.x + self.b))

    def test_a_strided_cuda_tensor_is_refused(self):
        wide = torch.randn(3, 8, device="cuda")
        with self.assertRaisesRegex(terrace.errors.InvalidArgument, "not contiguous"):
            self.sess.run(None, {"x": wide[:, ::2], "b": self.b})


if __name__ == "__main__":
    if MISSING is not None:
        print(f"skipped: {MISSING} (the test needs numpy, onnx and the module terrace._terrace on PYTHONPATH)")
        sys.exit(77)
    unittest.main(verbosity=2)
