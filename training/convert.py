#!/usr/bin/env python3
"""convert.py — transformers DeepseekV4ForCausalLM state dict (safetensors) → ds4cpp / ds4 GGUF v3.

The reverse of MODEL.md §14.4: HF parameter names become the GGUF names of §4, every tensor keeps its row-major
bytes with the dim list reversed (no transposes), routed experts are split out of `gate_up_proj`, `tid2eid` is
narrowed to I32. Storage types come from the export: float16 tensors are written F16, float32 ones F32, a
`<name>.q8_0_qs` / `<name>.q8_0_d` pair (what training/train.py exports for the two vocabulary tables) becomes
Q8_0 blocks, integer tables I32. Plain float tables (a state dict that was not prepared by train.py) are
quantized here: the vocabulary tables to Q8_0, other matrices to F16, vectors to F32.

Metadata: the `deepseek4.*` keys in the order and value types of src/modelspec/metadata_writer.cpp, provenance
keys `ds4cpp.trained.*`, and the `tokenizer.ggml.*` section — copied record by record from a GGUF that the C++
tokenizer import wrote (`--tokenizer-from`, e.g. `ds4-gen --profile tiny-chat` output), or rebuilt here from the
npm tokenizer.json + the V4 added-token table with the same conventions as src/tokenizer/hf_import.cpp
(both give identical bytes, checked for the committed model; tests/trained compares the model's tokenizer
tables with the C++ import on every run).

Pure Python 3 (no numpy, no torch), so it runs on the CPU machine.
Usage: training/convert.py --export DIR --results DIR/results.json [--tokenizer-from tiny-chat.gguf] -o OUT.gguf
"""
import argparse
import array
import json
import math
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import vocab  # noqa: E402

GGUF_MAGIC = b"GGUF"
ALIGN = 32
# ggml tensor types (FORMATS.md §2.1)
T_F32, T_F16, T_Q8_0, T_I32 = 0, 1, 8, 26
# GGUF metadata value types (FORMATS.md §1.4)
V_U8, V_I8, V_U16, V_I16, V_U32, V_I32, V_F32, V_BOOL, V_STR, V_ARR, V_U64, V_I64, V_F64 = range(13)
FIXED_SIZE = {V_U8: 1, V_I8: 1, V_U16: 2, V_I16: 2, V_U32: 4, V_I32: 4, V_F32: 4, V_BOOL: 1, V_U64: 8, V_I64: 8,
              V_F64: 8}


# ---------------------------------------------------------------------------------------------------------------
# safetensors (header = u64 length + JSON; data = raw little-endian tensors)
# ---------------------------------------------------------------------------------------------------------------
class Tensor:
    def __init__(self, dtype, shape, data):
        self.dtype, self.shape, self.data = dtype, list(shape), data

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = Tensor(info["dtype"], info["shape"], raw[base + a:base + b])
    return out


def load_export(paths):
    sd = {}
    for p in paths:
        for k, v in read_safetensors(p).items():
            if k in sd:
                raise ValueError(f"tensor {k} appears in two shards")
            sd[k] = v
    return sd


# ---------------------------------------------------------------------------------------------------------------
# Element conversions (only used for exports that are not already in their storage type)
# ---------------------------------------------------------------------------------------------------------------
def floats_of(t):
    if t.dtype == "F32":
        a = array.array("f")
        a.frombytes(t.data)
        return a
    if t.dtype == "F16":
        n = len(t.data) // 2
        return array.array("f", struct.unpack(f"<{n}e", t.data))
    if t.dtype == "BF16":
        n = len(t.data) // 2
        hi = struct.unpack(f"<{n}H", t.data)
        return array.array("f", struct.unpack(f"<{n}f", struct.pack(f"<{n}I", *[h << 16 for h in hi])))
    raise ValueError(f"not a float tensor: {t.dtype}")


def to_f16_bytes(t):
    if t.dtype == "F16":
        return t.data
    v = floats_of(t)
    return struct.pack(f"<{len(v)}e", *v)  # round to nearest even (FORMATS.md §2.2)


def to_f32_bytes(t):
    if t.dtype == "F32":
        return t.data
    v = floats_of(t)
    return struct.pack(f"<{len(v)}f", *v)


def to_i32_bytes(t):
    if t.dtype == "I32":
        return t.data
    if t.dtype == "I64":
        n = len(t.data) // 8
        vals = struct.unpack(f"<{n}q", t.data)
        if any(v < 0 or v > 0x7FFFFFFF for v in vals):
            raise ValueError("tid2eid holds ids outside the I32 range")
        return struct.pack(f"<{n}i", *vals)
    raise ValueError(f"not an integer tensor: {t.dtype}")


def q8_0_from_pair(qs, d):
    """Interleaves stored int8 quants [rows][cols] and f16 scales [rows][cols/32] into Q8_0 blocks."""
    rows, cols = qs.shape
    if d.shape != [rows, cols // 32] or cols % 32 or qs.dtype != "I8" or d.dtype != "F16":
        raise ValueError(f"bad Q8_0 pair: qs {qs.dtype}{qs.shape}, d {d.dtype}{d.shape}")
    out = bytearray()
    nb = rows * (cols // 32)
    for b in range(nb):
        out += d.data[2 * b:2 * b + 2]
        out += qs.data[32 * b:32 * b + 32]
    return bytes(out)


def q8_0_quantize(t):
    """FORMATS.md §2.8 Q8_0 of a float matrix (d = amax/127 in float32, q = round-half-away(x/d), f16(d))."""
    v = floats_of(t)
    out = bytearray()
    f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]  # noqa: E731
    for b in range(0, len(v), 32):
        blk = v[b:b + 32]
        d = f32(max(abs(x) for x in blk) / 127.0)
        inv = f32(1.0 / d) if d else 0.0
        q = []
        for x in blk:
            y = f32(x * inv)
            r = math.floor(abs(y) + 0.5)
            q.append(int(max(-127, min(127, r if y >= 0 else -r))))
        out += struct.pack("<e", d) + struct.pack("<32b", *q)
    return bytes(out)


# ---------------------------------------------------------------------------------------------------------------
# HF → GGUF tensors (MODEL.md §4 / §14.4)
# ---------------------------------------------------------------------------------------------------------------
class Out:
    def __init__(self, name, ne, gtype, data):
        self.name, self.ne, self.gtype, self.data = name, ne, gtype, data


def bytes_for(gtype, t):
    if gtype == T_F16:
        return to_f16_bytes(t)
    if gtype == T_F32:
        return to_f32_bytes(t)
    if gtype == T_I32:
        return to_i32_bytes(t)
    raise ValueError(gtype)


def convert_tensors(sd, cfg):
    used = set()

    def get(name):
        if name not in sd:
            raise KeyError(f"state dict has no '{name}'")
        used.add(name)
        return sd[name]

    # A train.py export is already in its storage types; converting one of its tensors would break the
    # equality with the reference logits, so that is an error rather than a silent rounding.
    prepared = any(k.endswith(".q8_0_qs") for k in sd)

    def target_type(hname, t, vector):
        if t.dtype in ("I32", "I64"):
            return T_I32
        g = T_F32 if vector else T_F16
        if prepared and t.dtype != {T_F32: "F32", T_F16: "F16"}[g]:
            raise ValueError(f"{hname} is {t.dtype} in a prepared export, expected {'F32' if vector else 'F16'}")
        return g

    def plain(gname, hname, vector=False):
        t = get(hname)
        g = target_type(hname, t, vector)
        return Out(gname, list(reversed(t.shape)), g, bytes_for(g, t))

    def vocab_table(gname, hname):
        if hname + ".q8_0_qs" in sd:
            qs, d = get(hname + ".q8_0_qs"), get(hname + ".q8_0_d")
            return Out(gname, list(reversed(qs.shape)), T_Q8_0, q8_0_from_pair(qs, d))
        t = get(hname)
        if t.dtype == "F16":
            return Out(gname, list(reversed(t.shape)), T_F16, t.data)
        return Out(gname, list(reversed(t.shape)), T_Q8_0, q8_0_quantize(t))

    out = [vocab_table("token_embd.weight", "model.embed_tokens.weight"),
           plain("output_hc_fn.weight", "model.hc_head.hc_fn"),
           plain("output_hc_base.weight", "model.hc_head.hc_base", True),
           plain("output_hc_scale.weight", "model.hc_head.hc_scale", True),
           plain("output_norm.weight", "model.norm.weight", True),
           vocab_table("output.weight", "lm_head.weight")]
    n_hash = cfg["n_hash_layers"]
    F = cfg["moe_intermediate_size"]
    for l, lt in enumerate(cfg["layer_types"]):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        out += [plain(b + "hc_attn_fn.weight", p + "attn_hc.fn"),
                plain(b + "hc_attn_scale.weight", p + "attn_hc.scale", True),
                plain(b + "hc_attn_base.weight", p + "attn_hc.base", True),
                plain(b + "attn_norm.weight", p + "input_layernorm.weight", True),
                plain(b + "attn_q_a.weight", p + "self_attn.q_a_proj.weight"),
                plain(b + "attn_q_a_norm.weight", p + "self_attn.q_a_norm.weight", True),
                plain(b + "attn_q_b.weight", p + "self_attn.q_b_proj.weight"),
                plain(b + "attn_kv.weight", p + "self_attn.kv_proj.weight"),
                plain(b + "attn_kv_a_norm.weight", p + "self_attn.kv_norm.weight", True),
                plain(b + "attn_sinks.weight", p + "self_attn.sinks", True),
                plain(b + "attn_output_a.weight", p + "self_attn.o_a_proj.weight"),
                plain(b + "attn_output_b.weight", p + "self_attn.o_b_proj.weight")]
        if lt != "sliding_attention":
            c = p + "self_attn.compressor."
            out += [plain(b + "attn_compressor_ape.weight", c + "position_bias"),
                    plain(b + "attn_compressor_kv.weight", c + "kv_proj.weight"),
                    plain(b + "attn_compressor_gate.weight", c + "gate_proj.weight"),
                    plain(b + "attn_compressor_norm.weight", c + "kv_norm.weight", True)]
        if lt == "compressed_sparse_attention":
            i = p + "self_attn.compressor.indexer."
            wp = i + "scorer.weights_proj.weight" if i + "scorer.weights_proj.weight" in sd else i + "weights_proj.weight"
            out += [plain(b + "indexer.attn_q_b.weight", i + "q_b_proj.weight"),
                    plain(b + "indexer.proj.weight", wp),
                    plain(b + "indexer_compressor_ape.weight", i + "position_bias"),
                    plain(b + "indexer_compressor_kv.weight", i + "kv_proj.weight"),
                    plain(b + "indexer_compressor_gate.weight", i + "gate_proj.weight"),
                    plain(b + "indexer_compressor_norm.weight", i + "kv_norm.weight", True)]
        out += [plain(b + "hc_ffn_fn.weight", p + "ffn_hc.fn"),
                plain(b + "hc_ffn_scale.weight", p + "ffn_hc.scale", True),
                plain(b + "hc_ffn_base.weight", p + "ffn_hc.base", True),
                plain(b + "ffn_norm.weight", p + "post_attention_layernorm.weight", True),
                plain(b + "ffn_gate_inp.weight", p + "mlp.gate.weight")]
        if l >= n_hash:
            out.append(plain(b + "exp_probs_b.bias", p + "mlp.gate.e_score_correction_bias", True))
        # Routed experts: gate_up_proj [NE][2F][E] = gate rows then up rows (HF chunk(2)); down_proj [NE][E][F].
        gu = get(p + "mlp.experts.gate_up_proj")
        ne, two_f, e = gu.shape
        if two_f != 2 * F:
            raise ValueError(f"{p}mlp.experts.gate_up_proj is {gu.shape}, expected [NE, {2 * F}, E]")
        g = target_type(p + "mlp.experts.gate_up_proj", gu, False)
        raw = bytes_for(g, gu)
        row = e * 2
        gate, up = bytearray(), bytearray()
        for x in range(ne):
            base = x * two_f * row
            gate += raw[base:base + F * row]
            up += raw[base + F * row:base + 2 * F * row]
        out += [Out(b + "ffn_gate_exps.weight", [e, F, ne], g, bytes(gate)),
                Out(b + "ffn_up_exps.weight", [e, F, ne], g, bytes(up)),
                plain(b + "ffn_down_exps.weight", p + "mlp.experts.down_proj"),
                plain(b + "ffn_gate_shexp.weight", p + "mlp.shared_experts.gate_proj.weight"),
                plain(b + "ffn_up_shexp.weight", p + "mlp.shared_experts.up_proj.weight"),
                plain(b + "ffn_down_shexp.weight", p + "mlp.shared_experts.down_proj.weight")]
        if l < n_hash:
            out.append(plain(b + "ffn_gate_tid2eid.weight", p + "mlp.gate.tid2eid"))
    unused = sorted(set(sd) - used)
    if unused:
        raise ValueError("state dict entries not mapped to any GGUF tensor: " + ", ".join(unused[:8]))
    return out


# ---------------------------------------------------------------------------------------------------------------
# GGUF writing
# ---------------------------------------------------------------------------------------------------------------
def gstr(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


class KV:
    """One metadata record, already encoded (key + type + value)."""

    def __init__(self, key, raw):
        self.key, self.raw = key, raw


def kv_u32(k, v):
    return KV(k, gstr(k) + struct.pack("<II", V_U32, v))


def kv_u64(k, v):
    return KV(k, gstr(k) + struct.pack("<IQ", V_U64, v))


def kv_f32(k, v):
    return KV(k, gstr(k) + struct.pack("<If", V_F32, v))


def kv_bool(k, v):
    return KV(k, gstr(k) + struct.pack("<IB", V_BOOL, 1 if v else 0))


def kv_str(k, v):
    return KV(k, gstr(k) + struct.pack("<I", V_STR) + gstr(v))


def kv_arr(k, elem, values):
    head = gstr(k) + struct.pack("<IIQ", V_ARR, elem, len(values))
    if elem == V_STR:
        body = b"".join(gstr(v) for v in values)
    elif elem == V_I32:
        body = struct.pack(f"<{len(values)}i", *values)
    elif elem == V_F32:
        body = struct.pack(f"<{len(values)}f", *values)
    else:
        raise ValueError(elem)
    return KV(k, head + body)


def model_metadata(cfg, name, provenance):
    """deepseek4.* as src/modelspec/metadata_writer.cpp writes them (same order and value types)."""
    L = len(cfg["layer_types"])
    ratio = {"sliding_attention": 0, "compressed_sparse_attention": 4,
             "heavily_compressed_attention": cfg["hca_ratio"]}
    kvs = [kv_str("general.architecture", "deepseek4"), kv_str("general.name", name),
           kv_str("general.license", "mit"), kv_u32("general.quantization_version", 2),
           kv_u32("deepseek4.block_count", L), kv_u64("deepseek4.context_length", 1048576),
           kv_u32("deepseek4.embedding_length", cfg["hidden_size"]), kv_u32("deepseek4.vocab_size", cfg["vocab_size"]),
           kv_u32("deepseek4.attention.head_count", cfg["num_attention_heads"]),
           kv_u32("deepseek4.attention.head_count_kv", 1),
           kv_u32("deepseek4.attention.key_length", cfg["head_dim"]),
           kv_u32("deepseek4.attention.value_length", cfg["head_dim"]),
           kv_u32("deepseek4.rope.dimension_count", 64),
           kv_u32("deepseek4.attention.q_lora_rank", cfg["q_lora_rank"]),
           kv_u32("deepseek4.attention.output_lora_rank", cfg["o_lora_rank"]),
           kv_u32("deepseek4.attention.output_group_count", cfg["o_groups"]),
           kv_u32("deepseek4.expert_count", cfg["n_routed_experts"]),
           kv_u32("deepseek4.expert_used_count", cfg["num_experts_per_tok"]),
           kv_u32("deepseek4.expert_feed_forward_length", cfg["moe_intermediate_size"]),
           kv_u32("deepseek4.expert_shared_count", 1),
           kv_u32("deepseek4.hash_layer_count", cfg["n_hash_layers"]),
           kv_u32("deepseek4.attention.sliding_window", cfg["sliding_window"]),
           kv_u32("deepseek4.attention.indexer.head_count", cfg["index_n_heads"]),
           kv_u32("deepseek4.attention.indexer.key_length", cfg["index_head_dim"]),
           kv_u32("deepseek4.attention.indexer.top_k", cfg["index_topk"]),
           kv_u32("deepseek4.hyper_connection.count", 4),
           kv_u32("deepseek4.hyper_connection.sinkhorn_iterations", 20),
           kv_f32("deepseek4.hyper_connection.epsilon", 1e-6),
           kv_f32("deepseek4.attention.layer_norm_rms_epsilon", 1e-6),
           kv_f32("deepseek4.expert_weights_scale", 1.5),
           kv_bool("deepseek4.expert_weights_norm", True),
           kv_arr("deepseek4.swiglu_clamp_exp", V_F32, [cfg["swiglu_limit"]] * L),
           kv_arr("deepseek4.attention.compress_ratios", V_I32, [ratio[t] for t in cfg["layer_types"]] + [0]),
           kv_f32("deepseek4.rope.freq_base", 10000.0),
           kv_f32("deepseek4.attention.compress_rope_freq_base", 160000.0),
           kv_f32("deepseek4.rope.scaling.factor", 16.0),
           kv_f32("deepseek4.rope.scaling.yarn_beta_fast", 32.0),
           kv_f32("deepseek4.rope.scaling.yarn_beta_slow", 1.0),
           kv_u64("deepseek4.rope.scaling.original_context_length", 65536),
           kv_str("deepseek4.rope.scaling.type", "yarn"),
           kv_u32("deepseek4.expert_gating_func", 4),
           kv_u32("deepseek4.nextn_predict_layers", 1)]
    for k, v in provenance.items():
        kvs.append(kv_str("ds4cpp.trained." + k, v))
    return kvs


def tokenizer_metadata_built():
    """tokenizer.ggml.* as src/tokenizer/gguf_metadata.cpp writes what hf_import.cpp imports."""
    tokens, merges, _ = vocab.load_tables()
    with open(vocab.TOKENIZER_JSON, encoding="utf-8") as f:
        tj = json.load(f)
    v3_len = 1 + max(max(tj["model"]["vocab"].values()), max(a["id"] for a in tj["added_tokens"]))
    v3_tokens = [None] * v3_len
    for k, i in tj["model"]["vocab"].items():
        v3_tokens[i] = k
    types = [1] * v3_len  # normal
    for a in tj["added_tokens"]:
        v3_tokens[a["id"]] = a["content"]
        types[a["id"]] = 3 if a.get("special", False) else 4  # control / user-defined
    types += [1] * (len(tokens) - v3_len)
    for i in range(len(tokens)):  # the V4 table overrides ids whose text changes
        prev = v3_tokens[i] if i < v3_len else ""
        if tokens[i] != prev:
            types[i] = 3 if i <= 2 else 4
    return [kv_str("tokenizer.ggml.model", "gpt2"), kv_str("tokenizer.ggml.pre", "joyai-llm"),
            kv_arr("tokenizer.ggml.tokens", V_STR, tokens), kv_arr("tokenizer.ggml.token_type", V_I32, types),
            kv_arr("tokenizer.ggml.merges", V_STR, merges), kv_u32("tokenizer.ggml.bos_token_id", 0),
            kv_u32("tokenizer.ggml.eos_token_id", 1), kv_u32("tokenizer.ggml.padding_token_id", 1),
            kv_bool("tokenizer.ggml.add_bos_token", False), kv_bool("tokenizer.ggml.add_eos_token", False)]


def _skip_value(raw, pos, vtype):
    if vtype in FIXED_SIZE:
        return pos + FIXED_SIZE[vtype]
    if vtype == V_STR:
        (n,) = struct.unpack_from("<Q", raw, pos)
        return pos + 8 + n
    if vtype == V_ARR:
        et, cnt = struct.unpack_from("<IQ", raw, pos)
        pos += 12
        if et in FIXED_SIZE:
            return pos + cnt * FIXED_SIZE[et]
        for _ in range(cnt):
            pos = _skip_value(raw, pos, et)
        return pos
    raise ValueError(f"unknown GGUF value type {vtype}")


def read_kv_records(path):
    """All metadata records of a GGUF as raw bytes, in file order."""
    with open(path, "rb") as f:
        head = f.read(24)
        if head[:4] != GGUF_MAGIC:
            raise ValueError(f"{path}: not a GGUF file")
        version, n_t, n_kv = struct.unpack_from("<IQQ", head, 4)
        if version != 3:
            raise ValueError(f"{path}: GGUF version {version}, expected 3")
        raw = head + f.read(64 << 20)
    pos, out = 24, []
    for _ in range(n_kv):
        start = pos
        (klen,) = struct.unpack_from("<Q", raw, pos)
        key = raw[pos + 8:pos + 8 + klen].decode("utf-8")
        pos += 8 + klen
        (vt,) = struct.unpack_from("<I", raw, pos)
        pos = _skip_value(raw, pos + 4, vt)
        out.append(KV(key, raw[start:pos]))
    return out


def tokenizer_metadata_from(path):
    kvs = [kv for kv in read_kv_records(path) if kv.key.startswith("tokenizer.")]
    if not any(kv.key == "tokenizer.ggml.tokens" for kv in kvs):
        raise ValueError(f"{path} has no tokenizer.ggml.tokens")
    return kvs


def write_gguf(path, kvs, tensors):
    infos = bytearray()
    offset = 0
    offsets = []
    for t in tensors:
        offsets.append(offset)
        infos += gstr(t.name) + struct.pack("<I", len(t.ne)) + struct.pack(f"<{len(t.ne)}Q", *t.ne)
        infos += struct.pack("<IQ", t.gtype, offset)
        offset += (len(t.data) + ALIGN - 1) // ALIGN * ALIGN
    head = GGUF_MAGIC + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kv.raw for kv in kvs) + infos
    pad = (ALIGN - len(head) % ALIGN) % ALIGN
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head + b"\0" * pad)
        for t, off in zip(tensors, offsets):
            f.write(t.data)
            f.write(b"\0" * ((ALIGN - len(t.data) % ALIGN) % ALIGN))
    os.replace(tmp, path)


def expected_bytes(t):
    n = 1
    for x in t.ne:
        n *= x
    if t.gtype == T_Q8_0:
        return n // 32 * 34
    return n * {T_F32: 4, T_F16: 2, T_I32: 4}[t.gtype]


def main():
    ap = argparse.ArgumentParser(description="HF DeepseekV4ForCausalLM safetensors export -> GGUF")
    ap.add_argument("--export", required=True, help="folder with *.safetensors shards (train.py output)")
    ap.add_argument("--results", required=True, help="train.py results.json (model shape, provenance)")
    ap.add_argument("--tokenizer-from", help="GGUF whose tokenizer.* records are copied verbatim")
    ap.add_argument("--name", default="DeepSeek V4 tiny-chat (trained)")
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()

    with open(args.results) as f:
        res = json.load(f)
    cfg = dict(res["shape"])
    cfg["layer_types"] = res["layer_types"]
    shards = sorted(os.path.join(args.export, p) for p in os.listdir(args.export) if p.endswith(".safetensors"))
    if not shards:
        raise SystemExit(f"no .safetensors files in {args.export}")
    sd = load_export(shards)
    tensors = convert_tensors(sd, cfg)
    for t in tensors:
        if len(t.data) != expected_bytes(t):
            raise SystemExit(f"{t.name}: {len(t.data)} bytes for dims {t.ne}, expected {expected_bytes(t)}")
    prov = {
        "recipe": "training/train.py + training/convert.py (docs/TRAINED_MODEL.md)",
        "corpus": "KJV Bible (bible-kjv-text), fortune-mod cookies (fortunes, fortunes-min), Jargon File 4.4.7 "
                  "(jargon-text), Manzoni I Promessi Sposi (Project Gutenberg #45334), V4 chat examples built "
                  "from them",
        "training": f"{res['steps']} steps, {res['tokens_seen']} tokens, {res['train_seconds']:.0f} s on "
                    f"{res['versions']['gpu']} (torch {res['versions']['torch']}, transformers "
                    f"{res['versions']['transformers']})",
    }
    kvs = model_metadata(cfg, args.name, prov)
    kvs += tokenizer_metadata_from(args.tokenizer_from) if args.tokenizer_from else tokenizer_metadata_built()
    write_gguf(args.out, kvs, tensors)
    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {len(tensors)} tensors, {len(kvs)} metadata keys, {size} bytes ({size / 2**20:.2f} MiB)")


if __name__ == "__main__":
    main()
