#!/usr/bin/env bash
# plot_bench.sh — plot a ds4-bench CSV with gnuplot (PNG or SVG, chosen by the output's extension).
#
#   scripts/plot_bench.sh [--memory] [--title TEXT] BENCH.csv OUT.png|OUT.svg
#
# Default: prefill and decode tok/s against the frontier (left axis) and the session's KV bytes
# (right axis). --memory: the memory run (ds4-bench --memory): the session's bytes per category (left
# axis); RSS, device memory and the process's scratch (right axis), against the tokens held. Columns
# are looked up by name in the CSV header, so the plot follows ds4-bench's column set (csv.h).
set -euo pipefail

mode=speed
title=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --memory) mode=memory; shift ;;
    --title) title="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
if [[ $# -ne 2 ]]; then
  echo "usage: $0 [--memory] [--title TEXT] BENCH.csv OUT.png|OUT.svg" >&2
  exit 2
fi
csv="$1"
out="$2"
if [[ ! -r "$csv" ]]; then
  echo "plot_bench.sh: cannot read '$csv'" >&2
  exit 1
fi
if ! command -v gnuplot >/dev/null 2>&1; then
  echo "plot_bench.sh: gnuplot not found (Debian: apt-get install gnuplot-nox)" >&2
  exit 1
fi
if [[ $(wc -l < "$csv") -lt 2 ]]; then
  echo "plot_bench.sh: '$csv' has no data rows" >&2
  exit 1
fi
case "$out" in
  *.png) term="pngcairo size 1100,650 noenhanced" ;;
  *.svg) term="svg size 1100,650 dynamic noenhanced" ;;
  *) echo "plot_bench.sh: output must end in .png or .svg, got '$out'" >&2; exit 2 ;;
esac
# gnuplot string literal: single quotes, with embedded single quotes doubled.
q() { printf "'%s'" "${1//\'/\'\'}"; }
[[ -n "$title" ]] || title="ds4-bench: $(basename "$csv")"

common="set terminal $term
set output $(q "$out")
set datafile separator ','
set key below
set grid
set title $(q "$title")
set xlabel 'tokens held by the session (frontier)'
MiB = 1048576.0"

if [[ "$mode" == memory ]]; then
  gnuplot <<GP
$common
set ylabel 'session bytes by category (MiB)'
set y2label 'process RSS / device used / scratch (MiB)'
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
plot $(q "$csv") using 'frontier':(column('rss_bytes')/MiB) axes x1y2 with linespoints title 'RSS (VmRSS), right axis', \
     '' using 'frontier':(column('device_used_bytes')/MiB) axes x1y2 with linespoints title 'device used, right axis', \
     '' using 'frontier':(column('kv_bytes')/MiB) with linespoints title 'session KV (all categories)', \
     '' using 'frontier':(column('session_raw_kv')/MiB) with lines title 'raw_kv', \
     '' using 'frontier':(column('session_compressed_kv_r4')/MiB) with lines title 'compressed_kv_r4', \
     '' using 'frontier':(column('session_compressed_kv_rhc')/MiB) with lines title 'compressed_kv_rhc', \
     '' using 'frontier':(column('session_indexer_kv')/MiB) with lines dt 2 lw 2 title 'indexer_kv', \
     '' using 'frontier':(column('session_compressor_state')/MiB) with lines title 'compressor_state', \
     '' using 'frontier':(column('process_scratch')/MiB) axes x1y2 with lines title 'scratch (process), right axis'
GP
else
  gnuplot <<GP
$common
set ylabel 'tokens / second'
set y2label 'session KV (MiB)'
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
plot $(q "$csv") using 'frontier':'prefill_tps' with linespoints title 'prefill tok/s', \
     '' using 'frontier':'gen_tps' with linespoints title 'decode tok/s', \
     '' using 'frontier':(column('kv_bytes')/MiB) axes x1y2 with linespoints title 'session KV MiB'
GP
fi
echo "plot_bench.sh: wrote $out" >&2
