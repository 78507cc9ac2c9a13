"""Finding libqmap and declaring the C functions of include/qmap.h to ctypes.

Internal: the public names are in qmap/__init__.py. Every structure here mirrors its C declaration field
by field, in order; include/qmap.h is the reference.
"""
import ctypes
import os
from typing import List

SONAME = "libqmap.so.0"


def candidate_paths() -> List[str]:
    """Where the library is looked for, in order: $QMAP_LIBRARY; the build tree of the checkout this package
    lies in (python/qmap -> build/libqmap.so); the lib/ directory of the prefix `make install` put the package
    in (PREFIX/lib/python3.X/dist-packages/qmap -> PREFIX/lib/libqmap.so.0); the soname through the dynamic
    loader's search path."""
    here = os.path.dirname(os.path.abspath(__file__))
    paths = []
    explicit = os.environ.get("QMAP_LIBRARY")
    if explicit:
        return [explicit]
    checkout = os.path.dirname(os.path.dirname(here))
    paths.append(os.path.join(checkout, "build", "libqmap.so"))
    prefix_lib = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    paths.append(os.path.join(prefix_lib, SONAME))
    paths.append(SONAME)
    return paths


def load() -> ctypes.CDLL:
    """The first library of candidate_paths() that loads. QMAP_LIBRARY, when set, is the only one tried."""
    tried = []
    for p in candidate_paths():
        if os.sep in p and not os.path.exists(p):
            tried.append("%s (absent)" % p)
            continue
        try:
            return ctypes.CDLL(p)
        except OSError as e:
            tried.append("%s (%s)" % (p, e))
    raise ImportError("qmap: cannot load libqmap; tried " + "; ".join(tried) +
                      ". Build it (make lib-qmap), install it (make install) or name it in QMAP_LIBRARY.")


# ---- structures (include/qmap.h) ------------------------------------------------------------------------

class qmap_error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("message", ctypes.c_char * 640)]


class qmap_model_params(ctypes.Structure):
    _fields_ = [("verify", ctypes.c_bool), ("threads", ctypes.c_int), ("no_mmap", ctypes.c_bool),
                ("large_pages", ctypes.c_bool),
                ("shard", ctypes.c_void_p)]   # const qmap_shard * (tensor parallel, qmap-mpi): NULL here


class qmap_model_info(ctypes.Structure):
    _fields_ = [("path", ctypes.c_char_p), ("arch", ctypes.c_char_p), ("variant", ctypes.c_char_p),
                ("file_type", ctypes.c_char_p), ("kind", ctypes.c_int), ("vocab_size", ctypes.c_uint32),
                ("context_length", ctypes.c_uint32), ("dim", ctypes.c_uint32), ("n_layers", ctypes.c_uint32),
                ("n_heads", ctypes.c_uint32), ("n_kv_heads", ctypes.c_uint32), ("head_dim", ctypes.c_uint32),
                ("ffn_dim", ctypes.c_uint32), ("input_dim", ctypes.c_uint32), ("n_params", ctypes.c_uint64),
                ("weight_bytes", ctypes.c_uint64), ("bytes_per_token", ctypes.c_uint64),
                ("file_size", ctypes.c_uint64), ("has_tokenizer", ctypes.c_bool),
                ("input_scale", ctypes.c_float), ("input_offset", ctypes.c_float),
                ("has_class_names", ctypes.c_bool), ("src_vocab_size", ctypes.c_uint32),
                ("n_enc_layers", ctypes.c_uint32)]


class qmap_detok(ctypes.Structure):
    _fields_ = [("pending", ctypes.c_uint8 * 8), ("n_pending", ctypes.c_uint32), ("flags", ctypes.c_uint32)]


class qmap_session_params(ctypes.Structure):
    _fields_ = [("n_ctx", ctypes.c_uint32), ("n_batch", ctypes.c_uint32), ("threads", ctypes.c_int),
                ("kv_type", ctypes.c_int), ("act", ctypes.c_int), ("logits_all", ctypes.c_bool),
                ("batch_invariant", ctypes.c_bool)]


class qmap_translate_params(ctypes.Structure):
    _fields_ = [("beam_size", ctypes.c_uint32), ("n_best", ctypes.c_uint32), ("length_penalty", ctypes.c_float),
                ("max_len", ctypes.c_uint32), ("max_batch", ctypes.c_uint32),
                ("max_batch_tokens", ctypes.c_uint32), ("threads", ctypes.c_int), ("kv_type", ctypes.c_int),
                ("act", ctypes.c_int)]


class qmap_hypothesis(ctypes.Structure):
    _fields_ = [("ids", ctypes.POINTER(ctypes.c_int32)), ("n_ids", ctypes.c_size_t), ("score", ctypes.c_float),
                ("log_prob", ctypes.c_float)]


class qmap_sampler_params(ctypes.Structure):
    _fields_ = [("temp", ctypes.c_float), ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float),
                ("min_p", ctypes.c_float), ("repeat_penalty", ctypes.c_float), ("repeat_last_n", ctypes.c_uint32),
                ("seed", ctypes.c_uint64)]


class qmap_container_info(ctypes.Structure):
    _fields_ = [("path", ctypes.c_char_p), ("major_version", ctypes.c_uint16), ("minor_version", ctypes.c_uint16),
                ("alignment", ctypes.c_uint64), ("file_size", ctypes.c_uint64), ("metadata_count", ctypes.c_uint64),
                ("tensor_count", ctypes.c_uint64)]


class qmap_meta_scalar(ctypes.Union):
    _fields_ = [("u32", ctypes.c_uint32), ("i32", ctypes.c_int32), ("u64", ctypes.c_uint64), ("i64", ctypes.c_int64),
                ("f32", ctypes.c_float), ("f64", ctypes.c_double), ("b", ctypes.c_bool)]


class qmap_meta_entry(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("type", ctypes.c_int), ("elem_type", ctypes.c_int),
                ("count", ctypes.c_uint64), ("v", qmap_meta_scalar), ("str", ctypes.c_void_p),
                ("str_len", ctypes.c_uint64), ("elems", ctypes.c_void_p), ("elems_size", ctypes.c_uint64)]


class qmap_tensor_info(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_uint32),
                ("dims", ctypes.c_uint64 * 4), ("n_elements", ctypes.c_uint64), ("data", ctypes.c_void_p),
                ("size", ctypes.c_uint64), ("offset", ctypes.c_uint64), ("checksum", ctypes.c_uint64),
                ("rows", ctypes.c_uint64), ("cols", ctypes.c_uint64), ("row_stride", ctypes.c_uint64),
                ("scales_offset", ctypes.c_uint64), ("sums_offset", ctypes.c_uint64)]


class qmap_progress(ctypes.Structure):
    _fields_ = [("tensor", ctypes.c_uint64), ("n_tensors", ctypes.c_uint64), ("bytes_done", ctypes.c_uint64),
                ("bytes_total", ctypes.c_uint64), ("seconds", ctypes.c_double)]


PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(qmap_progress))
WARNING_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


class qmap_convert_params(ctypes.Structure):
    _fields_ = [("config_path", ctypes.c_char_p), ("arch", ctypes.c_char_p), ("tokenizer_path", ctypes.c_char_p),
                ("src_tokenizer_path", ctypes.c_char_p), ("tgt_tokenizer_path", ctypes.c_char_p),
                ("no_tokenizer", ctypes.c_bool), ("dtype", ctypes.c_int), ("strict", ctypes.c_bool),
                ("allow_large", ctypes.c_bool), ("json_limit", ctypes.c_uint64), ("warning", WARNING_FN),
                ("warning_user", ctypes.c_void_p)]


class qmap_convert_result(ctypes.Structure):
    _fields_ = [("arch", ctypes.c_char_p), ("input_kind", ctypes.c_char * 160), ("config", ctypes.c_char * 512),
                ("tokenizer", ctypes.c_char * 160), ("input_files", ctypes.c_uint64), ("input_bytes", ctypes.c_uint64),
                ("n_tensors", ctypes.c_uint64), ("n_params", ctypes.c_uint64), ("n_skipped", ctypes.c_uint64),
                ("output_bytes", ctypes.c_uint64), ("nonfinite_values", ctypes.c_uint64),
                ("compressed_bytes", ctypes.c_uint64), ("inflated_bytes", ctypes.c_uint64),
                ("tied_output", ctypes.c_bool), ("seconds", ctypes.c_double), ("write_seconds", ctypes.c_double)]


class qmap_quantize_tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("action", ctypes.c_int), ("dtype_in", ctypes.c_int),
                ("dtype_out", ctypes.c_int), ("rank", ctypes.c_uint32), ("dims", ctypes.c_uint64 * 4),
                ("panels", ctypes.c_uint64), ("bytes_in", ctypes.c_uint64), ("bytes_out", ctypes.c_uint64),
                ("rows", ctypes.c_uint64), ("rel_rms_error", ctypes.c_double), ("max_abs_error", ctypes.c_double),
                ("outlier_rows", ctypes.c_uint64)]


TENSOR_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(qmap_quantize_tensor))


class qmap_quantize_params(ctypes.Structure):
    _fields_ = [("scheme", ctypes.c_int), ("keep", ctypes.POINTER(ctypes.c_char_p)), ("n_keep", ctypes.c_size_t),
                ("threads", ctypes.c_int), ("panel_cols", ctypes.c_uint64), ("on_tensor", TENSOR_FN),
                ("tensor_user", ctypes.c_void_p), ("shards", ctypes.c_uint32)]


class qmap_quantize_result(ctypes.Structure):
    _fields_ = [("n_quantized", ctypes.c_uint64), ("n_copied", ctypes.c_uint64), ("bytes_in", ctypes.c_uint64),
                ("bytes_out", ctypes.c_uint64), ("rel_rms_error", ctypes.c_double), ("threads", ctypes.c_int),
                ("kernels", ctypes.c_char_p), ("seconds", ctypes.c_double)]


# ---- prototypes -----------------------------------------------------------------------------------------

P = ctypes.POINTER
c_void_pp = P(ctypes.c_void_p)
_ERR = P(qmap_error)
_I32P = P(ctypes.c_int32)
_FP = P(ctypes.c_float)
_SIZEP = P(ctypes.c_size_t)

PROTOTYPES = {
    # name: (restype, argtypes)
    "qmap_version": (ctypes.c_char_p, []),
    "qmap_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "qmap_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "qmap_model_params_default": (None, [P(qmap_model_params)]),
    "qmap_model_open": (ctypes.c_int, [ctypes.c_char_p, P(qmap_model_params), c_void_pp, _ERR]),
    "qmap_model_close": (None, [ctypes.c_void_p]),
    "qmap_model_get_info": (None, [ctypes.c_void_p, P(qmap_model_info)]),
    "qmap_model_class_name": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_uint32, _SIZEP]),
    "qmap_tokenize": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_bool, _I32P,
                                     ctypes.c_size_t, _SIZEP, _ERR]),
    "qmap_detok_init": (None, [P(qmap_detok)]),
    "qmap_detokenize": (ctypes.c_int, [ctypes.c_void_p, P(qmap_detok), ctypes.c_int32, ctypes.c_char_p,
                                       ctypes.c_size_t, _SIZEP, _ERR]),
    "qmap_detok_flush": (ctypes.c_size_t, [P(qmap_detok), ctypes.c_char_p, ctypes.c_size_t]),
    "qmap_token_bos": (ctypes.c_int32, [ctypes.c_void_p]),
    "qmap_token_eos": (ctypes.c_int32, [ctypes.c_void_p]),
    "qmap_token_unk": (ctypes.c_int32, [ctypes.c_void_p]),
    "qmap_session_params_default": (None, [P(qmap_session_params)]),
    "qmap_session_new": (ctypes.c_int, [ctypes.c_void_p, P(qmap_session_params), c_void_pp, _ERR]),
    "qmap_session_free": (None, [ctypes.c_void_p]),
    "qmap_eval": (ctypes.c_int, [ctypes.c_void_p, _I32P, ctypes.c_size_t, _ERR]),
    "qmap_logits": (_FP, [ctypes.c_void_p, ctypes.c_size_t]),
    "qmap_session_pos": (ctypes.c_uint32, [ctypes.c_void_p]),
    "qmap_session_reset": (None, [ctypes.c_void_p]),
    "qmap_classifier_new": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, c_void_pp,
                                           _ERR]),
    "qmap_classifier_free": (None, [ctypes.c_void_p]),
    "qmap_classify": (ctypes.c_int, [ctypes.c_void_p, _FP, ctypes.c_size_t, _FP, _ERR]),
    "qmap_translate_params_default": (None, [P(qmap_translate_params)]),
    "qmap_translator_new": (ctypes.c_int, [ctypes.c_void_p, P(qmap_translate_params), c_void_pp, _ERR]),
    "qmap_translator_free": (None, [ctypes.c_void_p]),
    "qmap_translate": (ctypes.c_int, [ctypes.c_void_p, _I32P, P(ctypes.c_uint32), ctypes.c_size_t,
                                      P(qmap_hypothesis), _ERR]),
    "qmap_sampler_params_default": (None, [P(qmap_sampler_params)]),
    "qmap_sampler_new": (ctypes.c_int, [P(qmap_sampler_params), ctypes.c_uint32, c_void_pp, _ERR]),
    "qmap_sampler_free": (None, [ctypes.c_void_p]),
    "qmap_sample": (ctypes.c_int32, [ctypes.c_void_p, _FP]),
    "qmap_sampler_accept": (None, [ctypes.c_void_p, ctypes.c_int32]),
    "qmap_container_open": (ctypes.c_int, [ctypes.c_char_p, c_void_pp, _ERR]),
    "qmap_container_close": (None, [ctypes.c_void_p]),
    "qmap_container_get_info": (None, [ctypes.c_void_p, P(qmap_container_info)]),
    "qmap_container_meta": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64, P(qmap_meta_entry), _ERR]),
    "qmap_container_find_meta": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, P(qmap_meta_entry), _ERR]),
    "qmap_meta_array_get": (ctypes.c_int, [P(qmap_meta_entry), ctypes.c_uint64, ctypes.c_void_p, _ERR]),
    "qmap_meta_array_string": (ctypes.c_int, [ctypes.c_void_p, P(qmap_meta_entry), ctypes.c_uint64,
                                              P(ctypes.c_void_p), _SIZEP, _ERR]),
    "qmap_container_tensor": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64, P(qmap_tensor_info), _ERR]),
    "qmap_container_find_tensor": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, P(qmap_tensor_info), _ERR]),
    "qmap_container_verify": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_bool, P(ctypes.c_int), _ERR]),
    "qmap_convert_params_default": (None, [P(qmap_convert_params)]),
    "qmap_convert": (ctypes.c_int, [P(ctypes.c_char_p), ctypes.c_size_t, ctypes.c_char_p, P(qmap_convert_params),
                                    PROGRESS_FN, ctypes.c_void_p, P(qmap_convert_result), _ERR]),
    "qmap_quantize_params_default": (None, [P(qmap_quantize_params)]),
    "qmap_quantize": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, P(qmap_quantize_params), PROGRESS_FN,
                                     ctypes.c_void_p, P(qmap_quantize_result), _ERR]),
}


def declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Give every function of PROTOTYPES its C signature, so ctypes converts (and checks) arguments."""
    for name, (restype, argtypes) in PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


lib = declare(load())
