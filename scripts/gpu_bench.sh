#!/usr/bin/env bash
# gpu_bench.sh — ds4-bench on the GPU machine: CUDA prefill/decode rates by context frontier on a
# few-layer full-width flash-q2 file (generated there into /dev/shm; FORMATS.md §3.7 all-zero data:
# every weight byte is still read, so the rates measure bandwidth and launch overhead, not numerics)
# and on the trained tiny-chat model. Builds nothing; plot the CSVs afterwards with scripts/plot_bench.sh.
#
#   here:   scripts/gpu_bench.sh --pack BUILD_DIR PACK_DIR     (BUILD_DIR configured with -DDS4_CUDA=ON)
#   there:  scripts/gpu_bench.sh PACK_DIR [OUT_DIR]            (env LAYERS=4, CTX_MAX=8192, GEN=64, BENCH_FLAGS="--cuda-graphs")
set -u
if [ "${1:-}" = "--pack" ]; then
  . "$(dirname "$0")/gpu_pack_common.sh"
  B=${2:?build dir}; P=${3:?pack dir}
  rm -rf "$P"; mkdir -p "$P/lib" "$P/data"
  cp "$B/tools/ds4-bench/ds4-bench" "$B/tools/ds4-gen/ds4-gen" "$P/"
  pack_tokenizer "$P"
  cp "$(dirname "$0")/../../shared/data/promessi_sposi.txt" "$P/data/prompt.txt"
  pack_libs "$P" "$P/ds4-bench" "$P/ds4-gen"
  du -sh "$P"; exit 0
fi
P=$(cd "${1:?usage: gpu_bench.sh PACK_DIR [OUT_DIR]}" && pwd)
O=${2:-${OUT:-/tmp/gpu_bench}}; mkdir -p "$O"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export LD_LIBRARY_PATH="$P/lib:${LD_LIBRARY_PATH:-}"
LAYERS=${LAYERS:-4}; CTX_MAX=${CTX_MAX:-8192}; GEN=${GEN:-64}
echo "gpu_bench: commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(date -u +%F' '%H:%M' UTC')" | tee "$O/summary.txt"
. "$ROOT/scripts/gpu_pack_common.sh"
F=$(flash_gen "$P/ds4-gen" "$LAYERS" "$P/data/tokenizer.json" 2> "$O/gen.log")
echo "model $F (ROUTING=${ROUTING:-distinct})" | tee -a "$O/summary.txt"
"$P/ds4-bench" -m "$F" --cuda ${BENCH_FLAGS:-} --prompt-file "$P/data/prompt.txt" --ctx-start 2048 --ctx-max "$CTX_MAX" --step-incr 2048 \
  -n "$GEN" --csv "$O/flash_q2_l$LAYERS.csv" > "$O/flash.log" 2>&1; echo "flash-q2 $LAYERS layers rc=$?" | tee -a "$O/summary.txt"
"$P/ds4-bench" -m "$ROOT/models/ds4-tiny-chat.gguf" --cuda --prompt-file "$P/data/prompt.txt" --ctx-start 2048 \
  --ctx-max "$CTX_MAX" --step-incr 2048 -n "$GEN" --csv "$O/tiny_chat_cuda.csv" > "$O/tiny.log" 2>&1; echo "tiny-chat rc=$?" | tee -a "$O/summary.txt"
rm -f "$F"
for c in "$O"/*.csv; do echo "== $(basename "$c")"; cut -d, -f1-9 "$c"; done | tee -a "$O/summary.txt"
