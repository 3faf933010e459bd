#!/usr/bin/env bash
# gpu_graphs_check.sh — one short GPU run for step graphs (issues 5 and 8): the graph and emitted-row
# tests (CudaFused, CudaGraphs, CudaBatch graph tests: graphs on ≡ off bit for bit, emitting and batched
# steps replayed), then graphs on vs off on a few-layer flash-q2 file (distinct routing): ds4-bench decode
# at 2K … 32K, bench_batch_decode at N = 1, 8, 32, and cuda_bench's whole-model decode line. Prints a
# summary to stdout (the run's output tail). Builds nothing.
#
#   here:   scripts/gpu_graphs_check.sh --pack BUILD_DIR PACK_DIR   (BUILD_DIR configured with -DDS4_CUDA=ON)
#   there:  scripts/gpu_graphs_check.sh PACK_DIR [OUT_DIR]          (env LAYERS=4, GEN=32, CTX_MAX=32768)
# Env: SKIP_TESTS=1 (measurements only); OLD=DIR holding an earlier build's ds4-bench and bench_batch_decode
# (and lib/), run graphs on the same way for a before/after line. LAYERS ≥ 4: layers 0-1 have no
# compressor (ratio 0), so a 2-layer file emits no compressed row and cannot show emitting steps.
set -u
if [ "${1:-}" = "--pack" ]; then
  . "$(dirname "$0")/gpu_pack_common.sh"
  B=${2:?build dir}; P=${3:?pack dir}
  rm -rf "$P"; mkdir -p "$P/lib" "$P/data"
  cp "$B/tests/cuda/test_cuda_ops" "$B/tests/cuda/test_cuda_model" "$B/tests/cuda/cuda_bench" \
     "$B/tools/ds4-gen/ds4-gen" "$B/tools/ds4-bench/ds4-bench" "$B/bench/runtime/bench_batch_decode" "$P/"
  strip "$P"/test_cuda_ops "$P"/test_cuda_model "$P"/cuda_bench "$P"/ds4-gen "$P"/ds4-bench "$P"/bench_batch_decode
  pack_tokenizer "$P"
  cp "$(dirname "$0")/../../shared/data/promessi_sposi.txt" "$P/data/prompt.txt"
  pack_libs "$P" "$P"/test_cuda_ops "$P"/test_cuda_model "$P"/cuda_bench "$P"/ds4-gen "$P"/ds4-bench "$P"/bench_batch_decode
  du -sh "$P"; exit 0
fi
P=$(cd "${1:?usage: gpu_graphs_check.sh PACK_DIR [OUT_DIR]}" && pwd)
O=${2:-${OUT:-/tmp/gpu_graphs_check}}; mkdir -p "$O"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export LD_LIBRARY_PATH="$P/lib:${LD_LIBRARY_PATH:-}"
export DS4_CUDA_TEST_DATA="$P/data"
LAYERS=${LAYERS:-4}; GEN=${GEN:-32}; CTX_MAX=${CTX_MAX:-32768}
echo "gpu_graphs_check: commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(date -u +%F' '%H:%M' UTC')"
. "$ROOT/scripts/gpu_pack_common.sh"
for prof in tiny tiny-quant; do
  [ -e "$P/data/$prof-seed1.gguf" ] || "$P/ds4-gen" --profile $prof --seed 1 --threads 16 -o "$P/data/$prof-seed1.gguf" > /dev/null
done
[ -e "$P/data/ds4-tiny-chat.gguf" ] || ln -sf "$ROOT/models/ds4-tiny-chat.gguf" "$P/data/ds4-tiny-chat.gguf"
flash_gen "$P/ds4-gen" "$LAYERS" "$P/data/tokenizer.json" > /dev/null 2> "$O/gen.log" &  # while the tests run
GEN_PID=$!

t0=$(date +%s)
if [ -z "${SKIP_TESTS:-}" ]; then
timeout 60 "$P/test_cuda_ops" --gtest_color=no --gtest_filter='CudaFused.*' > "$O/ops.log" 2>&1; echo "ops (CudaFused) rc=$?"
timeout 120 "$P/test_cuda_model" --gtest_color=no --gtest_filter='CudaGraphs.*:CudaBatch.*Graphs*' > "$O/model.log" 2>&1
echo "model (CudaGraphs, CudaBatch graphs) rc=$? in $(( $(date +%s) - t0 )) s"
grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|FAIL|^MODEL .*graphs|^BATCH ' "$O/ops.log" "$O/model.log" | grep -v ' ok$' | head -40
fi
wait $GEN_PID
F=/dev/shm/flash-q2-l$LAYERS-${ROUTING:-distinct}.gguf
[ -e "$F" ] || { echo "no flash file"; cat "$O/gen.log" | tail -5; exit 1; }
echo "model $F"
# frontier, prefill tok/s, decode tok/s
for run in new:--cuda-graphs new:--no-cuda-graphs ${OLD:+old:--cuda-graphs}; do
  b=${run%%:*}; g=${run#*:}; D=$P; [ "$b" = old ] && D=$OLD
  LD_LIBRARY_PATH="$D/lib:$LD_LIBRARY_PATH" timeout 60 "$D/ds4-bench" -m "$F" --cuda $g --prompt-file "$P/data/prompt.txt" \
    --ctx-start 2048 --ctx-max "$CTX_MAX" --step-mul 2 -n "$GEN" --csv "$O/bench-$b$g.csv" > "$O/bench-$b$g.log" 2>&1
  echo "ds4-bench $b $g rc=$?"; cut -d, -f1,3,5 "$O/bench-$b$g.csv" 2>/dev/null
done
for run in new: new:--no-cuda-graphs ${OLD:+old:}; do
  b=${run%%:*}; g=${run#*:}; D=$P; [ "$b" = old ] && D=$OLD
  LD_LIBRARY_PATH="$D/lib:$LD_LIBRARY_PATH" timeout 60 "$D/bench_batch_decode" --backend cuda --model "$F" --prompt 256 $g \
    --benchmark_min_time=0.3 --benchmark_filter='BM_DecodeBatched/(1|8|32)/' > "$O/batch-$b$g.log" 2>&1
  echo "bench_batch_decode $b ${g:-graphs on} rc=$?"; grep -E '^BM_' "$O/batch-$b$g.log"
done
timeout 40 "$P/cuda_bench" --models-only "$F" > "$O/cuda_bench.log" 2>&1; echo "cuda_bench rc=$?"
grep -E 'BENCH model .* graphs' "$O/cuda_bench.log"
