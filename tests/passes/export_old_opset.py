"""Exports the small BERT and GPT-2 of tools/make_models.py at an older opset, where torch writes
LayerNormalization decomposed (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add), for the
LayerNorm fusion's ctest (tests/CMakeLists.txt).

    export_old_opset.py SOURCE_DIR OUT_DIR [OPSET]
"""
import importlib.util
import os
import sys

source, out = sys.argv[1], sys.argv[2]
opset = int(sys.argv[3]) if len(sys.argv) > 3 else 16
spec = importlib.util.spec_from_file_location("make_models", os.path.join(source, "tools", "make_models.py"))
make_models = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_models)
make_models.OPSET = opset  # the one setting changed: everything else is the zoo's own export
for name in ("bert", "gpt2"):
    make_models.export(name, out, True)
