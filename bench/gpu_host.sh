#!/usr/bin/env bash
# One measuring session on the GPU host (the `device` tool's machine: an H100, 16 CPU cores,
# PyTorch and ONNX Runtime installed, no Debian libraries): Terrace's tiers against its peers on the
# zoo, every output checked, results under $OUT. Run from the repository root with the bundle built
# here (../shared/tools/device-bundle .gpu build/tools/terrace build/tests/test_gpu ...):
#   bash bench/gpu_host.sh [MODELS] [CALLS]      (default: mlp,resnet50,mobilenetv2,bert,gpt2 and 30)
set -uo pipefail
models=${1:-mlp,resnet50,mobilenetv2,bert,gpt2}
calls=${2:-30}
out=${OUT:-/tmp/gpu-host-out}
mkdir -p "$out"
root=$(pwd)
printf '#!/usr/bin/env bash\nexec %q/.gpu/run terrace "$@"\n' "$root" > /tmp/terrace && chmod +x /tmp/terrace
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)'
  python3 -c 'import torch, onnxruntime; print("torch", torch.__version__, "onnxruntime", onnxruntime.__version__)'
} 2>&1 | tee "$out/machine.txt"
echo "== export"; python3 tools/make_models.py --out /tmp/m ${models//,/ } 2>&1 | tail -2
if [ -x .gpu/run ] && [ -e .gpu/bin/test_gpu.xz ]; then
  echo "== test_gpu"; .gpu/run test_gpu 2>&1 | tail -15 | tee "$out/test_gpu.txt"
fi
echo "== CPU: tier 1 against ONNX Runtime and PyTorch eager"
python3 bench/compare.py --models "$models" --calls "$calls" --warmup 5 --tiers cpu \
  --peers onnxruntime,pytorch-eager --terrace /tmp/terrace --models-dir /tmp/m --out "$out/cpu" 2>&1 |
  grep -v '^compare: ' | tee "$out/cpu.log"
echo "== GPU: tier 2 against PyTorch eager and torch.compile"
python3 bench/compare.py --models "$models" --calls "$calls" --warmup 5 --device cuda --tiers gpu \
  --peers pytorch-eager,torch.compile-default --terrace /tmp/terrace --models-dir /tmp/m --out "$out/gpu" 2>&1 |
  grep -v '^compare: ' | tee "$out/gpu.log"
# The device tool returns at most 8 files: the tables and JSON of both runs travel as one archive.
tar czf "$out/results.tgz" -C "$out" cpu gpu 2>/dev/null && rm -rf "$out/cpu" "$out/gpu"
ls -la "$out"
