"""A tiny Gemma 2 with the exact parameter names of Hugging Face's Gemma2ForCausalLM (modeling_gemma2.py).

    model.embed_tokens.weight [V, d]
    model.layers.{i}.input_layernorm.weight [d]              model.layers.{i}.post_attention_layernorm.weight [d]
    model.layers.{i}.pre_feedforward_layernorm.weight [d]    model.layers.{i}.post_feedforward_layernorm.weight [d]
    model.layers.{i}.self_attn.{q,k,v,o}_proj.weight         q [H·hd, d], k/v [KV·hd, d], o [d, H·hd]
    model.layers.{i}.mlp.{gate,up,down}_proj.weight
    model.norm.weight [d]                                    lm_head tied to embed_tokens (absent)

The equations: Gemma2RMSNorm(x) = x·rsqrt(mean(x²) + eps) · (1 + w) in float32; h = embed · √d (√d rounded
to the embedding's dtype); each layer x += post_attention_layernorm(attn(input_layernorm(x))), then
x += post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x))); attention scores q·kᵀ ·
query_pre_attn_scalar^-1/2, then cap·tanh(scores / cap) (attn_logit_softcapping), then the mask: causal,
and for even layers (layer_types "sliding_attention") 0 <= i - j < sliding_window; mlp
down(gelu_tanh(gate(x)) · up(x)); logits = cap·tanh(lm_head(norm(x)) / cap) (final_logit_softcapping).
head_dim is set on its own (H·hd != d here, as in the released models).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import perturb_vectors
from .llama import RotaryEmbedding, apply_rope


def make_config(**overrides):
    cfg = {
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
        "vocab_size": 97, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "max_position_embeddings": 32,
        "hidden_activation": "gelu_pytorch_tanh", "hidden_act": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "attention_bias": False, "query_pre_attn_scalar": 20,
        "attn_logit_softcapping": 5.0, "final_logit_softcapping": 5.0, "sliding_window": 8,
        "tie_word_embeddings": True, "torch_dtype": "float32",
    }
    cfg.update(overrides)
    return cfg


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        out = x.float()
        out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


def softcap(x, cap):
    return torch.tanh(x / cap) * cap if cap else x


class Attention(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        d = cfg["hidden_size"]
        self.n_head, self.n_kv, self.head_dim = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.scaling = cfg["query_pre_attn_scalar"] ** -0.5
        self.cap = cfg.get("attn_logit_softcapping")
        self.window = cfg["sliding_window"] if layer % 2 == 0 else None
        self.q_proj = nn.Linear(d, self.n_head * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_head * self.head_dim, d, bias=False)
        self.rotary_emb = RotaryEmbedding(self.head_dim, cfg["rope_theta"])

    def forward(self, x):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        cos, sin = self.rotary_emb(T)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.n_head // self.n_kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = softcap((q @ k.transpose(-1, -2)) * self.scaling, self.cap)
        i = torch.arange(T).view(T, 1)
        j = torch.arange(T).view(1, T)
        visible = j <= i
        if self.window is not None:
            visible = visible & (i - j < self.window)
        scores = scores.masked_fill(~visible, torch.finfo(scores.dtype).min)
        y = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, ff = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(d, ff, bias=False)
        self.up_proj = nn.Linear(d, ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        d, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.self_attn = Attention(cfg, layer)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(d, eps)
        self.post_attention_layernorm = RMSNorm(d, eps)
        self.pre_feedforward_layernorm = RMSNorm(d, eps)
        self.post_feedforward_layernorm = RMSNorm(d, eps)

    def forward(self, x):
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x)))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Gemma2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.hidden_size = cfg["hidden_size"]
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([DecoderLayer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        x = x * torch.tensor(self.hidden_size ** 0.5, dtype=x.dtype)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class Gemma2ForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.model = Gemma2Model(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if cfg.get("tie_word_embeddings", True):
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids):
        """input_ids [B, T] (int64) -> logits [B, T, V], soft-capped."""
        return softcap(self.lm_head(self.model(input_ids)), self.config.get("final_logit_softcapping"))


def build(seed=0, **overrides):
    cfg = make_config(**overrides)
    torch.manual_seed(seed)
    model = Gemma2ForCausalLM(cfg).eval()
    perturb_vectors(model, seed)
    return model, cfg
