#!/usr/bin/env bash
# loadgen_series.sh — issue #8's serving benchmark through the real HTTP server: for each N in the
# series, one ds4-server process with N sessions against N concurrent streaming ds4-loadgen clients;
# then the seed's experiment side by side: N separate ds4-server processes (one session each, as many
# as --separate-max allows) against the same N clients spread over them. Writes series.csv (one
# ds4-loadgen summary row per run: aggregate, all-streams-decoding and mean per-session decode tok/s, TTFT), the
# per-request CSVs, the server logs, and series.png (gnuplot) into OUT.
#
#   scripts/loadgen_series.sh --server BIN --loadgen BIN --model GGUF [--out DIR] [--series "1 2 4 8"]
#       [--prompt WORDS] [--gen TOKENS] [--separate-max K] [--port P] [--server-args "ARGS"]
#   scripts/loadgen_series.sh --plot-only DIR     (plot DIR/series.csv, e.g. copied back from the GPU machine)
#
# Server args are passed to every server (e.g. "--cuda --ctx 8192 --max-batch-tokens 512").
set -euo pipefail

server="" loadgen="" model="" out=/tmp/loadgen_series series="1 2 4 8 16 32 64" plot_only=0
prompt=512 gen=64 separate_max=8 port=18400 server_args=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --server) server="$2"; shift 2 ;;
    --loadgen) loadgen="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --series) series="$2"; shift 2 ;;
    --prompt) prompt="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --separate-max) separate_max="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --server-args) server_args="$2"; shift 2 ;;
    --plot-only) plot_only=1; out="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "loadgen_series.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
plot_series() {
  local summary="$out/series.csv"
  command -v gnuplot > /dev/null 2>&1 || { echo "gnuplot not found: plot skipped"; return 0; }
  [[ -r "$summary" ]] || { echo "no $summary: nothing to plot"; return 0; }
  awk -F, 'NR>1 && $1=="one-process" {print $3, $11, $13, $14, ($18 == "" ? 0 : $18)}' "$summary" > "$out/one.dat"
  awk -F, 'NR>1 && $1=="separate-processes" {print $3, $11, $13, $14}' "$summary" > "$out/sep.dat"
  local head
  head=$(awk -F, 'NR==2 {print "prompt " $5 " words, " $6 " generated"}' "$summary")
  gnuplot <<GP || echo "gnuplot failed (plot skipped)"
set terminal pngcairo size 1000,600
set output "$out/series.png"
set title "ds4-server: N concurrent streams ($head)"
set xlabel "concurrent streams N"
set logscale x 2
set ylabel "decode tok/s"
set y2label "TTFT mean (s)"
set y2tics
set key top left
set grid
plot "$out/one.dat" using 1:2 with linespoints lw 2 title "one process: aggregate", \
     "$out/one.dat" using 1:5 with linespoints lw 2 title "one process: all streams decoding", \
     "$out/one.dat" using 1:3 with linespoints title "one process: per session", \
     "$out/sep.dat" using 1:2 with linespoints lw 2 title "N processes: aggregate", \
     "$out/sep.dat" using 1:3 with linespoints title "N processes: per session", \
     "$out/one.dat" using 1:4 axes x1y2 with lines dt 2 title "one process: TTFT", \
     "$out/sep.dat" using 1:4 axes x1y2 with lines dt 2 title "N processes: TTFT"
GP
  echo "plot: $out/series.png"
}
if (( plot_only )); then plot_series; exit 0; fi
for x in server loadgen model; do
  if [[ -z "${!x}" ]]; then echo "loadgen_series.sh: --$x is required" >&2; exit 2; fi
done
[[ -x "$server" && -x "$loadgen" ]] || { echo "loadgen_series.sh: --server and --loadgen must be executables" >&2; exit 2; }
[[ -r "$model" ]] || { echo "loadgen_series.sh: cannot read model '$model'" >&2; exit 2; }
mkdir -p "$out"
summary="$out/series.csv"
rm -f "$summary"
pids=()

stop_servers() {
  for p in "${pids[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]:-}"; do [[ -n "$p" ]] && wait "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_servers EXIT

# start_server PORT SESSIONS QUEUE LOG: one server in the background, waits until /health answers.
start_server() {
  local p="$1" sessions="$2" queue="$3" log="$4"
  # shellcheck disable=SC2086
  DS4_LOCK_FILE="$out/lock.$p" "$server" -m "$model" --port "$p" --max-sessions "$sessions" \
    --queue-size "$queue" $server_args > "$log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 1 1200); do
    # The port accepts connections only once the worker is ready (listen comes after the engine probe).
    if (exec 3<> "/dev/tcp/127.0.0.1/$p") 2> /dev/null; then return 0; fi
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then echo "server on port $p died:"; tail -5 "$log"; return 1; fi
    sleep 0.25
  done
  echo "server on port $p did not come up"; return 1
}

for n in $series; do
  start_server "$port" "$n" $((n + 16)) "$out/server_one_n$n.log"
  "$loadgen" --url "127.0.0.1:$port" -c "$n" -p "$prompt" -g "$gen" --seed "$n" --label one-process \
    --csv "$out/requests_one_n$n.csv" --summary-csv "$summary" 2>&1 | tee "$out/loadgen_one_n$n.txt" || true
  if command -v curl > /dev/null 2>&1; then
    curl -s "http://127.0.0.1:$port/metrics" | grep -E '^ds4_(engine_step|batch_|max_sessions|max_batch|kv_)' \
      > "$out/metrics_one_n$n.txt" || true
  fi
  stop_servers
done

for n in $series; do
  (( n > separate_max )) && continue
  urls=()
  ok=1
  for i in $(seq 0 $((n - 1))); do
    if ! start_server $((port + 1 + i)) 1 16 "$out/server_sep_n${n}_$i.log"; then ok=0; break; fi
    urls+=(--url "127.0.0.1:$((port + 1 + i))")
  done
  if (( ok )); then
    "$loadgen" "${urls[@]}" -c "$n" -p "$prompt" -g "$gen" --seed "$n" --label separate-processes \
      --csv "$out/requests_sep_n$n.csv" --summary-csv "$summary" 2>&1 | tee "$out/loadgen_sep_n$n.txt" || true
  else
    echo "separate-processes,$n: not all $n servers started (memory?)" | tee -a "$out/notes.txt"
  fi
  stop_servers
done

echo "== $summary"; cat "$summary"
plot_series
