"""torch.compile(model, backend="terrace"): Dynamo's FX graphs exported to ONNX and run by Terrace.

    import torch, terrace
    fast = torch.compile(model, backend="terrace", options={"tier": "cpu", "threads": 4})
    with torch.no_grad():
        y = fast(x)

Each graph Dynamo captures is exported in memory by torch.onnx (the TorchScript exporter, opset
17; should it fail, the dynamo exporter where onnxscript is installed) and opened as a
terrace.InferenceSession (no autograd, no Python-side partitioning: the whole graph); its callable
feeds torch tensors (CPU ones as numpy arrays, not copied) and returns torch tensors of the graph's
dtypes, on its device, in the structure the graph returns. A graph Terrace cannot take (it needs
autograd, mutates an input, is in training mode, has non-tensor values, fails to export, load or
run) runs eagerly instead: one log line ("terrace.torch" logger) gives the reason, and report()
keeps it. options={"strict": True} raises TerraceBackendError instead.

options: "tier", "mode" and "threads" as InferenceSession takes them (torch.compile's mode=
"reduce-overhead" or "max-autotune" becomes Terrace's mode); "strict"; "exporter" ("auto",
"torchscript" or "dynamo"); "opset" (default 17 for the TorchScript exporter, the exporter's own
for dynamo).

Dynamo guards shapes and dtypes and calls the backend again when they fail; each such call builds
new sessions. A graph with symbolic sizes (Dynamo's automatic dynamic shapes) gets one session per
input signature, the sizes baked in, at most MAX_SESSIONS per graph (the least recent goes).
Parameters the export copied (torch before 2.5 keeps them in the graph module) are watched: an
in-place change (load_state_dict) makes new sessions.
Importing this module does not import torch; the backend is registered by torch's
"torch_dynamo_backends" entry point once installed, or by register() (which `import terrace` calls
when torch is already imported).
"""
import collections
import functools
import importlib.util
import inspect
import io
import itertools
import logging
import threading
import warnings

NAME = "terrace"
MAX_SESSIONS = 8  # per graph, as Dynamo's default recompile limit
DEFAULT_OPSET = 17  # the zoo's (tools/make_models.py); the TorchScript exporter's LayerNormalization
_OPTIONS = ("tier", "mode", "threads", "strict", "exporter", "opset")
_MODES = {"default": "default", "reduce-overhead": "reduce-overhead", "max-autotune": "max-autotune",
          "max-autotune-no-cudagraphs": "max-autotune"}
# Terrace's dtypes (python/src/arrays.cpp); names as torch spells them.
_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64")
# Ops that return a view of their first argument: an in-place op on such a view writes the base.
_VIEWS = {"view", "reshape", "__getitem__", "getitem", "transpose", "permute", "narrow", "select",
          "squeeze", "unsqueeze", "expand", "flatten", "t", "as_strided", "split", "chunk", "unbind",
          "view_as", "reshape_as", "unflatten", "movedim", "diagonal", "detach", "contiguous"}
# operator.iadd and friends, and Tensor.__setitem__: in place without a trailing "_".
_IN_PLACE_OPERATORS = {p + op + s for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and",
                                              "or", "xor", "lshift", "rshift", "matmul")
                       for p, s in (("i", ""), ("__i", "__"))} | {"setitem", "__setitem__"}
# Where a functional's "training" argument sits when given by position.
_TRAINING_ARG = {"dropout": 2, "alpha_dropout": 2, "feature_alpha_dropout": 2, "dropout1d": 2, "dropout2d": 2,
                 "dropout3d": 2, "batch_norm": 5, "instance_norm": 5}

log = logging.getLogger("terrace.torch")
_lock = threading.Lock()
_graph_ids = itertools.count(1)
_graphs = []      # one dict per graph compiled (report()["graphs"])
_fallbacks = []   # one dict per graph that went eager (report()["fallbacks"])


class TerraceBackendError(RuntimeError):
    """A graph the backend could not run on Terrace, raised instead of falling back (strict)."""


class _Unsupported(Exception):
    """Why a graph runs eagerly; stage is where it was found: check, export, load or run."""

    def __init__(self, stage, reason):
        super().__init__(reason)
        self.stage, self.reason = stage, reason


def report():
    """What the backend did in this process: {"graphs": [{"graph", "ops", "inputs", "outputs",
    "state" ("terrace" or "eager"), "sessions" (built so far), "exporter"}], "fallbacks":
    [{"graph", "stage", "reason"}]}. Copies: later calls do not change them."""
    with _lock:
        return {"graphs": [dict(g) for g in _graphs], "fallbacks": [dict(f) for f in _fallbacks]}


def reset_report():
    """Forgets the graphs and fallbacks report() lists (the compiled graphs keep running)."""
    with _lock:
        _graphs.clear()
        _fallbacks.clear()


def register():
    """Makes backend="terrace" known to torch.compile. Idempotent, and leaves the name alone
    where torch's entry-point discovery already found this package's entry point (torch then
    registers it itself, and a second registration would be refused as a duplicate)."""
    from torch._dynamo.backends import registry
    compiler_fns = getattr(registry, "_COMPILER_FNS", None)
    if compiler_fns is not None:  # torch 2.2 and later
        if NAME in compiler_fns or registry._BACKENDS.get(NAME) is not None:
            return
    elif NAME in registry._BACKENDS:  # torch 2.1: one table of functions
        return
    registry.register_backend(compiler_fn=backend, name=NAME)


def backend(gm, example_inputs, mode=None, options=None):
    """The torch.compile backend: (GraphModule, example inputs) -> a callable running it."""
    opts = _session_options(mode, options or {})
    graph = {"graph": next(_graph_ids), "ops": sum(n.op not in ("placeholder", "output") for n in gm.graph.nodes),
             "inputs": len(example_inputs), "outputs": 0, "state": "terrace", "sessions": 0, "exporter": None}
    with _lock:
        _graphs.append(graph)
    try:
        outputs, spec = _check(gm, example_inputs)
    except _Unsupported as e:
        _fall_back(graph, e, opts["strict"])
        return gm.forward
    graph["outputs"] = len(outputs)
    return _Compiled(gm, graph, outputs, spec, opts)


def _session_options(mode, options):
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ValueError(f"terrace backend: unknown option(s) {', '.join(unknown)} (known: {', '.join(_OPTIONS)})")
    terrace_mode = options.get("mode", mode)
    if terrace_mode is not None:
        if terrace_mode not in _MODES:
            raise ValueError(f"terrace backend: mode {terrace_mode!r} is not one of {', '.join(_MODES)}")
        terrace_mode = _MODES[terrace_mode]
    exporter = options.get("exporter", "auto")
    if exporter not in ("auto", "torchscript", "dynamo"):
        raise ValueError(f"terrace backend: exporter {exporter!r} is not 'auto', 'torchscript' or 'dynamo'")
    return {"tier": options.get("tier"), "mode": terrace_mode, "threads": options.get("threads"),
            "strict": bool(options.get("strict", False)), "exporter": exporter, "opset": options.get("opset")}


def _fall_back(graph, err, strict):
    message = f"graph {graph['graph']} ({graph['ops']} ops) runs eagerly: {err.stage}: {err.reason}"
    with _lock:
        graph["state"] = "eager"
        _fallbacks.append({"graph": graph["graph"], "stage": err.stage, "reason": err.reason})
    if strict:
        raise TerraceBackendError("terrace backend: " + message) from err
    log.warning("terrace backend: %s", message)


def _describe(value):
    return type(value).__name__


def _check(gm, example_inputs):
    """What Terrace cannot run faithfully, found before exporting; returns the graph's output
    nodes (flattened) and their structure."""
    import torch
    from torch.utils import _pytree as pytree

    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor):
            if x.layout != torch.strided:
                raise _Unsupported("check", f"input {i} has layout {x.layout}")
            if str(x.dtype).replace("torch.", "") not in _DTYPES:
                raise _Unsupported("check", f"input {i} has dtype {x.dtype}, which Terrace does not take")
        elif not isinstance(x, (int, torch.SymInt)) or isinstance(x, bool):
            raise _Unsupported("check", f"input {i} is a {_describe(x)}, not a tensor or a size")
    params = [p for p in gm.parameters() if p.requires_grad]
    if torch.is_grad_enabled() and (params or any(isinstance(x, torch.Tensor) and x.requires_grad
                                                  for x in example_inputs)):
        raise _Unsupported("check", "autograd is needed (grad mode is on and inputs or parameters require grad); "
                                    "Terrace runs inference: call under torch.no_grad() or torch.inference_mode()")
    _check_nodes(gm)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    leaves, spec = pytree.tree_flatten(output.args[0])
    for i, leaf in enumerate(leaves):
        value = leaf.meta.get("example_value", leaf.meta.get("val")) if isinstance(leaf, torch.fx.Node) else leaf
        if not isinstance(leaf, torch.fx.Node) or (value is not None and not isinstance(value, torch.Tensor)):
            raise _Unsupported("check", f"output {i} is a {_describe(value)}, not a tensor")
        if value is not None and str(value.dtype).replace("torch.", "") not in _DTYPES:
            raise _Unsupported("check", f"output {i} has dtype {value.dtype}, which Terrace does not return")
    if not leaves:
        raise _Unsupported("check", "the graph returns no tensors")
    return leaves, spec


def _target_name(node):
    return node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))


def _check_nodes(gm):
    """Mutations of inputs and training-mode behaviour: an ONNX export keeps neither."""
    import torch

    def base(node):  # the value a view chain starts from
        while (isinstance(node, torch.fx.Node) and node.op in ("call_method", "call_function")
               and _target_name(node) in _VIEWS and node.args):
            node = node.args[0]
        return node

    nodes = [n for n in gm.graph.nodes if n.op in ("call_method", "call_function", "call_module")]
    for node in nodes:  # training first: a training-mode BatchNorm also writes its counter
        name = _target_name(node)
        if node.op == "call_module":
            mod = gm.get_submodule(node.target)
            training = mod.training and isinstance(mod, (torch.nn.modules.batchnorm._BatchNorm,
                                                         torch.nn.modules.dropout._DropoutNd))
        else:
            training = _argument(node, "training", _TRAINING_ARG)
            if training is None and node.op == "call_function" and node.target in (
                    torch.nn.functional.dropout, torch.nn.functional.alpha_dropout):
                training = True  # their default
        if training is True:
            raise _Unsupported("check", f"{node.target if node.op == 'call_module' else name} ({node.name}) "
                                        "runs in training mode: call model.eval()")
    for node in nodes:
        name = _target_name(node)
        out = node.kwargs.get("out")
        in_place = ((name.endswith("_") and not name.startswith("_")) or name in _IN_PLACE_OPERATORS
                    or node.kwargs.get("inplace") is True
                    or (node.op == "call_module" and getattr(gm.get_submodule(node.target), "inplace", False)))
        target = out if out is not None else node.args[0] if in_place and node.args else None
        if isinstance(target, torch.fx.Node):
            written = base(target)
            if written.op in ("placeholder", "get_attr"):
                raise _Unsupported("check", f"{name} ({node.name}) writes the graph's input {written.name} in place")


def _argument(node, name, positions):
    """A call's argument by keyword or position (positions: by target name), None if absent."""
    if name in node.kwargs:
        return node.kwargs[name]
    pos = positions.get(_target_name(node))
    if pos is not None and node.op == "call_function" and len(node.args) > pos:
        return node.args[pos]
    return None


class _Compiled:
    """One Dynamo graph on Terrace: sessions by input signature, eager once anything fails."""

    def __init__(self, gm, graph, outputs, spec, opts):
        self.gm, self.graph, self.spec, self.opts = gm, graph, spec, opts
        self.expected = [_meta_tensor(n) for n in outputs]
        self.sessions = collections.OrderedDict()  # signature -> (session, input names, output names)
        self.lock = threading.Lock()
        self.eager = False
        # Before torch 2.5 Dynamo leaves parameters and buffers in the graph module (later ones pass
        # them as inputs): the export copies them, so an in-place change (load_state_dict, an
        # optimizer step) must make new sessions. _version counts a tensor's in-place writes.
        self.held = list(itertools.chain(gm.parameters(), gm.buffers()))
        self.versions = [t._version for t in self.held]

    def __call__(self, *args):
        if self.eager:
            return self.gm.forward(*args)
        if self.held and [t._version for t in self.held] != self.versions:
            with self.lock:
                self.sessions.clear()
                self.versions = [t._version for t in self.held]
        key = tuple((tuple(a.shape), a.dtype, str(a.device)) if hasattr(a, "shape") else int(a) for a in args)
        try:
            entry = self._session(key, args)
            outs = self._run(entry, args)
        except _Unsupported as e:
            self._give_up(e)
            return self.gm.forward(*args)
        from torch.utils import _pytree as pytree
        return pytree.tree_unflatten(outs, self.spec)

    def _give_up(self, err):
        with self.lock:
            if self.eager:
                return
            self.eager = True
            self.sessions.clear()
        _fall_back(self.graph, err, self.opts["strict"])

    def _session(self, key, args):
        with self.lock:
            entry = self.sessions.get(key)
            if entry is not None:
                self.sessions.move_to_end(key)
                return entry
            entry = self._build(args)
            self.sessions[key] = entry
            if len(self.sessions) > MAX_SESSIONS:
                self.sessions.popitem(last=False)
            return entry

    def _build(self, args):
        import terrace
        model, exporter = _export(self.gm, args, len(self.expected), self.opts)
        try:
            sess = terrace.InferenceSession(model, tier=self.opts["tier"], mode=self.opts["mode"],
                                            threads=self.opts["threads"])
        except Exception as e:  # a Terrace load error (unsupported op, opset, dtype ...)
            raise _Unsupported("load", _one_line(e)) from e
        inputs = [a.name for a in sess.get_inputs()]
        outputs = [a.name for a in sess.get_outputs()]
        if len(outputs) != len(self.expected):
            raise _Unsupported("load", f"the ONNX model has {len(outputs)} outputs, the graph {len(self.expected)}")
        positions = {f"input_{i}": i for i in range(len(args))}
        missing = [n for n in inputs if n not in positions]
        if missing:
            raise _Unsupported("load", f"the ONNX model has inputs the graph does not: {', '.join(missing)}")
        with _lock:
            self.graph["sessions"] += 1
            self.graph["exporter"] = exporter
        return sess, [(n, positions[n]) for n in inputs], outputs

    def _run(self, entry, args):
        import torch
        sess, inputs, outputs = entry
        feed = {name: _feedable(args[i]) for name, i in inputs}
        try:
            # numpy out (arrays over Terrace's own buffers, no copy): torch 2.1's DLPack lacks bool.
            outs = [torch.from_numpy(a) for a in sess.run(outputs, feed)]
        except Exception as e:
            raise _Unsupported("run", _one_line(e)) from e
        for k, expected in enumerate(self.expected):
            if expected is not None and (outs[k].dtype, outs[k].device) != expected:
                outs[k] = outs[k].to(device=expected[1], dtype=expected[0])
        return outs


def _meta_tensor(node):
    value = node.meta.get("example_value", node.meta.get("val"))
    return (value.dtype, value.device) if value is not None else None


def _feedable(x):
    """A CPU tensor as numpy (a view, not a copy); others (CUDA) through DLPack."""
    x = x.detach()
    if x.device.type == "cpu":
        try:
            return x.numpy()
        except (TypeError, RuntimeError):  # a dtype numpy lacks; conj or neg views
            return x.resolve_conj().resolve_neg()
    return x


def _one_line(err, limit=240):
    """An error as one line of at most limit characters: exporters' messages hold whole graphs."""
    text = str(err).strip().splitlines()
    line = f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _export(gm, args, n_outputs, opts):
    """The graph as ONNX bytes for these inputs (sizes baked in), and the exporter that made it."""
    import torch
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    names = [f"input_{i}" for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    module = _bound_class()(gm, [None if isinstance(a, torch.Tensor) else int(a) for a in args])
    has_dynamo_flag = "dynamo" in inspect.signature(torch.onnx.export).parameters
    choice = opts["exporter"]
    # auto: the TorchScript exporter (every torch from 2.1; opset 17, as the zoo), then the dynamo
    # one where torch has it and its onnxscript is installed.
    dynamo_ready = has_dynamo_flag and importlib.util.find_spec("onnxscript") is not None
    exporters = {"auto": ["torchscript"] + (["dynamo"] if dynamo_ready else []),
                 "torchscript": ["torchscript"], "dynamo": ["dynamo"]}[choice]
    errors = []
    for exporter in exporters:
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecation and tracer warnings, one per export
                args_ = tuple(t.detach() for t in tensors)
                if exporter == "torchscript":
                    buf = io.BytesIO()
                    torch.onnx.export(module, args_, buf, input_names=names,
                                      output_names=[f"output_{j}" for j in range(n_outputs)],
                                      opset_version=opts["opset"] or DEFAULT_OPSET,
                                      **({"dynamo": False} if has_dynamo_flag else {}))
                    return buf.getvalue(), exporter
                if not has_dynamo_flag:
                    raise RuntimeError("this torch has no dynamo exporter (torch.onnx.export(dynamo=True))")
                program = torch.onnx.export(module, args_, input_names=names, dynamo=True,
                                            **({"opset_version": opts["opset"]} if opts["opset"] else {}))
                return program.model_proto.SerializeToString(), exporter
        except Exception as e:  # the exporter's errors have no common class
            errors.append(f"{exporter}: {_one_line(e)}")
    raise _Unsupported("export", "; ".join(errors))


@functools.lru_cache(maxsize=None)
def _bound_class():
    import torch

    class Bound(torch.nn.Module):
        """The graph as a function of its tensors alone: sizes (SymInt inputs) fixed, the
        graph's own parameters kept as parameters (they export as initializers)."""

        def __init__(self, gm, fixed):
            super().__init__()
            self.gm, self.fixed = gm, fixed

        def forward(self, *tensors):
            it = iter(tensors)
            return self.gm(*[next(it) if v is None else v for v in self.fixed])

    return Bound  # defined on first use: torch is imported only then
