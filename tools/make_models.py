#!/usr/bin/env python3
"""Exports Terrace's model zoo: real architectures with random weights, as ONNX, each with a saved
input and PyTorch's output in the ONNX test-data layout (model.onnx, test_data_set_0/input_N.pb,
output_N.pb), so `terrace conformance DIR` and `terrace run --expect` can check them.

  tools/make_models.py [--out models] [--small] [NAME ...]

Full-size models: mlp, resnet50, mobilenetv2, bert (BERT-base encoder), gpt2 (GPT-2 small decoder).
--small exports reduced versions of the same architectures (fewer layers, smaller widths) for tests.
"""
import argparse
import inspect
import math
import os
import sys
import time

if __name__ == "__main__":
    print("make_models: loading PyTorch...", flush=True)  # the import alone takes seconds
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from onnx import numpy_helper

OPSET = 17  # LayerNormalization exports as one op from opset 17
# Newer torch exports through dynamo by default, at opsets beyond 17: keep the classic exporter.
# Decided once, from the real torch.onnx.export (bench/compare.py wraps it later).
LEGACY_EXPORT = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
DYNAMO = False  # --dynamo: torch's current default exporter instead (opsets 18+, needs onnxscript)


class MLP(nn.Module):
    def __init__(self, d_in=784, hidden=(512, 256), d_out=10):
        super().__init__()
        dims = (d_in,) + tuple(hidden)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))
        self.head = nn.Linear(dims[-1], d_out)

    def forward(self, x):
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.head(x)


class Attention(nn.Module):
    def __init__(self, hidden, heads, causal):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=-1)
        shape = (b, s, self.heads, h // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads)
        if self.causal:
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        out = scores.softmax(-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, s, h))


class Block(nn.Module):
    """A transformer layer: post-norm (BERT) or pre-norm (GPT-2), GELU feed-forward."""

    def __init__(self, hidden, heads, causal, pre_norm):
        super().__init__()
        self.attn = Attention(hidden, heads, causal)
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
        self.pre_norm = pre_norm

    def ff(self, x):
        return self.fc2(F.gelu(self.fc1(x)))

    def forward(self, x):
        if self.pre_norm:
            x = x + self.attn(self.ln1(x))
            return x + self.ff(self.ln2(x))
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.ff(x))


class Transformer(nn.Module):
    def __init__(self, vocab, seq, hidden, heads, layers, causal):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, causal, pre_norm=causal) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.causal = causal
        self.head = nn.Linear(hidden, vocab, bias=False) if causal else None

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        x = self.tok(ids) + self.pos(pos)
        if not self.causal:
            x = self.norm(x)  # BERT normalises the embeddings
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)) if self.causal else x


def bert(small):
    if small:
        return Transformer(vocab=100, seq=16, hidden=64, heads=4, layers=2, causal=False), ("ids", (2, 16))
    return Transformer(vocab=30522, seq=128, hidden=768, heads=12, layers=12, causal=False), ("ids", (1, 128))


def gpt2(small):
    if small:
        return Transformer(vocab=100, seq=16, hidden=64, heads=4, layers=2, causal=True), ("ids", (1, 16))
    return Transformer(vocab=50257, seq=128, hidden=768, heads=12, layers=12, causal=True), ("ids", (1, 128))


def resnet50(small):
    if small:
        m = torchvision.models.resnet.ResNet(torchvision.models.resnet.Bottleneck, [1, 1, 1, 1], num_classes=10)
        return m, ("image", (1, 3, 64, 64))
    return torchvision.models.resnet50(weights=None), ("image", (1, 3, 224, 224))


def mobilenetv2(small):
    if small:
        return torchvision.models.mobilenet_v2(weights=None, width_mult=0.25, num_classes=10), ("image", (1, 3, 64, 64))
    return torchvision.models.mobilenet_v2(weights=None), ("image", (1, 3, 224, 224))


def mlp(small):
    if small:
        return MLP(64, (32, 16), 4), ("x", (2, 64))
    return MLP(), ("x", (1, 784))


MODELS = {"mlp": mlp, "resnet50": resnet50, "mobilenetv2": mobilenetv2, "bert": bert, "gpt2": gpt2}


def save_pb(array, path, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


class Steps:
    """Prints a line as each step of an export starts, with the time the step before it took."""

    def __init__(self, label):
        self.label = label
        self.start = self.last = time.monotonic()
        self.first = True

    def __call__(self, what):
        now = time.monotonic()
        took = "" if self.first else f" (previous step {now - self.last:.1f} s)"
        print(f"make_models: {self.label}: {what}...{took}", flush=True)
        self.first, self.last = False, now

    def total(self):
        return time.monotonic() - self.start


def export(name, out_dir, small):
    label = name + ("_small" if small else "")
    step = Steps(label)
    step("building the model with random weights")
    torch.manual_seed(0)
    model, (input_name, shape) = MODELS[name](small)
    model.eval()
    if input_name == "ids":
        x = torch.randint(0, 100 if small else 1000, shape, dtype=torch.int64)
    else:
        x = torch.randn(*shape)
    with torch.no_grad():
        # Random weights leave BatchNorm statistics at 0/1; give them spread so they matter.
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        step("running PyTorch on a random input for the reference output")
        y = model(x)
    folder = os.path.join(out_dir, name + ("_small" if small else ""))
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    if DYNAMO:  # torch's current default exporter, at its default opset (18 and above)
        step("exporting ONNX (torch's dynamo exporter, its default opset)")
        torch.onnx.export(model, (x,), os.path.join(folder, "model.onnx"), input_names=[input_name],
                          output_names=["output"], dynamic_axes={input_name: {0: "batch"}, "output": {0: "batch"}},
                          dynamo=True, external_data=False)
    else:
        step(f"exporting ONNX (opset {OPSET})")
        torch.onnx.export(model, (x,), os.path.join(folder, "model.onnx"), opset_version=OPSET,
                          input_names=[input_name], output_names=["output"],
                          dynamic_axes={input_name: {0: "batch"}, "output": {0: "batch"}}, **LEGACY_EXPORT)
    step("writing test_data_set_0 (input and PyTorch's output)")
    save_pb(x.numpy(), os.path.join(data, "input_0.pb"), input_name)
    save_pb(y.numpy(), os.path.join(data, "output_0.pb"), "output")
    print(f"make_models: wrote {folder} ({input_name}{list(shape)} -> output{list(y.shape)}) in {step.total():.1f} s",
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="models")
    parser.add_argument("--small", action="store_true", help="reduced versions for tests")
    parser.add_argument("--dynamo", action="store_true",
                        help="export with torch's dynamo exporter at its default opset (torch 2.5+ with onnxscript)")
    parser.add_argument("names", nargs="*", help=f"models to export (default: all of {', '.join(MODELS)})")
    args = parser.parse_args()
    names = args.names or list(MODELS)
    global DYNAMO
    DYNAMO = args.dynamo
    for name in names:
        if name not in MODELS:
            sys.exit(f"make_models: unknown model '{name}' (known: {', '.join(MODELS)})")
    for i, name in enumerate(names, 1):
        print(f"make_models: [{i}/{len(names)}] {name}{' (small)' if args.small else ''} into {args.out}", flush=True)
        export(name, args.out, args.small)


if __name__ == "__main__":
    main()
