"""A tiny Llama (and Mistral / Qwen2 / Qwen3 variants) with the exact parameter names of Hugging Face's
LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM.

    model.embed_tokens.weight [V, d]
    model.layers.{i}.self_attn.q_proj.weight [H*hd, d]     (+ .bias [H*hd] for Qwen2)
    model.layers.{i}.self_attn.k_proj.weight [KV*hd, d]    (+ .bias for Qwen2)
    model.layers.{i}.self_attn.v_proj.weight [KV*hd, d]    (+ .bias for Qwen2)
    model.layers.{i}.self_attn.{q,k}_norm.weight [hd]      (Qwen3 only)
    model.layers.{i}.self_attn.o_proj.weight [d, H*hd]
    model.layers.{i}.self_attn.rotary_emb.inv_freq [hd/2]  buffer, persistent as in older checkpoints
    model.layers.{i}.mlp.{gate,up}_proj.weight [ff, d]     model.layers.{i}.mlp.down_proj.weight [d, ff]
    model.layers.{i}.input_layernorm.weight [d]            model.layers.{i}.post_attention_layernorm.weight [d]
    model.norm.weight [d]                                  lm_head.weight [V, d] (absent from the tied sharing)

RMSNorm (computed in float32), rotary embeddings in HF's rotate-half layout (the first half of each head
pairs with the second half), grouped-query attention (n_kv_heads < n_heads; query head h uses kv head
h // (H / KV)), SwiGLU MLP down(silu(gate(x)) * up(x)), causal mask. Mistral's sliding window lets query i
see key j when 0 <= i - j < sliding_window; Qwen2 has it only when use_sliding_window is true.

Variants (build(variant=...)): "llama" untied head, GQA 4/2; "mistral" untied, sliding window 8, GQA 4/2;
"qwen2" q/k/v biases, tied head, GQA 4/1; "qwen3" (modeling_qwen3.py) head_dim set on its own (4 heads of
32 over hidden 64, so H*hd != d), q_norm/k_norm: the RMSNorm (weight [hd], rms_norm_eps) of each query and key
head after the projection and before the rotation, tied head, GQA 4/2, no biases, no window.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import perturb_vectors

_VARIANTS = {
    "llama": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
    },
    "mistral": {
        "architectures": ["MistralForCausalLM"], "model_type": "mistral",
        "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "tie_word_embeddings": False,
        "sliding_window": 8,
    },
    "qwen2": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "num_key_value_heads": 1, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
        "use_sliding_window": False, "sliding_window": 32768,
    },
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": 32,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2,
    },
}


def make_config(variant="llama", **overrides):
    cfg = {
        "vocab_size": 97,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 32,
        "hidden_act": "silu",
        "attention_bias": False,
        "torch_dtype": "float32",
    }
    cfg.update(_VARIANTS[variant])
    cfg.update(overrides)
    return cfg


def has_qkv_bias(cfg):
    return cfg["model_type"] == "qwen2" or bool(cfg.get("attention_bias"))


def sliding_window(cfg):
    """The attention window in positions, or None for plain causal attention."""
    if cfg["model_type"] in ("qwen2", "qwen3") and not cfg.get("use_sliding_window", False):
        return None
    return cfg.get("sliding_window")


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim, theta):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, T):
        """cos, sin of shape [T, head_dim]: angle pos * inv_freq[k], duplicated over both halves."""
        freqs = torch.outer(torch.arange(T, dtype=torch.float32), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def softcap(x, cap):
    """cap·tanh(x / cap) (Gemma 2's soft-capping); x itself when cap is None or 0."""
    return torch.tanh(x / cap) * cap if cap else x


def attend(q, k, v, rotary_emb, scaling, window=None, cap=None):
    """HF's eager attention after the projections, shared by every rotary family here: q [B, T, H, hd],
    k and v [B, T, KV, hd] -> [B, T, H·hd]. RoPE on q and k, kv heads repeated (HF repeat_kv: query head h
    uses kv head h // (H / KV)), scores q·kᵀ·scaling soft-capped when cap is set, the causal mask (and
    0 <= i - j < window when window is set), softmax in float32, times v."""
    B, T, H, hd = q.shape
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)                 # [B, H|KV, T, hd]
    cos, sin = rotary_emb(T)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    rep = H // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = softcap((q @ k.transpose(-1, -2)) * scaling, cap)                         # [B, H, T, T]
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    visible = j <= i
    if window is not None:
        visible = visible & (i - j < window)
    scores = scores.masked_fill(~visible, torch.finfo(scores.dtype).min)
    y = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype) @ v
    return y.transpose(1, 2).reshape(B, T, H * hd)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.n_head = cfg["num_attention_heads"]
        self.n_kv = cfg["num_key_value_heads"]
        self.head_dim = cfg.get("head_dim") or d // self.n_head
        self.window = sliding_window(cfg)
        self.scaling, self.cap = self.head_dim ** -0.5, None                        # HF: head_dim ** -0.5
        bias = has_qkv_bias(cfg)
        self.q_proj = nn.Linear(d, self.n_head * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_head * self.head_dim, d, bias=False)
        if cfg["model_type"] == "qwen3":
            self.q_norm = RMSNorm(self.head_dim, cfg["rms_norm_eps"])
            self.k_norm = RMSNorm(self.head_dim, cfg["rms_norm_eps"])
        self.rotary_emb = RotaryEmbedding(self.head_dim, cfg["rope_theta"])

    def forward(self, x):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim)
        k = self.k_proj(x).view(B, T, self.n_kv, self.head_dim)
        v = self.v_proj(x).view(B, T, self.n_kv, self.head_dim)
        if hasattr(self, "q_norm"):                                                    # Qwen3: per head
            q, k = self.q_norm(q), self.k_norm(k)
        y = attend(q, k, v, self.rotary_emb, self.scaling, self.window, self.cap)
        return self.o_proj(y)


ACTIVATIONS = {"silu": F.silu, "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, ff = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(d, ff, bias=False)
        self.up_proj = nn.Linear(d, ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)
        self.act = ACTIVATIONS[cfg["hidden_act"]]                                     # SwiGLU, or GeGLU (Gemma)

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """A pre-norm block; Phi-3 passes its fused attention and MLP in."""
    def __init__(self, cfg, attn=None, mlp=None):
        super().__init__()
        self.self_attn = attn if attn is not None else Attention(cfg)
        self.mlp = mlp if mlp is not None else MLP(cfg)
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg, make_layer=DecoderLayer):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([make_layer(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg, make_layer=DecoderLayer):
        super().__init__()
        self.config = cfg
        self.model = LlamaModel(cfg, make_layer)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if cfg.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids):
        """input_ids [B, T] (int64) -> logits [B, T, V]."""
        return self.lm_head(self.model(input_ids))


def build(seed=0, variant="llama", **overrides):
    cfg = make_config(variant, **overrides)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    perturb_vectors(model, seed)
    return model, cfg
