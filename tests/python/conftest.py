"""Fixtures of the Python package's tests (tests/python): the qmap binary, a work directory, and the
containers the tests share, converted once per session by the qmap under test.

Run by `make python-test`, which sets QMAP_BIN, QMAP_LIBRARY and QMAP_TEST_WORKDIR to the build tree's and
PYTHONPATH=python; run by hand, they default to build/ of this checkout.
"""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "convert"))
FASHION_IMAGES = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"


def run_qmap(*args: str) -> str:
    """qmap's stdout; the test fails with its stderr when it exits non-zero."""
    r = subprocess.run([QMAP_BIN, *args], capture_output=True, text=True)
    assert r.returncode == 0, "qmap %s: %s" % (" ".join(args), r.stderr.strip())
    return r.stdout


QMAP_BIN = os.environ.get("QMAP_BIN", os.path.join(ROOT, "build", "qmap"))


@pytest.fixture(scope="session")
def workdir():
    d = os.environ.get("QMAP_TEST_WORKDIR", os.path.join(ROOT, "build", "tests", "python"))
    os.makedirs(d, exist_ok=True)
    return d


def _converted(workdir, name, *convert_args):
    out = os.path.join(workdir, name)
    tmp = out + ".part.qmap"
    run_qmap("convert", *convert_args, "-o", tmp, "--quiet")
    os.replace(tmp, out)
    return out


@pytest.fixture(scope="session")
def kjv(workdir):
    """The shipped King James Llama (tests/data/kjv_llama), converted with its tokenizer: F32 and Q8_ROW."""
    f32 = _converted(workdir, "kjv.qmap", os.path.join(DATA, "kjv_llama"))
    q8 = os.path.join(workdir, "kjv-q8.qmap")
    run_qmap("quantize", "--q8", f32, "-o", q8, "--quiet")
    return {"f32": f32, "q8": q8}


@pytest.fixture(scope="session")
def fashion(workdir):
    return _converted(workdir, "fashion.qmap", os.path.join(DATA, "fashion_mlp", "model.pt"))


@pytest.fixture(scope="session")
def digits(workdir):
    return _converted(workdir, "digits.qmap", os.path.join(DATA, "digits_mlp", "model.pt"))


@pytest.fixture(scope="session")
def g2p(workdir):
    g = os.path.join(DATA, "g2p")
    return _converted(workdir, "g2p.qmap", os.path.join(g, "model.pt"), "--src-tokenizer",
                      os.path.join(g, "src", "tokenizer.json"), "--tgt-tokenizer", os.path.join(g, "tgt", "tokenizer.json"))
