#!/usr/bin/env python3
"""make_golden.py — golden logits for the tiny DeepSeek V4 model from Hugging Face transformers.

Independent reference for the engine's forward pass (MODEL.md §14.4-§14.6): builds
DeepseekV4ForCausalLM with the config read from a tiny GGUF written by ds4-gen (F32 or F16 weights),
loads exactly those weights (strict), and writes per-position logits for a few random token
sequences plus the discrete-decision margins (indexer top-k cut-off, k-th vs (k+1)-th expert) that
let a comparison skip positions whose selection is ambiguous.

Runs where torch + transformers (with deepseek_v4) are installed; no internet; no `gguf` package
(a minimal numpy GGUF reader is below). Usage:

    python3 make_golden.py --gguf tiny.gguf --out OUTDIR [--device cpu|cuda] [--check-device cuda]

Output files in OUTDIR (all little-endian, no headers; shapes in manifest.json):
    seq{i}.ids.i32             int32 [S]           input token ids
    seq{i}.logits.f32          float32 [S][V]      logits at every position (predicting t+1)
    seq{i}.indexer_margin.f32  float32 [Lcsa][S]   relative gap between the TK-th and (TK+1)-th
                                                   indexer score (inf where all rows are visible)
    seq{i}.indexer_topk.i32    int32 [Lcsa][S][TK] selected compressed rows, ascending, -1 padded
    seq{i}.expert_margin.f32   float32 [L][S]      relative gap between the K-th and (K+1)-th
                                                   biased router score (inf on hash layers)
    seq{i}.experts.i32         int32 [L][S][K]     selected experts, ascending
    seq0.hc_states.f32         float32 [N][P][NHC][E]  HC state entering each layer (entry 0 = embedding), first P positions
    manifest.json              versions, revision checks, config, sequences, files, statistics
"""
import argparse
import hashlib
import inspect
import json
import math
import os
import struct
import sys
import time

import numpy as np

# ---------------------------------------------------------------------------------------------
# Minimal GGUF v3 reader (metadata of every type, F32/F16/I32 tensors).

GGUF_SCALAR = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
               6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
GGML_TYPES = {0: ("F32", np.float32, 4), 1: ("F16", np.float16, 2), 26: ("I32", np.int32, 4)}


class Gguf:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.pos = 0
        magic, version, n_tensors, n_kv = struct.unpack_from("<IIQQ", self.buf, 0)
        if magic != 0x46554747 or version != 3:
            raise ValueError(f"{path}: not a GGUF v3 file")
        self.pos = 24
        self.meta = {}
        for _ in range(n_kv):
            key = self._str()
            (vt,) = self._unpack("<I")
            self.meta.setdefault(key, self._value(vt))
        self.tensors = {}
        order = []
        for _ in range(n_tensors):
            name = self._str()
            (nd,) = self._unpack("<I")
            ne = list(self._unpack("<" + "Q" * nd))
            tid, off = self._unpack("<IQ")
            self.tensors[name] = (ne, tid, off)
            order.append(name)
        self.order = order
        align = self.meta.get("general.alignment", 32)
        self.data = (self.pos + align - 1) // align * align

    def _unpack(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def _str(self):
        (n,) = self._unpack("<Q")
        s = self.buf[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def _value(self, vt):
        if vt in GGUF_SCALAR:
            return self._unpack(GGUF_SCALAR[vt][0])[0]
        if vt == 8:
            return self._str()
        if vt == 9:
            et, n = self._unpack("<IQ")
            if et in GGUF_SCALAR and et != 7:
                fmt, size = GGUF_SCALAR[et]
                arr = np.frombuffer(self.buf, dtype=np.dtype(fmt), count=n, offset=self.pos)
                self.pos += n * size
                return arr.tolist()
            return [self._value(et) for _ in range(n)]
        raise ValueError(f"unknown GGUF value type {vt}")

    def tensor(self, name):
        """The tensor in PyTorch orientation: GGUF dims reversed, no transpose (MODEL.md §0)."""
        ne, tid, off = self.tensors[name]
        if tid not in GGML_TYPES:
            raise ValueError(f"{name}: type id {tid} not supported by this reader (use F32/F16 models)")
        _, dt, size = GGML_TYPES[tid]
        count = int(np.prod(ne))
        arr = np.frombuffer(self.buf, dtype=dt, count=count, offset=self.data + off)
        return arr.reshape(list(reversed(ne)))


# ---------------------------------------------------------------------------------------------
# Config from GGUF metadata.

def tiny_config_kwargs(g):
    m = g.meta
    k = lambda s: m["deepseek4." + s]
    n_layer = k("block_count")
    ratios = list(k("attention.compress_ratios"))[:n_layer]
    clamps = list(k("swiglu_clamp_exp"))[:n_layer]
    if len(set(clamps)) != 1:
        raise ValueError(f"HF has one swiglu_limit; the GGUF has per-layer clamps {clamps}")
    hca = sorted({r for r in ratios if r not in (0, 4)})
    if len(hca) > 1:
        raise ValueError(f"more than one HCA ratio: {hca}")
    type_of = {0: "sliding_attention", 4: "compressed_sparse_attention"}
    layer_types = [type_of.get(r, "heavily_compressed_attention") for r in ratios]
    n_hash = k("hash_layer_count")
    head_dim = k("attention.key_length")
    rope_dims = k("rope.dimension_count")
    prf = rope_dims / head_dim
    orig = k("rope.scaling.original_context_length")
    factor = float(k("rope.scaling.factor"))
    return dict(
        vocab_size=k("vocab_size"), hidden_size=k("embedding_length"), num_hidden_layers=n_layer,
        num_attention_heads=k("attention.head_count"), num_key_value_heads=k("attention.head_count_kv"),
        head_dim=head_dim, q_lora_rank=k("attention.q_lora_rank"), o_groups=k("attention.output_group_count"),
        o_lora_rank=k("attention.output_lora_rank"), n_routed_experts=k("expert_count"),
        num_experts_per_tok=k("expert_used_count"), n_shared_experts=k("expert_shared_count"),
        moe_intermediate_size=k("expert_feed_forward_length"), scoring_func="sqrtsoftplus",
        norm_topk_prob=bool(k("expert_weights_norm")), routed_scaling_factor=float(k("expert_weights_scale")),
        swiglu_limit=float(clamps[0]), sliding_window=k("attention.sliding_window"),
        index_n_heads=k("attention.indexer.head_count"), index_head_dim=k("attention.indexer.key_length"),
        index_topk=k("attention.indexer.top_k"), hc_mult=k("hyper_connection.count"),
        hc_sinkhorn_iters=k("hyper_connection.sinkhorn_iterations"), hc_eps=float(k("hyper_connection.epsilon")),
        rms_norm_eps=float(k("attention.layer_norm_rms_epsilon")),
        layer_types=layer_types,
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": hca[0] if hca else 128},
        mlp_layer_types=["hash_moe"] * n_hash + ["moe"] * (n_layer - n_hash),
        max_position_embeddings=int(factor * orig), rope_theta=float(k("rope.freq_base")),
        compress_rope_theta=float(k("attention.compress_rope_freq_base")), partial_rotary_factor=prf,
        rope_parameters={
            "main": {"rope_type": "default", "rope_theta": float(k("rope.freq_base")), "partial_rotary_factor": prf},
            "compress": {"rope_type": "yarn", "rope_theta": float(k("attention.compress_rope_freq_base")),
                         "partial_rotary_factor": prf, "factor": factor, "original_max_position_embeddings": orig,
                         "beta_fast": float(k("rope.scaling.yarn_beta_fast")),
                         "beta_slow": float(k("rope.scaling.yarn_beta_slow")), "attention_factor": 1.0},
        },
        tie_word_embeddings=False, attention_bias=False, num_nextn_predict_layers=1,
        bos_token_id=0, eos_token_id=1,
    ), ratios, hca


def make_config(DeepseekV4Config, kw, log):
    fields = getattr(DeepseekV4Config, "__dataclass_fields__", None)
    names = set(fields) if fields else set(inspect.signature(DeepseekV4Config.__init__).parameters)
    log["config_fields"] = sorted(names)
    kw = dict(kw)
    legacy = {}
    if "compress_rates" not in names:  # older revisions: scalar rates
        rates = kw.pop("compress_rates")
        legacy["compress_rate_csa"] = rates["compressed_sparse_attention"]
        legacy["compress_rate_hca"] = rates["heavily_compressed_attention"]
    if "mlp_layer_types" not in names:
        legacy["num_hash_layers"] = kw.pop("mlp_layer_types").count("hash_moe")
    if "rope_parameters" not in names:
        rp = kw.pop("rope_parameters")["compress"]
        legacy["rope_scaling"] = {"type": "yarn", "factor": rp["factor"],
                                  "original_max_position_embeddings": rp["original_max_position_embeddings"],
                                  "beta_fast": rp["beta_fast"], "beta_slow": rp["beta_slow"]}
    if "partial_rotary_factor" not in names:
        legacy["qk_rope_head_dim"] = int(round(kw.pop("partial_rotary_factor") * kw["head_dim"]))
    dropped = [x for x in kw if x not in names]
    for x in dropped:
        kw.pop(x)
    log["config_dropped_kwargs"] = dropped
    log["config_legacy_kwargs"] = sorted(legacy)
    cfg = DeepseekV4Config(**kw, **legacy)
    cfg._attn_implementation = "eager"
    return cfg


# ---------------------------------------------------------------------------------------------
# GGUF -> HF state dict (MODEL.md §14.4 "Weight mapping").

LAYER_MAP = {
    "attn_hc.fn": "hc_attn_fn.weight", "attn_hc.base": "hc_attn_base.weight", "attn_hc.scale": "hc_attn_scale.weight",
    "ffn_hc.fn": "hc_ffn_fn.weight", "ffn_hc.base": "hc_ffn_base.weight", "ffn_hc.scale": "hc_ffn_scale.weight",
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_a_proj.weight": "attn_q_a.weight", "self_attn.q_a_norm.weight": "attn_q_a_norm.weight",
    "self_attn.q_b_proj.weight": "attn_q_b.weight", "self_attn.kv_proj.weight": "attn_kv.weight",
    "self_attn.kv_norm.weight": "attn_kv_a_norm.weight", "self_attn.sinks": "attn_sinks.weight",
    "self_attn.o_a_proj.weight": "attn_output_a.weight", "self_attn.o_b_proj.weight": "attn_output_b.weight",
    "self_attn.compressor.kv_proj.weight": "attn_compressor_kv.weight",
    "self_attn.compressor.gate_proj.weight": "attn_compressor_gate.weight",
    "self_attn.compressor.position_bias": "attn_compressor_ape.weight",
    "self_attn.compressor.kv_norm.weight": "attn_compressor_norm.weight",
    "self_attn.compressor.indexer.q_b_proj.weight": "indexer.attn_q_b.weight",
    "self_attn.compressor.indexer.kv_proj.weight": "indexer_compressor_kv.weight",
    "self_attn.compressor.indexer.gate_proj.weight": "indexer_compressor_gate.weight",
    "self_attn.compressor.indexer.position_bias": "indexer_compressor_ape.weight",
    "self_attn.compressor.indexer.kv_norm.weight": "indexer_compressor_norm.weight",
    "self_attn.compressor.indexer.scorer.weights_proj.weight": "indexer.proj.weight",  # rev. A
    "self_attn.compressor.indexer.weights_proj.weight": "indexer.proj.weight",         # rev. B
    "mlp.gate.weight": "ffn_gate_inp.weight", "mlp.gate.e_score_correction_bias": "exp_probs_b.bias",
    "mlp.gate.tid2eid": "ffn_gate_tid2eid.weight",
    "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
}
GLOBAL_MAP = {
    "model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight",
    "model.norm.weight": "output_norm.weight", "model.hc_head.hc_fn": "output_hc_fn.weight",
    "model.hc_head.hc_base": "output_hc_base.weight", "model.hc_head.hc_scale": "output_hc_scale.weight",
}


def build_state_dict(torch, model, g):
    sd_keys = model.state_dict()
    out, used = {}, set()
    missing = []
    for key, ref in sd_keys.items():
        if key in GLOBAL_MAP:
            names = [GLOBAL_MAP[key]]
            arr = g.tensor(names[0])
        elif key.startswith("model.layers."):
            rest = key[len("model.layers."):]
            layer, sub = rest.split(".", 1)
            pre = f"blk.{layer}."
            if sub == "mlp.experts.gate_up_proj":
                names = [pre + "ffn_gate_exps.weight", pre + "ffn_up_exps.weight"]
                # [NE][F][E] each; HF stacks gate then up along the output rows (chunk(2) splits them).
                arr = np.concatenate([g.tensor(names[0]), g.tensor(names[1])], axis=1)
            elif sub == "mlp.experts.down_proj":
                names = [pre + "ffn_down_exps.weight"]
                arr = g.tensor(names[0])
            elif sub in LAYER_MAP:
                names = [pre + LAYER_MAP[sub]]
                arr = g.tensor(names[0])
            else:
                missing.append(key)
                continue
        else:
            missing.append(key)
            continue
        t = torch.from_numpy(np.array(arr))  # a writable copy
        t = t.to(torch.int64) if ref.dtype == torch.int64 else t.to(torch.float32)
        if tuple(t.shape) != tuple(ref.shape):
            raise ValueError(f"{key}: GGUF {names} gives shape {tuple(t.shape)}, model wants {tuple(ref.shape)}")
        out[key] = t
        used.update(names)
    unused = [n for n in g.order if n not in used]
    return out, missing, unused


# ---------------------------------------------------------------------------------------------
# Revision checks (MODEL.md §14.5 step 0).

GOLD_PRE = [0.253646227, 0.284887323, 0.235153901, 0.181919788]
GOLD_POST = [0.102556531, 0.385004945, 1.274742724, 1.589473130]
GOLD_C = [[0.440280696, 0.195951557, 0.157211752, 0.206554437],
          [0.010571054, 0.458650663, 0.520568419, 0.010207973],
          [0.000339852, 0.005005849, 0.235237105, 0.759419604],
          [0.548807399, 0.340390931, 0.086981724, 0.023816986]]


def check_hc_revision(torch, mod, cfg):
    HC = mod.DeepseekV4HyperConnection
    hc = HC(cfg).float()
    E = cfg.hidden_size
    n = 4 * E
    a = 3.0
    nu = a / math.sqrt(a * a / n + 1e-6)
    m = torch.tensor([math.sin(1 + k) for k in range(24)], dtype=torch.float64)
    with torch.no_grad():
        hc.fn.zero_()
        hc.fn[:, 0] = (m / nu).float()
        hc.base.copy_(torch.tensor([(k - 12) / 8 for k in range(24)]))
        hc.scale.copy_(torch.tensor([0.5, 2.0, 3.0]))
        x = torch.zeros(1, 1, 4, E)
        x[0, 0, 0, 0] = a
        out = hc(x)
    post, comb, collapsed = out[0], out[1], out[2]
    post = post.reshape(-1)[:4].double()
    comb = comb.reshape(4, 4).double()
    pre0 = float(collapsed.reshape(-1)[0]) / a
    err_post = float((post - torch.tensor(GOLD_POST, dtype=torch.float64)).abs().max())
    err_comb = float((comb - torch.tensor(GOLD_C, dtype=torch.float64)).abs().max())
    err_pre = abs(pre0 - GOLD_PRE[0])
    ok = err_post < 1e-5 and err_comb < 1e-5 and err_pre < 1e-5
    return dict(hc_matches_spec=ok, err_post=err_post, err_comb=err_comb, err_pre0=err_pre)


def check_shared_clamp(torch, model, cfg):
    """Does the shared expert (DeepseekV4MLP) clamp gate/up like the routed experts?"""
    layer = model.model.layers[0].mlp.shared_experts
    torch.manual_seed(0)
    x = torch.randn(5, cfg.hidden_size) * 30.0
    with torch.no_grad():
        y = layer(x)
        gp = layer.gate_proj(x)
        up = layer.up_proj(x)
        L = cfg.swiglu_limit
        silu = torch.nn.functional.silu
        clamped = layer.down_proj(silu(gp.clamp(max=L)) * up.clamp(min=-L, max=L))
        plain = layer.down_proj(silu(gp) * up)
    dc = float((y - clamped).abs().max())
    dp = float((y - plain).abs().max())
    return dict(shared_expert_clamp=dc < dp, diff_vs_clamped=dc, diff_vs_unclamped=dp)


# ---------------------------------------------------------------------------------------------
# Discrete-decision recorders.

class Recorders:
    def __init__(self, torch, model, cfg):
        self.torch = torch
        self.cfg = cfg
        self.handles = []
        self.capture = None
        self.indexer_scores = {}   # layer -> [S][T] masked scores as HF computed them
        self.router_in = {}        # layer -> [S][E] router input
        self.router_idx = {}       # layer -> [S][K] selected experts
        self.csa_layers = [i for i, t in enumerate(cfg.layer_types) if t == "compressed_sparse_attention"]
        for i, layer in enumerate(model.model.layers):
            comp = getattr(layer.self_attn, "compressor", None)
            idx = getattr(comp, "indexer", None) if comp is not None else None
            if idx is not None:
                self.handles.append(idx.register_forward_pre_hook(self._pre(i)))
                self.handles.append(idx.register_forward_hook(self._post(i)))
            gate = layer.mlp.gate
            self.handles.append(gate.register_forward_hook(self._router(i), with_kwargs=True))
        self.orig_method = torch.Tensor.topk
        self.orig_fn = torch.topk
        rec = self

        def method(t, *a, **k):
            if rec.capture is not None:
                rec.indexer_scores[rec.capture] = t.detach()[0].clone()
            return rec.orig_method(t, *a, **k)

        def fn(t, *a, **k):
            if rec.capture is not None:
                rec.indexer_scores[rec.capture] = t.detach()[0].clone()
            return rec.orig_fn(t, *a, **k)
        torch.Tensor.topk = method
        torch.topk = fn

    def _pre(self, i):
        def hook(module, args):
            self.capture = i
        return hook

    def _post(self, i):
        def hook(module, args, output):
            self.capture = None
        return hook

    def _router(self, i):
        def hook(module, args, kwargs, output):
            x = args[0] if args else kwargs["hidden_states"]
            self.router_in[i] = x.detach().reshape(-1, x.shape[-1]).clone()
            idx = output[2] if isinstance(output, (tuple, list)) and len(output) >= 3 else output[-1]
            self.router_idx[i] = idx.detach().reshape(-1, idx.shape[-1]).clone()
        return hook

    def close(self):
        for h in self.handles:
            h.remove()
        self.torch.Tensor.topk = self.orig_method
        self.torch.topk = self.orig_fn

    def margins(self, model, S):
        torch, cfg = self.torch, self.cfg
        TK, K = cfg.index_topk, cfg.num_experts_per_tok
        idx_margin = np.full((len(self.csa_layers), S), np.inf, np.float32)
        idx_topk = np.full((len(self.csa_layers), S, TK), -1, np.int32)
        for j, l in enumerate(self.csa_layers):
            sc = self.indexer_scores.get(l)
            if sc is None:
                raise RuntimeError(f"indexer scores of layer {l} were not captured")
            sc = sc.double().cpu().numpy()  # [S][T], future rows -inf
            for t in range(S):
                nc = (t + 1) // 4
                if nc == 0:
                    continue
                v = sc[t, :nc]
                order = np.argsort(-v, kind="stable")
                sel = np.sort(order[:min(TK, nc)])
                idx_topk[j, t, :len(sel)] = sel
                if nc > TK:
                    a, b = v[order[TK - 1]], v[order[TK]]
                    idx_margin[j, t] = (a - b) / max(abs(a), abs(b), 1e-30)
        L = cfg.num_hidden_layers
        exp_margin = np.full((L, S), np.inf, np.float32)
        experts = np.zeros((L, S, K), np.int32)
        for l in range(L):
            experts[l] = np.sort(self.router_idx[l].cpu().numpy(), axis=1)
            if cfg.mlp_layer_types[l] == "hash_moe":
                continue
            gate = model.model.layers[l].mlp.gate
            with torch.no_grad():
                x = self.router_in[l].double()
                logits = x @ gate.weight.detach().double().t()
                scores = torch.sqrt(torch.nn.functional.softplus(logits))
                biased = (scores + gate.e_score_correction_bias.detach().double()).cpu().numpy()
            srt = -np.sort(-biased, axis=1)
            a, b = srt[:, K - 1], srt[:, K]
            exp_margin[l] = ((a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-30)).astype(np.float32)
        return idx_margin, idx_topk, exp_margin, experts


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--check-device", default="", help="also run on this device and report the max difference")
    ap.add_argument("--seed", type=int, default=20261129, help="seed of the random token sequences")
    ap.add_argument("--lengths", default="300,333,384")
    ap.add_argument("--hc-positions", type=int, default=64)
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import torch
    import transformers
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    mod = sys.modules[DeepseekV4ForCausalLM.__module__]

    log = {"torch": torch.__version__, "transformers": transformers.__version__, "numpy": np.__version__,
           "modeling_file": getattr(mod, "__file__", "?")}
    try:
        with open(mod.__file__, "rb") as f:
            log["modeling_file_sha256"] = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        pass
    with open(args.gguf, "rb") as f:
        log["gguf_sha256"] = hashlib.sha256(f.read()).hexdigest()
    g = Gguf(args.gguf)
    # The tensor bytes alone: independent of metadata/tokenizer changes that do not touch weights.
    log["gguf_data_offset"] = g.data
    log["gguf_data_sha256"] = hashlib.sha256(g.buf[g.data:]).hexdigest()
    log["gguf_generator"] = {k: g.meta[k] for k in g.meta if k.startswith("ds4cpp.generator")}
    kw, ratios, hca = tiny_config_kwargs(g)
    cfg = make_config(DeepseekV4Config, kw, log)
    log["hf_config"] = {k: getattr(cfg, k, None) for k in ("layer_types", "compress_rates", "mlp_layer_types",
                                                            "rope_parameters", "swiglu_limit", "index_topk")}
    print("config:", json.dumps(log["hf_config"], default=str), flush=True)

    torch.manual_seed(0)
    model = DeepseekV4ForCausalLM(cfg).float().eval()
    try:
        rev = check_hc_revision(torch, mod, cfg)
    except Exception as e:  # noqa: BLE001 - a bug in the check itself must not cost the run
        rev = {"hc_matches_spec": None, "hc_check_error": repr(e)}
    try:
        rev.update(check_shared_clamp(torch, model, cfg))
    except Exception as e:  # noqa: BLE001
        rev["shared_clamp_check_error"] = repr(e)
    rev["indexer_scorer_submodule"] = any(".scorer." in k for k in model.state_dict())
    log["revision_checks"] = rev
    print("revision checks:", rev, flush=True)
    if rev["hc_matches_spec"] is False:
        json.dump(log, open(os.path.join(args.out, "manifest.json"), "w"), indent=1, default=str)
        sys.exit("installed HyperConnection does not match the spec golden vector (rev. C?): stop")

    rot = model.model.rotary_emb
    w = {k: getattr(rot, k).double().cpu().numpy().tolist() for k in ("main_inv_freq", "compress_inv_freq")
         if hasattr(rot, k)}
    log["rope_check"] = {
        "compress_omega_1": w.get("compress_inv_freq", [None, None])[1], "spec_omega_1": 0.6876560219336321,
        "compress_omega_20": w.get("compress_inv_freq", [None] * 21)[20], "spec_omega_20": 0.00029697777826169085,
        "compress_attention_scaling": getattr(rot, "compress_attention_scaling", None),
        "main_omega_1": w.get("main_inv_freq", [None, None])[1], "spec_main_omega_1": 0.7498942093324559,
    }
    print("rope:", log["rope_check"], flush=True)

    sd, missing, unused = build_state_dict(torch, model, g)
    if missing or unused:
        log["state_dict_shapes"] = {k: list(v.shape) for k, v in model.state_dict().items()}
        json.dump(log, open(os.path.join(args.out, "manifest.json"), "w"), indent=1, default=str)
        sys.exit(f"state dict mismatch: HF keys without a GGUF tensor {missing}; unused GGUF tensors {unused}")
    persistent = set(model.state_dict().keys())
    model.load_state_dict(sd, strict=True)
    log["loaded_keys"] = len(persistent)
    print(f"loaded {len(persistent)} tensors strictly", flush=True)

    V = cfg.vocab_size
    rng = np.random.default_rng(args.seed)
    lengths = [int(x) for x in args.lengths.split(",")]
    seqs = []
    for S in lengths:
        ids = rng.integers(0, V, size=S).astype(np.int32)
        ids[0] = 0  # BOS, as real prompts start
        seqs.append(ids)

    def run(device, ids, want_hidden):
        m = model.to(device)
        x = torch.from_numpy(ids.astype(np.int64))[None].to(device)
        with torch.no_grad():
            out = m(input_ids=x, use_cache=False, logits_to_keep=0, output_hidden_states=want_hidden)
        return out

    files, stats = [], []
    for i, ids in enumerate(seqs):
        S = len(ids)
        rec = Recorders(torch, model, cfg)
        t0 = time.time()
        try:
            out = run(args.device, ids, i == 0)
        finally:
            rec.close()
        logits = out.logits[0].float().cpu().numpy()
        if not np.isfinite(logits).all():
            sys.exit(f"sequence {i}: non-finite logits")
        idx_margin, idx_topk, exp_margin, experts = rec.margins(model, S)
        base = os.path.join(args.out, f"seq{i}")
        ids.astype("<i4").tofile(base + ".ids.i32")
        logits.astype("<f4").tofile(base + ".logits.f32")
        idx_margin.astype("<f4").tofile(base + ".indexer_margin.f32")
        idx_topk.astype("<i4").tofile(base + ".indexer_topk.i32")
        exp_margin.astype("<f4").tofile(base + ".expert_margin.f32")
        experts.astype("<i4").tofile(base + ".experts.i32")
        files += [f"seq{i}.{s}" for s in ("ids.i32", "logits.f32", "indexer_margin.f32", "indexer_topk.i32",
                                          "expert_margin.f32", "experts.i32")]
        st = {"length": S, "seconds": round(time.time() - t0, 3), "max_abs_logit": float(np.abs(logits).max()),
              "logit_std": float(logits.std()),
              "argmax_first16": logits.argmax(-1)[:16].tolist(),
              "indexer_min_rel_margin": float(np.min(idx_margin)) if idx_margin.size else None,
              "indexer_positions_below_1e-6": int((idx_margin < 1e-6).sum()),
              "indexer_positions_below_1e-4": int((idx_margin < 1e-4).sum()),
              "expert_min_rel_margin": float(np.min(exp_margin)),
              "expert_positions_below_1e-6": int((exp_margin < 1e-6).sum()),
              "expert_positions_below_1e-4": int((exp_margin < 1e-4).sum()),
              "top2_logit_gap_min": float(np.min(-np.diff(-np.sort(-logits, axis=1)[:, :2], axis=1)))}
        if i == 0 and getattr(out, "hidden_states", None) is not None:
            P = min(args.hc_positions, S)
            hs = [h[0, :P].float().cpu().numpy() for h in out.hidden_states if h.dim() == 4]
            st["hidden_states_shapes"] = [list(h.shape) for h in out.hidden_states]
            if hs:
                hs = np.stack(hs).astype("<f4")
                hs.tofile(base + ".hc_states.f32")
                files.append("seq0.hc_states.f32")
                st["hc_states_shape"] = list(hs.shape)
        if args.check_device:
            try:
                out2 = run(args.check_device, ids, False)
                l2 = out2.logits[0].float().cpu().numpy()
                st["check_device"] = args.check_device
                st["check_max_abs_diff"] = float(np.abs(l2 - logits).max())
                st["check_argmax_equal"] = bool((l2.argmax(-1) == logits.argmax(-1)).all())
            except Exception as e:  # noqa: BLE001 - the check is informational
                st["check_error"] = repr(e)
            model.to(args.device)
        print(f"seq{i}:", json.dumps(st), flush=True)
        stats.append(st)

    log.update({"device": args.device, "sequence_seed": args.seed, "lengths": lengths, "files": files,
                "stats": stats, "vocab_size": V, "n_layer": cfg.num_hidden_layers,
                "csa_layers": [i for i, t in enumerate(cfg.layer_types) if t == "compressed_sparse_attention"],
                "index_topk": cfg.index_topk, "experts_per_token": cfg.num_experts_per_tok,
                "compress_ratios": ratios})
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(log, f, indent=1, default=str)
    print("done", flush=True)


if __name__ == "__main__":
    main()
