"""Model.classify against `qmap run --input ... -o OUT.npy` on the shipped classifiers (Fashion-MNIST's real
test images as uint8 pixels, the digits' held-out float rows), and Model.translate against `qmap run` on the
shipped G2P encoder-decoder (greedy per word, a file of lines, beam search with n-best)."""
import gzip
import json
import os

import numpy as np
import pytest

import qmap
from conftest import DATA, FASHION_IMAGES, run_qmap

WORDS = ["hello", "qmap", "transformer", "phoneme", "tomato"]


def cli_outputs(model, x, workdir, tag):
    xp, out = os.path.join(workdir, tag + "-x.npy"), os.path.join(workdir, tag + "-out.npy")
    np.save(xp, x)
    run_qmap("run", model, "--input", xp, "-o", out, "-q", "-t", "2")
    return np.load(out)


def test_classify_fashion_pixels_equal_qmap_run(fashion, workdir):
    raw = gzip.open(FASHION_IMAGES).read()
    images = np.frombuffer(raw, dtype=np.uint8, offset=16)[:600 * 784].reshape(600, 28, 28)
    want = cli_outputs(fashion, images, workdir, "fashion")
    with qmap.Model(fashion, threads=2) as m:
        got = m.classify(images)
        assert m.info["kind"] == "classifier" and m.info["class_names"][9] == "Ankle boot"
        flat = m.classify(images.reshape(600, 784))
    assert got.dtype == np.float32 and got.shape == (600, 10)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(flat, got)


def test_classify_digits_features_equal_qmap_run(digits, workdir):
    x = np.load(os.path.join(DATA, "digits_mlp", "test.npz"))["x"]
    want = cli_outputs(digits, x, workdir, "digits")
    with qmap.Model(digits, threads=2) as m:
        got = m.classify(x)
        got64 = m.classify(x.astype(np.float64))
        empty = m.classify(np.zeros((0, x.shape[1]), dtype=np.float32))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got64, want)
    assert empty.shape == (0, 10)


def test_classify_bad_inputs(digits):
    with qmap.Model(digits) as m:
        d = m.info["input_dim"]
        bad = [np.zeros(d, np.float32), np.zeros((2, d + 1), np.float32), np.zeros((2, d), bool),
               np.array([["a"] * d]), np.zeros((2, d), np.complex64), [[object()] * d], "x", None]
        for x in bad:
            with pytest.raises(qmap.InvalidArgumentError):
                m.classify(x)
        with pytest.raises(qmap.InvalidArgumentError, match="needs a lm container"):
            m.generate("hello")


def cli_translate(g2p, *args):
    return json.loads(run_qmap("run", g2p, "--json", "-q", "-t", "2", *args))["translations"]


def test_translate_greedy_equals_qmap_run(g2p, workdir):
    words = os.path.join(workdir, "words.txt")
    with open(words, "w") as f:
        f.write("\n".join(WORDS) + "\n")
    want = [t[0]["text"] for t in cli_translate(g2p, "-f", words)]
    one = run_qmap("run", g2p, "-p", "hello", "-q").rstrip("\n")
    with qmap.Model(g2p, threads=2) as m:
        got = m.translate(WORDS)
        assert m.translate(["hello"]) == [one]
    assert got == want and all(got)


def test_translate_more_than_a_batch(g2p, workdir):
    """70 sentences: two calls of the library's batch of 64, the same texts as qmap run -f."""
    words = [w + s for s in ("", "s", "ed", "ing", "er", "ly", "ness", "ful", "less", "able", "ist", "ism", "al", "y")
             for w in WORDS]
    path = os.path.join(workdir, "words70.txt")
    with open(path, "w") as f:
        f.write("\n".join(words) + "\n")
    want = [t[0]["text"] for t in cli_translate(g2p, "-f", path)]
    with qmap.Model(g2p, threads=2) as m:
        got = m.translate(words)
    assert len(words) == 70 and got == want


def test_translate_beam_n_best_equals_qmap_run(g2p):
    want = [[h["text"] for h in t] for t in cli_translate(g2p, "-p", "tomato", "--beam", "4", "--n-best", "3")]
    with qmap.Model(g2p, threads=2) as m:
        got = m.translate(["tomato"], beam=4, n_best=3)
        greedy = m.translate(["tomato"])      # the translator is remade for other settings
        with pytest.raises(qmap.InvalidArgumentError):
            m.translate("tomato")
        with pytest.raises(qmap.InvalidArgumentError):
            m.translate(["tomato"], beam=2, n_best=3)
    assert got == want and len(got[0]) == 3
    assert greedy == [t[0]["text"] for t in cli_translate(g2p, "-p", "tomato")]
