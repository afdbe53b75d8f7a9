#!/usr/bin/env python3
"""Writes interp/op_versions.def: every default-domain op version from 18 on that ONNX's schemas
define for an op in interp/ops.def, with its inputs, outputs and attributes as ONNX declares them.
The form and the note of each version are Terrace's own (FORMS below). Run it with a newer onnx
than Debian's (which stops at opset 17), e.g. in a throwaway virtual environment:
  python3 -m venv /tmp/v && /tmp/v/bin/pip install onnx==1.18.0 && /tmp/v/bin/python tools/gen_op_versions.py
"""
import os
import re
import sys

import onnx.defs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

T = "Types"  # only new element types: ONNX 1.12 checks and infers it as its opset-17 version
O = "Own"    # new op, inputs or attributes: Terrace checks and infers it itself
M = "Missing"  # not implemented: NotImplemented at load, with the note
NEW22 = (T, "bfloat16 added")
FORMS = {
    ("BitwiseAnd", 18): (O, "new op"), ("BitwiseNot", 18): (O, "new op"),
    ("BitwiseOr", 18): (O, "new op"), ("BitwiseXor", 18): (O, "new op"),
    ("Mish", 18): (O, "new op"), ("Mish", 22): (O, "bfloat16 added"),
    ("Cast", 19): (O, "saturate attribute, float8 types"), ("Cast", 21): (O, "int4, uint4 types"),
    ("Cast", 23): (O, "float4e2m1 type"),
    ("CastLike", 19): (O, "saturate attribute, float8 types"), ("CastLike", 21): (O, "int4, uint4 types"),
    ("CastLike", 23): (O, "float4e2m1 type"),
    ("Equal", 19): (T, "string type added"),
    ("Gelu", 20): (O, "new op"),
    ("IsInf", 20): (T, "float8, bfloat16 types"), ("IsNaN", 20): (T, "float8, bfloat16 types"),
    ("ReduceMax", 20): (O, "bool type"), ("ReduceMin", 20): (O, "bool type"),
    ("DeformConv", 19): (O, "new op (2-D; other ranks are NotImplemented in the kernel)"),
    ("DeformConv", 22): (O, "bfloat16 added"),
    ("QLinearMatMul", 21): (T, "float8 types"),
    ("Attention", 23): (O, "new op"),
    ("AveragePool", 19): (O, "dilations attribute"), ("AveragePool", 22): (O, "bfloat16 added"),
    ("Col2Im", 18): (O, "new op"),
    ("GroupNormalization", 18): (O, "new op (ONNX 1.12 lacks it), scale and bias per group"),
    ("GroupNormalization", 21): (O, "stash_type; scale and bias per channel"),
    ("LpPool", 18): (O, "ceil_mode attribute"), ("LpPool", 22): (O, "bfloat16 added"),
    ("RMSNormalization", 23): (O, "new op"),
    ("RotaryEmbedding", 23): (O, "new op"),
    ("CenterCropPad", 18): (O, "new op"),
    ("Pad", 18): (O, "axes input"), ("Pad", 19): (O, "wrap mode"),
    ("Pad", 21): (O, "int4, uint4 types"), ("Pad", 23): (O, "float4e2m1 type"),
    ("Resize", 18): (O, "antialias, axes, keep_aspect_ratio_policy attributes"),
    ("Resize", 19): (O, "half_pixel_symmetric coordinate mode"),
    ("ScatterElements", 18): (T, "reductions max and min"), ("ScatterND", 18): (T, "reductions max and min"),
    ("Split", 18): (O, "num_outputs attribute"),
    ("OptionalGetElement", 18): (O, "tensor and sequence inputs"),
    ("OptionalHasElement", 18): (O, "tensor and sequence inputs, the input optional"),
    ("AffineGrid", 20): (O, "new op"),
    ("DequantizeLinear", 19): (T, "float8 types"),
    ("DequantizeLinear", 21): (O, "blocked quantisation (block_size), int4 types"),
    ("DequantizeLinear", 23): (O, "output_dtype attribute, float4e2m1"),
    ("QuantizeLinear", 19): (O, "saturate attribute (float8 only), float8 types"),
    ("QuantizeLinear", 21): (O, "blocked quantisation, output_dtype, int4 types"),
    ("QuantizeLinear", 23): (O, "precision attribute (Terrace computes in float32 at least), float4e2m1"),
    ("DFT", 20): (O, "axis becomes an input (default -2)"),
    ("GridSample", 20): (O, "volumetric (5-D) sampling, modes linear and cubic"),
    ("GridSample", 22): (O, "bfloat16 added"),
    ("RegexFullMatch", 20): (O, "new string op"),
    ("StringConcat", 20): (O, "new string op"),
    ("StringSplit", 20): (O, "new string op"),
}
REDUCE18 = (O, "axes as an optional input, noop_with_empty_axes")
TYPES_BY_VERSION = {19: "float8 types", 20: "float8 and bfloat16 types", 21: "int4, uint4 types",
                    22: "bfloat16 added", 23: "float4e2m1 type"}


def main():
    ops = re.findall(r"TERRACE_OP\((\w+),", open(os.path.join(ROOT, "interp/ops.def")).read())
    schemas = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain in ("", "ai.onnx") and s.since_version >= 18 and s.name in ops:
            schemas[(s.name, s.since_version)] = s
    lines = []
    for (name, v) in sorted(schemas):
        s = schemas[(name, v)]
        form, note = FORMS.get((name, v), (None, None))
        if form is None and name.startswith("Reduce") and v == 18:
            form, note = REDUCE18
        if form is None:
            form, note = T, TYPES_BY_VERSION.get(v, "new types")
        attrs = " ".join(sorted(s.attributes))
        max_in = min(s.max_input, 1 << 20)
        max_out = min(s.max_output, 1 << 20)
        lines.append(f'TERRACE_OP_VERSION({name}, {v}, {form}, {s.min_input}, {max_in}, {s.min_output}, '
                     f'{max_out}, "{attrs}", "{note}")')
    head = """// Default-domain op versions from opset 18 on (ONNX 1.18 = opset 23), one a line:
// TERRACE_OP_VERSION(Op, since, Form, min_inputs, max_inputs, min_outputs, max_outputs, "attributes", "what changed")
// Form: Types   only new element types: ONNX 1.12 (Debian, opset 17) checks and infers the node as
//               its opset-17 version, which has the same inputs, outputs and attributes;
//       Own     a new op or new inputs/attributes that ONNX 1.12 does not know: Terrace checks the
//               node against the counts and attribute names here and infers its outputs itself;
//       Missing not implemented: loading a model that uses it is NotImplemented, with the note.
// Versions up to 17 are the ones Terrace implements (interp/verify.h). The counts and attribute
// names come from ONNX's schemas; tools/gen_op_versions.py writes this file.
"""
    out = os.path.join(ROOT, "interp/op_versions.def")
    open(out, "w").write(head + "\n".join(lines) + "\n")
    print(f"{out}: {len(lines)} versions", file=sys.stderr)


if __name__ == "__main__":
    main()
