"""expected.py — what `qmap convert` must produce for a given torch state_dict, computed independently of
the C converter from the naming contract (the canonical container names, transposes and metadata).

    plan = expected_tensors("gpt2", state_dict)      # OrderedDict canonical name -> Expected
    plan["blk.0.attn_qkv.weight"].value(f16=False)    # numpy array: the exact bytes the container holds
    tied = plan.tied                                  # True when output.weight is omitted
    meta = expected_metadata("gpt2", config, tied)    # {"gpt2.dim": ("U32", 64), ...}

The metadata keys and types are those of spec/ARCHITECTURES.md; the values come from the config.

Mapping rules are written as (regex on the source name without its optional prefix, canonical template,
transform). A source name that matches no rule and no "ignore" pattern is reported, so a typo in the table
cannot hide a tensor.
"""
import re
from collections import OrderedDict

import numpy as np
import torch

T, SQUEEZE = "T", "squeeze"     # transforms: transpose a matrix; drop the size-1 dim of pos_embedding
IGNORE = object()

# arch -> (optional prefix, [(pattern, canonical or IGNORE, transform)])
RULES = {
    "gpt2": ("transformer.", [
        (r"wte\.weight", "tok_embd.weight", None),
        (r"wpe\.weight", "pos_embd.weight", None),
        (r"h\.(\d+)\.ln_1\.(weight|bias)", "blk.{0}.ln1.{1}", None),
        (r"h\.(\d+)\.attn\.c_attn\.weight", "blk.{0}.attn_qkv.weight", T),
        (r"h\.(\d+)\.attn\.c_attn\.bias", "blk.{0}.attn_qkv.bias", None),
        (r"h\.(\d+)\.attn\.c_proj\.weight", "blk.{0}.attn_out.weight", T),
        (r"h\.(\d+)\.attn\.c_proj\.bias", "blk.{0}.attn_out.bias", None),
        (r"h\.(\d+)\.ln_2\.(weight|bias)", "blk.{0}.ln2.{1}", None),
        (r"h\.(\d+)\.mlp\.c_fc\.weight", "blk.{0}.ffn_up.weight", T),
        (r"h\.(\d+)\.mlp\.c_fc\.bias", "blk.{0}.ffn_up.bias", None),
        (r"h\.(\d+)\.mlp\.c_proj\.weight", "blk.{0}.ffn_down.weight", T),
        (r"h\.(\d+)\.mlp\.c_proj\.bias", "blk.{0}.ffn_down.bias", None),
        (r"ln_f\.(weight|bias)", "out_norm.{0}", None),
        (r"lm_head\.weight", "output.weight", None),
        (r"h\.(\d+)\.attn\.(bias|masked_bias)", IGNORE, None),
    ]),
    "gpt_neo": ("transformer.", [
        (r"wte\.weight", "tok_embd.weight", None),
        (r"wpe\.weight", "pos_embd.weight", None),
        (r"h\.(\d+)\.ln_1\.(weight|bias)", "blk.{0}.ln1.{1}", None),
        (r"h\.(\d+)\.attn\.attention\.([qkv])_proj\.weight", "blk.{0}.attn_{1}.weight", None),
        (r"h\.(\d+)\.attn\.attention\.out_proj\.(weight|bias)", "blk.{0}.attn_out.{1}", None),
        (r"h\.(\d+)\.ln_2\.(weight|bias)", "blk.{0}.ln2.{1}", None),
        (r"h\.(\d+)\.mlp\.c_fc\.(weight|bias)", "blk.{0}.ffn_up.{1}", None),
        (r"h\.(\d+)\.mlp\.c_proj\.(weight|bias)", "blk.{0}.ffn_down.{1}", None),
        (r"ln_f\.(weight|bias)", "out_norm.{0}", None),
        (r"lm_head\.weight", "output.weight", None),
        (r"h\.(\d+)\.attn\.attention\.(bias|masked_bias)", IGNORE, None),
    ]),
    "llama": ("model.", [
        (r"embed_tokens\.weight", "tok_embd.weight", None),
        (r"layers\.(\d+)\.input_layernorm\.weight", "blk.{0}.attn_norm.weight", None),
        (r"layers\.(\d+)\.self_attn\.([qkvo])_proj\.weight", "blk.{0}.attn_{1}.weight", None),
        (r"layers\.(\d+)\.self_attn\.([qkv])_proj\.bias", "blk.{0}.attn_{1}.bias", None),
        (r"layers\.(\d+)\.self_attn\.([qk])_norm\.weight", "blk.{0}.attn_{1}_norm.weight", None),
        (r"layers\.(\d+)\.post_attention_layernorm\.weight", "blk.{0}.ffn_norm.weight", None),
        (r"layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight", "blk.{0}.ffn_{1}.weight", None),
        (r"norm\.weight", "out_norm.weight", None),
        (r"lm_head\.weight", "output.weight", None),
        (r"layers\.(\d+)\.self_attn\.rotary_emb\.inv_freq", IGNORE, None),
    ]),
    "seq2seq": ("", [
        (r"src_tok_emb\.embedding\.weight", "enc_embd.weight", None),
        (r"tgt_tok_emb\.embedding\.weight", "dec_embd.weight", None),
        (r"positional_encoding\.pos_embedding", "pos_enc", SQUEEZE),
        (r"transformer\.encoder\.layers\.(\d+)\.self_attn\.in_proj_(weight|bias)", "enc.{0}.attn_qkv.{1}", None),
        (r"transformer\.encoder\.layers\.(\d+)\.self_attn\.out_proj\.(weight|bias)", "enc.{0}.attn_out.{1}", None),
        (r"transformer\.encoder\.layers\.(\d+)\.linear1\.(weight|bias)", "enc.{0}.ffn_up.{1}", None),
        (r"transformer\.encoder\.layers\.(\d+)\.linear2\.(weight|bias)", "enc.{0}.ffn_down.{1}", None),
        (r"transformer\.encoder\.layers\.(\d+)\.norm([12])\.(weight|bias)", "enc.{0}.ln{1}.{2}", None),
        (r"transformer\.encoder\.norm\.(weight|bias)", "enc_norm.{0}", None),
        (r"transformer\.decoder\.layers\.(\d+)\.self_attn\.in_proj_(weight|bias)", "dec.{0}.attn_qkv.{1}", None),
        (r"transformer\.decoder\.layers\.(\d+)\.self_attn\.out_proj\.(weight|bias)", "dec.{0}.attn_out.{1}", None),
        (r"transformer\.decoder\.layers\.(\d+)\.multihead_attn\.in_proj_(weight|bias)", "dec.{0}.cross_qkv.{1}",
         None),
        (r"transformer\.decoder\.layers\.(\d+)\.multihead_attn\.out_proj\.(weight|bias)", "dec.{0}.cross_out.{1}",
         None),
        (r"transformer\.decoder\.layers\.(\d+)\.linear1\.(weight|bias)", "dec.{0}.ffn_up.{1}", None),
        (r"transformer\.decoder\.layers\.(\d+)\.linear2\.(weight|bias)", "dec.{0}.ffn_down.{1}", None),
        (r"transformer\.decoder\.layers\.(\d+)\.norm([123])\.(weight|bias)", "dec.{0}.ln{1}.{2}", None),
        (r"transformer\.decoder\.norm\.(weight|bias)", "dec_norm.{0}", None),
        (r"generator\.(weight|bias)", "output.{0}", None),
    ]),
}

# Our variant names -> the container's architecture.
ARCH_OF = {"mlp": "mlp", "gpt2": "gpt2", "gpt_neo": "gpt_neo", "llama": "llama", "mistral": "llama",
           "qwen2": "llama", "qwen3": "llama", "seq2seq": "seq2seq"}


class Expected:
    """One container tensor: its source tensor and the transform that turns it into the stored one."""

    def __init__(self, name, source_name, tensor, transform):
        self.name = name
        self.source_name = source_name
        self.tensor = tensor
        self.transform = transform

    def torch_f32(self):
        t = self.tensor.detach().cpu().float()
        if self.transform == T:
            t = t.t()
        elif self.transform == SQUEEZE:
            t = t.squeeze(1)
        return t.contiguous()

    @property
    def shape(self):
        return tuple(self.torch_f32().shape)

    def value(self, f16=False):
        """The stored values: float32 (torch's .float()), or with f16=True torch's .half() for rank >= 2."""
        t = self.torch_f32()
        if f16 and t.dim() >= 2:
            return t.half().numpy()
        return t.numpy().astype("<f4", copy=False)


class Plan(OrderedDict):
    """canonical name -> Expected, plus .tied, .ignored and .unmatched source names."""
    tied = False
    ignored = ()
    unmatched = ()


def _map_rules(arch, sd):
    prefix, rules = RULES[arch]
    compiled = [(re.compile(p + r"\Z"), c, tr) for p, c, tr in rules]
    plan, ignored, unmatched = Plan(), [], []
    for key, t in sd.items():
        bare = key[len(prefix):] if prefix and key.startswith(prefix) else key
        for rx, canon, tr in compiled:
            m = rx.match(bare)
            if m:
                if canon is IGNORE:
                    ignored.append(key)
                else:
                    plan[canon.format(*m.groups())] = Expected(canon.format(*m.groups()), key, t, tr)
                break
        else:
            unmatched.append(key)
    plan.ignored, plan.unmatched = ignored, unmatched
    return plan


def _map_mlp(sd):
    """The i-th Linear (a rank-2 "<p>.weight") becomes layers.i; its "<p>.bias" follows it."""
    plan = Plan()
    i = 0
    for key, t in sd.items():
        if key.endswith(".weight") and t.dim() == 2:
            plan["layers.%d.weight" % i] = Expected("layers.%d.weight" % i, key, t, None)
            bias = key[:-len("weight")] + "bias"
            if bias in sd:
                plan["layers.%d.bias" % i] = Expected("layers.%d.bias" % i, bias, sd[bias], None)
            i += 1
    return plan


def _same_tensor(a, b):
    """Bitwise-equal values (the tie test of the contract; shared storage implies it)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(torch.equal(a.detach().cpu().float().contiguous().view(torch.int32),
                            b.detach().cpu().float().contiguous().view(torch.int32)))


def expected_tensors(variant, sd):
    arch = ARCH_OF[variant]
    if arch == "mlp":
        return _map_mlp(sd)
    plan = _map_rules(arch, sd)
    if "output.weight" in plan and "tok_embd.weight" in plan:
        if _same_tensor(plan["output.weight"].tensor, plan["tok_embd.weight"].tensor):
            del plan["output.weight"]
    plan.tied = "output.weight" not in plan and arch != "seq2seq"
    return plan

# ------------------------------------------------------------------------------------------- metadata


def expected_metadata(variant, cfg, tied):
    """{key: (type name, value)} of the architecture's hyperparameters (spec/ARCHITECTURES.md 3-7),
    computed from the HF-style config the model was built with."""
    def u32(v):
        return ("U32", int(v))

    def f32(v):
        return ("F32", float(v))

    arch = ARCH_OF[variant]
    if arch in ("gpt2", "gpt_neo"):
        if arch == "gpt2":
            d, ctx, layers, heads, ff = (cfg["n_embd"], cfg["n_positions"], cfg["n_layer"], cfg["n_head"],
                                         cfg["n_inner"])
        else:
            d, ctx, layers, heads, ff = (cfg["hidden_size"], cfg["max_position_embeddings"], cfg["num_layers"],
                                         cfg["num_heads"], cfg["intermediate_size"])
        m = {"vocab_size": u32(cfg["vocab_size"]), "context_length": u32(ctx), "dim": u32(d),
             "n_layers": u32(layers), "n_heads": u32(heads), "ffn_dim": u32(ff or 4 * d),
             "norm_eps": f32(cfg["layer_norm_epsilon"]), "activation": ("STRING", cfg["activation_function"]),
             "tied_output": ("BOOL", tied)}
        if arch == "gpt_neo":
            m["attention_layers"] = ("ARRAY[STRING]", gpt_neo_attention_layers(cfg))
            m["window_size"] = u32(cfg["window_size"])
    elif arch == "llama":
        d, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        window = cfg.get("sliding_window") or 0
        if cfg["model_type"] in ("qwen2", "qwen3") and not cfg.get("use_sliding_window", False):
            window = 0
        m = {"variant": ("STRING", cfg["model_type"]), "vocab_size": u32(cfg["vocab_size"]),
             "context_length": u32(cfg["max_position_embeddings"]), "dim": u32(d),
             "n_layers": u32(cfg["num_hidden_layers"]), "n_heads": u32(heads),
             "n_kv_heads": u32(cfg["num_key_value_heads"]), "head_dim": u32(cfg.get("head_dim") or d // heads),
             "ffn_dim": u32(cfg["intermediate_size"]), "sliding_window": u32(window),
             "norm_eps": f32(cfg["rms_norm_eps"]), "rope_theta": f32(cfg["rope_theta"]),
             "rope_style": ("STRING", "half"), "qkv_bias": ("BOOL", cfg["model_type"] == "qwen2"),
             "qk_norm": ("BOOL", cfg["model_type"] == "qwen3"),
             "tied_output": ("BOOL", tied), "activation": ("STRING", cfg["hidden_act"])}
    elif arch == "seq2seq":
        m = {"src_vocab_size": u32(cfg["src_vocab_size"]), "tgt_vocab_size": u32(cfg["tgt_vocab_size"]),
             "dim": u32(cfg["d_model"]), "n_heads": u32(cfg["nhead"]),
             "n_enc_layers": u32(cfg["num_encoder_layers"]), "n_dec_layers": u32(cfg["num_decoder_layers"]),
             "ffn_dim": u32(cfg["dim_feedforward"]), "max_len": u32(cfg["max_len"]),
             "norm_eps": f32(cfg["layer_norm_eps"]), "embed_scale": f32(cfg["d_model"] ** 0.5),
             "activation": ("STRING", cfg["activation"]), "norm_first": ("BOOL", cfg["norm_first"])}
    else:
        return {}
    return {"%s.%s" % (arch, k): v for k, v in m.items()}


def expected_mlp_metadata(sd, activations, output="logits"):
    """mlp.* for a state_dict whose 2-D "*weight" tensors are the Linear layers, in order."""
    dims = [(t.shape[1], t.shape[0]) for k, t in sd.items() if k.endswith("weight") and t.dim() == 2]
    return {"mlp.n_layers": ("U32", len(dims)), "mlp.activations": ("ARRAY[STRING]", list(activations)),
            "mlp.input_dim": ("U32", dims[0][0]), "mlp.output_dim": ("U32", dims[-1][1]),
            "mlp.output": ("STRING", output)}


def gpt_neo_attention_layers(cfg):
    out = []
    for kinds, n in cfg["attention_types"]:
        out.extend(list(kinds) * n)
    return out


def values_equal(found, want):
    """Metadata value vs config value: ints exactly, floats after rounding both to float32."""
    if isinstance(want, bool) or isinstance(found, (bool, np.bool_)):
        return bool(found) == bool(want) and isinstance(found, (bool, np.bool_)) == isinstance(want, bool)
    if isinstance(want, float) or isinstance(found, (float, np.floating)):
        try:
            return np.float32(found) == np.float32(want)
        except (TypeError, ValueError):
            return False
    if isinstance(want, int):
        try:
            return int(found) == want and not isinstance(found, (str, bytes))
        except (TypeError, ValueError):
            return False
    if isinstance(want, (list, tuple)):
        return list(found) == list(want) if isinstance(found, (list, tuple, np.ndarray)) else False
    return found == want
