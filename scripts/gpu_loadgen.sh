#!/usr/bin/env bash
# gpu_loadgen.sh — issue #8's serving series on the GPU machine: a few-layer full-width flash-q2 file
# (ds4-gen --zeros, generated there into /dev/shm; every weight byte is still read, so rates measure
# bandwidth and launch overhead, not numerics) served by the CUDA ds4-server, driven by ds4-loadgen
# through scripts/loadgen_series.sh (one process with N sessions, and N separate processes). Builds
# nothing; plot the CSV back here with scripts/loadgen_series.sh --plot-only DIR.
#
#   here:   scripts/gpu_loadgen.sh --pack BUILD_DIR PACK_DIR     (BUILD_DIR configured with -DDS4_CUDA=ON)
#   there:  scripts/gpu_loadgen.sh PACK_DIR [OUT_DIR]
#           env: LAYERS=4 SERIES="1 2 4 8 16 32 64" PROMPT=256 GEN=32 SEP_MAX=4 BATCH_TOKENS=512 CTX=4096
#                SERIES_TIMEOUT=150 (seconds; what finished by then is kept)
set -u
if [ "${1:-}" = "--pack" ]; then
  . "$(dirname "$0")/gpu_pack_common.sh"
  B=${2:?build dir}; P=${3:?pack dir}
  rm -rf "$P"; mkdir -p "$P/lib" "$P/data"
  cp "$B/tools/ds4-server/ds4-server" "$B/tools/ds4-gen/ds4-gen" "$B/tools/ds4-loadgen/ds4-loadgen" "$P/"
  cp "$B/tests/server/test_server_batch" "$P/" 2>/dev/null || echo "no test_server_batch in $B: the CUDA batched==solo check is skipped"
  strip "$P"/ds4-server "$P"/ds4-gen "$P"/ds4-loadgen "$P"/test_server_batch 2>/dev/null
  pack_tokenizer "$P"
  pack_libs "$P" "$P"/ds4-server "$P"/ds4-gen "$P"/ds4-loadgen "$P"/test_server_batch
  du -sh "$P"; exit 0
fi
P=$(cd "${1:?usage: gpu_loadgen.sh PACK_DIR [OUT_DIR]}" && pwd)
O=${2:-${OUT:-/tmp/gpu_loadgen}}; mkdir -p "$O"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export LD_LIBRARY_PATH="$P/lib:${LD_LIBRARY_PATH:-}"
LAYERS=${LAYERS:-4}; SERIES=${SERIES:-"1 2 4 8 16 32 64"}; PROMPT=${PROMPT:-256}; GEN=${GEN:-32}
SEP_MAX=${SEP_MAX:-4}; BATCH_TOKENS=${BATCH_TOKENS:-512}; CTX=${CTX:-4096}; SERIES_TIMEOUT=${SERIES_TIMEOUT:-150}
echo "gpu_loadgen: commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(date -u +%F' '%H:%M' UTC'), layers $LAYERS" | tee "$O/summary.txt"
t0=$(date +%s)
# Correctness first: the batching server's checks (batched == solo token for token, no starvation,
# prefix-cache hits == cold, KV budget) on the CUDA backend with the trained tiny model.
if [ -x "$P/test_server_batch" ]; then
  (cd "$ROOT" && DS4_TEST_BACKEND=cuda DS4_SERVER_TEST_MODEL="$ROOT/models/ds4-tiny-chat.gguf" timeout 90 "$P/test_server_batch") > "$O/test_cuda.log" 2>&1
  echo "test_server_batch on CUDA rc=$? ($(grep -c '^\[       OK' "$O/test_cuda.log") ok) in $(( $(date +%s) - t0 )) s" | tee -a "$O/summary.txt"
fi
. "$ROOT/scripts/gpu_pack_common.sh"
F=$(flash_gen "$P/ds4-gen" "$LAYERS" "$P/data/tokenizer.json" 2> "$O/gen.log")
echo "ds4-gen rc=$? in $(( $(date +%s) - t0 )) s: $F (ROUTING=${ROUTING:-distinct})" | tee -a "$O/summary.txt"
timeout "$SERIES_TIMEOUT" bash "$ROOT/scripts/loadgen_series.sh" --server "$P/ds4-server" --loadgen "$P/ds4-loadgen" --model "$F" --out /tmp/series \
  --series "$SERIES" --prompt "$PROMPT" --gen "$GEN" --separate-max "$SEP_MAX" \
  --server-args "--cuda --ctx $CTX --max-batch-tokens $BATCH_TOKENS --prefix-cache-mb 0" > "$O/series.log" 2>&1
echo "series rc=$? after $(( $(date +%s) - t0 )) s" | tee -a "$O/summary.txt"
cp /tmp/series/series.csv "$O/" 2>/dev/null
for l in /tmp/series/server_one_n*.log; do echo "== $l"; head -6 "$l"; done > "$O/servers.txt" 2>/dev/null
cat /tmp/series/loadgen_*.txt > "$O/loadgen.txt" 2>/dev/null
rm -f "$F"
cat "$O/series.csv" | tee -a "$O/summary.txt"
