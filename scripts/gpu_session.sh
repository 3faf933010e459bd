#!/usr/bin/env bash
# gpu_session.sh — one device call that re-checks and re-measures everything the CUDA issues report:
# gpu_check.sh (op + model parity, batched ≡ solo, per-stage decode breakdown, 2-layer flash-q2 file),
# gpu_batch_probe.sh (engine-only batched decode, N = 1..32, 4-layer file), ds4-bench on the full 43-layer
# flash-q2 file (prefill and greedy decode at 2K…32K frontiers, chunk 2048) and gpu_loadgen.sh (the
# serving series through ds4-server on a flash-q2 file of LOAD_LAYERS layers). Builds nothing.
#
#   here:   scripts/gpu_session.sh --pack BUILD_DIR PACK_TARBALL   (BUILD_DIR configured with -DDS4_CUDA=ON)
#   there:  scripts/gpu_session.sh PACK_TARBALL [OUT_DIR]
#           env: LOAD_LAYERS=43 SERIES="1 8 32" PROMPT=1024 GEN=128 SERIES_TIMEOUT=240
#                ROUTING=distinct|tied (gpu_pack_common.sh flash_gen: the benchmark files' routing)
#                GRAPHS_CTX_MAX=8192: a second ds4-bench walk with BENCH_FLAGS2 (default --no-cuda-graphs) to there,
#                  as many decode tokens as the first (ds4-bench has no warm-up: equal counts compare equal)
#                OPS_FILTER (gpu_check.sh), SKIP_PROBE=1 / SKIP_LOAD=1: without the batch probe / the serving series
#                GEN43=32: greedy decode tokens per frontier of the 43-layer walk
#                CHECK_FLASH_LAYERS=2: gpu_check's flash-q2 stage bench file (0 skips it)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = "--pack" ]; then
  B=${2:?build dir}; T=${3:?pack tarball}
  W=$(mktemp -d)
  bash "$HERE/gpu_check.sh" --pack "$B" "$W/check" > /dev/null
  bash "$HERE/gpu_batch_probe.sh" --pack "$B" "$W/probe" > /dev/null
  bash "$HERE/gpu_loadgen.sh" --pack "$B" "$W/load" > /dev/null
  rm -f "$W/load/test_server_batch"  # the server-level CUDA check is test_server_batch's own run (90 s)
  bash "$HERE/gpu_bench.sh" --pack "$B" "$W/bench" > /dev/null  # ds4-bench, ds4-gen, their libs, prompt
  strip "$W/bench/ds4-bench" "$W/bench/ds4-gen"
  strip "$W"/check/test_cuda_ops "$W"/check/test_cuda_model "$W"/check/cuda_bench "$W"/check/ds4-gen 2>/dev/null
  mkdir -p "$(dirname "$T")"
  (cd "$W" && tar cf - check probe bench load | xz -9 -T2 > "$T")
  rm -rf "$W"; ls -la "$T"; exit 0
fi
T=$(cd "$(dirname "${1:?usage: gpu_session.sh PACK_TARBALL [OUT_DIR]}")" && pwd)/$(basename "$1")
O=${2:-${OUT:-/tmp/gpu_session}}; mkdir -p "$O"
P=/tmp/gpu_session_pack; rm -rf "$P"; mkdir -p "$P" && tar xJf "$T" -C "$P"
t0=$(date +%s)
FLASH_LAYERS=${CHECK_FLASH_LAYERS:-2} bash "$HERE/gpu_check.sh" "$P/check" "$O/check" > "$O/check.txt" 2>&1
echo "gpu_check rc=$? in $(( $(date +%s) - t0 )) s"
if [ -z "${SKIP_PROBE:-}" ]; then
  LAYERS=4 PROMPT=512 NCU_N="" bash "$HERE/gpu_batch_probe.sh" "$P/probe" "$O/probe" > "$O/probe.txt" 2>&1
  echo "gpu_batch_probe rc=$? at $(( $(date +%s) - t0 )) s"
fi
rm -f /dev/shm/flash-q2-l4-*.gguf
. "$HERE/gpu_pack_common.sh"
F=$(flash_gen "$P/bench/ds4-gen" 43 "$P/bench/data/tokenizer.json" 2> /dev/null)
echo "43-layer file $F (ROUTING=${ROUTING:-distinct}) at $(( $(date +%s) - t0 )) s"
mkdir -p "$O/bench43"
LD_LIBRARY_PATH="$P/bench/lib:${LD_LIBRARY_PATH:-}" timeout 120 "$P/bench/ds4-bench" -m "$F" --cuda ${BENCH_FLAGS:-} --chunk 2048 \
  --prompt-file "$P/bench/data/prompt.txt" --ctx-start 2048 --ctx-max 32768 --step-mul 2 --gen-tokens "${GEN43:-32}" \
  --csv "$O/bench43/bench_flash_q2_l43.csv" > "$O/bench43/bench.log" 2>&1
echo "ds4-bench 43 layers rc=$? at $(( $(date +%s) - t0 )) s"
if [ -n "${GRAPHS_CTX_MAX:-}" ]; then  # the same walk with BENCH_FLAGS2 (graphs off by default), to GRAPHS_CTX_MAX
  LD_LIBRARY_PATH="$P/bench/lib:${LD_LIBRARY_PATH:-}" timeout 120 "$P/bench/ds4-bench" -m "$F" --cuda ${BENCH_FLAGS2:---no-cuda-graphs} --chunk 2048 \
    --prompt-file "$P/bench/data/prompt.txt" --ctx-start 2048 --ctx-max "$GRAPHS_CTX_MAX" --step-mul 2 --gen-tokens "${GEN43:-32}" \
    --csv "$O/bench43/bench_flash_q2_l43_b.csv" > "$O/bench43/bench_b.log" 2>&1
  echo "ds4-bench 43 layers ${BENCH_FLAGS2:---no-cuda-graphs} rc=$? at $(( $(date +%s) - t0 )) s"
fi
[ "${LOAD_LAYERS:-43}" = 43 ] || rm -f "$F"  # else gpu_loadgen's flash_gen reuses it
if [ -z "${SKIP_LOAD:-}" ]; then
  LAYERS=${LOAD_LAYERS:-43} SERIES=${SERIES:-"1 8 32"} PROMPT=${PROMPT:-1024} GEN=${GEN:-128} SEP_MAX=0 BATCH_TOKENS=512 \
    CTX=8192 SERIES_TIMEOUT=${SERIES_TIMEOUT:-240} bash "$HERE/gpu_loadgen.sh" "$P/load" "$O/load" > "$O/load.txt" 2>&1
  echo "gpu_loadgen rc=$? at $(( $(date +%s) - t0 )) s"
fi
rm -f /dev/shm/flash-q2-l*-*.gguf
grep -E '^\| (op|model)|cases|PARITY.*FAIL|per-token sum|BENCH model' "$O/check/summary.txt" | head -20
[ -f "$O/probe/summary.txt" ] && grep -E '^BM_' "$O/probe/summary.txt"
cat "$O/bench43/bench_flash_q2_l43.csv"
[ -f "$O/bench43/bench_flash_q2_l43_b.csv" ] && cat "$O/bench43/bench_flash_q2_l43_b.csv"
[ -f "$O/load/summary.txt" ] && tail -8 "$O/load/summary.txt"
exit 0  # the stages' own rc lines above say how each went (the last test above must not be the script's status)
