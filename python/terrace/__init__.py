"""Terrace from Python: ONNX models on a tiered JIT, with ONNX Runtime's InferenceSession shape.

    import numpy, terrace
    sess = terrace.InferenceSession("model.onnx")
    (y,) = sess.run(None, {"x": numpy.ones((1, 4), numpy.float32)})

Inputs may also be terrace.Tensor or any DLPack object (torch tensors, CPU or CUDA); outputs come
back as terrace.Tensor (DLPack both ways) with run(..., output_type="tensor") or through
io_binding(). validate() and bench() are the CLI's `terrace validate` and `terrace bench`.

Errors are terrace.TerraceError (a RuntimeError) with .code, Terrace's name for the error
("InvalidArgument", ...); terrace.errors has a subclass per code.
"""
import json
import logging
import os
import pkgutil
import sys

# In a build tree the compiled module is in BUILD/python/terrace/, beside this folder's copy on
# PYTHONPATH: the package spans both. Installed, both are one folder and this changes nothing.
__path__ = pkgutil.extend_path(__path__, __name__)

from . import errors  # noqa: E402
from ._terrace import Session as _Session  # noqa: E402
from ._terrace import Tensor, TerraceError, __version__  # noqa: E402

__all__ = ["InferenceSession", "IOBinding", "NodeArg", "Tensor", "TerraceError", "errors", "__version__"]

_OUTPUT_TYPES = ("numpy", "tensor")


def _invalid_argument(message):
    """terrace.errors.InvalidArgument as the compiled module raises it: str with the code, .message without."""
    e = errors.InvalidArgument("InvalidArgument: " + message)
    e.message = message
    return e


class NodeArg:
    """An input or output: its name, shape (ints; a symbolic dim's name; None where unknown)
    and type ("tensor(float)"), as ONNX Runtime's NodeArg."""

    __slots__ = ("name", "shape", "type")

    def __init__(self, name, shape, type):
        self.name, self.shape, self.type = name, shape, type

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class InferenceSession:
    """A Terrace session over an ONNX model (a path or the model's bytes).

    tier: the highest tier regions may climb to, "interp", "cpu" or "gpu" (None: the highest
    this build and machine have, or $TERRACE_MAX_TIER). mode: "default", "reduce-overhead" or
    "max-autotune" (None: $TERRACE_MODE). threads: the threads one call uses (None: every core,
    or $OMP_NUM_THREADS).
    """

    def __init__(self, path_or_bytes, tier=None, mode=None, threads=None):
        model = path_or_bytes
        if isinstance(model, (bytearray, memoryview)):
            model = bytes(model)
        elif not isinstance(model, bytes):
            model = os.fspath(model)
        self._sess = _Session(model, tier, mode, threads)
        self._inputs = [NodeArg(*a) for a in self._sess.inputs()]
        self._outputs = [NodeArg(*a) for a in self._sess.outputs()]

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def run(self, output_names, input_feed, output_type="numpy"):
        """The outputs named in output_names (None: all, in the model's order) for input_feed, a
        dict {input name: value}: a numpy array, a terrace.Tensor, or any object with __dlpack__
        (a torch tensor, CPU or CUDA). C-contiguous arrays and compact DLPack tensors of the
        input's dtype are read in place, not copied. output_type "numpy" returns numpy arrays,
        "tensor" terrace.Tensor (host memory; io_binding() keeps outputs on the GPU). Safe from
        many threads; the GIL is released while Terrace runs."""
        if output_type not in _OUTPUT_TYPES:
            raise _invalid_argument(f"output_type must be 'numpy' or 'tensor', not {output_type!r}")
        return self._sess.run(output_names, input_feed, output_type == "tensor")

    def io_binding(self):
        """An IOBinding for run_with_iobinding: inputs bound once, outputs on a chosen device."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding):
        """Runs with the binding's inputs; its get_outputs() then returns the bound outputs."""
        iobinding._run()

    def report(self):
        """The session's report as a dict: "regions" (tier, calls, compile times ...) and calls."""
        return json.loads(self._sess.report_json())

    def explain(self):
        """The report as text: the regions, the graph breaks and why, the tiers that ran."""
        return self._sess.report()

    def warmup_state(self):
        """Where the warm-up stands: {"settled": bool, "compiling": n, "top_tier": the highest tier
        reachable here, "calls": n, "regions": [{"id", "ops", "tier", "state", "validation",
        "calls", "climb", "settled"}]}. A region is settled when it stays where it is: compiled and
        validated on the top tier (or held below it, "climb" saying why), or stopped (a compile
        failed; "state" says why), or the top tier is the interpreter."""
        return self._sess.warmup_state()

    def validate(self, input_feed=None, tiers="all", calls=None, dims=None, shapes=None):
        """`terrace validate` on this session's model and options: the optimized model on each
        tier ("interp", "cpu", "gpu" or "all") against the unoptimized graph on the interpreter.
        input_feed gives inputs ({name: value}, the same every call); the others are random (a
        new draw per call), with dims ({symbolic dim: size}) and shapes ({input: shape}). Returns
        the CLI's --json as a dict: "passed", and per tier "passed", "tiers_ran", "outputs" (each
        "max_abs_err", "max_rel_err", "passed", "message"), "failures", "notes"; "calls" per tier."""
        return json.loads(self._sess.validate(input_feed or {}, tiers, calls, dims or {}, shapes or {}))

    def bench(self, input_feed=None, calls=20, duration=None, concurrency=1, steady_calls=0,
              baseline_calls=None, dims=None, shapes=None):
        """`terrace bench` on this session's model and options: a new session from a cold start,
        calls times (or for duration seconds) from concurrency threads, then an interpreter
        baseline. Inputs as validate's (random ones drawn once). Returns the CLI's --json as a
        dict: "calls" (the warm-up timeline: each call's ms and tiers), "regions" (when each was
        promoted and ready), "steady" (p50_ms, p90_ms, p99_ms, min_ms, max_ms, calls_per_s),
        "baseline", "speedup", "break_even_call" (an index, or "never") and "checks"."""
        return json.loads(self._sess.bench(input_feed or {}, calls, duration, concurrency, steady_calls,
                                           baseline_calls, dims or {}, shapes or {}))

    def wait_until_settled(self, timeout=None):
        """Waits for the background compiles in flight (seconds; None: no limit). True when
        none is left, False if the timeout passed first."""
        return self._sess.wait_until_settled(timeout)


class IOBinding:
    """ONNX Runtime's IOBinding: inputs bound by name (numpy arrays, terrace.Tensor or DLPack
    objects such as CUDA torch tensors), outputs bound to a device ("cpu" or "cuda"), then
    session.run_with_iobinding(binding) and get_outputs() (terrace.Tensor, in bind order).
    Outputs bound to "cuda" stay in tier 2's device memory; reading them needs tier 2 (a GPU)."""

    def __init__(self, session):
        self._session = session
        self._inputs = {}
        self._outputs = []  # (name, device)
        self._results = None

    def bind_input(self, name, value):
        self._session._sess.check_input(name)
        self._inputs[name] = value

    def bind_output(self, name, device="cpu"):
        self._session._sess.check_output(name)
        device = "cuda" if device in ("cuda", "cuda:0") else device
        if device not in ("cpu", "cuda"):
            raise _invalid_argument(f"output '{name}': device must be 'cpu' or 'cuda', not {device!r}")
        self._outputs = [(n, d) for n, d in self._outputs if n != name] + [(name, device)]

    def clear_binding_inputs(self):
        self._inputs = {}

    def clear_binding_outputs(self):
        self._outputs = []
        self._results = None

    def _run(self):
        outputs = self._outputs or [(a.name, "cpu") for a in self._session.get_outputs()]
        names = [n for n, _ in outputs]
        self._results = self._session._sess.run_bound(self._inputs, names, [d for _, d in outputs])

    def get_outputs(self):
        """The last run's outputs as terrace.Tensor, in the order bound (all, in the model's order,
        when none was bound)."""
        if self._results is None:
            raise _invalid_argument("no outputs yet: call session.run_with_iobinding(binding) first")
        return list(self._results)

    def copy_outputs_to_cpu(self):
        """The last run's outputs as numpy arrays (copied from a device)."""
        return [t.numpy() for t in self.get_outputs()]


# torch.compile(model, backend="terrace"): an installed package is found through torch's
# "torch_dynamo_backends" entry point; from a build tree (no entry point), or before torch looked
# for entry points, registering here makes the name known. Only where torch is already imported:
# importing terrace never imports torch. Registering imports torch._dynamo where nothing did yet
# (about 1 s once, measured with torch 2.11).
if "torch" in sys.modules:
    try:
        from . import torch_backend
        torch_backend.register()
    except Exception as _e:  # torch without torch._dynamo (before 2.0): InferenceSession works on
        logging.getLogger("terrace.torch").debug("backend 'terrace' not registered: %s", _e)
