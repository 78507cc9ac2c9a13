"""A tiny GPT-2 with the exact parameter names of Hugging Face's GPT2LMHeadModel.

    transformer.wte.weight [V, d]              transformer.wpe.weight [ctx, d]
    transformer.h.{i}.ln_1.{weight,bias} [d]   transformer.h.{i}.ln_2.{weight,bias} [d]
    transformer.h.{i}.attn.c_attn.{weight [d, 3d], bias [3d]}     Conv1D: weight stored [in, out]
    transformer.h.{i}.attn.c_proj.{weight [d, d], bias [d]}
    transformer.h.{i}.attn.bias [1, 1, ctx, ctx] (bool causal mask)  .masked_bias [] (float) -- buffers
    transformer.h.{i}.mlp.c_fc.{weight [d, ff], bias [ff]}   transformer.h.{i}.mlp.c_proj.{weight [ff, d], bias [d]}
    transformer.ln_f.{weight,bias} [d]         lm_head.weight [V, d] (tied to wte)

Pre-LayerNorm blocks, learned absolute positions, gelu_new (tanh approximation), attention scaled by
1/sqrt(head_dim), causal mask. The two attention buffers are kept persistent, as in the original GPT-2
checkpoints, so that the converter has to recognise and ignore them.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import perturb_vectors


def make_config(**overrides):
    cfg = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": 97,
        "n_positions": 32,
        "n_ctx": 32,
        "n_embd": 64,
        "n_layer": 2,
        "n_head": 4,
        "n_inner": None,               # None: 4 * n_embd, as in HF
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }
    cfg.update(overrides)
    return cfg


def gelu_new(x):
    """HF's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Conv1D(nn.Module):
    """HF's Conv1D: a linear layer whose weight is stored transposed, [in_features, out_features]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight).view(*x.shape[:-1], self.nf)


class GPT2Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        ctx, d = cfg["n_positions"], cfg["n_embd"]
        self.n_head = cfg["n_head"]
        self.head_dim = d // self.n_head
        self.register_buffer("bias", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)).view(1, 1, ctx, ctx))
        self.register_buffer("masked_bias", torch.tensor(-1e4))
        self.c_attn = Conv1D(3 * d, d)
        self.c_proj = Conv1D(d, d)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)                            # each [B, T, d]
        q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)         # [B, H, T, T]
        causal = self.bias[:, :, :T, :T]
        scores = torch.where(causal, scores, torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype))
        y = F.softmax(scores, dim=-1) @ v                                   # [B, H, T, hd]
        y = y.transpose(1, 2).reshape(B, T, d)
        return self.c_proj(y)


class GPT2MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["n_embd"]
        ff = cfg["n_inner"] or 4 * d
        self.c_fc = Conv1D(ff, d)
        self.c_proj = Conv1D(d, ff)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class PreLNBlock(nn.Module):
    """x + attn(ln_1(x)), then + mlp(ln_2(x)): the block of GPT-2 and GPT-Neo, under the names HF gives both.
    attn and mlp are made by the caller (first attn, then mlp: the order the seed's draws go in)."""

    def __init__(self, d, eps, attn, mlp):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=eps)
        self.attn = attn
        self.ln_2 = nn.LayerNorm(d, eps=eps)
        self.mlp = mlp

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPTTransformer(nn.Module):
    """HF's `transformer` of GPT-2 and GPT-Neo: token and learned position embeddings, the blocks, ln_f.
    make_blocks() is called after the embeddings are made, so that the seed's draws keep their order."""

    def __init__(self, vocab, n_positions, d, eps, make_blocks):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(n_positions, d)
        self.h = nn.ModuleList(make_blocks())
        self.ln_f = nn.LayerNorm(d, eps=eps)

    def forward(self, input_ids):
        T = input_ids.shape[1]
        x = self.wte(input_ids) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPTCausalLM(nn.Module):
    """The transformer and lm_head, tied to wte unless the config says otherwise."""

    def __init__(self, cfg, d, transformer):
        super().__init__()
        self.config = cfg
        self.transformer = transformer
        self.lm_head = nn.Linear(d, cfg["vocab_size"], bias=False)
        if cfg.get("tie_word_embeddings", True):
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, input_ids):
        """input_ids [B, T] (int64) -> logits [B, T, V]."""
        return self.lm_head(self.transformer(input_ids))


class GPT2LMHeadModel(GPTCausalLM):
    def __init__(self, cfg):
        d, eps = cfg["n_embd"], cfg["layer_norm_epsilon"]

        def blocks():
            return [PreLNBlock(d, eps, GPT2Attention(cfg), GPT2MLP(cfg)) for _ in range(cfg["n_layer"])]

        super().__init__(cfg, d, GPTTransformer(cfg["vocab_size"], cfg["n_positions"], d, eps, blocks))


def build_seeded(cls, cfg, seed):
    """cls(cfg) made from `seed`, in eval mode, its vectors perturbed (common.perturb_vectors): (model, cfg)."""
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    perturb_vectors(model, seed)
    return model, cfg


def build(seed=0, **overrides):
    return build_seeded(GPT2LMHeadModel, make_config(**overrides), seed)
