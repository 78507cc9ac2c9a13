"""Model.perplexity against the same windows computed in torch: the shipped KJV Llama's F32 container
(F32 KV cache) and its checkpoint run by tests/models' LlamaForCausalLM, on the held-out books'
(tests/tools/kjv_data.py) text tokenized by qmap with BOS, llama.cpp's windows (BOS in slot 0, second half
scored): equal to 4 significant digits (relative 5e-5)."""
import json
import os
import sys

import numpy as np
import pytest
import torch

import qmap
from conftest import DATA, ROOT, run_qmap
from models.llama import LlamaForCausalLM

sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import kjv_data  # noqa: E402

CTX, CHUNKS = 128, 6


@pytest.fixture(scope="module")
def heldout():
    """The first few thousand words of the held-out books (enough for CHUNKS windows and more)."""
    return kjv_data.heldout_text()[:40000]


def torch_ppl(ids, bos):
    d = os.path.join(DATA, "kjv_llama")
    model = LlamaForCausalLM(json.load(open(os.path.join(d, "config.json")))).eval()
    model.load_state_dict(torch.load(os.path.join(d, "pytorch_model.bin")))
    nll = []
    for k in range(CHUNKS):
        w = list(ids[k * CTX:(k + 1) * CTX])
        w[0] = bos
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([w]))[0].double(), dim=-1).numpy()
        nll += [-lp[j, w[j + 1]] for j in range(CTX // 2, CTX - 1)]
    return float(np.exp(np.mean(nll)))


def test_perplexity_equals_torch(kjv, heldout):
    with qmap.Model(kjv["f32"], threads=2, kv="f32") as m:
        ids = m.tokenize(heldout)
        bos = m.info["bos_id"]
        assert ids[0] == bos and len(ids) > (CHUNKS + 1) * CTX
        got = m.perplexity(heldout, ctx=CTX, chunks=CHUNKS)
        fewer = m.perplexity(heldout, ctx=CTX, chunks=2)
        with pytest.raises(qmap.InvalidArgumentError, match="need at least"):
            m.perplexity(heldout[:300], ctx=CTX)
        with pytest.raises(qmap.InvalidArgumentError):
            m.perplexity(heldout, ctx=m.n_ctx + 1)
    want = torch_ppl(ids, bos)
    assert abs(got / want - 1) < 5e-5, (got, want)
    assert fewer != got


@pytest.mark.parametrize("dtype", ["f32", "q8"])
def test_perplexity_equals_qmap_perplexity(kjv, heldout, workdir, dtype):
    """Model.perplexity is `qmap perplexity` (same windows, same KV type and act mode): equal to 1e-6 relative,
    where a window shifted by one token moves the figure by about 1e-2."""
    text = os.path.join(workdir, "heldout-ppl.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write(heldout)
    cli = json.loads(run_qmap("perplexity", kjv[dtype], "-f", text, "-c", str(CTX), "--chunks", str(CHUNKS),
                              "--kv", "f32", "-t", "2", "--json", "-q"))
    with qmap.Model(kjv[dtype], threads=2, kv="f32") as m:
        got = m.perplexity(heldout, ctx=CTX, chunks=CHUNKS)
    assert cli["chunks"] == CHUNKS and cli["bos_first"]
    assert abs(got / cli["ppl"] - 1) < 1e-6, (got, cli["ppl"])
