#!/usr/bin/env python3
"""ncu_step_table.py — where each step of a ds4-bench run under ncu spends its kernel time, per kernel shape.

Input: the CSV of `ncu --metrics gpu__time_duration.sum --csv` over ds4-bench (scripts/gpu_step_profile.sh writes two:
per launch, and with --graph-profiling graph). Every step (a prefill chunk or a decode token) starts at its embed
launch; in graph mode a replayed decode step is one row named "graph". For each step this prints the launch count and
kernel-time sum, then (with --top K, for the steps named by --steps) the kernels grouped by name, grid and block:
total µs, launches, µs per launch — sorted by total.

usage: scripts/ncu_step_table.py NCU_CSV [--steps 2,3] [--top 40]
Deliberately not here: running ncu (gpu_step_profile.sh); mapping kernels to model stages (their launch order does).
"""
import argparse
import collections
import csv
import re


def launches(path):
    rows = csv.reader(line for line in open(path) if line.startswith('"'))
    hdr = next(rows)
    out = []
    for r in rows:
        d = dict(zip(hdr, r))
        if d.get('Metric Name') == 'gpu__time_duration.sum':
            out.append((d['Kernel Name'], d['Grid Size'], d['Block Size'],
                        float(d['Metric Value'].replace(',', '')) / 1e3))
    return out


def short(name):
    return re.sub(r'\(.*', '', re.sub(r'ds4::<unnamed>::', '', name))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('csv')
    ap.add_argument('--steps', default='', help='comma-separated step numbers to break down (default: none)')
    ap.add_argument('--top', type=int, default=40)
    a = ap.parse_args()
    ls = launches(a.csv)
    # a step = launches from one embed (or one replayed graph) to the next
    starts = [i for i, (n, *_rest) in enumerate(ls) if 'embed_kernel' in n or n == 'graph']
    steps = list(zip(starts, starts[1:] + [len(ls)]))
    for k, (b, e) in enumerate(steps):
        kind = 'graph replay' if ls[b][0] == 'graph' else 'launches'
        print(f'step {k}: {e - b} {kind}, {sum(t for *_x, t in ls[b:e]):.1f} us')
    for k in (int(s) for s in a.steps.split(',') if s):
        b, e = steps[k]
        by = collections.defaultdict(lambda: [0, 0.0])
        for n, g, bl, t in ls[b:e]:
            v = by[f'{short(n)} grid{g} block{bl}']
            v[0] += 1
            v[1] += t
        print(f'\n== step {k}: {e - b} launches, {sum(v[1] for v in by.values()):.1f} us')
        print('   total_us  count   us/call  kernel')
        for name, (cnt, t) in sorted(by.items(), key=lambda x: -x[1][1])[:a.top]:
            print(f'{t:11.1f} {cnt:5d} {t / cnt:9.2f}  {name}')


if __name__ == '__main__':
    main()
