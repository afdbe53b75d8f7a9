#!/usr/bin/env python3
"""Varying traffic for `terrace run|bench --input-sets` (issue 36), without the onnx package.

  tools/make_input_sets.py MODEL_DIR OUT_DIR --dim INPUT:AXIS:NAME --sizes 1,5,9 [--vocab N] [--seed S]

Copies MODEL_DIR/model.onnx to OUT_DIR/model.onnx with dim AXIS of graph input INPUT (and the same
fixed size in the graph outputs) renamed to the symbolic dim NAME, the stored value_info dropped (it
pins intermediate shapes to the exported size; Terrace infers them), and writes one
test_data_set_K per size: an int64 input of the input's shape with AXIS set to that size, random
ids below --vocab (the zoo's BERT exports with a fixed sequence length: this makes it take many).
No outputs are written: the validator checks the compiled regions against the interpreter.
"""
import argparse
import os
import random
import struct


def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def fields(buf):
    """(field number, wire type, raw bytes of the whole field, payload) for each field of a message."""
    i = 0
    while i < len(buf):
        start = i
        key, i = read_varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            _, i = read_varint(buf, i)
            payload = None
        elif wire == 2:
            n, i = read_varint(buf, i)
            payload = buf[i:i + n]
            i += n
        elif wire == 1:
            i += 8
            payload = None
        elif wire == 5:
            i += 4
            payload = None
        else:
            raise ValueError(f"wire type {wire}")
        yield num, wire, buf[start:i], payload


def message(num, payload):
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def rename_dim(value_info, axis, fixed, name):
    """A ValueInfoProto with its tensor shape's dim `axis` (or every dim equal to `fixed` when axis
    is None) set to dim_param `name`. Returns (new bytes, the fixed size replaced)."""
    replaced = None

    def dims(shape):
        nonlocal replaced
        out = b""
        k = 0
        for num, _, raw, payload in fields(shape):
            if num != 1:
                out += raw
                continue
            value = None
            for dn, dw, _, _ in fields(payload):
                if dn == 1:
                    value, _ = read_varint(payload, 1)
            hit = (k == axis) if axis is not None else (value == fixed and k > 0)
            if hit and value is not None:
                replaced = value
                out += message(1, message(2, name.encode()))
            else:
                out += raw
            k += 1
        return out

    def rewrite(buf, path):
        out = b""
        for num, wire, raw, payload in fields(buf):
            if wire == 2 and num == path[0]:
                inner = dims(payload) if len(path) == 1 else rewrite(payload, path[1:])
                out += message(num, inner)
            else:
                out += raw
        return out

    # ValueInfoProto.type(2) -> TypeProto.tensor_type(1) -> shape(2) -> dim(1)
    return rewrite(value_info, [2, 1, 2]), replaced


def name_of(value_info):
    for num, _, _, payload in fields(value_info):
        if num == 1:
            return payload.decode()
    return ""


def patch_model(data, input_name, axis, dim_name):
    model = b""
    for num, wire, raw, payload in fields(data):
        if num != 7:  # ModelProto.graph
            model += raw
            continue
        graph = b""
        fixed = None
        parts = list(fields(payload))
        for gnum, gwire, graw, gpayload in parts:
            if gnum == 11 and name_of(gpayload) == input_name:
                new, fixed = rename_dim(gpayload, axis, None, dim_name)
                graph += message(11, new)
            elif gnum == 13:  # value_info: dropped
                continue
            else:
                graph += graw
        if fixed is None:
            raise SystemExit(f"input {input_name} has no fixed dim {axis}")
        out = b""
        for gnum, gwire, graw, gpayload in fields(graph):
            if gnum == 12:  # outputs: the same fixed size past the batch dim renamed too
                new, _ = rename_dim(gpayload, None, fixed, dim_name)
                out += message(12, new)
            else:
                out += graw
        model += message(7, out)
    return model


def tensor_pb(name, dims, values):
    body = b"".join(varint(1 << 3 | 0) + varint(d) for d in dims)
    body += varint(2 << 3 | 0) + varint(7)  # INT64
    body += message(8, name.encode())
    body += message(9, struct.pack(f"<{len(values)}q", *values))
    return body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--dim", required=True, help="INPUT:AXIS:NAME")
    ap.add_argument("--sizes", required=True)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--shape", default="1,0", help="the input's shape, the varying axis as 0")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    input_name, axis, dim_name = a.dim.split(":")
    axis = int(axis)
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.model_dir, "model.onnx"), "rb") as f:
        data = f.read()
    with open(os.path.join(a.out_dir, "model.onnx"), "wb") as f:
        f.write(patch_model(data, input_name, axis, dim_name))
    rng = random.Random(a.seed)
    shape = [int(x) for x in a.shape.split(",")]
    for k, size in enumerate(int(s) for s in a.sizes.split(",")):
        dims = list(shape)
        dims[axis] = size
        n = 1
        for d in dims:
            n *= d
        folder = os.path.join(a.out_dir, f"test_data_set_{k}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "input_0.pb"), "wb") as f:
            f.write(tensor_pb(input_name, dims, [rng.randrange(a.vocab) for _ in range(n)]))
    print(f"make_input_sets: {a.out_dir}: {input_name} dim {axis} -> {dim_name}, sizes {a.sizes}")


if __name__ == "__main__":
    main()
