#!/usr/bin/env bash
# gpu_memory.sh — issue 7's seed experiment on the GPU machine: one session loaded incrementally from 10K
# to 250K tokens in 10K steps on a few-layer full-width flash-q2 file (CUDA), recording at each step RSS,
# device memory used and every memory category (ds4-bench --memory), next to `ds4 plan` for the same
# context on the same file. The few-layer curve scales to 43 layers by MODEL.md §10.3's per-layer rows
# (docs/MEMORY.md does the arithmetic). Builds nothing; plot afterwards with scripts/plot_bench.sh --memory.
#
#   here:   scripts/gpu_memory.sh --pack BUILD_DIR PACK_DIR     (BUILD_DIR configured with -DDS4_CUDA=ON)
#   there:  scripts/gpu_memory.sh PACK_DIR [OUT_DIR]   (env LAYERS=4, CTX_MAX=250000, LIMIT_S=150, CHUNK=256,
#           KEEP_FILE=1 to leave the generated file in /dev/shm; an existing file is reused)
set -u
if [ "${1:-}" = "--pack" ]; then
  . "$(dirname "$0")/gpu_pack_common.sh"
  B=${2:?build dir}; P=${3:?pack dir}
  rm -rf "$P"; mkdir -p "$P/data" "$P/lib"
  cp "$B/tools/ds4-bench/ds4-bench" "$B/tools/ds4-gen/ds4-gen" "$B/tools/ds4/ds4" "$P/"
  strip "$P/ds4-bench" "$P/ds4-gen" "$P/ds4"
  pack_libs "$P" "$P/ds4-bench" "$P/ds4-gen" "$P/ds4"
  pack_tokenizer "$P"
  cp "$(dirname "$0")/../../shared/data/promessi_sposi.txt" "$P/data/prompt.txt"
  du -sh "$P"; exit 0
fi
P=$(cd "${1:?usage: gpu_memory.sh PACK_DIR [OUT_DIR]}" && pwd)
O=${2:-${OUT:-/tmp/gpu_memory}}; mkdir -p "$O"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export LD_LIBRARY_PATH="$P/lib:${LD_LIBRARY_PATH:-}"
LAYERS=${LAYERS:-4}; CTX_MAX=${CTX_MAX:-250000}; LIMIT_S=${LIMIT_S:-150}; CHUNK=${CHUNK:-256}
echo "gpu_memory: commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(date -u +%F' '%H:%M' UTC')" | tee "$O/summary.txt"
F=/dev/shm/flash-q2-l$LAYERS.gguf
t0=$(date +%s)
[ -e "$F" ] || "$P/ds4-gen" --profile flash-q2 --layers "$LAYERS" --zeros --tokenizer-json "$P/data/tokenizer.json" -o "$F" > "$O/gen.log" 2>&1
echo "gen rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$O/summary.txt"
"$P/ds4" plan -m "$F" --backend cuda --ctx "$CTX_MAX" --chunk "$CHUNK" --json > "$O/plan_cuda_$CTX_MAX.json" 2> "$O/plan.err"
echo "plan rc=$?" | tee -a "$O/summary.txt"
# The bench writes one CSV row per frontier as it goes; the time limit keeps the run inside the budget and
# what it reached is kept.
timeout "$LIMIT_S" "$P/ds4-bench" -m "$F" --cuda --memory --chunk "$CHUNK" --prompt-file "$P/data/prompt.txt" --ctx-max "$CTX_MAX" \
  --csv "$O/memory_flash_q2_l$LAYERS.csv" > "$O/bench.log" 2>&1
echo "bench rc=$? (124 = stopped by the ${LIMIT_S}s limit)" | tee -a "$O/summary.txt"
nvidia-smi --query-gpu=memory.used,memory.total --format=csv | tee -a "$O/summary.txt"
[ -n "${KEEP_FILE:-}" ] || rm -f "$F"  # KEEP_FILE=1: a following call on the same machine reuses it
cut -d, -f1,3,6,8,9 "$O/memory_flash_q2_l$LAYERS.csv" | tee -a "$O/summary.txt"
tail -5 "$O/bench.log" | tee -a "$O/summary.txt"
