#!/usr/bin/python3
"""make_config_manifest_seeds.py — write the generated seeds of fuzz_config, fuzz_manifest and fuzz_index.

    /usr/bin/python3 tests/fuzz/make_config_manifest_seeds.py [OUTDIR]      (default: tests/fuzz/seeds)

config/models-*.json   the config.json of every model in tests/models (VARIANTS, default sizes): the sizes
                       fuzz_config's in-memory sources have, so these seeds reach a complete plan.
manifest/export-*.json manifest.json exactly as convert/export_torch.py writes it for tiny versions of the
                       same models (every tensor of 0..1024 elements), each tensor's "file" then renamed to
                       the fixed file fuzz_manifest creates for its element count (e<N>.bin, N float32
                       values; FIXED_ELEMENTS below must equal the list in fuzz_manifest.c).
index/*.json           shard indexes shaped like Hugging Face's model.safetensors.index.json and
                       pytorch_model.bin.index.json (sorted keys, indent 2, 2 shards), and edge cases.

Hand-written seeds live beside these and are not written by this script: config/hf-*.json (the real
Hugging Face config.json of gpt2, EleutherAI/gpt-neo-125M, TinyLlama-1.1B-Chat-v1.0, Mistral-7B-v0.1 and
Qwen2-0.5B), config/variant-*.json (the other keys and model_type aliases the planners read),
config/odd-*.json (an integer beyond int64 in an unrelated key, floats and strings where counts belong),
manifest/bad-*.json (refusals: links out of the directory, a FIFO, a directory, unknown keys, overflowing
shapes, ...), manifest/{link-inside,empty-tensors-none,mlp-*}.json, and regress-* (reproducers of fixed
fuzzer findings). torch is needed (python3-torch); the output depends only on the models' shapes and
configs, so it is the same on every run.
"""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "convert"))

import torch.nn as nn  # noqa: E402

import models  # noqa: E402
from export_torch import export  # noqa: E402

FIXED_ELEMENTS = (0, 1, 2, 4, 8, 16, 32, 48, 64, 128, 256, 512, 768, 1024)

# tiny sizes: every tensor has an element count in FIXED_ELEMENTS
TINY = {
    "gpt2": dict(vocab_size=64, n_positions=16, n_ctx=16, n_embd=16, n_head=4),
    "gpt_neo": dict(vocab_size=64, max_position_embeddings=16, hidden_size=16, num_heads=4, window_size=4),
    "llama": dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_attention_heads=4,
                  max_position_embeddings=16),
    "mistral": dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_attention_heads=4,
                    max_position_embeddings=16, sliding_window=4),
    "qwen2": dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_attention_heads=4,
                  max_position_embeddings=16),
    "seq2seq": dict(d_model=16, nhead=4, dim_feedforward=32, src_vocab_size=64, tgt_vocab_size=32, max_len=16,
                    num_encoder_layers=1, num_decoder_layers=1),
}


def write_json(path, obj, indent):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=indent)
        f.write("\n")


def write_configs(out):
    d = os.path.join(out, "config")
    os.makedirs(d, exist_ok=True)
    for name, (module, kw) in sorted(models.VARIANTS.items()):
        cfg = module.make_config(**kw)
        write_json(os.path.join(d, "models-%s.json" % name), cfg, 2)


def renamed(manifest):
    """The manifest with every tensor's file renamed to the fixed file of its element count."""
    for name, t in manifest["tensors"].items():
        n = 1
        for dim in t["shape"]:
            n *= dim
        if n not in FIXED_ELEMENTS:
            raise SystemExit("tensor %s has %d elements, not one of the fixed files" % (name, n))
        t["file"] = "e%d.bin" % n
    return manifest


def export_manifest(model, cfg, tmp, arch=None):
    outdir = os.path.join(tmp, "dump")
    export(model, outdir, config=cfg, arch=arch)
    with open(os.path.join(outdir, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    shutil.rmtree(outdir)
    return renamed(manifest)


def write_manifests(out):
    d = os.path.join(out, "manifest")
    os.makedirs(d, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="qmap-seeds-")
    try:
        for name, kw in sorted(TINY.items()):
            model, cfg = models.build(name, seed=1, **kw)
            write_json(os.path.join(d, "export-%s.json" % name), export_manifest(model, cfg, tmp), 1)
        # an nn.Sequential: arch "mlp" and the "layers" list
        seq = nn.Sequential(nn.Flatten(), nn.Linear(16, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 8),
                            nn.GELU(), nn.Linear(8, 4), nn.LogSoftmax(dim=-1)).eval()
        write_json(os.path.join(d, "export-mlp.json"), export_manifest(seq, None, tmp), 1)
        # a state_dict with no config: the converter guesses the architecture from the names
        model, _ = models.build("llama", seed=2, **TINY["llama"])
        write_json(os.path.join(d, "export-llama-noconfig.json"),
                   export_manifest(model.state_dict(), None, tmp), 1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def llama_index(n_layers, shard_of):
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for i in range(n_layers):
        p = "model.layers.%d." % i
        names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
        names += [p + "self_attn.%s_proj.weight" % x for x in "qkvo"]
        names += [p + "mlp.%s_proj.weight" % x for x in ("gate", "up", "down")]
    return {name: shard_of(name) for name in names}


def write_indexes(out):
    d = os.path.join(out, "index")
    os.makedirs(d, exist_ok=True)

    def shard(name):
        first = "layers.0." in name or "layers.1." in name or "embed" in name
        return "model-0000%d-of-00002.safetensors" % (1 if first else 2)

    wm = llama_index(3, shard)
    write_json(os.path.join(d, "model.safetensors.index.json"),
               {"metadata": {"total_size": 2200119296}, "weight_map": dict(sorted(wm.items()))}, 2)

    gpt2 = {}
    for name in ["transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                 "transformer.ln_f.bias"]:
        gpt2[name] = "pytorch_model-00001-of-00002.bin"
    for i in range(3):
        p = "transformer.h.%d." % i
        for s in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                  "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                  "mlp.c_proj.weight", "mlp.c_proj.bias"):
            gpt2[p + s] = "pytorch_model-0000%d-of-00002.bin" % (1 if i == 0 else 2)
    write_json(os.path.join(d, "pytorch_model.bin.index.json"),
               {"metadata": {"total_size": 497759232}, "weight_map": dict(sorted(gpt2.items()))}, 2)

    # every tensor its own shard; file order unsorted; no metadata
    own = {"model.layers.%d.mlp.up_proj.weight" % i: "part-%d.safetensors" % (7 - i) for i in range(8)}
    write_json(os.path.join(d, "one-shard-each.json"), {"weight_map": own}, None)
    write_json(os.path.join(d, "empty-weight-map.json"), {"metadata": {"total_size": 0}, "weight_map": {}}, 2)
    write_json(os.path.join(d, "metadata-null.json"),
               {"metadata": None, "weight_map": {"w": "a.bin", "b": "a.bin"}}, None)
    write_json(os.path.join(d, "metadata-nested.json"),
               {"metadata": {"total_size": 1e30, "format": "pt", "nested": {"x": [1, 2.5, None, True, "s"]}},
                "weight_map": {"model.embed_tokens.weight": "model.safetensors"}}, 1)
    write_json(os.path.join(d, "unicode-names.json"),
               {"weight_map": {"model.\u00e9mbed.weight": "sh\u00e4rd-1.safetensors",
                               "model.\u4e2d.weight": "sh\u00e4rd-1.safetensors",
                               "model.\U0001f600.weight": "shard 2.safetensors"}}, None)
    # refused: a shard that is not a plain file name, a duplicate key, wrong types
    bad = {
        "bad-shard-slash.json": {"weight_map": {"a": "model-00001-of-00002.safetensors",
                                                "b": "../other/model-00002-of-00002.safetensors"}},
        "bad-shard-subdir.json": {"weight_map": {"a": "shards/model-00001.safetensors"}},
        "bad-shard-backslash.json": {"weight_map": {"a": "..\\model.safetensors"}},
        "bad-shard-dotdot.json": {"weight_map": {"a": ".."}},
        "bad-shard-empty.json": {"weight_map": {"a": ""}},
        "bad-tensor-empty.json": {"weight_map": {"": "model.safetensors"}},
        "bad-shard-number.json": {"weight_map": {"a": 1}},
        "bad-weight-map-array.json": {"weight_map": ["model.safetensors"]},
        "bad-no-weight-map.json": {"metadata": {"total_size": 4}},
        "bad-metadata-string.json": {"metadata": "x", "weight_map": {}},
        "bad-big-integer.json": {"metadata": {"total_size": 10 ** 30}, "weight_map": {"a": "b.bin"}},
    }
    for fname, obj in bad.items():
        write_json(os.path.join(d, fname), obj, None)
    with open(os.path.join(d, "bad-duplicate-key.json"), "w", encoding="utf-8") as f:
        f.write('{"metadata": {"total_size": 8},\n "weight_map": {\n  "model.norm.weight": "model-00001-of-00002.safetensors",\n'
                '  "model.norm.weight": "model-00002-of-00002.safetensors"\n }\n}\n')
    with open(os.path.join(d, "bad-top-array.json"), "w", encoding="utf-8") as f:
        f.write('[{"weight_map": {}}]\n')


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "seeds")
    write_configs(out)
    write_manifests(out)
    write_indexes(out)


if __name__ == "__main__":
    main()
