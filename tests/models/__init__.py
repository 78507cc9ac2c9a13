"""Tiny PyTorch reference models for qmap's converter and runtime tests.

Each module builds a small model whose state_dict keys are exactly those of the real checkpoints
(Hugging Face transformers for gpt2 / gpt_neo / llama, the PyTorch translation tutorial for seq2seq, a plain
nn.Sequential for mlp) and whose forward() is the reference the runtime is compared against.

Every module exposes
    make_config(**overrides) -> dict        the HF-style config.json contents (our own keys for mlp/seq2seq)
    build(seed=0, **overrides) -> (model, config)
and `VARIANTS` below names the models the tests use (llama.py also builds Mistral-, Qwen2- and Qwen3-style ones).

Only torch and the standard library are used: no transformers package.
"""
from . import gpt2, gpt_neo, llama, mlp, seq2seq

# name -> (module, keyword overrides for build()). The converter maps mistral/qwen2/qwen3 onto "llama".
VARIANTS = {
    "mlp": (mlp, {}),
    "gpt2": (gpt2, {}),
    "gpt_neo": (gpt_neo, {}),
    "llama": (llama, {}),
    "mistral": (llama, {"variant": "mistral"}),
    "qwen2": (llama, {"variant": "qwen2"}),
    "qwen3": (llama, {"variant": "qwen3"}),
    "seq2seq": (seq2seq, {}),
}


def build(name, seed=0, **overrides):
    """build("llama") -> (model, config) for one of VARIANTS."""
    module, kw = VARIANTS[name]
    kw = dict(kw)
    kw.update(overrides)
    return module.build(seed=seed, **kw)

