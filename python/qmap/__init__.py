"""qmap — run models stored in .qmap containers from Python, over libqmap (include/qmap.h) with ctypes.

    import qmap
    with qmap.Model("kjv-q8.qmap", threads=2) as m:
        print(m.generate("In the beginning", max_tokens=32, temperature=0))
        ids = m.tokenize("In the beginning")       # list[int]
        x = m.logits(ids)                          # numpy float32 (len(ids), vocab)

    with qmap.open("kjv-q8.qmap") as c:          # the container without a model
        c.metadata["general.architecture"]         # Python values
        c.tensors["output.weight"].dequantize()    # numpy views of the mapping (Q8_ROW: .q, .scale)
        c.verify()                                 # every checksum, as `qmap verify`
    qmap.convert("ckpt_dir", "model.qmap")         # the library's converter, as `qmap convert`
    qmap.quantize("model.qmap", "model-q8.qmap", q8=True)

Model covers language models (tokenize, detokenize, generate, logits), classifiers (classify) and
encoder-decoders (translate); qmap.open (a Container) reads any container's metadata and tensors. Errors
are qmap.Error subclasses, one per kind of qmap_status (qmap.errors).
The library is found through $QMAP_LIBRARY, else the checkout's build/libqmap.so, else the prefix this
package was installed into, else libqmap.so.0 on the loader's path.

Not covered yet: the per-tensor report of quantize (`qmap quantize --report`; quantize returns totals).
"""
from . import _lib
from .errors import (ChecksumError, Error, FileIOError, FormatError, InvalidArgumentError, NotFoundError,
                     OutOfMemoryError, SourceError, StateError, TypeMismatchError, UnsupportedError, Utf8Error,
                     WeightsError)
from .container import BF16Tensor, Container, Q8RowTensor, Tensors, open
from .convert import ConvertWarning, Progress, convert, quantize
from .model import Model


def library_version() -> str:
    """The version of the libqmap this package loaded ("0.3.0")."""
    return _lib.lib.qmap_version().decode()


def library_path() -> str:
    """The file of the libqmap this package loaded."""
    return _lib.lib._name


__version__ = library_version()

# qmap.open is left out of __all__: `from qmap import *` must not hide the builtin open.
__all__ = ["Model", "Container", "Tensors", "Q8RowTensor", "BF16Tensor", "convert", "quantize", "Progress",
           "ConvertWarning", "Error", "FileIOError", "OutOfMemoryError", "InvalidArgumentError", "StateError",
           "NotFoundError", "TypeMismatchError", "FormatError", "ChecksumError", "Utf8Error", "UnsupportedError",
           "SourceError", "WeightsError", "library_version", "library_path", "__version__"]
