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
import torch
import torch.nn as nn

from . import llama
from .common import perturb_vectors
from .llama import softcap


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


class Attention(llama.Attention):
    """Llama's projections and attention; Gemma's scaling, score soft-capping and window on even layers."""
    def __init__(self, cfg, layer):
        super().__init__(cfg)
        self.scaling = cfg["query_pre_attn_scalar"] ** -0.5
        self.cap = cfg.get("attn_logit_softcapping")
        self.window = cfg["sliding_window"] if layer % 2 == 0 else None


class DecoderLayer(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        d, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.self_attn = Attention(cfg, layer)
        self.mlp = llama.MLP(cfg)                   # GeGLU: hidden_act gelu_pytorch_tanh
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
