"""qmap.Model: a .qmap container opened through libqmap (include/qmap.h), with the calls of its kind.

A Model holds the mapping (qmap_model) and, made when first needed, the mutable objects the C API runs
with: a generation session, a session keeping every position's logits, a classifier, a translator. Every
call that touches them takes the model's lock, so one Model may be shared between threads (their calls run
one at a time; ctypes releases the GIL while the library computes, so other Python threads keep running).
For parallel work, open one Model per thread: the mapping is shared by the page cache.
"""
import ctypes
import os
import secrets
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from .container import _human_bytes
from .errors import QMAP_ERR_INVALID_ARGUMENT, QMAP_ERR_NOT_FOUND, QMAP_ERR_STATE, NotFoundError, StateError
from .errors import invalid as _invalid
from .errors import raise_if as _raise_if

C = _lib.lib
KINDS = {0: "none", 1: "lm", 2: "classifier", 3: "seq2seq"}
KV_TYPES = {"f16": 0, "f32": 1}
ACT_MODES = {"auto": 0, "int8": 1, "f32": 2, "int8x2": 3, "precise": 4}
DEFAULT_MAX_CTX = 4096      # positions of the KV cache when n_ctx is not given (the model's, up to this)
PIECE_CAP = 4096            # bytes qmap_detokenize may write: every token of the common vocabularies fits


def _choice(name: str, value: str, table: Dict[str, int]) -> int:
    if value not in table:
        raise _invalid("%s=%r: expected one of %s" % (name, value, ", ".join(table)))
    return table[value]


def _count(name: str, value: Any, low: int, high: int) -> int:
    """An integer argument within [low, high] (bool refused: True is not a count)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise _invalid("%s=%r: expected an integer in [%d, %d]" % (name, value, low, high))
    return int(value)


def _real(name: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not low <= float(value) <= high:
        raise _invalid("%s=%r: expected a number in [%g, %g]" % (name, value, low, high))
    return float(value)


def _as_ids(ids: Any, vocab: int, what: str) -> np.ndarray:
    """A sequence of token ids as a contiguous int32 array, each checked to lie in [0, vocab)."""
    if isinstance(ids, (str, bytes)):
        raise _invalid("%s: expected token ids, got a string (tokenize it first)" % what)
    try:
        a = np.asarray(ids)
    except (TypeError, ValueError) as e:
        raise _invalid("%s: not a sequence of token ids (%s)" % (what, e)) from None
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise _invalid("%s: expected a flat sequence of integer ids, got shape %s dtype %s" % (what, a.shape, a.dtype))
    if a.size and (int(a.min()) < 0 or int(a.max()) >= vocab):
        bad = int(a[(a < 0) | (a >= vocab)][0])
        raise _invalid("%s: id %d is outside the vocabulary of %d" % (what, bad, vocab))
    return np.ascontiguousarray(a, dtype=np.int32)


def _i32p(a: np.ndarray) -> Any:
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))


def _f32p(a: np.ndarray) -> Any:
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


class _Detokenizer:
    """One text's streaming detokenizer (qmap_detok): token ids in, complete UTF-8 characters out."""

    def __init__(self, handle: ctypes.c_void_p) -> None:
        self.handle = handle
        self.state = _lib.qmap_detok()
        C.qmap_detok_init(ctypes.byref(self.state))
        self.buf = ctypes.create_string_buffer(PIECE_CAP)

    def piece(self, token: int) -> str:
        n = ctypes.c_size_t(0)
        err = _lib.qmap_error()
        st = C.qmap_detokenize(self.handle, ctypes.byref(self.state), token, self.buf, PIECE_CAP, ctypes.byref(n),
                               ctypes.byref(err))
        _raise_if(st, err)
        return self.buf.raw[:n.value].decode("utf-8", "replace")

    def flush(self) -> str:
        n = C.qmap_detok_flush(ctypes.byref(self.state), self.buf, PIECE_CAP)
        return self.buf.raw[:n].decode("utf-8", "replace")


class _StopFilter:
    """Cuts generated text before the earliest stop string, however the text is split into pieces: text is
    let out only up to where a stop string could still begin, and a full stop string ends the text only
    when no other one could still complete from an earlier start."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.pending = ""
        self.stopped = False

    def feed(self, piece: str) -> str:
        self.pending += piece
        hit = self._first_match()
        maybe = self._first_partial()
        if hit is not None and hit <= maybe:
            out, self.pending, self.stopped = self.pending[:hit], "", True
            return out
        keep = min(maybe, hit) if hit is not None else maybe
        out, self.pending = self.pending[:keep], self.pending[keep:]
        return out

    def finish(self) -> str:
        """What is left once the text has ended (cut before a stop string it holds)."""
        hit = self._first_match()
        out, self.pending = self.pending[:hit] if hit is not None else self.pending, ""
        return out

    def _first_match(self) -> Optional[int]:
        hits = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        return min(hits) if hits else None

    def _first_partial(self) -> int:
        """Where the earliest end of pending that is a proper beginning of a stop string starts
        (len(pending) if none)."""
        start = len(self.pending)
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(s[:k]):
                    start = min(start, len(self.pending) - k)
                    break
        return start


def _stop_list(stop: Union[None, str, Sequence[str]]) -> List[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if not all(isinstance(s, str) for s in stop):
        raise _invalid("stop=%r: expected a string or a list of strings" % (stop,))
    return list(stop)


class Model:
    """A .qmap container opened for running: the file is mapped read-only, validated, and its weights used
    where they lie (nothing dequantized or copied).

    >>> with qmap.Model("kjv-q8.qmap", threads=2) as m:
    ...     print(m.generate("In the beginning", max_tokens=16, temperature=0))

    Parameters: `threads` for evaluation (None or 0: one per CPU the process may use); `n_ctx` positions
    of a language model's KV cache (None: the model's context length, at most 4096); `n_batch` prompt tokens
    evaluated per batch (0: 512); `kv` the KV cache type ("f16" or "f32"); `act` how Q8_ROW products treat
    activations ("auto", "precise", "int8", "int8x2", "f32"; include/qmap.h qmap_act_mode); `verify` hashes
    every tensor at open; `no_mmap` reads the file into memory instead of mapping it.
    Raises a subclass of qmap.Error: FileIOError for a missing file, FormatError for one that is not a
    container, UnsupportedError for an architecture this library cannot run.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], threads: Optional[int] = None,
                 n_ctx: Optional[int] = None, n_batch: int = 0, kv: str = "f16", act: str = "auto",
                 verify: bool = False, no_mmap: bool = False) -> None:
        self._lock = threading.RLock()
        self._handle: Optional[ctypes.c_void_p] = None
        self._objects: Dict[str, Any] = {}
        self._streaming = False
        try:
            self._path = os.fspath(path)
        except TypeError:
            raise _invalid("path=%r: expected the name of a .qmap file" % (path,)) from None
        self._threads = _count("threads", 0 if threads is None else threads, 0, 1024)
        self._n_batch = _count("n_batch", n_batch, 0, 1 << 20)
        self._kv = _choice("kv", kv, KV_TYPES)
        self._act = _choice("act", act, ACT_MODES)
        self._handle = self._open(self._path, verify, no_mmap)
        self._info = self._read_info()
        ctx = self._info["context_length"]
        self._n_ctx = min(ctx, DEFAULT_MAX_CTX) if n_ctx is None else _count("n_ctx", n_ctx, 1, 1 << 24)

    # ---- opening, closing, describing ------------------------------------------------------------------

    def _open(self, path: str, verify: bool, no_mmap: bool) -> ctypes.c_void_p:
        if not isinstance(path, str) or not path or "\0" in path:
            raise _invalid("path=%r: expected the name of a .qmap file" % (path,))
        params = _lib.qmap_model_params()
        C.qmap_model_params_default(ctypes.byref(params))
        params.verify = bool(verify)
        params.threads = self._threads
        params.no_mmap = bool(no_mmap)
        handle = ctypes.c_void_p()
        err = _lib.qmap_error()
        _raise_if(C.qmap_model_open(os.fsencode(path), ctypes.byref(params), ctypes.byref(handle),
                                    ctypes.byref(err)), err)
        return handle

    def _read_info(self) -> Dict[str, Any]:
        raw = _lib.qmap_model_info()
        C.qmap_model_get_info(self._handle, ctypes.byref(raw))
        info: Dict[str, Any] = {}
        for name, _ in raw._fields_:
            value = getattr(raw, name)
            info[name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        info["path"] = self._path
        info["kind"] = KINDS.get(raw.kind, str(raw.kind))
        info["dtype"] = info["file_type"]
        if raw.has_class_names:
            info["class_names"] = [self._class_name(i) for i in range(raw.vocab_size)]
        if raw.has_tokenizer:
            info["bos_id"], info["eos_id"] = C.qmap_token_bos(self._handle), C.qmap_token_eos(self._handle)
        return info

    def _class_name(self, i: int) -> str:
        n = ctypes.c_size_t(0)
        p = C.qmap_model_class_name(self._handle, i, ctypes.byref(n))
        return ctypes.string_at(p, n.value).decode("utf-8", "replace") if p else ""

    def close(self) -> None:
        """Free every session and the mapping. Calling it again does nothing; any other call afterwards
        raises qmap.StateError."""
        with self._lock:
            if self._handle is None:
                return
            for key, obj in self._objects.items():
                free = {"gen": C.qmap_session_free, "all": C.qmap_session_free,
                        "classifier": C.qmap_classifier_free}.get(key, C.qmap_translator_free)
                free(obj[0] if isinstance(obj, tuple) else obj)
            self._objects.clear()
            C.qmap_model_close(self._handle)
            self._handle = None

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:   # interpreter shutdown: the library may already be gone
            pass

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._handle is None

    @property
    def info(self) -> Dict[str, Any]:
        """What the container holds: path, arch, variant, kind ("lm", "classifier", "seq2seq", "none"), dtype
        (general.file_type), vocab_size, context_length, dim, n_layers, n_heads, n_kv_heads, head_dim,
        ffn_dim, input_dim, n_params, weight_bytes, bytes_per_token, file_size, has_tokenizer, ... (the
        fields of qmap_model_info), class_names for a classifier that names them, bos_id/eos_id."""
        self._require_open()
        return dict(self._info)

    @property
    def n_ctx(self) -> int:
        """Positions a language model's sessions hold (prompt and generated tokens together)."""
        return self._n_ctx

    def __repr__(self) -> str:
        i = getattr(self, "_info", None)
        if i is None:
            return "<qmap.Model %r (not open)>" % (getattr(self, "_path", "?"),)
        return "<qmap.Model %r arch=%s kind=%s dtype=%s size=%s%s>" % (
            self._path, i["arch"], i["kind"], i["dtype"] or "?", _human_bytes(i["file_size"]),
            " closed" if self.closed else "")

    def _require_open(self) -> None:
        if self._handle is None:
            raise StateError("%s: the model is closed" % self._path, code=QMAP_ERR_STATE, status="QMAP_ERR_STATE")

    def _require_kind(self, kind: str, call: str) -> None:
        self._require_open()
        if self._info["kind"] != kind:
            raise _invalid("%s: %s needs a %s container; this one is %s (arch %s)"
                           % (self._path, call, kind, self._info["kind"], self._info["arch"]))

    # ---- tokenizer --------------------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True) -> List[int]:
        """The ids of `text` under the container's tokenizer (a seq2seq model's source vocabulary); with
        add_special, BOS/EOS as the tokenizer adds them. NotFoundError if the container has none."""
        with self._lock:
            self._require_open()
            return self._tokenize(text, add_special).tolist()

    def _tokenize(self, text: str, add_special: bool) -> np.ndarray:
        if not isinstance(text, str):
            raise _invalid("text=%r: expected a str" % (text,))
        data = text.encode("utf-8", "surrogatepass")   # a lone surrogate reaches the library as bad UTF-8
        n = ctypes.c_size_t(0)
        cap = len(data) + 8
        for _ in range(2):
            ids = np.zeros(cap, dtype=np.int32)
            err = _lib.qmap_error()
            st = C.qmap_tokenize(self._handle, data, len(data), bool(add_special), _i32p(ids), cap, ctypes.byref(n),
                                 ctypes.byref(err))
            if st == QMAP_ERR_INVALID_ARGUMENT and n.value > cap:
                cap = n.value
                continue
            _raise_if(st, err)
            return ids[:n.value]
        raise AssertionError("qmap_tokenize asked for a larger buffer twice")

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of `ids` (a seq2seq model's target vocabulary), as a stream of them would print it: the
        text's first token loses the space a SentencePiece tokenizer put before it; special tokens (BOS "<s>")
        print as the library prints them."""
        with self._lock:
            self._require_open()
            arr = _as_ids(ids, self._vocab_for_text(), "ids")
            d = _Detokenizer(self._handle)
            return "".join(d.piece(int(t)) for t in arr) + d.flush()

    def _vocab_for_text(self) -> int:
        return self._info["vocab_size"]

    # ---- language models: sessions, generation, logits --------------------------------------------------

    def _session(self, key: str, logits_all: bool) -> ctypes.c_void_p:
        """The session `key` ("gen" or "all"), made on first use with the model's parameters."""
        if key not in self._objects:
            sp = _lib.qmap_session_params()
            C.qmap_session_params_default(ctypes.byref(sp))
            sp.n_ctx, sp.n_batch, sp.threads = self._n_ctx, self._n_batch, self._threads
            sp.kv_type, sp.act, sp.logits_all = self._kv, self._act, logits_all
            s = ctypes.c_void_p()
            err = _lib.qmap_error()
            _raise_if(C.qmap_session_new(self._handle, ctypes.byref(sp), ctypes.byref(s), ctypes.byref(err)), err)
            self._objects[key] = s
        return self._objects[key]

    def _eval(self, session: ctypes.c_void_p, ids: np.ndarray) -> None:
        err = _lib.qmap_error()
        _raise_if(C.qmap_eval(session, _i32p(ids), len(ids), ctypes.byref(err)), err)

    def _prompt_ids(self, prompt: Union[str, Sequence[int]]) -> np.ndarray:
        ids = self._tokenize(prompt, True) if isinstance(prompt, str) else \
            _as_ids(prompt, self._info["vocab_size"], "prompt")
        if len(ids) == 0:
            raise _invalid("%s: the prompt has no tokens" % self._path)
        if len(ids) > self._n_ctx:
            raise _invalid("%s: the prompt is %d tokens, more than the context of %d (n_ctx)"
                           % (self._path, len(ids), self._n_ctx))
        return ids

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """The model's output at every position of `ids` (evaluated from position 0): a new float32 array of
        shape (len(ids), vocab_size). len(ids) may be up to n_ctx."""
        with self._lock:
            self._require_kind("lm", "logits")
            arr = _as_ids(ids, self._info["vocab_size"], "ids")
            if not 1 <= len(arr) <= self._n_ctx:
                raise _invalid("%s: logits of %d ids; give 1 .. n_ctx (%d)" % (self._path, len(arr), self._n_ctx))
            s = self._session("all", True)
            C.qmap_session_reset(s)
            vocab = self._info["vocab_size"]
            out = np.empty((len(arr), vocab), dtype=np.float32)
            step = self._n_batch or 512
            for start in range(0, len(arr), step):
                chunk = arr[start:start + step]
                self._eval(s, chunk)
                for i in range(len(chunk)):
                    out[start + i] = np.ctypeslib.as_array(C.qmap_logits(s, i), shape=(vocab,))
            return out

    def perplexity(self, text: str, ctx: int = 256, chunks: Optional[int] = None) -> float:
        """Perplexity of `text` by llama.cpp's method: the text is tokenized once (with BOS when the
        tokenizer adds one) and cut into non-overlapping windows of `ctx` tokens (at most `chunks` of them;
        the text must fill two); each window is evaluated from an empty cache with BOS in its first slot
        (when the tokenizer adds one), and only its second half is scored: exp of the mean negative
        log-likelihood of each token from position ctx/2 + 1 on. Computed here from logits()."""
        with self._lock:
            self._require_kind("lm", "perplexity")
            ctx = _count("ctx", ctx, 4, self._n_ctx)
            chunks = None if chunks is None else _count("chunks", chunks, 1, 1 << 30)
            ids = self._tokenize(text, True)
            bos = C.qmap_token_bos(self._handle)
            adds_bos = len(ids) > 0 and bos >= 0 and ids[0] == bos
            n_windows = len(ids) // ctx
            if n_windows < 2:
                raise _invalid("%s: perplexity: the text is %d tokens; windows of %d need at least %d"
                               % (self._path, len(ids), ctx, 2 * ctx))
            n_windows = n_windows if chunks is None else min(n_windows, chunks)
            nll = [self._window_nll(ids[k * ctx:(k + 1) * ctx].copy(), bos if adds_bos else -1)
                   for k in range(n_windows)]
            return float(np.exp(np.concatenate(nll).mean()))

    def _window_nll(self, window: np.ndarray, bos: int) -> np.ndarray:
        """-log P of window[j + 1] given window[..j], for j from len/2 to len - 2 (the scored half)."""
        if bos >= 0:
            window[0] = bos
        first = len(window) // 2
        x = self.logits(window)[first:-1].astype(np.float64)
        mx = x.max(axis=1, keepdims=True)
        lse = mx[:, 0] + np.log(np.exp(x - mx).sum(axis=1))
        return lse - x[np.arange(len(x)), window[first + 1:]]

    def generate(self, prompt: Union[str, Sequence[int]], max_tokens: int = 64, temperature: float = 0.8,
                 top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0,
                 repeat_last_n: int = 64, seed: Optional[int] = None,
                 stop: Union[None, str, Sequence[str]] = None, stream: bool = False) -> Union[str, Iterator[str]]:
        """Continue `prompt` (text, tokenized with BOS as the tokenizer adds it, or a list of ids) and return
        the continuation only, as `qmap run` prints it: up to max_tokens tokens, ending early at the
        end-of-sequence token, at n_ctx, or before the first of the `stop` strings (not included).

        Sampling is llama.cpp's (penalty, top-k, top-p, min-p, temperature; temperature 0 is greedy); the
        same seed gives the same text, and seed=None draws a fresh one. With stream=True, returns an
        iterator of the text piece by piece (never splitting a UTF-8 character), joining to the same text;
        until it is exhausted or closed, other generate calls on this model raise StateError."""
        with self._lock:
            self._require_kind("lm", "generate")
            if not self._info["has_tokenizer"]:
                raise NotFoundError("%s: the container has no tokenizer, and generate returns text; logits() "
                                    "runs token ids without one" % self._path, code=QMAP_ERR_NOT_FOUND,
                                    status="QMAP_ERR_NOT_FOUND")
            ids = self._prompt_ids(prompt)
            params = self._sampler_params(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed)
            max_tokens = _count("max_tokens", max_tokens, 0, 1 << 24)
            stops = _stop_list(stop)
        pieces = self._pieces(ids, params, max_tokens, stops)
        return pieces if stream else "".join(pieces)

    def _sampler_params(self, temperature: float, top_k: int, top_p: float, min_p: float, repeat_penalty: float,
                        repeat_last_n: int, seed: Optional[int]) -> _lib.qmap_sampler_params:
        p = _lib.qmap_sampler_params()
        p.temp = _real("temperature", temperature, 0.0, 100.0)
        p.top_k = _count("top_k", top_k, 0, 1 << 24)
        p.top_p = _real("top_p", top_p, 0.0, 1.0)
        p.min_p = _real("min_p", min_p, 0.0, 1.0)
        p.repeat_penalty = _real("repeat_penalty", repeat_penalty, 0.01, 100.0)
        p.repeat_last_n = _count("repeat_last_n", repeat_last_n, 0, 1 << 20)
        p.seed = secrets.randbits(64) if seed is None else _count("seed", seed, 0, (1 << 64) - 1)
        return p

    def _pieces(self, ids: np.ndarray, params: _lib.qmap_sampler_params, max_tokens: int,
                stops: List[str]) -> Iterator[str]:
        """The generation loop of cli/cmd_run.c, yielding text as it completes; holds the generation session
        from its first step to its end."""
        with self._lock:
            self._require_open()
            if self._streaming:
                raise StateError("%s: a streamed generate() is still running; exhaust or close it first"
                                 % self._path, code=QMAP_ERR_STATE, status="QMAP_ERR_STATE")
            self._streaming = True
        sampler = ctypes.c_void_p()
        try:
            with self._lock:
                err = _lib.qmap_error()
                _raise_if(C.qmap_sampler_new(ctypes.byref(params), self._info["vocab_size"], ctypes.byref(sampler),
                                             ctypes.byref(err)), err)
                logits, detok = self._start(ids, sampler)
            filt = _StopFilter(stops)
            for text in self._steps(len(ids), sampler, logits, detok, max_tokens):
                out = filt.feed(text)
                if out:
                    yield out
                if filt.stopped:
                    return
            tail = filt.feed(detok.flush()) + filt.finish()
            if tail:
                yield tail
        finally:
            C.qmap_sampler_free(sampler)
            self._streaming = False

    def _start(self, ids: np.ndarray, sampler: ctypes.c_void_p) -> Tuple[Any, _Detokenizer]:
        """Evaluate the prompt in a fresh session, record it in the sampler's penalty history, and make the
        detokenizer state for what follows. The prompt's tokens (BOS excepted) go through the detokenizer
        first, their text dropped, so the first generated token keeps its leading space (as qmap run)."""
        s = self._session("gen", False)
        C.qmap_session_reset(s)
        self._eval(s, ids)
        for t in ids:
            C.qmap_sampler_accept(sampler, int(t))
        detok = _Detokenizer(self._handle)
        bos = C.qmap_token_bos(self._handle)
        if self._info["has_tokenizer"]:
            for t in ids:
                if t != bos:
                    detok.piece(int(t))
        return C.qmap_logits(s, len(ids) - 1), detok

    def _steps(self, n_prompt: int, sampler: ctypes.c_void_p, logits: Any, detok: _Detokenizer,
               max_tokens: int) -> Iterator[str]:
        """Sample, print, evaluate, one token at a time, stopping as qmap run does: after max_tokens, at the
        end-of-sequence token (not printed), or when the context is full. The last token is not evaluated:
        nothing would read its logits."""
        eos = C.qmap_token_eos(self._handle)
        gen_cap = self._n_ctx + 1 - n_prompt
        for n_gen in range(1, max_tokens + 1):
            with self._lock:
                self._require_open()
                s = self._objects["gen"]
                token = C.qmap_sample(sampler, logits)
                if token == eos:
                    return
                text = detok.piece(token)
                if n_gen == max_tokens or n_gen >= gen_cap or C.qmap_session_pos(s) >= self._n_ctx:
                    yield text
                    return
                self._eval(s, np.array([token], dtype=np.int32))
                logits = C.qmap_logits(s, 0)
            yield text

    # ---- classifiers -------------------------------------------------------------------------------------

    def classify(self, x: Any) -> np.ndarray:
        """The classifier's output for each row of `x`: shape (n, input_dim) (or (n, ...) whose trailing
        dimensions flatten to input_dim, such as (n, 28, 28) images) -> float32 (n, classes). Float rows
        are the model's features; integer rows (uint8 pixels) are mapped as the model was trained,
        value * input_scale + input_offset (as `qmap run --input`). A wrong shape or dtype raises
        InvalidArgumentError."""
        with self._lock:
            self._require_kind("classifier", "classify")
            feats = self._features(x)
            out = np.empty((feats.shape[0], self._info["vocab_size"]), dtype=np.float32)
            if feats.shape[0] == 0:
                return out
            c = self._classifier()
            err = _lib.qmap_error()
            _raise_if(C.qmap_classify(c, _f32p(feats), feats.shape[0], _f32p(out), ctypes.byref(err)), err)
            return out

    def _features(self, x: Any) -> np.ndarray:
        """x as contiguous float32 rows of input_dim features (see classify)."""
        d = self._info["input_dim"]
        try:
            a = np.asarray(x)
        except (TypeError, ValueError) as e:
            raise _invalid("x: not an array (%s)" % e) from None
        if a.ndim < 2 or int(np.prod(a.shape[1:])) != d:
            raise _invalid("x: shape %s; the model takes rows of %d features: (n, %d)" % (a.shape, d, d))
        rows = a.reshape(a.shape[0], d)
        if a.dtype.kind == "f":
            return np.ascontiguousarray(rows, dtype=np.float32)
        if a.dtype.kind in "iu":
            scale, offset = self._info["input_scale"], self._info["input_offset"]
            return np.ascontiguousarray(rows.astype(np.float32) * np.float32(scale) + np.float32(offset))
        raise _invalid("x: dtype %s; give float rows (features) or integer ones (pixels)" % a.dtype)

    def _classifier(self) -> ctypes.c_void_p:
        if "classifier" not in self._objects:
            c = ctypes.c_void_p()
            err = _lib.qmap_error()
            _raise_if(C.qmap_classifier_new(self._handle, 0, self._threads, self._act, ctypes.byref(c),
                                            ctypes.byref(err)), err)
            self._objects["classifier"] = c
        return self._objects["classifier"]

    # ---- encoder-decoders ----------------------------------------------------------------------------

    def translate(self, sentences: Sequence[str], beam: int = 1, n_best: int = 1, length_penalty: float = 1.0,
                  max_len: int = 0) -> Union[List[str], List[List[str]]]:
        """Translate each sentence with a seq2seq container (greedy for beam=1, else beam search ranking by
        log P / length^length_penalty), as `qmap run` prints them: a list of strings, or with n_best > 1
        a list of the n_best best (best first) per sentence. max_len caps target tokens (0: the model's)."""
        if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
            raise _invalid("sentences: expected a list of str")
        with self._lock:
            self._require_kind("seq2seq", "translate")
            beam = _count("beam", beam, 1, 256)
            n_best = _count("n_best", n_best, 1, beam)
            t = self._translator(beam, n_best, _real("length_penalty", length_penalty, 0.0, 100.0),
                                 _count("max_len", max_len, 0, 1 << 16))
            srcs = [self._source_ids(i, s) for i, s in enumerate(sentences)]
            texts: List[List[str]] = []
            for start in range(0, len(srcs), 64):
                texts += self._translate_batch(t, srcs[start:start + 64], n_best)
            return [x[0] for x in texts] if n_best == 1 else texts

    def _source_ids(self, i: int, sentence: str) -> np.ndarray:
        ids = self._tokenize(sentence, True)
        if not 1 <= len(ids) <= self._info["context_length"]:
            raise _invalid("sentence %d: %d source tokens; the model takes 1 .. %d"
                           % (i, len(ids), self._info["context_length"]))
        return ids

    def _translator(self, beam: int, n_best: int, length_penalty: float, max_len: int) -> ctypes.c_void_p:
        """The translator for these settings; one with other settings is freed and remade."""
        key = (beam, n_best, length_penalty, max_len)
        old = self._objects.get("translator")
        if old is not None and old[1] == key:
            return old[0]
        if old is not None:
            C.qmap_translator_free(old[0])
            del self._objects["translator"]
        tp = _lib.qmap_translate_params()
        C.qmap_translate_params_default(ctypes.byref(tp))
        tp.beam_size, tp.n_best, tp.length_penalty, tp.max_len = beam, n_best, length_penalty, max_len
        tp.max_batch, tp.threads, tp.kv_type, tp.act = 64, self._threads, self._kv, self._act
        t = ctypes.c_void_p()
        err = _lib.qmap_error()
        _raise_if(C.qmap_translator_new(self._handle, ctypes.byref(tp), ctypes.byref(t), ctypes.byref(err)), err)
        self._objects["translator"] = (t, key)
        return t

    def _translate_batch(self, t: ctypes.c_void_p, srcs: List[np.ndarray], n_best: int) -> List[List[str]]:
        src = np.ascontiguousarray(np.concatenate(srcs), dtype=np.int32)
        lens = np.array([len(s) for s in srcs], dtype=np.uint32)
        hyps = (_lib.qmap_hypothesis * (len(srcs) * n_best))()
        err = _lib.qmap_error()
        _raise_if(C.qmap_translate(t, _i32p(src), lens.ctypes.data_as(ctypes.POINTER(ctypes.c_uint32)), len(srcs),
                                   hyps, ctypes.byref(err)), err)
        return [[self._hypothesis_text(hyps[i * n_best + j]) for j in range(n_best)] for i in range(len(srcs))]

    def _hypothesis_text(self, h: _lib.qmap_hypothesis) -> str:
        """A hypothesis's text as qmap run prints it: a word-level vocabulary joins with spaces, so the one in
        front is dropped."""
        d = _Detokenizer(self._handle)
        text = "".join(d.piece(h.ids[k]) for k in range(h.n_ids)) + d.flush()
        return text[1:] if text.startswith(" ") else text
