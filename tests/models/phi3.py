"""A tiny Phi-3 with the exact parameter names of Hugging Face's Phi3ForCausalLM (modeling_phi3.py).

    model.embed_tokens.weight [V, d]
    model.layers.{i}.self_attn.qkv_proj.weight [(H + 2·KV)·hd, d]   q rows, then k rows, then v rows
    model.layers.{i}.self_attn.o_proj.weight [d, H·hd]
    model.layers.{i}.mlp.gate_up_proj.weight [2·ff, d]               gate rows, then up rows
    model.layers.{i}.mlp.down_proj.weight [d, ff]
    model.layers.{i}.input_layernorm.weight [d]        model.layers.{i}.post_attention_layernorm.weight [d]
    model.norm.weight [d]                              lm_head.weight [V, d] (untied)

The equations of Phi3Attention / Phi3MLP: qkv = qkv_proj(x); q = qkv[..., :H·hd], k = qkv[..., H·hd :
H·hd + KV·hd], v = the rest; RoPE in the rotate-half layout over the whole head (partial_rotary_factor 1);
grouped-query attention; a sliding window (query i sees key j when 0 <= i - j < sliding_window);
gate, up = gate_up_proj(x).chunk(2, dim=-1); down_proj(up * silu(gate)). RMSNorm as Llama's.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import perturb_vectors
from .llama import DecoderLayer, LlamaForCausalLM, RotaryEmbedding, attend


def make_config(**overrides):
    cfg = {
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
        "vocab_size": 97, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32,
        "original_max_position_embeddings": 32, "hidden_act": "silu", "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "rope_scaling": None, "sliding_window": 8, "tie_word_embeddings": False,
        "attention_dropout": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "torch_dtype": "float32",
    }
    cfg.update(overrides)
    return cfg


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.n_head, self.n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.head_dim = d // self.n_head
        self.window = cfg.get("sliding_window")
        self.qkv_proj = nn.Linear(d, (self.n_head + 2 * self.n_kv) * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_head * self.head_dim, d, bias=False)
        self.rotary_emb = RotaryEmbedding(self.head_dim, cfg["rope_theta"])

    def forward(self, x):
        B, T, _ = x.shape
        qp, kp = self.n_head * self.head_dim, self.n_kv * self.head_dim
        q, k, v = self.qkv_proj(x).split([qp, kp, kp], dim=-1)
        y = attend(q.view(B, T, self.n_head, self.head_dim), k.view(B, T, self.n_kv, self.head_dim),
                   v.view(B, T, self.n_kv, self.head_dim), self.rotary_emb, self.head_dim ** -0.5, self.window)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, ff = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_up_proj = nn.Linear(d, 2 * ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(up * F.silu(gate))


def make_layer(cfg):
    """Llama's block with the fused projections."""
    return DecoderLayer(cfg, Attention(cfg), MLP(cfg))


def build(seed=0, **overrides):
    cfg = make_config(**overrides)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg, make_layer).eval()       # Phi3ForCausalLM: Llama's model, these layers
    perturb_vectors(model, seed)
    return model, cfg
