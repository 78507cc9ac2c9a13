#!/usr/bin/python3
"""export_torch.py — dump a PyTorch model as a qmap raw-dump directory, for `qmap convert`.

    /usr/bin/python3 convert/export_torch.py MODEL.pt OUTDIR [--config config.json] [--arch NAME]

    from export_torch import export
    export(model_or_state_dict, "outdir", config=None, arch=None)

MODEL.pt is either a whole module saved with torch.save(model) (loaded with weights_only=False, so only
use files you trust: unpickling can run code) or a state_dict (optionally wrapped as {"state_dict": ...}
or {"model_state_dict": ...}); for a bare state_dict, --config / --arch say what the model is.

The directory holds one little-endian float32 file per floating-point tensor, named after its state_dict
key plus ".bin", and manifest.json:

    {"format": "qmap-raw-dump", "version": 1, "arch": "mlp", "config": {...},
     "layers": [{"type": "linear", "weight": "1.weight", "bias": "1.bias",
                 "in_features": 784, "out_features": 128}, {"type": "relu"}, ...],
     "tensors": {"1.weight": {"file": "1.weight.bin", "shape": [128, 784], "dtype": "float32"}, ...},
     "skipped": ["<non-float buffers, e.g. int64 position_ids>"]}

"layers" is written for an nn.Sequential only (arch then defaults to "mlp"); any module type in it that
qmap cannot run raises ExportError. f16/bf16/f64 tensors are converted exactly as torch's .float() does.
The directory is written under a temporary name beside OUTDIR and renamed into place, so OUTDIR is either
complete or absent. An existing OUTDIR is replaced only if it is an empty directory or an earlier raw
dump (it holds a manifest.json); anything else is refused.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
from collections import OrderedDict

import torch
import torch.nn as nn

FORMAT = "qmap-raw-dump"
VERSION = 1
ARCHS = ("mlp", "gpt2", "gpt_neo", "llama", "seq2seq")

# nn.Sequential members qmap can run, by class, with their manifest type. Exact classes only: a subclass
# may override forward().
_SIMPLE_LAYERS = {
    nn.ReLU: "relu",
    nn.Tanh: "tanh",
    nn.Sigmoid: "sigmoid",
    nn.SiLU: "silu",
    nn.Dropout: "dropout",
    nn.Identity: "identity",
}


class ExportError(Exception):
    """The model cannot be exported; the message says which part and why."""


def sequential_layers(seq):
    """The manifest "layers" list of an nn.Sequential (state_dict key prefixes are the child names)."""
    layers = []
    for name, m in seq.named_children():
        kind = type(m)
        if kind is nn.Linear:
            layers.append({"type": "linear", "weight": name + ".weight",
                           "bias": name + ".bias" if m.bias is not None else None,
                           "in_features": m.in_features, "out_features": m.out_features})
        elif kind in _SIMPLE_LAYERS:
            layers.append({"type": _SIMPLE_LAYERS[kind]})
        elif kind is nn.GELU:
            if getattr(m, "approximate", "none") != "none":
                raise ExportError("layer %s: GELU(approximate=%r) is not supported (only the exact erf GELU)"
                                  % (name, m.approximate))
            layers.append({"type": "gelu"})
        elif kind is nn.Flatten:
            if m.end_dim != -1 or m.start_dim not in (1, -3, -2):
                raise ExportError("layer %s: Flatten(start_dim=%d, end_dim=%d) is not supported "
                                  "(only the default Flatten(1, -1))" % (name, m.start_dim, m.end_dim))
            layers.append({"type": "flatten"})
        elif kind in (nn.Softmax, nn.LogSoftmax):
            if m.dim not in (-1, 1):
                raise ExportError("layer %s: %s(dim=%r) is not supported (only the last dim)"
                                  % (name, kind.__name__, m.dim))
            layers.append({"type": "softmax" if kind is nn.Softmax else "log_softmax"})
        else:
            raise ExportError("layer %s: %s is not supported in an exported nn.Sequential (supported: Linear, "
                              "ReLU, GELU, Tanh, Sigmoid, SiLU, Flatten, Dropout, Identity, Softmax, "
                              "LogSoftmax)" % (name, kind.__name__))
    return layers


def _check_key(key):
    """A state_dict key becomes a file name: refuse anything that would leave the directory."""
    if (not isinstance(key, str) or not key or "/" in key or "\\" in key or "\0" in key
            or key.startswith(".")):
        raise ExportError("state_dict key %r cannot be used as a file name" % (key,))


def _tensor_f32(t):
    """A tensor's values as a C-ordered little-endian float32 array (exactly torch's .float())."""
    return t.detach().cpu().to(torch.float32).contiguous().numpy().astype("<f4", copy=False)


def _replace_dir(tmp, outdir):
    """Move the finished temporary directory `tmp` to `outdir`."""
    if not os.path.lexists(outdir):
        os.rename(tmp, outdir)
        return
    if not os.path.isdir(outdir) or os.path.islink(outdir):
        raise ExportError("%s exists and is not a directory" % outdir)
    if os.listdir(outdir) and not os.path.isfile(os.path.join(outdir, "manifest.json")):
        raise ExportError("%s exists and is not an earlier raw dump (no manifest.json); refusing to "
                          "replace it" % outdir)
    old = tmp + ".old"
    os.rename(outdir, old)
    os.rename(tmp, outdir)
    shutil.rmtree(old)


def export(model_or_state_dict, outdir, config=None, arch=None):
    """Write `model_or_state_dict` (an nn.Module or a mapping of name -> tensor) to the raw-dump directory
    `outdir`. Returns the manifest (a dict). Raises ExportError on a model that cannot be exported."""
    layers = None
    obj = model_or_state_dict
    if isinstance(obj, nn.Module):
        if isinstance(obj, nn.Sequential):
            layers = sequential_layers(obj)
            if arch is None:
                arch = "mlp"
        if config is None and isinstance(getattr(obj, "config", None), dict):
            config = obj.config
        state_dict = obj.state_dict()
    elif isinstance(obj, dict):
        state_dict = obj
    else:
        raise ExportError("expected an nn.Module or a state_dict, got %s" % type(obj).__name__)
    if arch is not None and arch not in ARCHS:
        raise ExportError("unknown arch %r (known: %s)" % (arch, ", ".join(ARCHS)))
    if config is None and arch == "mlp":
        config = {"model_type": "mlp"}
    if config is not None and not isinstance(config, dict):
        raise ExportError("config must be a dict (a parsed config.json), got %s" % type(config).__name__)

    tensors = OrderedDict()
    skipped = []
    for key, t in state_dict.items():
        if not isinstance(t, torch.Tensor):
            raise ExportError("state_dict entry %r is a %s, not a tensor" % (key, type(t).__name__))
        _check_key(key)
        if t.is_floating_point():
            tensors[key] = t
        else:
            skipped.append(key)
    if not tensors:
        raise ExportError("the state_dict holds no floating-point tensor")
    if layers is not None:
        for layer in layers:
            for field in ("weight", "bias"):
                if layer.get(field) is not None and layer[field] not in tensors:
                    raise ExportError("layer tensor %r is not in the state_dict" % layer[field])

    manifest = OrderedDict([("format", FORMAT), ("version", VERSION)])
    if arch is not None:
        manifest["arch"] = arch
    if config is not None:
        manifest["config"] = config
    if layers is not None:
        manifest["layers"] = layers
    manifest["tensors"] = OrderedDict(
        (key, {"file": key + ".bin", "shape": list(t.shape), "dtype": "float32"}) for key, t in tensors.items())
    if skipped:
        manifest["skipped"] = skipped

    outdir = os.path.abspath(outdir)
    parent = os.path.dirname(outdir)
    tmp = tempfile.mkdtemp(prefix="." + os.path.basename(outdir) + ".tmp-", dir=parent)
    try:
        for key, t in tensors.items():
            with open(os.path.join(tmp, key + ".bin"), "wb") as f:
                _tensor_f32(t).tofile(f)
                f.flush()
                os.fsync(f.fileno())
        with open(os.path.join(tmp, "manifest.json"), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o755)
        _replace_dir(tmp, outdir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def load_model_file(path):
    """torch.load a whole module or a state_dict (also unwraps {"state_dict": ...} checkpoints)."""
    obj = torch.load(path, map_location="cpu", weights_only=False)
    if isinstance(obj, nn.Module):
        return obj
    if isinstance(obj, dict):
        for wrapper in ("state_dict", "model_state_dict", "model"):
            inner = obj.get(wrapper)
            if isinstance(inner, dict) and inner and all(isinstance(v, torch.Tensor) for v in inner.values()):
                return inner
            if isinstance(inner, nn.Module):
                return inner
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return obj
    raise ExportError("%s holds a %s, neither an nn.Module nor a state_dict of tensors"
                      % (path, type(obj).__name__))


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="export_torch.py",
        description="Write a PyTorch model as a raw float32 dump directory (manifest.json + one .bin per "
                    "tensor) that `qmap convert OUTDIR -o model.qmap` reads.",
        epilog="MODEL.pt is unpickled with torch.load(weights_only=False): only export files you trust. "
               "Examples: export_torch.py mnist_mlp.pt mnist_dump   (a saved nn.Sequential); "
               "export_torch.py pytorch_model.bin gpt2_dump --config config.json")
    p.add_argument("model", metavar="MODEL.pt", help="torch.save(model) or torch.save(model.state_dict()) file")
    p.add_argument("outdir", metavar="OUTDIR", help="directory to create (replaced if it is an earlier dump)")
    p.add_argument("--config", metavar="FILE", help="model config JSON (HF config.json, or our mlp/seq2seq "
                                                   "keys); stored in the manifest")
    p.add_argument("--arch", choices=ARCHS, help="architecture name to record (default: mlp for an "
                                                 "nn.Sequential, else left to the converter)")
    args = p.parse_args(argv)
    try:
        config = None
        if args.config:
            with open(args.config, encoding="utf-8") as f:
                config = json.load(f)
        model = load_model_file(args.model)
        manifest = export(model, args.outdir, config=config, arch=args.arch)
    except (ExportError, OSError, ValueError, RuntimeError, EOFError) as e:
        print("export_torch.py: %s: %s" % (args.model, e), file=sys.stderr)
        return 1
    print("%s: %d tensors%s -> %s" % (args.model, len(manifest["tensors"]),
                                     ", %d skipped" % len(manifest["skipped"]) if "skipped" in manifest else "",
                                     args.outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
