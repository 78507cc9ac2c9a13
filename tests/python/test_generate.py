"""Model.generate / tokenize / detokenize against `qmap run` and `qmap tokenize` on the shipped KJV Llama.

generate(..., temperature=0) and generate(..., seed=S) equal `qmap run --temp 0` / `--seed S` with the same
sampling flags, context (-c) and threads; stream=True yields pieces that join to the same text; stop
strings cut it where the first one begins; a context too small for max_tokens stops where qmap run stops.
"""
import json
import random

import pytest

import qmap
from conftest import run_qmap

PROMPT = "In the beginning"


def qmap_run(path, *args):
    """`qmap run --json` on PROMPT-style flags: its object (text, ids, stop)."""
    return json.loads(run_qmap("run", path, "--json", "-t", "2", *args))


@pytest.mark.parametrize("dtype", ["f32", "q8"])
def test_greedy_equals_qmap_run(kjv, dtype):
    want = qmap_run(kjv[dtype], "-p", PROMPT, "-n", "48", "--temp", "0", "-c", "512")
    with qmap.Model(kjv[dtype], threads=2, n_ctx=512) as m:
        got = m.generate(PROMPT, max_tokens=48, temperature=0)
    assert want["stop"] == "n_predict" and len(want["ids"]) == 48
    assert got == want["text"]


@pytest.mark.parametrize("seed", [42, 7])
def test_seeded_equals_qmap_run_and_stream_joins(kjv, seed):
    flags = ["--top-k", "30", "--top-p", "0.9", "--min-p", "0.02", "--temp", "0.9", "--repeat-penalty", "1.1",
             "--repeat-last-n", "16", "--seed", str(seed)]
    want = qmap_run(kjv["q8"], "-p", PROMPT, "-n", "64", *flags, "-c", "256")
    kw = dict(max_tokens=64, temperature=0.9, top_k=30, top_p=0.9, min_p=0.02, repeat_penalty=1.1,
              repeat_last_n=16, seed=seed)
    with qmap.Model(kjv["q8"], threads=2, n_ctx=256) as m:
        got = m.generate(PROMPT, **kw)
        pieces = list(m.generate(PROMPT, stream=True, **kw))
        again = m.generate(PROMPT, **kw)
    assert got == want["text"]
    assert "".join(pieces) == got and len(pieces) > 1
    assert again == got, "the same seed gives the same text on a reused session"
    assert all(p and "\ufffd" not in p for p in pieces)


def test_default_sampling_equals_qmap_run_defaults(kjv):
    """generate's defaults are qmap run's (llama.cpp's): only the seed is given."""
    want = qmap_run(kjv["q8"], "-p", PROMPT, "-n", "32", "--seed", "3", "-c", "512")
    with qmap.Model(kjv["q8"], threads=2, n_ctx=512) as m:
        assert m.generate(PROMPT, max_tokens=32, seed=3) == want["text"]


def test_prompt_as_ids_and_context_limit(kjv):
    """A prompt of ids is the text's; n_ctx 12 stops generation where qmap run -c 12 stops."""
    want = qmap_run(kjv["f32"], "-p", PROMPT, "-n", "64", "--temp", "0", "-c", "12")
    assert want["stop"] == "context"
    with qmap.Model(kjv["f32"], threads=2, n_ctx=12) as m:
        ids = m.tokenize(PROMPT)
        assert ids == want["prompt_ids"]
        assert m.generate(ids, max_tokens=64, temperature=0) == want["text"]
        assert "".join(m.generate(PROMPT, max_tokens=64, temperature=0, stream=True)) == want["text"]
        with pytest.raises(qmap.InvalidArgumentError, match="more than the context"):
            m.generate(PROMPT * 5, max_tokens=4)


def test_stop_strings(kjv):
    with qmap.Model(kjv["f32"], threads=2, n_ctx=512) as m:
        full = m.generate(PROMPT, max_tokens=48, temperature=0)
        stop = "LORD"
        assert stop in full
        want = full[:full.index(stop)]
        assert m.generate(PROMPT, max_tokens=48, temperature=0, stop=[stop, "never in this text"]) == want
        assert "".join(m.generate(PROMPT, max_tokens=48, temperature=0, stop=stop, stream=True)) == want
        assert m.generate(PROMPT, max_tokens=48, temperature=0, stop="never in this text") == full


def test_stream_holds_the_session(kjv):
    """While a stream runs, another generate on the model is refused (StateError), not interleaved;
    closing the stream frees it."""
    with qmap.Model(kjv["q8"], threads=2, n_ctx=128) as m:
        it = m.generate(PROMPT, max_tokens=8, temperature=0, stream=True)
        first = next(it)
        with pytest.raises(qmap.StateError):
            m.generate(PROMPT, max_tokens=2)
        assert m.tokenize("beginning")          # the tokenizer needs no session
        it.close()
        assert m.generate(PROMPT, max_tokens=8, temperature=0).startswith(first)


def test_tokenize_equals_qmap_tokenize(kjv):
    text = "And God said, Let there be light: and there was light. Ünïcødé ✓"
    want = json.loads(run_qmap("tokenize", kjv["q8"], "-p", text, "--json"))
    with qmap.Model(kjv["q8"]) as m:
        ids = m.tokenize(text)
        assert ids == want
        plain = m.tokenize(text, add_special=False)
        assert plain == ids[1:] and ids[0] == m.info["bos_id"]
        assert m.detokenize(plain) == text          # byte fallback pieces join into whole characters


@pytest.mark.parametrize("text,stops", [
    ("In the beginning God created", ["God"]),
    ("aaab and more", ["aab"]),
    ("abcabd", ["abd", "cab"]),
    ("no stop string here", ["zz", "here!"]),
    ("x" * 30 + "END", ["END", "xxE"]),
    ("xabcd", ["abcd", "bc"]),
    ("xabcd", ["abce", "bc"]),
])
def test_stop_filter_any_split(text, stops):
    """However the text is cut into pieces, the streamed output is the whole text cut before the earliest
    stop string (the non-streamed definition)."""
    from qmap.model import _StopFilter
    hits = [text.find(s) for s in stops if s in text]
    want = text[:min(hits)] if hits else text
    rng = random.Random(len(text))
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(0, min(8, len(text) - 1))))
        pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
        f, out = _StopFilter(stops), ""
        for p in pieces:
            out += f.feed(p)
            if f.stopped:
                break
        if not f.stopped:
            out += f.finish()
        assert out == want, pieces
