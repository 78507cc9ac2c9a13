"""savers.py — write one model's weights through every route `qmap convert` accepts, plus tiny tokenizers.

    srcs, extra_args = ROUTES["safetensors"](model, config, directory)
    # then: qmap convert *srcs -o out.qmap *extra_args

Every route writes its files into an empty `directory`, with config.json beside them (the raw dump keeps its
config in manifest.json instead), and returns the SRC arguments for `qmap convert` and any extra options.

Routes (all hold the model's exact state_dict values):
    raw             convert/export_torch.export() directory (manifest.json + float32 .bin files)
    torch           torch.save(state_dict) zip, named pytorch_model.bin
    torch_wrapped   torch.save({"state_dict": sd, "epoch": 1}), named checkpoint.pth
    safetensors     model.safetensors, written here from the format description (no safetensors package)
    st_index        two safetensors shards + model.safetensors.index.json (SRC = the index)
    st_shards       the same two shards given directly as two SRC arguments
    torch_index     two torch.save shards + pytorch_model.bin.index.json (SRC = the index)
    npz             np.savez (member names = state_dict keys)
    npz_compressed  np.savez_compressed
Special sources, one architecture each (see SPECIAL_ROUTES): fp16 and bf16 state_dicts via torch.save, and a
state_dict whose tensors are non-contiguous views (a transposed view, a slice with a storage offset).

safetensors has no tensor sharing: like Hugging Face's save_pretrained, the writer drops a tensor that shares
storage with an earlier one (the tied lm_head.weight). npz and the raw dump store the tied tensor twice.

Tokenizers: gpt2 gets vocab.json + merges.txt (byte-level BPE over GPT-2's byte-to-unicode alphabet),
llama gets tokenizer.json (a sentencepiece-style BPE with <unk>, <s>, </s> and byte-fallback tokens
<0x00>..<0xFF>). Both are trained here, deterministically, on a few sentences; the models are then built
with vocab_size equal to the tokenizer's size (build_model()).
"""
import copy
import json
import os
import struct
import sys
from collections import Counter, OrderedDict

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "convert"))

import models                      # noqa: E402  (tests/models)
from export_torch import export    # noqa: E402  (convert/export_torch.py)

# ------------------------------------------------------------------------------------------- tensors

SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL",
}


def tensor_bytes(t):
    """The tensor's elements in C order as little-endian bytes (bf16 as its raw 16-bit patterns)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def drop_shared(sd):
    """The state_dict without tensors sharing storage with an earlier one (what HF does for safetensors)."""
    seen = set()
    out = OrderedDict()
    for k, t in sd.items():
        key = (t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr(),
               t.storage_offset(), tuple(t.shape), tuple(t.stride()))
        if t.numel() and key in seen:
            continue
        seen.add(key)
        out[k] = t
    return out


def write_safetensors(path, sd, metadata=None):
    """Write `sd` as a safetensors file: u64 LE header length, JSON header (padded with spaces to a
    multiple of 8), then the tensors' bytes back to back in header order."""
    header = OrderedDict()
    if metadata is not None:
        header["__metadata__"] = metadata
    blobs = []
    pos = 0
    for name, t in sd.items():
        b = tensor_bytes(t)
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [pos, pos + len(b)]}
        blobs.append(b)
        pos += len(b)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def split_two(sd):
    """Split a state_dict into two halves (in order), for sharded checkpoints."""
    items = list(sd.items())
    half = (len(items) + 1) // 2
    return OrderedDict(items[:half]), OrderedDict(items[half:])


def numpy_arrays(sd):
    """name -> numpy array for np.savez (float, int and bool tensors; values unchanged)."""
    return OrderedDict((k, t.detach().cpu().contiguous().numpy()) for k, t in sd.items())


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")

# ------------------------------------------------------------------------------------------- routes


def save_raw(model, cfg, d):
    path = os.path.join(d, "dump")
    export(model, path, config=cfg)
    return [path], []


def save_torch(model, cfg, d):
    write_json(os.path.join(d, "config.json"), cfg)
    path = os.path.join(d, "pytorch_model.bin")
    torch.save(model.state_dict(), path)
    return [path], []


def save_torch_wrapped(model, cfg, d):
    write_json(os.path.join(d, "config.json"), cfg)
    path = os.path.join(d, "checkpoint.pth")
    torch.save({"state_dict": model.state_dict(), "epoch": 1}, path)
    return [path], []


def save_safetensors(model, cfg, d):
    write_json(os.path.join(d, "config.json"), cfg)
    path = os.path.join(d, "model.safetensors")
    write_safetensors(path, drop_shared(model.state_dict()), metadata={"format": "pt"})
    return [path], []


def _st_shards(model, cfg, d):
    write_json(os.path.join(d, "config.json"), cfg)
    parts = split_two(drop_shared(model.state_dict()))
    names = ["model-%05d-of-%05d.safetensors" % (i + 1, len(parts)) for i in range(len(parts))]
    weight_map = OrderedDict()
    total = 0
    for name, part in zip(names, parts):
        write_safetensors(os.path.join(d, name), part, metadata={"format": "pt"})
        for k, t in part.items():
            weight_map[k] = name
            total += len(tensor_bytes(t))
    index = os.path.join(d, "model.safetensors.index.json")
    write_json(index, {"metadata": {"total_size": total}, "weight_map": weight_map})
    return index, [os.path.join(d, n) for n in names]


def save_st_index(model, cfg, d):
    index, _ = _st_shards(model, cfg, d)
    return [index], []


def save_st_shards(model, cfg, d):
    _, shards = _st_shards(model, cfg, d)
    return shards, []


def save_torch_index(model, cfg, d):
    write_json(os.path.join(d, "config.json"), cfg)
    parts = split_two(model.state_dict())
    names = ["pytorch_model-%05d-of-%05d.bin" % (i + 1, len(parts)) for i in range(len(parts))]
    weight_map = OrderedDict()
    total = 0
    for name, part in zip(names, parts):
        torch.save(part, os.path.join(d, name))
        for k, t in part.items():
            weight_map[k] = name
            total += t.numel() * t.element_size()
    index = os.path.join(d, "pytorch_model.bin.index.json")
    write_json(index, {"metadata": {"total_size": total}, "weight_map": weight_map})
    return [index], []


def save_npz(model, cfg, d):
    write_json(os.path.join(d, "config.json"), cfg)
    path = os.path.join(d, "model.npz")
    np.savez(path, **numpy_arrays(model.state_dict()))
    return [path], []


def save_npz_compressed(model, cfg, d):
    write_json(os.path.join(d, "config.json"), cfg)
    path = os.path.join(d, "model.npz")
    np.savez_compressed(path, **numpy_arrays(model.state_dict()))
    return [path], []


ROUTES = OrderedDict([
    ("raw", save_raw),
    ("torch", save_torch),
    ("torch_wrapped", save_torch_wrapped),
    ("safetensors", save_safetensors),
    ("st_index", save_st_index),
    ("st_shards", save_st_shards),
    ("torch_index", save_torch_index),
    ("npz", save_npz),
    ("npz_compressed", save_npz_compressed),
])

# ------------------------------------------------------------------------------------------- special sources


def lowp_state_dict(model, dtype):
    """The state_dict of a copy of `model` cast with .half() / .bfloat16() (ties kept, buffers too)."""
    m = copy.deepcopy(model)
    m = m.half() if dtype == torch.float16 else m.bfloat16()
    return m.state_dict()


def save_fp16(model, cfg, d):
    cfg = dict(cfg, torch_dtype="float16")
    write_json(os.path.join(d, "config.json"), cfg)
    path = os.path.join(d, "pytorch_model.bin")
    torch.save(lowp_state_dict(model, torch.float16), path)
    return [path], []


def save_bf16(model, cfg, d):
    cfg = dict(cfg, torch_dtype="bfloat16")
    write_json(os.path.join(d, "config.json"), cfg)
    path = os.path.join(d, "pytorch_model.bin")
    torch.save(lowp_state_dict(model, torch.bfloat16), path)
    return [path], []


def noncontiguous_state_dict(sd):
    """The same values, but the third matrix (after the embeddings) is a transposed view
    (w.t().contiguous().t(): strides [1, rows]) and the last matrix a slice, with a non-zero storage
    offset, of a larger tensor. Returns (state_dict, (names of the two altered tensors))."""
    out = OrderedDict(sd)
    mats = [k for k, t in sd.items() if t.dim() == 2 and t.is_floating_point()]
    a, b = mats[2], [k for k in mats if not k.startswith("lm_head")][-1]
    out[a] = sd[a].detach().t().contiguous().t()
    assert not out[a].is_contiguous()
    w = sd[b].detach()
    big = torch.cat([torch.full((37,), 7.0), w.reshape(-1), torch.full((5,), -3.0)])
    out[b] = big[37:37 + w.numel()].view(w.shape)
    assert out[b].storage_offset() == 37
    return out, (a, b)


def save_noncontig(model, cfg, d):
    write_json(os.path.join(d, "config.json"), cfg)
    path = os.path.join(d, "pytorch_model.bin")
    sd, _ = noncontiguous_state_dict(model.state_dict())
    torch.save(sd, path)
    return [path], []


# route name -> (architecture variant it is run on, saver, source dtype of the floating tensors)
SPECIAL_ROUTES = OrderedDict([
    ("fp16", ("llama", save_fp16, torch.float16)),
    ("bf16", ("llama", save_bf16, torch.bfloat16)),
    ("noncontig", ("gpt2", save_noncontig, torch.float32)),
])

# ------------------------------------------------------------------------------------------- tokenizers

CORPUS = (
    "Once upon a time there was a little girl named Lily. She liked to play in the park with her dog. "
    "One day the sun was hot and the dog was tired, so they sat under a tree and ate a red apple. "
    "The tree was tall and the apple was sweet. Lily said thank you to the tree, and the dog wagged its tail. "
    "Then they went home and told mom about the tree in the park."
)


def gpt2_byte_alphabet():
    """GPT-2's byte -> printable unicode character map: printable Latin-1 bytes stand for themselves, the
    other 68 bytes take code points 256, 257, ... in byte order. Returned as a list indexed by byte."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return [table[b] for b in range(256)]


def train_bpe(words, n_merges):
    """Greedy BPE on a list of words, each a tuple of symbols. Returns the merges in order, each a pair.
    Ties between equally frequent pairs go to the lexicographically smallest, so the result is fixed."""
    freq = Counter(words)
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for w, c in freq.items():
            for p in zip(w, w[1:]):
                pairs[p] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged = Counter()
        for w, c in freq.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        freq = merged
    return merges


def gpt2_tokenizer(n_merges=40):
    """(vocab: token -> id, merges: list of pairs): 256 byte tokens in GPT-2's order (printable bytes
    first), merged tokens, then <|endoftext|>."""
    alphabet = gpt2_byte_alphabet()
    order = sorted(range(256), key=lambda b: (ord(alphabet[b]) >= 256, ord(alphabet[b])))
    vocab = OrderedDict((alphabet[b], i) for i, b in enumerate(order))
    words = []
    for i, w in enumerate(CORPUS.split(" ")):
        text = (" " + w if i else w).encode("utf-8")
        words.append(tuple(alphabet[b] for b in text))
    merges = train_bpe(words, n_merges)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, merges


def write_gpt2_tokenizer(d):
    vocab, merges = gpt2_tokenizer()
    write_json(os.path.join(d, "vocab.json"), vocab)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write("%s %s\n" % (a, b))
    return ["vocab.json", "merges.txt"]


def llama_tokenizer(n_merges=30):
    """(vocab: piece -> id, merges): <unk>, <s>, </s>, <0x00>..<0xFF>, the corpus characters (most
    frequent first), then merged pieces. Words carry sentencepiece's leading "\u2581"."""
    vocab = OrderedDict([("<unk>", 0), ("<s>", 1), ("</s>", 2)])
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    words = [tuple("\u2581" + w) for w in CORPUS.split(" ")]
    chars = Counter(ch for w in words for ch in w)
    for ch in sorted(chars, key=lambda c: (-chars[c], c)):
        vocab[ch] = len(vocab)
    merges = train_bpe(words, n_merges)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab, merges


def write_llama_tokenizer(d):
    vocab, merges = llama_tokenizer()
    special = [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for t in ("<unk>", "<s>", "</s>")]
    tok = OrderedDict([
        ("version", "1.0"),
        ("truncation", None),
        ("padding", None),
        ("added_tokens", special),
        ("normalizer", {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}),
        ("pre_tokenizer", None),
        ("post_processor", {"type": "TemplateProcessing",
                            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                       {"Sequence": {"id": "A", "type_id": 0}}],
                            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                     {"Sequence": {"id": "A", "type_id": 0}},
                                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                     {"Sequence": {"id": "B", "type_id": 1}}],
                            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}),
        ("decoder", {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}),
        ("model", OrderedDict([
            ("type", "BPE"), ("dropout", None), ("unk_token", "<unk>"), ("continuing_subword_prefix", None),
            ("end_of_word_suffix", None), ("fuse_unk", True), ("byte_fallback", True),
            ("vocab", vocab), ("merges", ["%s %s" % m for m in merges])])),
    ])
    write_json(os.path.join(d, "tokenizer.json"), tok)
    return ["tokenizer.json"]


# variant -> (writer, (vocab, merges) builder); the other variants have no tokenizer
TOKENIZERS = {
    "gpt2": (write_gpt2_tokenizer, gpt2_tokenizer),
    "llama": (write_llama_tokenizer, llama_tokenizer),
}


def build_model(name, seed=0):
    """models.build(name) with vocab_size matching the tokenizer when the variant has one."""
    if name in TOKENIZERS:
        vocab, _ = TOKENIZERS[name][1]()
        return models.build(name, seed=seed, vocab_size=len(vocab))
    return models.build(name, seed=seed)


def write_tokenizer(name, d):
    """Write the variant's tokenizer files into `d`; returns their names ([] if it has none)."""
    if name not in TOKENIZERS:
        return []
    return TOKENIZERS[name][0](d)
