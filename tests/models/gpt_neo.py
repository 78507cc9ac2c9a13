"""A tiny GPT-Neo with the exact parameter names of Hugging Face's GPTNeoForCausalLM.

    transformer.wte.weight [V, d]     transformer.wpe.weight [ctx, d]
    transformer.h.{i}.ln_1.{weight,bias}      transformer.h.{i}.ln_2.{weight,bias}
    transformer.h.{i}.attn.attention.{q,k,v}_proj.weight [d, d]      (nn.Linear, no bias)
    transformer.h.{i}.attn.attention.out_proj.{weight [d, d], bias [d]}
    transformer.h.{i}.attn.attention.bias [1, 1, ctx, ctx] (bool mask)  .masked_bias [] -- buffers
    transformer.h.{i}.mlp.c_fc.{weight [ff, d], bias}    transformer.h.{i}.mlp.c_proj.{weight [d, ff], bias}
    transformer.ln_f.{weight,bias}    lm_head.weight [V, d] (tied to wte)

As in HF GPT-Neo: attention scores are NOT scaled by 1/sqrt(head_dim); layers alternate "global" (causal)
and "local" (causal and only the last `window_size` positions: key j is visible from query i when
0 <= i - j < window_size); MLP with gelu_new; pre-LayerNorm.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .gpt2 import GPTCausalLM, GPTTransformer, PreLNBlock, build_seeded, gelu_new


def make_config(**overrides):
    cfg = {
        "architectures": ["GPTNeoForCausalLM"],
        "model_type": "gpt_neo",
        "vocab_size": 97,
        "max_position_embeddings": 32,
        "hidden_size": 64,
        "num_layers": 2,
        "num_heads": 4,
        "intermediate_size": None,        # None: 4 * hidden_size, as in HF
        "window_size": 8,
        "attention_types": [[["global", "local"], 1]],
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }
    cfg.update(overrides)
    return cfg


def attention_layers(cfg):
    """Expand attention_types [[["global", "local"], n], ...] into one entry per layer."""
    layers = []
    for kinds, repeat in cfg["attention_types"]:
        for _ in range(repeat):
            layers.extend(kinds)
    if len(layers) != cfg["num_layers"]:
        raise ValueError("attention_types describe %d layers, num_layers is %d" % (len(layers), cfg["num_layers"]))
    return layers


class GPTNeoSelfAttention(nn.Module):
    def __init__(self, cfg, kind):
        super().__init__()
        ctx, d = cfg["max_position_embeddings"], cfg["hidden_size"]
        mask = torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)).view(1, 1, ctx, ctx)
        if kind == "local":
            mask = torch.bitwise_xor(mask, torch.tril(mask, -cfg["window_size"]))
        self.register_buffer("bias", mask)
        self.register_buffer("masked_bias", torch.tensor(-1e9))
        self.n_head = cfg["num_heads"]
        self.head_dim = d // self.n_head
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.q_proj = nn.Linear(d, d, bias=False)
        self.out_proj = nn.Linear(d, d, bias=True)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = (p(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        scores = q @ k.transpose(-1, -2)                 # no 1/sqrt(head_dim), as in HF GPT-Neo
        visible = self.bias[:, :, :T, :T]
        scores = torch.where(visible, scores, torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype))
        y = F.softmax(scores, dim=-1) @ v
        return self.out_proj(y.transpose(1, 2).reshape(B, T, d))


class GPTNeoAttention(nn.Module):
    """HF wraps the self-attention in an extra module, hence the `.attn.attention.` in every name."""

    def __init__(self, cfg, kind):
        super().__init__()
        self.attention_type = kind
        self.attention = GPTNeoSelfAttention(cfg, kind)

    def forward(self, x):
        return self.attention(x)


class GPTNeoMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        ff = cfg["intermediate_size"] or 4 * d
        self.c_fc = nn.Linear(d, ff)
        self.c_proj = nn.Linear(ff, d)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPTNeoForCausalLM(GPTCausalLM):
    def __init__(self, cfg):
        d, eps = cfg["hidden_size"], cfg["layer_norm_epsilon"]

        def blocks():
            return [PreLNBlock(d, eps, GPTNeoAttention(cfg, kind), GPTNeoMLP(cfg)) for kind in attention_layers(cfg)]

        super().__init__(cfg, d, GPTTransformer(cfg["vocab_size"], cfg["max_position_embeddings"], d, eps, blocks))


def build(seed=0, **overrides):
    return build_seeded(GPTNeoForCausalLM, make_config(**overrides), seed)
