"""wordlevel.py — Hugging Face tokenizer files for a word-level vocabulary, as the seq2seq tests and training
scripts write them (tests/tools/train_numbers.py, train_g2p.py via g2p_data.py, tests/run/test_seq2seq.py).

write_wordlevel(directory, tokens, pre_tokenizer, bos_eos) writes into `directory`:
  tokenizer.json         WordLevel model (id = index in `tokens`, unk "<unk>"), every "<...>" token a special
                         added token, the given pre-tokenizer, no normalizer / post-processor / decoder;
  tokenizer_config.json  unk "<unk>", pad "<pad>", no automatic BOS/EOS; with bos_eos, bos "<s>", eos "</s>".
"""
import json
import os

SPLIT_CHARACTERS = {"type": "Split", "pattern": {"Regex": "."}, "behavior": "Isolated", "invert": False}
SPLIT_WHITESPACE = {"type": "WhitespaceSplit"}


def write_wordlevel(directory, tokens, pre_tokenizer, bos_eos):
    os.makedirs(directory, exist_ok=True)
    specials = [t for t in tokens if t.startswith("<")]
    tj = {"version": "1.0", "truncation": None, "padding": None,
          "added_tokens": [{"id": tokens.index(t), "content": t, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True} for t in specials],
          "normalizer": None, "pre_tokenizer": pre_tokenizer, "post_processor": None, "decoder": None,
          "model": {"type": "WordLevel", "vocab": {t: i for i, t in enumerate(tokens)}, "unk_token": "<unk>"}}
    with open(os.path.join(directory, "tokenizer.json"), "w") as f:
        json.dump(tj, f, indent=1)
    cfg = {"unk_token": "<unk>", "pad_token": "<pad>", "add_bos_token": False, "add_eos_token": False}
    if bos_eos:
        cfg.update(bos_token="<s>", eos_token="</s>")
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return os.path.join(directory, "tokenizer.json")
