"""qmap.open(): a .qmap container's metadata and tensors, without a model (include/qmap.h, "containers").

    with qmap.open("model.qmap") as c:
        c.metadata["general.architecture"]      # Python values
        w = c.tensors["blk.0.attn_q.weight"]     # F32/F16/I32: a read-only numpy view of the mapping
        q = c.tensors["output.weight"]           # Q8_ROW: .q (int8), .scale (float32), .dequantize()
        c.verify()                               # every checksum, as `qmap verify`

Tensors are views of the file's read-only mapping, never copies: reading one costs the pages it touches,
which the page cache shares between processes. Every view keeps the mapping alive: close() (or leaving the
`with`) ends the Container's own use of it, so that later calls on the Container raise qmap.StateError, and
the mapping is released once no array viewing it remains. A Container is immutable: any number of threads
may read it and its arrays at once.
"""
import collections.abc
import ctypes
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from . import _lib
from .errors import QMAP_ERR_STATE, StateError, error_for
from .errors import invalid as _invalid
from .errors import raise_if as _raise_if

C = _lib.lib
DTYPE_NAMES = {1: "F32", 2: "F16", 3: "BF16", 4: "I32", 5: "Q8_ROW"}
NUMPY_DTYPES = {1: np.dtype("<f4"), 2: np.dtype("<f2"), 4: np.dtype("<i4")}
DTYPE_BF16, DTYPE_Q8_ROW = 3, 5
# metadata types (spec/FORMAT.md section 4) -> the union field holding a scalar, or the numpy dtype of an
# array's packed little-endian elements
META_SCALAR_FIELDS = {1: "u32", 2: "i32", 3: "u64", 4: "i64", 5: "f32", 6: "f64", 7: "b"}
META_ARRAY_DTYPES = {1: "<u4", 2: "<i4", 3: "<u8", 4: "<i8", 5: "<f4", 6: "<f8", 7: "u1"}
META_STRING, META_ARRAY = 8, 9


def _human_bytes(n: int) -> str:
    """n bytes as people read them (model.py's repr uses it too)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return "%.1f %s" % (n / size, unit)
    return "%d B" % n


class _Mapping:
    """The C container (qmap_container: the mapping). Closed when the last reference goes: the Container's,
    or that of any buffer an array views (_Mapping.view)."""

    def __init__(self, handle: ctypes.c_void_p) -> None:
        self.handle = handle

    def view(self, address: int, nbytes: int) -> memoryview:
        """A read-only buffer of nbytes at address (inside the mapping) that keeps this mapping open."""
        raw = (ctypes.c_char * nbytes).from_address(address)
        raw._mapping = self   # the ctypes array is the buffer's owner; it holds the mapping
        return memoryview(raw).cast("B").toreadonly()

    def __del__(self) -> None:
        try:
            C.qmap_container_close(self.handle)
        except Exception:   # interpreter shutdown: the library may already be gone
            pass


def _array(mapping: _Mapping, address: int, dtype: np.dtype, count: int, shape: Tuple[int, ...]) -> np.ndarray:
    buf = mapping.view(address, max(count * dtype.itemsize, 1))
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


class Q8RowTensor:
    """A Q8_ROW tensor (spec/FORMAT.md 6.1): int8 values with one float32 scale per row, the last dim being
    the row. Element [..., j] is q[..., j] * scale[...], computed in float32.

    q:        int8 view of shape `shape` (each row's padding to 64 bytes is skipped by the strides)
    scale:    float32 view of shape shape[:-1]
    row_sums: int32 view of shape shape[:-1], the sum of each row's q (for integer kernels)
    """

    dtype = "Q8_ROW"

    def __init__(self, name: str, shape: Tuple[int, ...], q: np.ndarray, scale: np.ndarray,
                 row_sums: np.ndarray) -> None:
        self.name = name
        self.shape = shape
        self.q = q
        self.scale = scale
        self.row_sums = row_sums

    def dequantize(self) -> np.ndarray:
        """A new float32 array of `shape`: q * scale per row, in float32 as the spec computes it."""
        return self.q.astype(np.float32) * self.scale[..., None]

    def __repr__(self) -> str:
        return "<qmap.Q8RowTensor %r shape=%s>" % (self.name, self.shape)


class BF16Tensor:
    """A BF16 tensor: numpy has no bfloat16, so `raw` is a uint16 view of its bits and to_float32() widens
    it (each value is the upper half of a float32)."""

    dtype = "BF16"

    def __init__(self, name: str, raw: np.ndarray) -> None:
        self.name = name
        self.shape = raw.shape
        self.raw = raw

    def to_float32(self) -> np.ndarray:
        """A new float32 array of `shape`, exact."""
        return (self.raw.astype(np.uint32) << 16).view(np.float32)

    dequantize = to_float32

    def __repr__(self) -> str:
        return "<qmap.BF16Tensor %r shape=%s>" % (self.name, self.shape)


TensorView = Union[np.ndarray, Q8RowTensor, BF16Tensor]


class Tensors(collections.abc.Mapping):
    """The container's tensors by name, in file order: F32, F16 and I32 tensors as read-only numpy views of
    the mapping (owndata False), Q8_ROW as Q8RowTensor, BF16 as BF16Tensor. A missing name is a KeyError;
    any access after the container is closed raises qmap.StateError."""

    def __init__(self, container: "Container") -> None:
        self._container = container

    def __getitem__(self, name: str) -> TensorView:
        info = self._container._find_tensor(name)
        if info is None:
            raise KeyError(name)
        return self._container._view(info)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._container._find_tensor(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._container._names())

    def __len__(self) -> int:
        return len(self._container._names())

    def __repr__(self) -> str:
        return "<qmap.Tensors of %r: %d tensors>" % (self._container.path, len(self))


class Container:
    """A .qmap file opened to look at (qmap.open): validated (spec/FORMAT.md section 7) and mapped
    read-only; no tensor byte is read until a tensor is used. A context manager; close() ends its use.

    Raises a subclass of qmap.Error: FileIOError for a missing file or one that is not a regular file,
    FormatError for one that is not a valid container.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"]) -> None:
        self._mapping: Optional[_Mapping] = None
        try:
            self.path = os.fspath(path)
        except TypeError:
            raise _invalid("path=%r: expected the name of a .qmap file" % (path,)) from None
        if not isinstance(self.path, str) or not self.path or "\0" in self.path:
            raise _invalid("path=%r: expected the name of a .qmap file" % (self.path,))
        handle = ctypes.c_void_p()
        err = _lib.qmap_error()
        _raise_if(C.qmap_container_open(os.fsencode(self.path), ctypes.byref(handle), ctypes.byref(err)), err)
        self._mapping = _Mapping(handle)
        raw = _lib.qmap_container_info()
        C.qmap_container_get_info(handle, ctypes.byref(raw))
        self._info = {"path": self.path, "version": "%d.%d" % (raw.major_version, raw.minor_version),
                      "alignment": raw.alignment, "file_size": raw.file_size,
                      "metadata_count": raw.metadata_count, "tensor_count": raw.tensor_count}
        self._tensor_names: Optional[List[str]] = None
        self._metadata: Optional[Dict[str, Any]] = None
        self._tensors = Tensors(self)

    # ---- lifetime ---------------------------------------------------------------------------------------

    def close(self) -> None:
        """End this Container's use of the mapping (again: nothing). Arrays taken from it stay valid and keep
        the mapping until they go; every other call on the Container raises qmap.StateError."""
        self._mapping = None

    @property
    def closed(self) -> bool:
        return self._mapping is None

    def __enter__(self) -> "Container":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _handle(self) -> ctypes.c_void_p:
        if self._mapping is None:
            raise StateError("%s: the container is closed" % self.path, code=QMAP_ERR_STATE, status="QMAP_ERR_STATE")
        return self._mapping.handle

    # ---- description --------------------------------------------------------------------------------------

    @property
    def info(self) -> Dict[str, Any]:
        """path, version ("1.0"), alignment, file_size, metadata_count, tensor_count."""
        self._handle()
        return dict(self._info)

    @property
    def metadata(self) -> Dict[str, Any]:
        """Every metadata entry, in file order, as Python values: int (U32/I32/U64/I64), float (F32/F64),
        bool, str, and lists of them for arrays. Decoded once; each access returns a new dict."""
        handle = self._handle()
        if self._metadata is None:
            self._metadata = {}
            for i in range(self._info["metadata_count"]):
                e = _lib.qmap_meta_entry()
                err = _lib.qmap_error()
                _raise_if(C.qmap_container_meta(handle, i, ctypes.byref(e), ctypes.byref(err)), err)
                self._metadata[e.key.decode("utf-8")] = self._meta_value(handle, e)
        return dict(self._metadata)

    def _meta_value(self, handle: ctypes.c_void_p, e: _lib.qmap_meta_entry) -> Any:
        if e.type in META_SCALAR_FIELDS:
            return getattr(e.v, META_SCALAR_FIELDS[e.type])
        if e.type == META_STRING:
            return ctypes.string_at(e.str, e.str_len).decode("utf-8") if e.str_len else ""
        if e.type == META_ARRAY and e.elem_type == META_STRING:
            return [self._meta_string(handle, e, i) for i in range(e.count)]
        if e.type == META_ARRAY and e.elem_type in META_ARRAY_DTYPES:
            raw = ctypes.string_at(e.elems, e.elems_size) if e.elems_size else b""
            values = np.frombuffer(raw, dtype=META_ARRAY_DTYPES[e.elem_type])
            return (values != 0).tolist() if e.elem_type == 7 else values.tolist()
        raise error_for(6, "%s: metadata key %r: type %d is not one this package reads" % (
            self.path, e.key.decode("utf-8"), e.type))

    def _meta_string(self, handle: ctypes.c_void_p, e: _lib.qmap_meta_entry, i: int) -> str:
        p = ctypes.c_void_p()
        n = ctypes.c_size_t(0)
        err = _lib.qmap_error()
        _raise_if(C.qmap_meta_array_string(handle, ctypes.byref(e), i, ctypes.byref(p), ctypes.byref(n),
                                           ctypes.byref(err)), err)
        return ctypes.string_at(p, n.value).decode("utf-8") if n.value else ""

    def __repr__(self) -> str:
        if self.closed:
            return "<qmap.Container %r closed>" % (self.path,)
        arch = self.metadata.get("general.architecture", "?")
        mix: Dict[str, int] = {}
        for name in self._names():
            d = DTYPE_NAMES.get(self._find_tensor(name).dtype, "?")
            mix[d] = mix.get(d, 0) + 1
        return "<qmap.Container %r arch=%s tensors=%d (%s) size=%s>" % (
            self.path, arch, len(self._names()), ", ".join("%d %s" % (n, d) for d, n in sorted(mix.items())),
            _human_bytes(self._info["file_size"]))

    # ---- tensors ------------------------------------------------------------------------------------------

    @property
    def tensors(self) -> Tensors:
        """The tensors by name (a Mapping; see Tensors)."""
        self._handle()
        return self._tensors

    def tensor_info(self, name: str) -> Dict[str, Any]:
        """name, dtype ("F32", "Q8_ROW", ...), shape, offset (in the file), size (bytes), checksum (XXH3-64)
        of one tensor. KeyError if there is none of that name."""
        t = self._find_tensor(name)
        if t is None:
            raise KeyError(name)
        return {"name": name, "dtype": DTYPE_NAMES.get(t.dtype, str(t.dtype)), "shape": tuple(t.dims[:t.rank]),
                "offset": t.offset, "size": t.size, "checksum": t.checksum}

    def _names(self) -> List[str]:
        handle = self._handle()
        if self._tensor_names is None:
            names = []
            for i in range(self._info["tensor_count"]):
                t = _lib.qmap_tensor_info()
                err = _lib.qmap_error()
                _raise_if(C.qmap_container_tensor(handle, i, ctypes.byref(t), ctypes.byref(err)), err)
                names.append(t.name.decode("utf-8"))
            self._tensor_names = names
        return self._tensor_names

    def _find_tensor(self, name: str) -> Optional[_lib.qmap_tensor_info]:
        handle = self._handle()
        if not isinstance(name, str) or "\0" in name:
            return None
        t = _lib.qmap_tensor_info()
        err = _lib.qmap_error()
        st = C.qmap_container_find_tensor(handle, name.encode("utf-8", "surrogatepass"), ctypes.byref(t),
                                          ctypes.byref(err))
        if st == 5:   # QMAP_ERR_NOT_FOUND
            return None
        _raise_if(st, err)
        return t

    def _view(self, t: _lib.qmap_tensor_info) -> TensorView:
        mapping = self._mapping
        assert mapping is not None   # _find_tensor checked
        name = t.name.decode("utf-8")
        shape = tuple(int(d) for d in t.dims[:t.rank])
        if t.dtype in NUMPY_DTYPES:
            return _array(mapping, t.data, NUMPY_DTYPES[t.dtype], int(t.n_elements), shape)
        if t.dtype == DTYPE_BF16:
            return BF16Tensor(name, _array(mapping, t.data, np.dtype("<u2"), int(t.n_elements), shape))
        if t.dtype == DTYPE_Q8_ROW:
            rows, cols, stride = int(t.rows), int(t.cols), int(t.row_stride)
            q = _array(mapping, t.data, np.dtype("i1"), rows * stride, (rows, stride))[:, :cols].reshape(shape)
            scale = _array(mapping, t.data + t.scales_offset, np.dtype("<f4"), rows, shape[:-1])
            sums = _array(mapping, t.data + t.sums_offset, np.dtype("<i4"), rows, shape[:-1])
            return Q8RowTensor(name, shape, q, scale, sums)
        raise error_for(29, "%s: tensor %r: dtype %d is not one this package reads" % (self.path, name, t.dtype))

    # ---- verification ---------------------------------------------------------------------------------------

    def verify(self, full: bool = False, threads: int = 0) -> None:
        """Hash every tensor and compare it with its stored checksum, as `qmap verify` (with full, also the
        padding and Q8_ROW rules, as `qmap verify --full`); threads 0: one per CPU. Returns None when every
        tensor passes; otherwise raises qmap.ChecksumError (or FormatError for a full check's rules) naming
        the first damaged tensor, whose `bad_tensors` maps every damaged tensor's name to its status."""
        handle = self._handle()
        if isinstance(threads, bool) or not isinstance(threads, int) or not 0 <= threads <= 1024:
            raise _invalid("threads=%r: expected an integer in [0, 1024]" % (threads,))
        n = self._info["tensor_count"]
        status = (ctypes.c_int * max(n, 1))()
        err = _lib.qmap_error()
        st = C.qmap_container_verify(handle, threads, bool(full), status, ctypes.byref(err))
        if st == 0:
            return
        e = error_for(st, err.message.decode("utf-8", "replace"))
        names = self._names()
        e.bad_tensors = {names[i]: C.qmap_status_name(status[i]).decode() for i in range(n) if status[i] != 0}
        raise e


def open(path: Union[str, "os.PathLike[str]"]) -> Container:   # noqa: A001 (qmap.open is the API's name)
    """Open a .qmap container to read its metadata and tensors (no model is built): see Container."""
    return Container(path)
