#!/usr/bin/env python3
"""Convert a Hugging Face style Llama directory (config.json, model.safetensors, tokenizer.json) to GGUF with
llama.cpp's own convert_hf_to_gguf.py, on a host where only Debian's Python packages are installed.

    peer_gguf.py LLAMA_CPP_DIR HF_DIR OUT.gguf [--outtype f32|f16]

The converter is used as it is — its tensor names, its q/k permutation, its metadata — with the gaps
filled from here, because PyPI is unreachable and Debian 12 packages neither `safetensors` nor `transformers`:
- `safetensors.safe_open` is provided over a numpy memmap of the file (the format is a JSON header and raw
  little-endian arrays), so the converter's lazy tensors read the very bytes `qmap convert` reads;
- the vocabulary is read from tokenizer.json (a SentencePiece-style BPE with byte fallback, as Llama 2's) in
  the converter's "llama" tokenizer model: pieces in id order, byte pieces typed BYTE, the special added tokens
  CONTROL, and as score the negated rank of the merge that makes the piece, which is the order llama.cpp's
  SPM tokenizer merges in (the converter's own path needs tokenizer.model through sentencepiece's protobuf
  module, or transformers);
- make_lm.py's config.json has no `architectures` nor `rms_norm_eps`: a Llama is named LlamaForCausalLM
  and gets transformers' default epsilon (1e-6), as `qmap convert` does;
- torch 1.13 (Debian 12) lacks the float8 dtypes the converter names in a table; they are aliased to uint8,
  which no tensor here uses.
"""
import argparse
import warnings
import contextlib
import json
import struct
import sys
from pathlib import Path

import numpy as np
import torch

ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
             "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


class SafetensorsSlice:
    """What the converter uses of safetensors' PySafeSlice: dtype, shape, and [:] as a torch tensor."""

    def __init__(self, array, dtype_name):
        self.array = array
        self.dtype_name = dtype_name

    def get_dtype(self):
        return self.dtype_name

    def get_shape(self):
        return list(self.array.shape)

    def __getitem__(self, index):
        return torch.from_numpy(np.ascontiguousarray(self.array[index]))


class SafetensorsFile:
    def __init__(self, path):
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(header_len))
        header.pop("__metadata__", None)
        base = 8 + header_len
        self.entries = {}
        for name, info in header.items():
            start, end = info["data_offsets"]
            dtype = np.dtype(ST_DTYPES[info["dtype"]]).newbyteorder("<")
            count = (end - start) // dtype.itemsize
            array = np.memmap(path, dtype=dtype, mode="r", offset=base + start, shape=(count,))
            self.entries[name] = (array.reshape(info["shape"]), info["dtype"])

    def keys(self):
        return list(self.entries)

    def get_slice(self, name):
        return SafetensorsSlice(*self.entries[name])

    def get_tensor(self, name):
        return self.get_slice(name)[...]


@contextlib.contextmanager
def safe_open(path, framework="pt", device="cpu"):
    if framework != "pt" or device != "cpu":
        raise ValueError("this stand-in reads to CPU torch tensors only")
    yield SafetensorsFile(path)


def install_safetensors_shim():
    import types
    module = types.ModuleType("safetensors")
    module.safe_open = safe_open
    sys.modules["safetensors"] = module


def merge_ranks(tok):
    """piece -> rank of the first merge that makes it (lower merges first)."""
    ranks = {}
    for rank, merge in enumerate(tok["model"].get("merges", [])):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        ranks.setdefault(left + right, rank)
    return ranks


def llama_vocab_from_tokenizer_json(path, gguf, vocab_size):
    tok = json.loads(Path(path).read_text(encoding="utf-8"))
    model = tok["model"]
    if model.get("type") != "BPE" or not model.get("byte_fallback"):
        raise SystemExit(f"{path}: not a SentencePiece-style BPE with byte fallback (Llama 2's kind)")
    pieces = {i: p for p, i in model["vocab"].items()}
    added = {t["id"]: t for t in tok.get("added_tokens", [])}
    for i, t in added.items():
        pieces.setdefault(i, t["content"])
    ranks = merge_ranks(tok)
    n = max(vocab_size, len(pieces))
    tokens, scores, types = [], [], []
    for i in range(n):
        piece = pieces.get(i, f"[PAD{i}]")
        tokens.append(piece.encode("utf-8"))
        if i in added and added[i].get("special"):
            types.append(gguf.TokenType.UNKNOWN if piece == model.get("unk_token") else gguf.TokenType.CONTROL)
            scores.append(0.0)
        elif piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
            types.append(gguf.TokenType.BYTE)
            scores.append(0.0)
        else:
            types.append(gguf.TokenType.NORMAL if i in pieces else gguf.TokenType.UNUSED)
            scores.append(-float(ranks.get(piece, len(ranks) + i)))
    return tokens, scores, types


def patch_vocab(convert, gguf):
    def set_vocab(self):
        path = self.dir_model / "tokenizer.json"
        tokens, scores, types = llama_vocab_from_tokenizer_json(path, gguf, self.hparams["vocab_size"])
        w = self.gguf_writer
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        gguf.SpecialVocab(self.dir_model, n_vocab=len(tokens)).add_to_gguf(w)

    convert.LlamaModel.set_vocab = set_vocab


def patch_architecture(convert):
    """make_lm.py's config.json gives neither `architectures` (the converter picks its class by it) nor
    `rms_norm_eps` (llama.cpp refuses a file without it); transformers would fill in the defaults."""
    load = convert.Model.load_hparams

    def load_hparams(dir_model):
        hparams = load(dir_model)
        if hparams.get("model_type") == "llama":
            hparams.setdefault("architectures", ["LlamaForCausalLM"])
            # transformers' LlamaConfig default, which qmap convert applies too
            hparams.setdefault("rms_norm_eps", 1e-6)
        return hparams

    convert.Model.load_hparams = staticmethod(load_hparams)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("llama_cpp_dir")
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", default="f32", choices=["f32", "f16"])
    a = ap.parse_args()
    src = Path(a.llama_cpp_dir).resolve()
    sys.path[:0] = [str(src / "gguf-py"), str(src)]
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, name):
            setattr(torch, name, torch.uint8)
    install_safetensors_shim()
    # the memmaps are read-only and the converter never writes into its inputs
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    import gguf
    import convert_hf_to_gguf as convert
    patch_vocab(convert, gguf)
    patch_architecture(convert)
    sys.argv = ["convert_hf_to_gguf.py", a.hf_dir, "--outfile", a.out, "--outtype", a.outtype]
    convert.main()


if __name__ == "__main__":
    main()
