#!/usr/bin/python3
"""make_spm_seeds.py — seeds for fuzz_spm: small real tokenizer.model files, trained by python3-sentencepiece
on the King James Bible (Debian bible-kjv), a few KB each.

Accepted ones (BPE as Llama 2 and Mistral have it: identity normalizer, spaces kept; with and without byte
fallback and dummy prefix, with user-defined and control symbols) and refused ones (unigram, BPE with
remove_extra_whitespaces), so the fuzzer starts from both sides of every check. The nmt_nfkc normalizer's
map alone is ~240 KB, above the fuzzer's input size: not a seed.

    /usr/bin/python3 tests/fuzz/make_spm_seeds.py tests/fuzz/seeds/spm
"""
import os
import subprocess
import sys
import tempfile

import sentencepiece as spm


def main(out):
    os.makedirs(out, exist_ok=True)
    text = subprocess.run(["bible", "-f", "Gen1:1-Gen50:26"], capture_output=True, text=True, check=True).stdout
    base = dict(model_type="bpe", normalization_rule_name="identity", remove_extra_whitespaces=False,
                num_threads=1, minloglevel=2, hard_vocab_limit=False)
    variants = {
        "bpe-fallback-400": dict(vocab_size=400, byte_fallback=True),
        "bpe-200": dict(vocab_size=200),
        "bpe-nodummy-200": dict(vocab_size=200, add_dummy_prefix=False),
        "bpe-userdef-200": dict(vocab_size=200, user_defined_symbols=["<sep>", "LORD"], control_symbols=["<ctl>"]),
        "bpe-pad-200": dict(vocab_size=200, pad_id=3, unk_id=0, bos_id=1, eos_id=2),
        "bpe-nobos-200": dict(vocab_size=200, bos_id=-1, eos_id=1, unk_id=0),
        "unigram-200": dict(vocab_size=200, model_type="unigram"),
        "bpe-rmws-200": dict(vocab_size=200, remove_extra_whitespaces=True),
    }
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "genesis.txt")
        open(corpus, "w").write(text)
        for name, opts in variants.items():
            o = dict(base, input=corpus, model_prefix=os.path.join(tmp, name))
            o.update(opts)
            spm.SentencePieceTrainer.train(**o)
            data = open(os.path.join(tmp, name + ".model"), "rb").read()
            open(os.path.join(out, name + ".model"), "wb").write(data)
            print("%s: %d bytes" % (name, len(data)))


if __name__ == "__main__":
    main(sys.argv[1])
