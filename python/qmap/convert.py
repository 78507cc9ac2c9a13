"""qmap.convert() and qmap.quantize(): the library's converter and quantizer (include/qmap.h qmap_convert,
qmap_quantize), the same code `qmap convert` and `qmap quantize` run, with the same output byte for byte.

    qmap.convert("ckpt_dir", "model.qmap")                      # torch.save / safetensors / .npz / hub dir
    qmap.quantize("model.qmap", "model-q8.qmap", q8=True)       # Q8_ROW (or f16=True)

Both write atomically (nothing is left on failure) and raise a qmap.Error subclass naming the file, key or
tensor at fault. The GIL is released while they run; `progress` is called on the calling thread.
"""
import ctypes
import os
import warnings
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Union

from . import _lib
from .errors import error_for
from .errors import invalid as _invalid

C = _lib.lib
PathLike = Union[str, "os.PathLike[str]"]
CONVERT_DTYPES = {"f32": 1, "f16": 2}
QUANT_Q8_ROW, QUANT_F16 = 1, 2
QUANT_ACTIONS = {1: "quantized", 2: "kept", 3: "copied"}
DTYPE_NAMES = {1: "F32", 2: "F16", 3: "BF16", 4: "I32", 5: "Q8_ROW"}
PANEL_COLS_AUTO = (1 << 64) - 1


class Progress(NamedTuple):
    """What a progress callback receives: the tensor being written (0-based) of n_tensors, the output's
    tensor bytes written so far of bytes_total, and the seconds since writing began."""
    tensor: int
    n_tensors: int
    bytes_done: int
    bytes_total: int
    seconds: float


class ConvertWarning(UserWarning):
    """A warning of qmap.convert (e.g. NaN/Inf copied from a weight; strict=True makes it an error)."""


def _path(name: str, value: Any) -> bytes:
    try:
        p = os.fspath(value)
    except TypeError:
        raise _invalid("%s=%r: expected a path" % (name, value)) from None
    if isinstance(p, str):
        p = os.fsencode(p)
    if not p or b"\0" in p:
        raise _invalid("%s=%r: expected a path" % (name, value))
    return p


def _optional_path(name: str, value: Any) -> Optional[bytes]:
    return None if value is None else _path(name, value)


class _Callbacks:
    """The C callbacks for one call: progress and warnings relayed to Python, and the first exception a
    progress callable raised, kept to be raised once the library returns (the C code cannot unwind)."""

    def __init__(self, progress: Optional[Callable[[Progress], Any]]) -> None:
        if progress is not None and not callable(progress):
            raise _invalid("progress=%r: expected a callable taking a qmap.Progress" % (progress,))
        self.user_progress = progress
        self.error: Optional[BaseException] = None
        self.progress = _lib.PROGRESS_FN(self._on_progress) if progress else _lib.PROGRESS_FN()
        self.warning = _lib.WARNING_FN(self._on_warning)

    def _on_progress(self, _user: Any, p: Any) -> None:
        if self.error is not None or self.user_progress is None:
            return
        v = p.contents
        try:
            self.user_progress(Progress(v.tensor, v.n_tensors, v.bytes_done, v.bytes_total, v.seconds))
        except BaseException as e:   # noqa: B902 — KeyboardInterrupt too: re-raised after the call
            self.error = e

    def _on_warning(self, _user: Any, message: bytes) -> None:
        warnings.warn(message.decode("utf-8", "replace"), ConvertWarning, stacklevel=2)

    def finish(self, status: int, err: _lib.qmap_error) -> None:
        if status != 0:
            raise error_for(status, err.message.decode("utf-8", "replace"))
        if self.error is not None:
            raise self.error


def convert(src: Union[PathLike, Sequence[PathLike]], dst: PathLike, *, config: Optional[PathLike] = None,
            arch: Optional[str] = None, dtype: str = "f32", tokenizer: Optional[PathLike] = None,
            no_tokenizer: bool = False, src_tokenizer: Optional[PathLike] = None,
            tgt_tokenizer: Optional[PathLike] = None, strict: bool = False, allow_large: bool = False,
            json_limit: Optional[int] = None,
            progress: Optional[Callable[[Progress], Any]] = None) -> Dict[str, Any]:
    """Convert a PyTorch export into the container `dst`, as `qmap convert SRC... -o DST` does.

    src: a torch.save file, a safetensors file, a .npy/.npz, a shard index JSON, a model directory or a raw
    dump directory, or a list of shard files. Options as the CLI's: config (config.json; default beside
    src), arch (default from the config or the tensor names; "none" stores every tensor as it is), dtype of
    the matrices ("f32" or "f16"), tokenizer (default: looked for beside src), no_tokenizer, src_tokenizer /
    tgt_tokenizer (seq2seq), strict (NaN/Inf is an error, not a ConvertWarning), allow_large (accept zip
    entries that inflate past the bomb guard), json_limit (bytes, cap of every JSON file read). progress is
    called with a qmap.Progress as tensors are written.

    Returns a dict: arch, input_kind, config, tokenizer, input_files, input_bytes, n_tensors, n_params,
    n_skipped, output_bytes, nonfinite_values, compressed_bytes, inflated_bytes, tied_output, seconds,
    write_seconds.
    """
    sources = [src] if isinstance(src, (str, bytes, os.PathLike)) else list(src)
    if not sources:
        raise _invalid("src: no source given")
    paths = [_path("src", s) for s in sources]
    params = _lib.qmap_convert_params()
    C.qmap_convert_params_default(ctypes.byref(params))
    params.config_path = _optional_path("config", config)
    if arch is not None and (not isinstance(arch, str) or not arch or "\0" in arch):
        raise _invalid("arch=%r: expected an architecture name" % (arch,))
    params.arch = arch.encode() if arch else None
    if dtype not in CONVERT_DTYPES:
        raise _invalid("dtype=%r: expected one of %s" % (dtype, ", ".join(CONVERT_DTYPES)))
    params.dtype = CONVERT_DTYPES[dtype]
    params.tokenizer_path = _optional_path("tokenizer", tokenizer)
    params.src_tokenizer_path = _optional_path("src_tokenizer", src_tokenizer)
    params.tgt_tokenizer_path = _optional_path("tgt_tokenizer", tgt_tokenizer)
    params.no_tokenizer, params.strict, params.allow_large = bool(no_tokenizer), bool(strict), bool(allow_large)
    if json_limit is not None:
        if isinstance(json_limit, bool) or not isinstance(json_limit, int) or json_limit < 1:
            raise _invalid("json_limit=%r: expected a positive number of bytes" % (json_limit,))
        params.json_limit = json_limit
    calls = _Callbacks(progress)
    params.warning = calls.warning
    argv = (ctypes.c_char_p * len(paths))(*paths)
    result = _lib.qmap_convert_result()
    err = _lib.qmap_error()
    st = C.qmap_convert(argv, len(paths), _path("dst", dst), ctypes.byref(params), calls.progress, None,
                        ctypes.byref(result), ctypes.byref(err))
    calls.finish(st, err)
    out: Dict[str, Any] = {}
    for name, _ in result._fields_:
        value = getattr(result, name)
        out[name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return out


def quantize(src: PathLike, dst: PathLike, q8: Optional[bool] = None, f16: bool = False, *,
             keep: Sequence[str] = (), threads: int = 0, panel_cols: Union[str, int] = "auto",
             progress: Optional[Callable[[Progress], Any]] = None, shards: int = 0) -> Dict[str, Any]:
    """Quantize the container `src` into `dst`, as `qmap quantize (--q8 | --f16) SRC -o DST` does: Q8_ROW
    (the default, or q8=True) or F16 (f16=True) for every weight matrix (rank >= 2, name ending in
    ".weight", not pos_embd.weight, matching none of the `keep` globs); everything else copied. threads 0:
    one per CPU (the output is the same for any number); panel_cols "auto", 0 or a multiple of 64 (as
    --panel-cols); shards N > 0 writes the layout for N tensor-parallel ranks (as --shards: the attention
    output in N column panels, the down projection in a multiple of N), 0 none. progress is called with a
    qmap.Progress as tensors are written.

    Returns a dict: n_quantized, n_copied, bytes_in, bytes_out, rel_rms_error, threads, kernels, seconds,
    and tensors: one dict per tensor in file order (the report `qmap quantize --json` prints): name, action
    ("quantized", "kept", "copied"), dtype_in, dtype_out, shape (as written), bytes_in, bytes_out, and for
    quantized tensors panels, rows, rel_rms_error, max_abs_error, outlier_rows (Q8_ROW) (None otherwise).
    """
    if q8 and f16:
        raise _invalid("q8=True and f16=True: give one scheme")
    if not f16 and q8 is False:
        raise _invalid("q8=False: give q8=True or f16=True")
    params = _lib.qmap_quantize_params()
    C.qmap_quantize_params_default(ctypes.byref(params))
    params.scheme = QUANT_F16 if f16 else QUANT_Q8_ROW
    if isinstance(keep, str) or not all(isinstance(k, str) and k and "\0" not in k for k in keep):
        raise _invalid("keep=%r: expected a list of glob patterns" % (keep,))
    globs = (ctypes.c_char_p * max(len(keep), 1))(*[k.encode() for k in keep])
    params.keep, params.n_keep = ctypes.cast(globs, ctypes.POINTER(ctypes.c_char_p)), len(keep)
    if isinstance(threads, bool) or not isinstance(threads, int) or not 0 <= threads <= 1024:
        raise _invalid("threads=%r: expected an integer in [0, 1024]" % (threads,))
    params.threads = threads
    if panel_cols == "auto":
        params.panel_cols = PANEL_COLS_AUTO
    elif isinstance(panel_cols, int) and not isinstance(panel_cols, bool) and panel_cols >= 0:
        params.panel_cols = panel_cols
    else:
        raise _invalid("panel_cols=%r: expected \"auto\", 0 or a multiple of 64" % (panel_cols,))
    if isinstance(shards, bool) or not isinstance(shards, int) or not 0 <= shards <= 4096:
        raise _invalid("shards=%r: expected an integer in [0, 4096]" % (shards,))
    params.shards = shards
    calls = _Callbacks(progress)
    tensors: List[Dict[str, Any]] = []
    on_tensor = _lib.TENSOR_FN(lambda _user, t: tensors.append(_tensor_report(t.contents, bool(f16))))
    params.on_tensor = on_tensor
    result = _lib.qmap_quantize_result()
    err = _lib.qmap_error()
    st = C.qmap_quantize(_path("src", src), _path("dst", dst), ctypes.byref(params), calls.progress, None,
                         ctypes.byref(result), ctypes.byref(err))
    calls.finish(st, err)
    out: Dict[str, Any] = {name: getattr(result, name) for name, _ in result._fields_}
    out["kernels"] = (result.kernels or b"").decode()
    out["tensors"] = tensors
    return out


def _tensor_report(t: Any, f16: bool) -> Dict[str, Any]:
    quantized = t.action == 1
    return {"name": t.name.decode("utf-8"), "action": QUANT_ACTIONS.get(t.action, str(t.action)),
            "dtype_in": DTYPE_NAMES.get(t.dtype_in, str(t.dtype_in)),
            "dtype_out": DTYPE_NAMES.get(t.dtype_out, str(t.dtype_out)), "shape": list(t.dims[:t.rank]),
            "panels": t.panels if quantized else None, "bytes_in": t.bytes_in, "bytes_out": t.bytes_out,
            "rows": t.rows if quantized else None,
            "rel_rms_error": t.rel_rms_error if quantized else None,
            "max_abs_error": t.max_abs_error if quantized else None,
            "outlier_rows": t.outlier_rows if quantized and not f16 else None}
