"""Terrace from Python: ONNX models on a tiered JIT, with ONNX Runtime's InferenceSession shape.

    import numpy, terrace
    sess = terrace.InferenceSession("model.onnx")
    (y,) = sess.run(None, {"x": numpy.ones((1, 4), numpy.float32)})

Errors are terrace.TerraceError (a RuntimeError) with .code, Terrace's name for the error
("InvalidArgument", ...); terrace.errors has a subclass per code.
"""
import json
import os
import pkgutil

# In a build tree the compiled module is in BUILD/python/terrace/, beside this folder's copy on
# PYTHONPATH: the package spans both. Installed, both are one folder and this changes nothing.
__path__ = pkgutil.extend_path(__path__, __name__)

from . import errors  # noqa: E402
from ._terrace import Session as _Session  # noqa: E402
from ._terrace import TerraceError, __version__  # noqa: E402

__all__ = ["InferenceSession", "NodeArg", "TerraceError", "errors", "__version__"]


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

    def run(self, output_names, input_feed):
        """The outputs named in output_names (None: all, in the model's order) as numpy arrays,
        for input_feed, a dict {input name: numpy array}. C-contiguous arrays of a dtype the
        model takes are read in place, not copied. Safe from many threads; the GIL is released
        while Terrace runs."""
        return self._sess.run(output_names, input_feed)

    def report(self):
        """The session's report as a dict: "regions" (tier, calls, compile times ...) and calls."""
        return json.loads(self._sess.report_json())

    def explain(self):
        """The report as text: the regions, the graph breaks and why, the tiers that ran."""
        return self._sess.report()

    def wait_until_settled(self, timeout=None):
        """Waits for the background compiles in flight (seconds; None: no limit). True when
        none is left, False if the timeout passed first."""
        return self._sess.wait_until_settled(timeout)
