#!/usr/bin/env bash
# Replays one reproducer of a crash, hang or silent wrong answer that probing the CLI once found
# (the hardening issues), and checks what it must do now: end within 20 s with exit 0 and the right
# answer, or exit 1 with a coded error naming what was wrong.
#   tests/repros/check.sh TERRACE_BINARY REPRO_NAME
# Each `expect` line runs one command under a 20 s limit and checks its exit status and output.
set -uo pipefail
TERRACE=$1
NAME=$2
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failures=0

# expect STATUS REGEX... -- COMMAND...: the command exits with STATUS within 20 s and its output
# (stdout and stderr) has a line matching each extended regular expression.
expect() {
  local want=$1
  shift
  local patterns=()
  while [ "$1" != "--" ]; do patterns+=("$1"); shift; done
  shift
  local out status
  out=$(timeout 20 "$@" 2>&1)
  status=$?
  if [ "$status" -ne "$want" ]; then
    echo "FAIL ($NAME): exit $status, expected $want (124: still running after 20 s): $*"
    echo "$out" | tail -5
    failures=$((failures + 1))
    return
  fi
  for pattern in "${patterns[@]}"; do
    if ! grep -Eq -- "$pattern" <<<"$out"; then
      echo "FAIL ($NAME): no line matches /$pattern/: $*"
      echo "$out" | tail -5
      failures=$((failures + 1))
      return
    fi
  done
  echo "ok ($NAME): exit $status: $*"
}

# Tier 1 served calls (the CLI's summary of the tiers that ran).
ON_CPU=('ran on .*cpu')

export TERRACE_CACHE_DIR="$WORK/cache"
case "$NAME" in
  C1_*)  # MatMul [0,5] x [5,3] on tier 1: oneDNN died with SIGFPE on AVX-512
    cd "$HERE/$NAME"
    expect 0 "${ON_CPU[@]}" 'output y: float32\[0,3\]' -- \
      "$TERRACE" run model.onnx --input a=in_a.pb --input b=in_b.pb --repeat 20000 --quiet
    expect 0 "${ON_CPU[@]}" 'output y: float32\[0,4\]' -- \
      "$TERRACE" run linear_dynamic_batch.onnx --random-inputs --dim batch=0 --repeat 20000 --quiet
    ;;
  C2_*)  # Gemm transA with K = 0: beta * C broadcast (exp.pb), from tier 1
    cd "$HERE/$NAME"
    expect 0 "${ON_CPU[@]}" 'check y: matches' -- \
      "$TERRACE" run model.onnx --input a=a.pb --input b=b.pb --input c=c.pb --expect y=exp.pb --repeat 20000 --quiet
    ;;
  C3_*)  # Gemm transB with M = N = 0
    cd "$HERE/$NAME"
    expect 0 "${ON_CPU[@]}" 'output y: float32\[0,0\]' -- \
      "$TERRACE" run model.onnx --input a=a.pb --input b=b.pb --input c=c.pb --repeat 20000 --quiet
    ;;
  C4_*)  # RoiAlign output sizes that overflow int64 (2^32 x 2^32, 2^62 x 4) or exceed any memory
    cd "$HERE/$NAME"
    for m in model.onnx model_2p62x4.onnx model_vector_max_size.onnx; do
      expect 1 'InvalidArgument: .*RoiAlign.*output_height x output_width gives a result of more than 2\^40 elements' -- \
        "$TERRACE" run "$m" --input X=X.pb --input rois=rois.pb --input batch_indices=batch_indices.pb
    done
    ;;
  E1_*)  # Gemm transB with N = 0: oneDNN's "could not execute a primitive" escaped uncoded
    cd "$HERE/$NAME"
    expect 0 "${ON_CPU[@]}" 'output y: float32\[3,0\]' 'check y: matches' -- \
      "$TERRACE" run model.onnx --input a=a.pb --input b=b.pb --input c=c.pb --expect y=exp.pb --repeat 20000 --quiet
    ;;
  H1_*)  # a FIFO as the model: open() blocked forever
    mkfifo "$WORK/fifo.onnx"
    expect 1 "IoError: .*fifo.onnx' is not a regular file" -- "$TERRACE" run "$WORK/fifo.onnx" --random-inputs
    expect 1 "IoError: .*fifo.onnx' is not a regular file" -- "$TERRACE" explain "$WORK/fifo.onnx"
    ;;
  H2_*)  # an endless or blocking --expected file: read without limit, or blocked forever (a
         # usage error: the file is an argument of the command)
    mkfifo "$WORK/expected.fifo"
    for f in /dev/urandom "$WORK/expected.fifo"; do
      expect 2 "expected-failures file: .*is not a regular file" -- \
        "$TERRACE" conformance --filter 'test_abs$' --expected "$f"
    done
    ;;
  H3_*)  # a huge fusible region: compile time grew past minutes and the exit waited for it
    cd "$HERE/$NAME"
    export TERRACE_CACHE_DIR=
    for m in fan_1000.onnx chain_20000.onnx; do
      expect 0 'output' -- "$TERRACE" run "$m" --random-inputs --repeat 2 --quiet
    done
    ;;
  H4_*)  # a Loop whose scan output changes shape at iteration 5 of 6, 10^7 or 2^62
    cd "$HERE/$NAME"
    for trip in trip_6.pb trip_1e7.pb trip_2p62.pb; do
      expect 1 'InvalidArgument: Loop.*scan output 0 of iteration 5 is float32\[0\], iteration 0 gave float32\[1\]' -- \
        "$TERRACE" run model.onnx --input trip_count=$trip --input cond=cond.pb --input y=y.pb
    done
    ;;
  H5_*)  # a cache entry that is a FIFO or a link to /dev/zero: the compile blocked or read forever
    cd "$HERE/$NAME"
    # bench waits for the compile (--steady-calls): 20,000 calls of `run` could end before it, on a
    # loaded machine (seen in CI once the interpreter's calls got faster).
    expect 0 "${ON_CPU[@]}" -- "$TERRACE" bench model.onnx --calls 3 --steady-calls 3 --quiet
    entries=("$TERRACE_CACHE_DIR"/cpu/*.o)
    if [ ! -e "${entries[0]}" ]; then
      echo "FAIL ($NAME): the first run left no cache entry in $TERRACE_CACHE_DIR/cpu"
      failures=$((failures + 1))
    else
      # The compile reads the bad entry as a miss, compiles afresh and stores a regular file over
      # it (its job has started within the 20,000 calls, and the exit waits for a running one).
      for bad in fifo /dev/zero; do
        for e in "${entries[@]}"; do
          rm -f "$e"
          if [ $bad = fifo ]; then mkfifo "$e"; else ln -s /dev/zero "$e"; fi
        done
        expect 0 'output out' -- "$TERRACE" run model.onnx --random-inputs --repeat 20000 --quiet
        for e in "${entries[@]}"; do
          if [ ! -f "$e" ] || [ -L "$e" ]; then
            echo "FAIL ($NAME): the cache entry $e ($bad) was not replaced by a compiled object"
            failures=$((failures + 1))
          fi
        done
      done
    fi
    ;;
  S1_*)  # Conv + Relu fused on tier 1 turned -inf into NaN: the answer must be the interpreter's
    cd "$HERE/$NAME"
    for m in conv_relu matmul_relu; do
      x=x_inf.pb
      [ $m = matmul_relu ] && x=x_mm_inf.pb
      expect 0 "${ON_CPU[@]}" 'check y: matches' -- \
        "$TERRACE" run $m.onnx --input x=$x --expect y=y_$m.pb --repeat 20000 --quiet
    done
    ;;
  F1_*)  # a shape input declared int64[2^40] or [1e5]: inference built a 2^40-dim shape (hang, then
         # out of memory), or printed a 1.3 MB error line
    cd "$HERE/$NAME"
    for m in expand_s_2p40.onnx cos_2p40.onnx expand_s_1e5.onnx; do
      expect 1 'InvalidModel: .*node 0 \((Expand|ConstantOfShape)\): input .* is declared with [0-9]+ values, but its length is the rank' -- \
        "$TERRACE" explain "$m"
      if [ "$(timeout 20 "$TERRACE" run "$m" --random-inputs --tier interp 2>&1 | wc -c)" -gt 2000 ]; then
        echo "FAIL ($NAME): $m: more than 2000 bytes of output"
        failures=$((failures + 1))
      fi
    done
    ;;
  F2_*)  # a graph input declared with dim -1 (paddle2onnx's dynamic dim) was refused
    cd "$HERE/$NAME"
    expect 0 'output y: float32\[1,4\]' 'read as dynamic' -- \
      "$TERRACE" run relu_dim_minus1.onnx --random-inputs --tier interp
    ;;
  F3_*)  # external data through symbolic links, as in the Hugging Face cache, was refused
    cd "$HERE/$NAME"
    mkdir -p "$WORK/hf/blobs" "$WORK/hf/snapshots/rev1"
    cp ext_good.onnx "$WORK/hf/blobs/aaa"
    cp good.bin "$WORK/hf/blobs/bbb"
    ln -s ../../blobs/aaa "$WORK/hf/snapshots/rev1/model.onnx"
    ln -s ../../blobs/bbb "$WORK/hf/snapshots/rev1/good.bin"
    expect 0 'output' -- "$TERRACE" run "$WORK/hf/snapshots/rev1/model.onnx" --input x=x4.pb --tier interp
    ln -s /dev/zero "$WORK/hf/blobs/zero"
    rm "$WORK/hf/snapshots/rev1/good.bin"
    ln -s ../../blobs/zero "$WORK/hf/snapshots/rev1/good.bin"
    expect 1 'InvalidModel: .*good.bin.*symbolic link' -- \
      "$TERRACE" run "$WORK/hf/snapshots/rev1/model.onnx" --input x=x4.pb --tier interp
    ;;
  F6_*)  # HardSigmoid(NaN) gave 1.0 (ONNX's reference and ONNX Runtime: NaN), also after a Conv
    cd "$HERE/$NAME"
    for tier in interp cpu; do
      expect 0 'check y: matches' -- "$TERRACE" run u_HardSigmoid.onnx --input x=x64.pb --expect y=y_HardSigmoid.pb \
        --tier $tier --warm --repeat 3 --quiet
      expect 0 'check y: matches' -- "$TERRACE" run c_ConvHardSigmoid.onnx --input x=x1_1_8_8.pb \
        --expect y=y_ConvHardSigmoid.pb --tier $tier --warm --repeat 3 --quiet
    done
    ;;
  F7_*)  # a cached object that fails validation stayed in the cache: no later process recompiled
    cd "$HERE/$NAME"
    expect 0 'region 0 .*cpu, compiled' -- "$TERRACE" run ew.onnx --input x=x.pb --expect y=y.pb --warm --repeat 2
    entries=("$TERRACE_CACHE_DIR"/cpu/*.o)
    # a tanh coefficient of the prelude (0.4678368866f) patched to 0.9f, the checksum recomputed
    expect 0 'occurrences [1-9]' -- /usr/bin/python3 tamper.py "${entries[0]}" 5188ef3e 6666663f
    expect 0 'region 0 .*validation failed' -- "$TERRACE" run ew.onnx --input x=x.pb --expect y=y.pb --warm --repeat 2
    expect 0 'region 0 .*cpu, compiled.*validation passed' -- \
      "$TERRACE" run ew.onnx --input x=x.pb --expect y=y.pb --warm --repeat 2
    ;;
  F8_*)  # `terrace compile` into a cache folder it cannot write printed PASSED
    cd "$HERE/$NAME"
    echo x > "$WORK/not_a_dir"
    expect 1 'the cache cannot be written' 'FAILED' -- "$TERRACE" compile ew.onnx --tier cpu --cache-dir "$WORK/not_a_dir"
    expect 0 '1 regions: 1 compiled' 'PASSED' -- "$TERRACE" compile ew.onnx --tier cpu --cache-dir "$WORK/cc"
    ;;
  F10_*)  # run --serve --expect with no count on stdin: SIGSEGV comparing an output never made
    cd "$HERE/$NAME"
    expect 1 'no call was made' 'FAILED' -- bash -c "\"\$0\" run ew.onnx --input x=x.pb --serve --expect y=y.pb < /dev/null" "$TERRACE"
    expect 1 'no call was made' 'FAILED' -- bash -c "printf '\n\n' | \"\$0\" run ew.onnx --input x=x.pb --serve --expect y=y.pb" "$TERRACE"
    expect 0 'check y: matches' -- bash -c "echo 2 | \"\$0\" run ew.onnx --input x=x.pb --serve --expect y=y.pb" "$TERRACE"
    ;;
  *)
    echo "unknown reproducer $NAME"
    exit 2
    ;;
esac
exit $((failures > 0))
