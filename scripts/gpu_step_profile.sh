#!/usr/bin/env bash
# gpu_step_profile.sh — where a whole 43-layer step's time goes (issue 5), in one GPU call, on the pack
# gpu_session.sh makes (its bench/ folder: ds4-bench, ds4-gen, libs, tokenizer, prompt):
#  1. ds4-bench on the full flash-q2 file (ROUTING=distinct) at 2K, 256 greedy tokens: the wall-clock
#     rate of steady decode (graphs on), the number every stage sum is compared with;
#  2. ncu --graph-profiling graph over a 2,048-token prefill and 6 decode steps:
#     the device time of each replayed decode graph — wall minus this is host work between steps;
#  3. ncu per launch (graph nodes one by one, caches as the step leaves them) over a 4,096-token prefill
#     (two 2,048-token chunks) and 2 decode steps: each
#     kernel's own time — the graph's time minus their sum is what the boundaries between kernels cost.
# scripts/ncu_step_table.py turns 2 and 3 into the per-stage tables. Builds nothing.
#   there:  scripts/gpu_step_profile.sh PACK_TARBALL [OUT_DIR]
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(cd "$(dirname "${1:?usage: gpu_step_profile.sh PACK_TARBALL [OUT_DIR]}")" && pwd)/$(basename "$1")
O=${2:-${OUT:-/tmp/gpu_step_profile}}; mkdir -p "$O"
P=/tmp/gpu_step_pack; rm -rf "$P"; mkdir -p "$P" && tar xJf "$T" -C "$P" bench
export LD_LIBRARY_PATH="$P/bench/lib:${LD_LIBRARY_PATH:-}"
t0=$(date +%s)
st() { echo "[+$(( $(date +%s) - t0 )) s] $*" | tee -a "$O/summary.txt"; }
echo "gpu_step_profile: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | head -1), $(date -u +%F' '%H:%M' UTC')" | tee "$O/summary.txt"
. "$HERE/gpu_pack_common.sh"
F=$(flash_gen "$P/bench/ds4-gen" "${LAYERS:-43}" "$P/bench/data/tokenizer.json" 2> "$O/gen.log")
st "flash-q2 ${LAYERS:-43} layers: $F"
B=("$P/bench/ds4-bench" -m "$F" --cuda --chunk 2048 --prompt-file "$P/bench/data/prompt.txt")
timeout 120 "${B[@]}" --ctx-start 2048 --ctx-max 2048 --gen-tokens 256 --csv "$O/steady.csv" > "$O/steady.log" 2>&1
st "ds4-bench steady 2K, 256 tokens rc=$?"; cat "$O/steady.csv" | tee -a "$O/summary.txt"
NCUB=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
N=(--clock-control none --cache-control none --metrics gpu__time_duration.sum --print-units base --csv)
if [ "${GRAPH_MODE:-1}" = 1 ]; then
  timeout 150 "$NCUB" "${N[@]}" --graph-profiling graph "${B[@]}" --ctx-start 2048 --ctx-max 2048 -n 6 \
    > "$O/ncu_graph.csv" 2> "$O/ncu_graph.err"
  st "ncu graph mode rc=$? ($(grep -c gpu__time_duration "$O/ncu_graph.csv") results)"
fi
timeout 300 "$NCUB" "${N[@]}" "${B[@]}" --ctx-start 4096 --ctx-max 4096 -n 2 > "$O/ncu_node.csv" 2> "$O/ncu_node.err"
st "ncu node mode rc=$? ($(grep -c gpu__time_duration "$O/ncu_node.csv") results)"
# NODE2_FLAGS: the same per-launch profile once more with extra engine flags (e.g. --cuda-f16-mma), to
# compare two dispatch choices kernel by kernel in one call.
if [ -n "${NODE2_FLAGS:-}" ]; then
  timeout 300 "$NCUB" "${N[@]}" "${B[@]}" $NODE2_FLAGS --ctx-start 4096 --ctx-max 4096 -n 2 \
    > "$O/ncu_node2.csv" 2> "$O/ncu_node2.err"
  st "ncu node mode with $NODE2_FLAGS rc=$? ($(grep -c gpu__time_duration "$O/ncu_node2.csv") results)"
fi
xz -T4 "$O"/ncu_*.csv
rm -f /dev/shm/flash-q2-l*-*.gguf
