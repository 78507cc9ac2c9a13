"""The encoder-decoder translation model of PyTorch's "Language Translation with nn.Transformer" tutorial,
with batch_first=True, exactly its parameter names:

    transformer.encoder.layers.{i}.self_attn.in_proj_{weight [3d, d], bias [3d]}
    transformer.encoder.layers.{i}.self_attn.out_proj.{weight [d, d], bias [d]}
    transformer.encoder.layers.{i}.linear1.{weight [ff, d], bias}  .linear2.{weight [d, ff], bias}
    transformer.encoder.layers.{i}.norm1 / norm2.{weight, bias}     transformer.encoder.norm.{weight, bias}
    transformer.decoder.layers.{i}.self_attn.* / multihead_attn.* (cross-attention) / linear1 / linear2
    transformer.decoder.layers.{i}.norm1 / norm2 / norm3            transformer.decoder.norm.{weight, bias}
    generator.{weight [tgt_V, d], bias}
    src_tok_emb.embedding.weight [src_V, d]    tgt_tok_emb.embedding.weight [tgt_V, d]
    positional_encoding.pos_embedding [max_len, 1, d]   (sinusoidal buffer)

Token embeddings are multiplied by sqrt(d_model); the sinusoidal table is added (sin on even features, cos
on odd ones); post-LayerNorm layers (norm_first=False) with ReLU; the decoder self-attention is causal.
"""
import math

import torch
import torch.nn as nn

from .common import perturb_vectors


def make_config(**overrides):
    cfg = {
        "model_type": "seq2seq",
        "d_model": 64,
        "nhead": 4,
        "num_encoder_layers": 2,
        "num_decoder_layers": 2,
        "dim_feedforward": 128,
        "src_vocab_size": 97,
        "tgt_vocab_size": 89,
        "max_len": 32,
        "layer_norm_eps": 1e-5,
        "activation": "relu",
        "norm_first": False,
    }
    cfg.update(overrides)
    return cfg


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len):
        super().__init__()
        den = torch.exp(-torch.arange(0, d_model, 2) * math.log(10000) / d_model)
        pos = torch.arange(0, max_len).reshape(max_len, 1)
        table = torch.zeros((max_len, d_model))
        table[:, 0::2] = torch.sin(pos * den)
        table[:, 1::2] = torch.cos(pos * den)
        self.register_buffer("pos_embedding", table.unsqueeze(-2))      # [max_len, 1, d]

    def forward(self, x):
        """x [B, S, d] -> x + table[:S] (dropout is the identity in eval mode)."""
        return x + self.pos_embedding[: x.size(1), 0, :].unsqueeze(0)


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model

    def forward(self, tokens):
        return self.embedding(tokens.long()) * math.sqrt(self.d_model)


class Seq2SeqTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        d = cfg["d_model"]
        self.transformer = nn.Transformer(d_model=d, nhead=cfg["nhead"],
                                          num_encoder_layers=cfg["num_encoder_layers"],
                                          num_decoder_layers=cfg["num_decoder_layers"],
                                          dim_feedforward=cfg["dim_feedforward"], dropout=0.1,
                                          activation=cfg["activation"], layer_norm_eps=cfg["layer_norm_eps"],
                                          batch_first=True, norm_first=cfg["norm_first"])
        self.generator = nn.Linear(d, cfg["tgt_vocab_size"])
        self.src_tok_emb = TokenEmbedding(cfg["src_vocab_size"], d)
        self.tgt_tok_emb = TokenEmbedding(cfg["tgt_vocab_size"], d)
        self.positional_encoding = PositionalEncoding(d, cfg["max_len"])

    @staticmethod
    def causal_mask(T):
        """[T, T] float mask: 0 where position i may attend to j (j <= i), -inf elsewhere."""
        return torch.triu(torch.full((T, T), float("-inf")), diagonal=1)

    def encode(self, src):
        """src [B, S] -> memory [B, S, d]."""
        return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)))

    def decode(self, tgt, memory):
        """tgt [B, T], memory [B, S, d] -> decoder output [B, T, d] (causal over tgt)."""
        return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory,
                                        tgt_mask=self.causal_mask(tgt.size(1)))

    def forward(self, src, tgt):
        """src [B, S], tgt [B, T] -> logits [B, T, tgt_V]."""
        return self.generator(self.decode(tgt, self.encode(src)))

    @torch.no_grad()
    def greedy_decode(self, src, max_new, bos, eos):
        """Greedy translation of one sentence src [1, S]: tokens after `bos`, stopping at `eos`."""
        memory = self.encode(src)
        ys = torch.tensor([[bos]])
        for _ in range(max_new):
            nxt = int(self.generator(self.decode(ys, memory)[:, -1]).argmax(-1))
            ys = torch.cat([ys, torch.tensor([[nxt]])], dim=1)
            if nxt == eos:
                break
        return ys[0, 1:].tolist()


def build(seed=0, **overrides):
    cfg = make_config(**overrides)
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(cfg)
    for p in model.parameters():                 # the tutorial's init
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    model.eval()
    perturb_vectors(model, seed)
    return model, cfg
