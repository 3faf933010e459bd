#!/usr/bin/env python3
"""ncu_prefill_table.py — per-token prefill cost by stage for the 43-layer Flash model, from the ncu
per-launch CSV of a few-layer flash-q2 prefill (scripts/gpu_prefill_profile.sh writes it: 4 layers =
2 without compressor, 1 CSA, 1 HCA; chunks of 2,048 tokens).

Each prefill chunk starts at an embed launch; a layer half starts at the 1,024-thread RMSNorm before
its HC controls (two per layer); launches from hc_head on are the output head. Kernels are put into
stages by name, summed per layer kind, and scaled to Flash's mix: 2 plain + 21 CSA + 20 HCA layers,
plus the head, divided by the chunk's tokens.

usage: scripts/ncu_prefill_table.py NCU_CSV [TOKENS_PER_CHUNK=2048]
Deliberately not here: running ncu (gpu_prefill_profile.sh), decode steps (the chunks only).
"""
import collections
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ncu_step_table  # noqa: E402  (the per-launch CSV reader, shared)


def stage(name, grid):
    if 'attention' in name:
        return 'attention core'
    if 'indexer' in name:
        return 'indexer (scores, top-k, FP4 qat)'
    if 'compressor' in name:
        return 'compressor pooling'
    if 'f16_' in name:
        return 'F16 matmul: HC controls 24x16384' if grid.startswith('(24,') or grid.startswith('(6,') else \
            'F16 matmul: router, compressor/indexer projections'
    # grouped expert GEMMs: the IQ2_XXS (16) and Q2_K (10) instantiations of either GEMM kernel
    if re.search(r'gemm2?_kernel<(16|10)\b', name) or any(k in name for k in ('moe', 'experts', 'plan_tiles', 'q8_K')):
        return 'routed experts (grouped int8 GEMM + glue)'
    if 'gemm' in name or 'quantize_q8_0' in name or 'swiglu' in name:
        return 'int8 GEMM: attention projections, shared expert (+ act quant)'
    if 'rms_norm' in name or 'hc_' in name or 'add_kernel' in name:
        return 'HC pre/post, RMSNorm'
    if 'rope' in name or 'fp8' in name or 'f16_round' in name:
        return 'RoPE, FP8/f16 rounding'
    if 'router' in name:
        return 'router top-k'
    return 'other (embed, fill)'


def main():
    path = sys.argv[1]
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    chunks, cur = [], None
    for n, g, b, t in ncu_step_table.launches(path):
        if 'embed_kernel' in n:
            cur = []
            chunks.append(cur)
        if cur is not None:
            cur.append((n, g, b, t))
    kinds = {0: 'plain', 1: 'plain', 2: 'CSA', 3: 'HCA'}
    weight = {'plain': 2, 'CSA': 21, 'HCA': 20, 'head': 1}
    for ci, ch in enumerate(chunks):
        if ch[0][1] != f'({16 * tokens}, 1, 1)':
            continue  # not a chunk of `tokens` (decode steps): the embed grid is 16 blocks per token
        per = collections.defaultdict(lambda: collections.defaultdict(float))
        halves, head = 0, False
        for n, g, b, t in ch:
            if 'rms_norm' in n and b.startswith('(1024,'):
                halves += 1
            if 'hc_head' in n:
                head = True
            kind = 'head' if head else kinds.get(max(halves - 1, 0) // 2, 'HCA')
            per[kind][stage(n, g)] += t / (2 if kind == 'plain' else 1)
        total_ms = sum(t for *_, t in ch) / 1e3
        print(f'chunk {ci}: {len(ch)} launches, {total_ms:.2f} ms of kernels (4 layers)')
        print(f"{'stage':64s} {'plain us':>9s} {'CSA us':>9s} {'HCA us':>9s}  {'43 layers, us/token':>19s}")
        tot = 0.0
        for s in sorted({s for k in per for s in per[k]}):
            v = sum(weight[k] * per[k][s] for k in per) / tokens
            tot += v
            print(f"{s:64s} {per['plain'][s]:9.0f} {per['CSA'][s]:9.0f} {per['HCA'][s]:9.0f}  {v:19.1f}")
        print(f"{'total (kernels only)':64s} {'':9s} {'':9s} {'':9s}  {tot:19.1f}  = {1e6 / tot:.0f} tok/s")


if __name__ == '__main__':
    main()
