"""qmap's errors: every code of include/qmap_errors.h maps to its own kind of qmap.Error, named as the
library names it; each way a user can go wrong raises that kind (never a bare Exception, never a crash)."""
import json
import os
import re

import numpy as np
import pytest

import qmap
from conftest import ROOT
from qmap import errors


def header_codes():
    text = open(os.path.join(ROOT, "include", "qmap_errors.h")).read()
    return {int(v): "QMAP_" + n for n, v in re.findall(r"X\(P##(\w+),\s*(\d+),", text)}


def test_every_status_has_its_class():
    codes = header_codes()
    assert len(codes) > 40 and codes[0] == "QMAP_OK"
    for code, name in codes.items():
        if code == 0:
            continue
        e = errors.error_for(code, "m")
        assert type(e) is not qmap.Error and isinstance(e, qmap.Error), name
        assert e.status == name and e.code == code and str(e) == "m [%s]" % name
    assert set(errors.CLASS_OF_CODE) == set(codes) - {0}
    assert type(errors.error_for(999, "newer library")) is qmap.Error


def test_missing_file_and_not_a_container(tmp_path):
    with pytest.raises(qmap.FileIOError) as e:
        qmap.Model(str(tmp_path / "absent.qmap"))
    assert "absent.qmap" in str(e.value) and isinstance(e.value, OSError)
    assert str(e.value).count("ERR_") == 1          # the library's message already names its status
    junk = tmp_path / "config.qmap"
    junk.write_bytes(open(os.path.join(ROOT, "tests", "data", "g2p", "config.json"), "rb").read())
    with pytest.raises(qmap.FormatError) as e:
        qmap.Model(str(junk))
    assert e.value.status == "QMAP_ERR_BAD_MAGIC" and "config.qmap" in e.value.message
    with pytest.raises(qmap.FileIOError):
        qmap.Model(str(tmp_path))                        # a directory
    fifo = tmp_path / "fifo.qmap"
    os.mkfifo(fifo)
    with pytest.raises(qmap.FileIOError, match="not a regular file"):
        qmap.Model(str(fifo))                            # refused, never waited on
    for bad in (None, 3, b"x.qmap", "", "a\0b"):
        with pytest.raises(qmap.InvalidArgumentError):
            qmap.Model(bad)


def test_bad_model_arguments(kjv):
    for kw in (dict(kv="f8"), dict(act="fast"), dict(threads=-1), dict(n_ctx=0), dict(threads=True)):
        with pytest.raises(qmap.InvalidArgumentError):
            qmap.Model(kjv["q8"], **kw)
    with qmap.Model(kjv["q8"]) as m:
        for kw in (dict(max_tokens=-1), dict(temperature=-1), dict(top_p=2), dict(seed=-5), dict(stop=[1])):
            with pytest.raises(qmap.InvalidArgumentError):
                m.generate("In", **kw)
        with pytest.raises(qmap.InvalidArgumentError):
            m.classify(np.zeros((1, 4), np.float32))
        with pytest.raises(qmap.InvalidArgumentError):
            m.translate(["a"])
        with pytest.raises(qmap.InvalidArgumentError):
            m.detokenize([m.info["vocab_size"]])
        with pytest.raises(qmap.Utf8Error):
            m.tokenize("a\ud800b")                       # a lone surrogate is not UTF-8


def test_closed_model_raises(kjv, digits, g2p):
    calls = [lambda m: m.info, lambda m: m.tokenize("In"), lambda m: m.detokenize([1]),
             lambda m: m.generate("In", max_tokens=2), lambda m: m.logits([1, 2]),
             lambda m: m.classify(np.zeros((1, 64), np.float32)), lambda m: m.translate(["a"])]
    for path in (kjv["q8"], digits, g2p):
        m = qmap.Model(path)
        m.close()
        m.close()                                        # twice is fine
        assert m.closed and "closed" in repr(m)
        for call in calls:
            with pytest.raises(qmap.StateError):
                call(m)


def test_close_during_a_stream(kjv):
    m = qmap.Model(kjv["q8"], n_ctx=64)
    it = m.generate("In the beginning", max_tokens=16, temperature=0, stream=True)
    next(it)
    m.close()
    with pytest.raises(qmap.StateError):
        list(it)


def test_repr_and_info(kjv):
    with qmap.Model(kjv["q8"]) as m:
        r = repr(m)
        assert kjv["q8"] in r and "arch=llama" in r and "dtype=q8_row" in r and "MB" in r
        info = m.info
        cfg = json.load(open(os.path.join(ROOT, "tests", "data", "kjv_llama", "config.json")))
        assert info["file_size"] == os.path.getsize(kjv["q8"]) and info["vocab_size"] == cfg["vocab_size"]
        assert info["context_length"] == cfg["max_position_embeddings"]
        assert m.n_ctx == min(cfg["max_position_embeddings"], 4096)
