"""Model.logits against an independent torch forward (tests/models: HF parameter names and math) for a
random-init gpt2 and llama, saved as real checkpoints and converted by `qmap convert`: F32 weights with an
F32 KV cache within 1e-4 of max |logit| at every position (tests/run/test_lm.py's bound), in one batch and in
batches of 7.
"""
import os
import threading

import numpy as np
import pytest
import torch

import qmap
from conftest import run_qmap
from models import gpt2, llama
from savers import save_safetensors, save_torch

T = 48
CASES = {
    "gpt2": (gpt2, dict(n_positions=64, n_ctx=64), save_torch),
    "llama": (llama, dict(variant="llama", max_position_embeddings=64), save_safetensors),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def lm(request, workdir):
    name = request.param
    mod, kw, saver = CASES[name]
    model, cfg = mod.build(seed=3, **kw)
    d = os.path.join(workdir, "lm-" + name)
    os.makedirs(d, exist_ok=True)
    srcs, _ = saver(model, cfg, d)
    path = os.path.join(d, "f32.qmap")
    run_qmap("convert", *srcs, "-o", path, "--no-tokenizer", "--quiet")
    ids = torch.randint(0, cfg["vocab_size"], (T,), generator=torch.Generator().manual_seed(9)).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([ids]))[0].double().numpy()
    return name, path, ids, ref


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_logits_equal_torch(lm):
    name, path, ids, ref = lm
    with qmap.Model(path, threads=2, kv="f32") as m:
        got = m.logits(ids)
        assert got.dtype == np.float32 and got.shape == (T, m.info["vocab_size"])
        assert m.info["arch"] == name and m.info["dtype"] == "f32"
    assert rel(got, ref) <= 1e-4


def test_logits_in_batches_of_7_and_again(lm):
    """More ids than n_batch run chunk by chunk: the same logits (1e-5); a second call starts afresh."""
    _, path, ids, ref = lm
    with qmap.Model(path, threads=2, kv="f32", n_batch=7) as m:
        got = m.logits(ids)
        assert rel(got, ref) <= 1e-4
        again = m.logits(ids[:10])
    assert rel(again, got[:10]) <= 1e-5


def test_one_model_from_several_threads(lm):
    """Calls from several threads on one Model run one at a time (its lock): each gets the logits a lone
    call gets."""
    _, path, ids, _ = lm
    with qmap.Model(path, threads=1, kv="f32") as m:
        want = [m.logits(ids[:n]) for n in (5, 17, 31, 48)]
        got = [None] * 8

        def work(i):
            got[i] = m.logits(ids[:(5, 17, 31, 48)[i % 4]])
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, want[i % 4])


def test_logits_bad_ids(lm):
    _, path, ids, _ = lm
    with qmap.Model(path, threads=1) as m:
        v = m.info["vocab_size"]
        for bad in ([0, v], [-1], [], [0.5, 1.0], "In the", [[1, 2]]):
            with pytest.raises(qmap.InvalidArgumentError):
                m.logits(bad)
        with pytest.raises(qmap.InvalidArgumentError, match="1 .. n_ctx"):
            m.logits([1] * (m.n_ctx + 1))
        with pytest.raises(qmap.NotFoundError):   # no tokenizer in this container
            m.tokenize("hello")
        with pytest.raises(qmap.NotFoundError, match="no tokenizer"):
            m.generate(ids[:4], max_tokens=2, stream=True)
