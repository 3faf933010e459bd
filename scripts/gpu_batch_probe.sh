#!/usr/bin/env bash
# gpu_batch_probe.sh — where the time of one batched decode step goes on the GPU machine (issue 8):
# the engine alone (bench_batch_decode: N sessions in one Engine::step vs stepped one by one, no HTTP)
# on a few-layer full-width flash-q2 file, then per-kernel device time at N = 1 and N = 8 with Nsight
# Compute (only the kernel-duration metric, so one pass per kernel), so kernels whose time grows with
# the batch stand out. Builds nothing.
#
#   here:   scripts/gpu_batch_probe.sh --pack BUILD_DIR PACK_DIR   (BUILD_DIR configured with -DDS4_CUDA=ON)
#   there:  scripts/gpu_batch_probe.sh PACK_DIR [OUT_DIR]   (env LAYERS=4 PROMPT=512 NCU_N="1 8")
set -u
if [ "${1:-}" = "--pack" ]; then
  . "$(dirname "$0")/gpu_pack_common.sh"
  B=${2:?build dir}; P=${3:?pack dir}
  rm -rf "$P"; mkdir -p "$P/lib" "$P/data"
  cp "$B/bench/runtime/bench_batch_decode" "$B/tools/ds4-gen/ds4-gen" "$P/"
  strip "$P"/bench_batch_decode "$P"/ds4-gen
  pack_tokenizer "$P"
  pack_libs "$P" "$P"/bench_batch_decode "$P"/ds4-gen
  du -sh "$P"; exit 0
fi
P=$(cd "${1:?usage: gpu_batch_probe.sh PACK_DIR [OUT_DIR]}" && pwd)
O=${2:-${OUT:-/tmp/gpu_batch_probe}}; mkdir -p "$O"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export LD_LIBRARY_PATH="$P/lib:${LD_LIBRARY_PATH:-}"
LAYERS=${LAYERS:-4}; PROMPT=${PROMPT:-512}; NCU_N=${NCU_N:-"1 8"}
echo "gpu_batch_probe: commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(date -u +%F' '%H:%M' UTC'), layers $LAYERS" | tee "$O/summary.txt"
. "$ROOT/scripts/gpu_pack_common.sh"
F=$(flash_gen "$P/ds4-gen" "$LAYERS" "$P/data/tokenizer.json" 2> "$O/gen.log")
echo "model $F (ROUTING=${ROUTING:-distinct})" | tee -a "$O/summary.txt"
"$P/bench_batch_decode" --backend cuda --model "$F" --prompt "$PROMPT" --benchmark_min_time=1 \
  --benchmark_filter='/(1|2|4|8|16|32)/' > "$O/engine.log" 2>&1
echo "engine bench rc=$?" | tee -a "$O/summary.txt"
grep -E '^BM_' "$O/engine.log" | tee -a "$O/summary.txt"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  for N in $NCU_N; do
    # A short prompt keeps the prefill's kernels few; min_time ≈ 0 runs the decode step a handful of times.
    timeout 200 "$NCU" --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
      "$P/bench_batch_decode" --backend cuda --model "$F" --prompt 16 --benchmark_min_time=0.000001 \
      --benchmark_filter="BM_DecodeBatched/$N/" > "$O/ncu_n$N.log" 2>&1
    echo "ncu N=$N rc=$?" | tee -a "$O/summary.txt"
  done
else
  echo "no ncu" | tee -a "$O/summary.txt"
fi
