#!/usr/bin/env python3
"""train.py — trains the tiny DeepSeek V4 chat model with transformers' DeepseekV4ForCausalLM on one GPU, then
produces everything the repository keeps from the run: the weights exactly as the GGUF will store them, held-out
perplexity per corpus, golden logits for the engine tests and greedy samples.

Runs on the GPU machine (torch 2.11, transformers 5.17, safetensors; no network, no tokenizer needed: the corpus
arrives pre-tokenized from make_corpus.py). One invocation does, in order:
  1. checks of the installed transformers revision (MODEL.md §14.5 step 0: the mHC golden vector; §14.4: the RoPE
     inverse frequencies) and of the model structure; a preflight of every post-training stage on the untrained
     model, so that a bug there costs seconds, not the training run;
  2. training for a fixed wall-clock budget (AdamW, warmup + cosine on elapsed time, aux-loss-free router-bias
     balancing as in DeepSeek V3/V4, float32 master weights with TF32 matmuls);
  3. rounding of the weights to their GGUF storage types (Q8_0 for the two 129,280-row tables, F16 for matrices,
     F32 for vectors, I32 for tid2eid) and export as safetensors shards with the HF parameter names;
  4. with the rounded weights loaded back, in strict float32 (TF32 off): held-out perplexity per corpus,
     golden logits of the reference sequences (tests/trained format), greedy continuations of the prompts.
`--from-export DIR` skips 1-3: it reloads an export and redoes stage 4, choosing reference sequences whose router
and indexer decisions have clear margins (MODEL.md §14.6) — how tests/trained/reference_logits.bin was made.
It deliberately does not write the GGUF (training/convert.py does, on the CPU machine, with the real tokenizer
metadata) and does not simulate the engine's FP8/FP4 numerics (HF has none; the tests run the engine with them off).
"""
import argparse
import json
import math
import os
import struct
import sys
import time
import types

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------------------------
# Model shape. Every structural feature of V4 Flash is kept (MODEL.md §14.1/§14.2): sliding-only, CSA (ratio 4,
# overlapping compressor + indexer) and HCA (ratio 16) layers, hash-routed and top-k-routed MoE layers, indexer
# top-k (32) below the 75 compressed rows a 300-token test reaches, window (64) below the test length, 4 HC
# streams. E = 64 keeps the two 129,280 x 64 tables (Q8_0) and the tokenizer at ~24.7 MiB of the 32 MiB budget.
# ---------------------------------------------------------------------------------------------------------------
SHAPE = dict(
    vocab_size=129280, hidden_size=64, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=1,
    head_dim=128, q_lora_rank=64, o_groups=2, o_lora_rank=64,
    n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=128,
    sliding_window=64, index_n_heads=8, index_head_dim=128, index_topk=32,
    hca_ratio=16, n_hash_layers=3, swiglu_limit=10.0,
)
ROPE_DIMS = 64
LAYER_TYPES = ["sliding_attention", "sliding_attention", "compressed_sparse_attention",
               "heavily_compressed_attention", "compressed_sparse_attention", "heavily_compressed_attention"]
CORPORA = ["bible", "fortunes", "jargon", "promessi", "chat"]
MIX = {"bible": 0.22, "fortunes": 0.18, "jargon": 0.12, "promessi": 0.18, "chat": 0.30}
EOS = 1

# Golden mHC values (MODEL.md §6.2), used to identify the HF revision (§14.5 step 0).
GOLD_PRE0 = 0.253646227
GOLD_POST = [0.102556531, 0.385004945, 1.274742724, 1.589473130]
GOLD_COMB = [[0.440280696, 0.195951557, 0.157211752, 0.206554437],
             [0.010571054, 0.458650663, 0.520568419, 0.010207973],
             [0.000339852, 0.005005849, 0.235237105, 0.759419604],
             [0.548807399, 0.340390931, 0.086981724, 0.023816986]]


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def make_config():
    from transformers import DeepseekV4Config
    s = SHAPE
    rp = ROPE_DIMS / s["head_dim"]
    cfg = DeepseekV4Config(
        vocab_size=s["vocab_size"], hidden_size=s["hidden_size"], num_hidden_layers=s["num_hidden_layers"],
        num_attention_heads=s["num_attention_heads"], num_key_value_heads=1, head_dim=s["head_dim"],
        q_lora_rank=s["q_lora_rank"], o_groups=s["o_groups"], o_lora_rank=s["o_lora_rank"],
        n_routed_experts=s["n_routed_experts"], num_experts_per_tok=s["num_experts_per_tok"], n_shared_experts=1,
        moe_intermediate_size=s["moe_intermediate_size"], scoring_func="sqrtsoftplus", norm_topk_prob=True,
        routed_scaling_factor=1.5, swiglu_limit=s["swiglu_limit"], sliding_window=s["sliding_window"],
        index_n_heads=s["index_n_heads"], index_head_dim=s["index_head_dim"], index_topk=s["index_topk"],
        hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6,
        layer_types=list(LAYER_TYPES),
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": s["hca_ratio"]},
        mlp_layer_types=["hash_moe"] * s["n_hash_layers"] + ["moe"] * (s["num_hidden_layers"] - s["n_hash_layers"]),
        max_position_embeddings=1048576, rope_theta=10000.0, compress_rope_theta=160000.0,
        partial_rotary_factor=rp,
        rope_parameters={
            "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": rp},
            "compress": {"rope_type": "yarn", "rope_theta": 160000.0, "partial_rotary_factor": rp,
                         "factor": 16.0, "original_max_position_embeddings": 65536,
                         "beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": 1.0},
        },
        tie_word_embeddings=False, attention_bias=False, attention_dropout=0.0, num_nextn_predict_layers=1,
        bos_token_id=0, eos_token_id=1, initializer_range=0.02,
    )
    assert list(cfg.layer_types) == LAYER_TYPES, cfg.layer_types
    assert cfg.compress_rates["heavily_compressed_attention"] == s["hca_ratio"]
    return cfg


def spec_inv_freq(compressed):
    """MODEL.md §5.3 per-pair inverse frequencies (double precision)."""
    R = ROPE_DIMS
    if not compressed:
        return [10000.0 ** (-2 * i / R) for i in range(R // 2)]
    b = 160000.0

    def corr(beta):
        return R * math.log(65536 / (2 * math.pi * beta)) / (2 * math.log(b))
    lo, hi = max(0, math.floor(corr(32))), min(R - 1, math.ceil(corr(1)))
    out = []
    for i in range(R // 2):
        ext = b ** (-2 * i / R)
        ramp = min(1.0, max(0.0, (i - lo) / max(0.001, hi - lo)))
        out.append(ext / 16 * ramp + ext * (1 - ramp))
    return out


def pin_rope(model):
    """Sets every RoPE table to MODEL.md §5.3 (float32 of the double values) and the YaRN magnitude to 1, and
    reports how far the installed transformers was from it (it should already agree to float rounding)."""
    want = {"main": torch.tensor(spec_inv_freq(False), dtype=torch.float64),
            "compress": torch.tensor(spec_inv_freq(True), dtype=torch.float64)}
    info = {"modules": 0}
    for m in model.modules():
        if type(m).__name__ != "DeepseekV4RotaryEmbedding":
            continue
        info["modules"] += 1
        for label, w in want.items():
            cur = getattr(m, f"{label}_inv_freq", None)
            if cur is None:
                continue
            if cur.numel() != w.numel():
                raise RuntimeError(f"{label}_inv_freq has {cur.numel()} entries, expected {w.numel()}")
            err = float(((cur.double().cpu() - w).abs() / w).max())
            info[f"{label}_inv_freq_relerr"] = max(info.get(f"{label}_inv_freq_relerr", 0.0), err)
            with torch.no_grad():
                cur.copy_(w.to(cur.device, cur.dtype))
                orig = getattr(m, f"{label}_original_inv_freq", None)
                if orig is not None:
                    orig.copy_(w.to(orig.device, orig.dtype))
            sc = getattr(m, f"{label}_attention_scaling", 1.0)
            info[f"{label}_attention_scaling_was"] = float(sc)
            setattr(m, f"{label}_attention_scaling", 1.0)
    if not info["modules"]:
        raise RuntimeError("no DeepseekV4RotaryEmbedding module found")
    return info


def force_eager_experts(model):
    """The reference must be plain float32 matmuls; grouped_mm kernels are not (and may want bf16)."""
    seen = set()
    for m in model.modules():
        c = getattr(m, "config", None)
        if c is None or id(c) in seen:
            continue
        seen.add(id(c))
        if getattr(c, "_experts_implementation", "eager") != "eager":
            try:
                c._experts_implementation = "eager"
            except Exception:
                object.__setattr__(c, "_experts_implementation", "eager")
    impls = {getattr(getattr(m, "config", None), "_experts_implementation", None)
             for m in model.modules() if hasattr(m, "gate_up_proj")}
    return sorted(str(i) for i in impls)


def clamped_shared_forward(self, x):
    # The model clamps the shared expert like the routed ones (MODEL.md §8 step 6, ds4 and official 60d8d707);
    # some HF revisions do not, so the forward is pinned here to the model definition.
    lim = self._ds4_limit
    gate = self.gate_proj(x).clamp(max=lim)
    up = self.up_proj(x).clamp(min=-lim, max=lim)
    return self.down_proj(F.silu(gate) * up)


def check_revision(model, cfg, dev):
    """§14.5 step 0 (mHC golden vector) and §14.4 RoPE checks. Returns a dict for the results file."""
    info = {}
    hc_cls = type(model.model.layers[0].attn_hc)
    hc = hc_cls(cfg).to(dev).double()
    E = cfg.hidden_size
    n = 4 * E
    a = 3.0
    nu = a / math.sqrt(a * a / n + 1e-6)
    with torch.no_grad():
        hc.fn.zero_()
        m = torch.tensor([math.sin(1 + k) for k in range(24)], dtype=torch.float64, device=dev)
        hc.fn[:, 0] = m / nu
        hc.base.copy_(torch.tensor([(k - 12) / 8 for k in range(24)], dtype=torch.float64))
        hc.scale.copy_(torch.tensor([0.5, 2.0, 3.0], dtype=torch.float64))
        x = torch.zeros(1, 1, 4, E, dtype=torch.float64, device=dev)
        x[0, 0, 0, 0] = a
        post, comb, collapsed = hc(x)
    pre0 = float(collapsed[0, 0, 0]) / a
    dpost = max(abs(float(post.reshape(-1)[i]) - GOLD_POST[i]) for i in range(4))
    dcomb = max(abs(float(comb.reshape(4, 4)[j, k]) - GOLD_COMB[j][k]) for j in range(4) for k in range(4))
    info["hc_golden"] = {"pre0_err": abs(pre0 - GOLD_PRE0), "post_err": dpost, "comb_err": dcomb}
    if dpost > 1e-5 or dcomb > 1e-5 or abs(pre0 - GOLD_PRE0) > 1e-5:  # float32 inside the module
        raise RuntimeError(f"installed DeepseekV4HyperConnection is not the V4 model (rev. C?): {info['hc_golden']}")
    sh = model.model.layers[0].mlp.shared_experts
    info["shared_mlp_class"] = type(sh).__name__
    return info


def build_model(dev, seed):
    from transformers import DeepseekV4ForCausalLM
    cfg = make_config()
    torch.manual_seed(seed)
    try:
        model = DeepseekV4ForCausalLM._from_config(cfg, attn_implementation="eager")
    except Exception:  # older signatures
        model = DeepseekV4ForCausalLM(cfg)
    model = model.to(dev).float()
    s = SHAPE
    # Hash routing tables: distinct expert ids per token (MODEL.md §14.2), fixed by the seed.
    g = torch.Generator().manual_seed(seed + 1)
    for l in range(s["n_hash_layers"]):
        gate = model.model.layers[l].mlp.gate
        ids = torch.rand(s["vocab_size"], s["n_routed_experts"], generator=g).argsort(dim=1)[:, :s["num_experts_per_tok"]]
        gate.tid2eid.copy_(ids.to(gate.tid2eid.dtype))
    for layer in model.model.layers:
        sh = layer.mlp.shared_experts
        sh._ds4_limit = s["swiglu_limit"]
        sh.forward = types.MethodType(clamped_shared_forward, sh)
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr(), "lm_head is tied"
    return model, cfg


def topk_routers(model):
    return [layer.mlp.gate for layer in model.model.layers if hasattr(layer.mlp.gate, "e_score_correction_bias")]


# ---------------------------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------------------------
def load_u32(path):
    with open(path, "rb") as f:
        raw = f.read()
    t = torch.frombuffer(bytearray(raw), dtype=torch.int32).clone()
    return t.long()


class Batches:
    """Random windows of seq+1 tokens, corpus chosen per row with the MIX weights."""

    def __init__(self, streams, seq, batch, dev, seed):
        self.s = {k: v.to(dev) for k, v in streams.items()}
        self.seq, self.batch, self.dev = seq, batch, dev
        self.g = torch.Generator(device="cpu").manual_seed(seed)
        self.names = list(self.s)
        self.w = torch.tensor([MIX[k] for k in self.names])

    def next(self):
        which = torch.multinomial(self.w, self.batch, replacement=True, generator=self.g)
        rows = []
        ar = torch.arange(self.seq + 1, device=self.dev)
        for i, name in enumerate(self.names):
            n = int((which == i).sum())
            if not n:
                continue
            st = self.s[name]
            off = torch.randint(0, st.numel() - self.seq - 1, (n,), generator=self.g).to(self.dev)
            rows.append(st[off[:, None] + ar[None, :]])
        x = torch.cat(rows)
        x = x[torch.randperm(x.shape[0], generator=self.g).to(self.dev)]
        return x[:, :-1].contiguous(), x[:, 1:].contiguous()


def eval_windows(stream, seq, limit=None):
    n = (stream.numel() - 1) // seq
    if limit:
        n = min(n, limit)
    idx = torch.arange(n)[:, None] * seq + torch.arange(seq + 1)[None, :]
    return stream[idx]


@torch.no_grad()
def mean_nll(model, windows, dev, bs=16):
    tot, cnt = 0.0, 0
    for i in range(0, windows.shape[0], bs):
        w = windows[i:i + bs].to(dev)
        logits = model(input_ids=w[:, :-1], use_cache=False).logits.float()
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum")
        tot += float(nll)
        cnt += w[:, 1:].numel()
    return tot / max(cnt, 1), cnt


# ---------------------------------------------------------------------------------------------------------------
# GGUF storage rounding and export
# ---------------------------------------------------------------------------------------------------------------
def storage_kind(name, t):
    """GGUF storage type of an HF parameter (MODEL.md §4 types; F16 where ds4 stores Q8_0/k-quants)."""
    if name.endswith("tid2eid"):
        return "I32"
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        return "Q8_0"
    vector_like = t.dim() == 1 or name.endswith(("e_score_correction_bias", "sinks"))
    if vector_like:
        return "F32"
    return "F16"


def q8_0(x):
    """Q8_0 blocks of 32 along the last dim (FORMATS.md §2.8): d = amax/127, q = round-half-away(x/d), f16(d)."""
    rows, cols = x.shape
    b = x.float().reshape(rows, cols // 32, 32)
    amax = b.abs().amax(dim=-1, keepdim=True)
    d = amax / 127.0
    inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
    v = b * inv
    q = (torch.sign(v) * torch.floor(v.abs() + 0.5)).clamp(-127, 127).to(torch.int8)
    d16 = d.to(torch.float16)
    deq = (d16.float() * q.float()).reshape(rows, cols)
    return q.reshape(rows, cols), d16.reshape(rows, cols // 32), deq


def round_to_storage(model):
    """Rounds every parameter/buffer to its storage type in place; returns the export dict (HF names)."""
    export = {}
    sd = model.state_dict()
    with torch.no_grad():
        for name, t in sd.items():
            kind = storage_kind(name, t)
            if kind == "I32":
                export[name] = t.to(torch.int32).cpu().contiguous()
            elif kind == "Q8_0":
                q, d, deq = q8_0(t)
                t.copy_(deq)
                export[name + ".q8_0_qs"] = q.cpu().contiguous()
                export[name + ".q8_0_d"] = d.cpu().contiguous()
            elif kind == "F16":
                h = t.to(torch.float16)
                t.copy_(h.float())
                export[name] = h.cpu().contiguous()
            else:
                export[name] = t.float().cpu().contiguous()
    return export


def save_shards(export, out_dir, prefix):
    from safetensors.torch import save_file
    groups = {"embed": {}, "head": {}, "body": {}}
    for k, v in export.items():
        if k.startswith("model.embed_tokens."):
            groups["embed"][k] = v
        elif k.startswith("lm_head."):
            groups["head"][k] = v
        else:
            groups["body"][k] = v
    paths = []
    for g, d in groups.items():
        p = os.path.join(out_dir, f"{prefix}-{g}.safetensors")
        save_file(d, p, metadata={"format": "ds4-trained-export-v1"})
        paths.append(p)
    return paths


# ---------------------------------------------------------------------------------------------------------------
# Golden logits (format read by tests/trained/test_trained_model.cpp)
# ---------------------------------------------------------------------------------------------------------------
REF_MAGIC = b"DS4REFL1"
N_TOP = 32
N_FIXED = 96


def fixed_ids(vocab, n, seed=7):
    g = torch.Generator().manual_seed(seed)
    return sorted(torch.randperm(vocab, generator=g)[:n].tolist())


@torch.no_grad()
def reference_record(model, name, ids, dev, fixed):
    """One sequence: per position max|logit|, logsumexp, next-token NLL, top-32 (id, value), fixed-id values."""
    x = torch.tensor([ids], device=dev)
    logits = model(input_ids=x, use_cache=False).logits[0].double()  # [T][V]
    T, V = logits.shape
    lse = torch.logsumexp(logits, dim=-1)
    mx = logits.abs().amax(dim=-1)
    nll = torch.full((T,), float("nan"), dtype=torch.float64, device=dev)
    nll[:-1] = lse[:-1] - logits[torch.arange(T - 1, device=dev), x[0, 1:]]
    top_v, top_i = logits.topk(N_TOP, dim=-1)
    fix = logits[:, torch.tensor(fixed, device=dev)]
    nm = name.encode()
    parts = [struct.pack("<I", len(nm)), nm, struct.pack("<II", T, V),
             struct.pack(f"<{T}I", *ids)]
    for t in range(T):
        parts.append(struct.pack("<fff", float(mx[t]), float(lse[t]), float(nll[t])))
        parts.append(struct.pack(f"<{N_TOP}I", *top_i[t].tolist()))
        parts.append(struct.pack(f"<{N_TOP}f", *top_v[t].float().tolist()))
        parts.append(struct.pack(f"<{N_FIXED}f", *fix[t].float().tolist()))
    ppl = math.exp(float(nll[:-1].mean()))
    margin = float((top_v[:, 0] - top_v[:, 1]).min())
    return b"".join(parts), {"tokens": T, "ppl": ppl, "mean_nll": float(nll[:-1].mean()),
                             "min_top1_margin": margin, "max_abs_logit": float(mx.max())}


def write_references(model, refseqs, dev, path):
    fixed = fixed_ids(SHAPE["vocab_size"], N_FIXED)
    blobs, stats = [], {}
    for name, ids in refseqs.items():
        blob, st = reference_record(model, name, ids, dev, fixed)
        blobs.append(blob)
        stats[name] = st
    with open(path, "wb") as f:
        f.write(REF_MAGIC + struct.pack("<IIII", len(blobs), N_TOP, N_FIXED, 0))
        f.write(struct.pack(f"<{N_FIXED}I", *fixed))
        for b in blobs:
            f.write(b)
    return stats


@torch.no_grad()
def routing_margins(model, ids, dev):
    """Smallest score gap at the discrete decisions for `ids`: MoE top-k (K-th vs K+1-th biased score) and the
    indexer top-k (TK-th vs TK+1-th score among causal rows), so a tie-sensitive reference is noticed."""
    K, TK = SHAPE["num_experts_per_tok"], SHAPE["index_topk"]
    res = {"moe_min_gap": float("inf"), "indexer_min_gap": None}
    hooks = []

    def router_hook(mod, inp, out):
        h = inp[0].reshape(-1, inp[0].shape[-1])
        scores = F.softplus(F.linear(h.float(), mod.weight.float())).sqrt() + mod.e_score_correction_bias.float()
        s, _ = scores.sort(dim=-1, descending=True)
        res["moe_min_gap"] = min(res["moe_min_gap"], float((s[:, K - 1] - s[:, K]).min()))

    for r in topk_routers(model):
        hooks.append(r.register_forward_hook(router_hook))
    scorer_cls = [m for m in model.modules() if type(m).__name__ == "DeepseekV4IndexerScorer"]

    def scorer_hook(mod, inp, out):
        sc = out[0]  # [S, T]
        S, T = sc.shape
        gaps = []
        for t in range(S):
            n = (t + 1) // 4
            if n > TK:
                v, _ = sc[t, :n].sort(descending=True)
                # Relative to the query's largest |score|: exact ties (rows whose every head is ReLU'd to 0)
                # give 0 and make the selection implementation-defined (MODEL.md §14.6).
                gaps.append(float((v[TK - 1] - v[TK]) / v.abs().max().clamp_min(1e-30)))
        if gaps:
            g = min(gaps)
            res["indexer_min_gap"] = g if res["indexer_min_gap"] is None else min(res["indexer_min_gap"], g)

    for m in scorer_cls:
        hooks.append(m.register_forward_hook(scorer_hook))
    # How often the shared-expert clamp fires: the model clamps it (MODEL.md §8 step 6), so an engine run
    # without that clamp would only match where this count is zero.
    res["shared_clamp_hits"] = 0
    lim = SHAPE["swiglu_limit"]

    def shared_hook(mod, inp, out):
        x = inp[0]
        hits = (mod.gate_proj(x) > lim).sum() + (mod.up_proj(x).abs() > lim).sum()
        res["shared_clamp_hits"] += int(hits)

    for layer in model.model.layers:
        hooks.append(layer.mlp.shared_experts.register_forward_hook(shared_hook))
    try:
        model(input_ids=torch.tensor([ids], device=dev), use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    if not scorer_cls:
        res["indexer_min_gap"] = "not measured (no DeepseekV4IndexerScorer module in this revision)"
    return res


@torch.no_grad()
def greedy(model, ids, dev, max_new):
    x = list(ids)
    out = []
    for _ in range(max_new):
        logits = model(input_ids=torch.tensor([x], device=dev), use_cache=False).logits[0, -1]
        nxt = int(logits.argmax())
        out.append(nxt)
        if nxt == EOS:
            break
        x.append(nxt)
    return out


def post_training(model, data, refseqs, prompts, dev, out_dir, prefix, quick):
    """Stages 3-4. `quick` = preflight on a few tokens."""
    res = {}
    export = round_to_storage(model)
    res["export_bytes"] = sum(v.numel() * v.element_size() for v in export.values())
    res["shards"] = [os.path.basename(p) for p in save_shards(export, out_dir, prefix)]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    model.eval()
    ppl = {}
    for name in CORPORA:
        w = eval_windows(data[f"eval_{name}"], 512, limit=2 if quick else None)
        nll, cnt = mean_nll(model, w, dev)
        ppl[name] = {"ppl": math.exp(nll), "mean_nll": nll, "tokens": cnt}
    res["heldout"] = ppl
    refs = {k: (v[:40] if quick else v) for k, v in refseqs.items()}
    res["reference"] = write_references(model, refs, dev, os.path.join(out_dir, f"{prefix}-reference_logits.bin"))
    res["margins"] = {k: routing_margins(model, v, dev) for k, v in refs.items()}
    res["greedy"] = {k: {"prompt": v, "ids": greedy(model, v, dev, 3 if quick else 96)} for k, v in prompts.items()}
    return res


def load_export(model, export_dir):
    """Loads a safetensors export (this script's stage 3 output) into the model: the exact stored values."""
    from safetensors.torch import load_file
    raw = {}
    for p in sorted(os.listdir(export_dir)):
        if p.endswith(".safetensors"):
            raw.update(load_file(os.path.join(export_dir, p)))
    sd = {}
    for k, v in raw.items():
        if k.endswith(".q8_0_d"):
            continue
        if k.endswith(".q8_0_qs"):
            base = k[:-len(".q8_0_qs")]
            d = raw[base + ".q8_0_d"].float()
            sd[base] = (d.repeat_interleave(32, dim=1) * v.float())
        elif k.endswith("tid2eid"):
            sd[k] = v.long()
        else:
            sd[k] = v.float()
    model.load_state_dict(sd, strict=True)


def reference_candidates(data, refseqs, n_alt=12, T=320):
    """The make_corpus.py sequences first, then BOS-prefixed windows of the held-out streams."""
    cands = {}
    for name, stream in (("promessi", data["eval_promessi"]), ("bible", data["eval_bible"]),
                         ("chat", data["eval_chat"])):
        lst = [list(refseqs[name])]
        n = stream.numel()
        for i in range(n_alt):
            off = 1 + (i * (n - T - 1)) // n_alt  # skip the stream's own leading BOS
            w = stream[off:off + T - 1].tolist()
            lst.append([0] + w)
        cands[name] = lst
    return cands


def pick_references(model, data, refseqs, dev, moe_min=1e-4, idx_min=1e-4):
    """For each reference kind, the first candidate whose discrete decisions have clear margins."""
    chosen, report = {}, {}
    for name, lst in reference_candidates(data, refseqs).items():
        best, best_score = None, -1.0
        for i, ids in enumerate(lst):
            m = routing_margins(model, ids, dev)
            ig = m["indexer_min_gap"] if isinstance(m["indexer_min_gap"], float) else 1.0
            score = min(m["moe_min_gap"] / moe_min, ig / idx_min)
            if score > best_score:
                best, best_score = (i, ids, m), score
            if score >= 1.0:
                break
        i, ids, m = best
        chosen[name] = ids
        report[name] = {"candidate": i, "margins": m, "ok": best_score >= 1.0}
    return chosen, report


def references_only(args, results, data, refseqs, prompts, dev):
    """Second run: the exported weights, tie-free reference sequences, everything of stage 4 again."""
    model, cfg = build_model(dev, args.seed)
    results["checks"] = check_revision(model, cfg, dev)
    results["checks"]["rope"] = pin_rope(model)
    results["checks"]["experts_implementation"] = force_eager_experts(model)
    load_export(model, args.from_export)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    model.eval()
    chosen, report = pick_references(model, data, refseqs, dev)
    results["reference_choice"] = report
    log("reference choice", json.dumps(report))
    ppl = {}
    for name in CORPORA:
        nll, cnt = mean_nll(model, eval_windows(data[f"eval_{name}"], 512), dev)
        ppl[name] = {"ppl": math.exp(nll), "mean_nll": nll, "tokens": cnt}
    results["heldout"] = ppl
    log("held-out (stored weights)", json.dumps({k: round(v["ppl"], 3) for k, v in ppl.items()}))
    results["reference_seqs"] = chosen
    results["reference"] = write_references(model, chosen, dev, os.path.join(args.out, "reference_logits.bin"))
    log("reference", json.dumps(results["reference"]))
    results["greedy"] = {k: {"prompt": v, "ids": greedy(model, v, dev, 96)} for k, v in prompts.items()}
    with open(os.path.join(args.out, "results_refs.json"), "w") as f:
        json.dump(results, f)
    log("done")


# ---------------------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description="train the tiny DeepSeek V4 chat model")
    ap.add_argument("--data", default=".device-carry/trained")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--train-seconds", type=float, default=220)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--bias-update", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--from-export", help="skip training: load this export, choose tie-free references, redo stage 4")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    dev = torch.device("cuda")
    import transformers
    results = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                            "gpu": torch.cuda.get_device_name(0)},
               "shape": SHAPE, "layer_types": LAYER_TYPES, "args": vars(args), "mix": MIX}
    log("versions", results["versions"])

    data = {}
    for part in (("eval",) if args.from_export else ("train", "eval")):
        for name in CORPORA:
            data[f"{part}_{name}"] = load_u32(os.path.join(args.data, f"{part}_{name}.u32"))
    with open(os.path.join(args.data, "refseqs.json")) as f:
        refseqs = json.load(f)
    with open(os.path.join(args.data, "prompts.json")) as f:
        prompts = json.load(f)
    results["train_tokens"] = {k: int(v.numel()) for k, v in data.items()}
    if args.from_export:
        return references_only(args, results, data, refseqs, prompts, dev)

    model, cfg = build_model(dev, args.seed)
    results["checks"] = check_revision(model, cfg, dev)
    results["checks"]["rope"] = pin_rope(model)
    results["checks"]["experts_implementation"] = force_eager_experts(model)
    results["n_params"] = sum(p.numel() for p in model.parameters())
    log("checks", results["checks"], "params", results["n_params"])

    # Preflight: every post-training stage on a throwaway copy of the untrained model.
    import copy
    t0 = time.time()
    pre = post_training(copy.deepcopy(model), data, refseqs, prompts, dev, "/tmp", "preflight", quick=True)
    results["preflight_seconds"] = time.time() - t0
    log("preflight ok", json.dumps(pre["heldout"]), "in", round(results["preflight_seconds"], 1), "s")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    # ---- training ----
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    batches = Batches({k: data[f"train_{k}"] for k in CORPORA}, args.seq, args.batch, dev, args.seed)
    routers = topk_routers(model)
    counts = {id(r): torch.zeros(SHAPE["n_routed_experts"], device=dev) for r in routers}

    def count_hook(mod, inp, out):
        counts[id(mod)] += torch.bincount(out[2].reshape(-1), minlength=SHAPE["n_routed_experts"]).float()

    hooks = [r.register_forward_hook(count_hook) for r in routers]
    eval_small = {k: eval_windows(data[f"eval_{k}"], args.seq, limit=4) for k in CORPORA}
    curve, evals = [], []
    step, tokens, t_start = 0, 0, time.time()
    last_eval = -1e9
    while True:
        elapsed = time.time() - t_start
        frac = elapsed / args.train_seconds
        if frac >= 1.0:
            break
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (
            args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))
        for gparam in opt.param_groups:
            gparam["lr"] = lr
        x, y = batches.next()
        logits = model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():  # aux-loss-free balancing: push under-used experts up, over-used down
            for r in routers:
                c = counts[id(r)]
                if c.sum() > 0:
                    r.e_score_correction_bias += args.bias_update * torch.sign(c.mean() - c)
                c.zero_()
        step += 1
        tokens += x.numel()
        if step % 10 == 0 or step == 1:
            curve.append({"step": step, "t": round(time.time() - t_start, 2), "tokens": tokens,
                          "loss": float(loss), "lr": lr, "grad_norm": float(gn)})
        if step % 50 == 0:
            log(f"step {step} t {time.time() - t_start:.0f}s tok {tokens} loss {float(loss):.3f} lr {lr:.2e}")
        if time.time() - last_eval > 20:
            model.eval()
            ev = {"step": step, "t": round(time.time() - t_start, 2), "tokens": tokens}
            for k, w in eval_small.items():
                ev[k] = mean_nll(model, w, dev)[0]
            evals.append(ev)
            model.train()
            last_eval = time.time()
    for h in hooks:
        h.remove()
    train_time = time.time() - t_start
    model.eval()
    ev = {"step": step, "t": round(train_time, 2), "tokens": tokens}
    for k, w in eval_small.items():
        ev[k] = mean_nll(model, w, dev)[0]
    evals.append(ev)
    results.update({"train_seconds": train_time, "steps": step, "tokens_seen": tokens,
                    "tokens_per_second": tokens / train_time, "loss_curve": curve, "eval_curve": evals,
                    "router_bias": {str(i): r.e_score_correction_bias.tolist() for i, r in enumerate(routers)}})
    log(f"trained {step} steps, {tokens} tokens in {train_time:.0f}s ({tokens / train_time:.0f} tok/s)")

    # Perplexity of the float weights before rounding, to show what the storage types cost.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    results["heldout_float"] = {}
    for name in CORPORA:
        nll, cnt = mean_nll(model, eval_windows(data[f"eval_{name}"], 512), dev)
        results["heldout_float"][name] = {"ppl": math.exp(nll), "mean_nll": nll, "tokens": cnt}
    log("held-out (float weights)", json.dumps({k: round(v["ppl"], 2) for k, v in results["heldout_float"].items()}))

    res_path = os.path.join(args.out, "results.json")
    with open(res_path, "w") as f:  # partial results first: a failure below still leaves the training record
        json.dump(results, f)
    try:
        results.update(post_training(model, data, refseqs, prompts, dev, args.out, "trained", quick=False))
    except Exception:
        import traceback
        results["post_training_error"] = traceback.format_exc()
        with open(res_path, "w") as f:
            json.dump(results, f)
        raise
    log("held-out (stored weights)", json.dumps({k: round(v["ppl"], 2) for k, v in results["heldout"].items()}))
    log("reference", json.dumps(results["reference"]))
    log("margins", json.dumps(results["margins"]))
    with open(res_path, "w") as f:
        json.dump(results, f)
    log("done")


if __name__ == "__main__":
    sys.exit(main())
