"""g2p_data.py — the CMU Pronouncing Dictionary as Debian's festlex-cmu ships it, for the G2P model
(tests/tools/train_g2p.py trains it, tests/run/test_seq2seq.py checks qmap against it).

Entries look like  ("kemble" nil (((k eh m) 1) ((b ax l) 0)))  : a word, a part of speech (nil for most),
then syllables of phones with a stress digit. The target spelling of a word is its phones in order with
the syllable's stress digit appended to each vowel phone ("k eh1 m b ax0 l"); consonants carry none.
Rules: lines that are not entries (the "MNCL" header) are skipped; words with a character outside a-z and
the apostrophe are skipped; a word listed more than once (homographs: "a" as dt and as n) keeps its first
entry. The held-out words are those whose CRC-32 is 0 mod 20 (5%), a fixed rule independent of any seed.

Vocabularies: source = <pad> 0, <unk> 1, then the characters sorted; target = <pad> 0, <unk> 1, <s> 2,
</s> 3, then the phones sorted (the training words alone give the same sets as the whole dictionary).
A source is the word's character ids (no BOS/EOS); a target is <s> phones </s>.

API (torch is imported only inside the decoding functions):
  read_cmudict(path=CMUDICT) -> [(word, [phone, ...])]
  held_out(word) -> bool;  split(word) -> "held_out" | "train"
  vocabularies(entries) -> (src_tokens, tgt_tokens)   id = index in the list
  write_tokenizer(directory, tokens, side)
  load_model(directory) -> (model, config, src_vocab, tgt_vocab)            side "src" | "tgt": tokenizer.json + tokenizer_config.json
  greedy_decode(model, src_ids, bos, eos, max_len) -> [id, ...]            (without EOS)
  greedy_decode_batch(model, srcs, bos, eos, max_len) -> [[id, ...], ...]  (the same, grouped by length)
  beam_search(model, src_ids, bos, eos, max_len, beam, length_penalty=1.0) -> [(ids, score, log_prob)] best first
  beam_decode(model, src_ids, bos, eos, max_len, beam, length_penalty=1.0) -> [id, ...]  (the best of beam_search)
  word_accuracy(hyps, refs), phone_error_rate(hyps, refs), scores(hyps, refs) -> (accuracy, PER), edit_distance(a, b)
"""
import re
import zlib

CMUDICT = "/usr/share/festival/dicts/cmu/cmudict-0.4.out"
VOWELS = {"aa", "ae", "ah", "ao", "aw", "ax", "ay", "eh", "el", "em", "en", "er", "ey", "ih", "iy", "ow", "oy",
          "uh", "uw"}
SRC_SPECIALS = ["<pad>", "<unk>"]
TGT_SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]
_ENTRY = re.compile(r'^\("([^"]*)" \S+ \((.*)\)\)$')
_SYLL = re.compile(r"\(\(([^()]*)\) (\d)\)")


def read_cmudict(path=CMUDICT):
    """[(word, [phone, ...])] in file order, by the rules above."""
    out, seen = [], set()
    with open(path, encoding="latin-1") as f:
        for line in f:
            m = _ENTRY.match(line.strip())
            if not m:
                continue
            word = m.group(1)
            if word in seen or not re.fullmatch(r"[a-z']+", word):
                continue
            phones = []
            for sy, stress in _SYLL.findall(m.group(2)):
                phones += [p + stress if p in VOWELS else p for p in sy.split()]
            if not phones:
                continue
            seen.add(word)
            out.append((word, phones))
    return out


def held_out(word):
    """True for the 5% of words held out of training: zlib.crc32(word) % 20 == 0."""
    return zlib.crc32(word.encode()) % 20 == 0


def split(word):
    """"held_out" or "train" (held_out above)."""
    return "held_out" if held_out(word) else "train"


def vocabularies(entries):
    """Source (characters) and target (phones) token lists, specials first, the rest sorted."""
    chars = sorted({c for w, _ in entries for c in w})
    phones = sorted({p for _, ps in entries for p in ps})
    return SRC_SPECIALS + chars, TGT_SPECIALS + phones


def write_tokenizer(directory, tokens, side):
    """HF tokenizer files for a word-level vocabulary (tests/tools/wordlevel.py): side "src" splits into
    single characters, side "tgt" at whitespace and names <s> / </s> as bos / eos."""
    if side not in ("src", "tgt"):
        raise ValueError("side is 'src' or 'tgt', not %r" % (side,))
    import wordlevel
    wordlevel.write_wordlevel(directory, tokens,
                              wordlevel.SPLIT_CHARACTERS if side == "src" else wordlevel.SPLIT_WHITESPACE, side == "tgt")


def load_model(directory):
    """A trained model directory (model.pt, config.json, src/ and tgt/tokenizer.json) as
    (model in eval mode, config, source vocab {token: id}, target vocab {token: id})."""
    import json
    import os
    import torch
    from models.seq2seq import Seq2SeqTransformer
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    vocab = []
    for side in ("src", "tgt"):
        with open(os.path.join(directory, side, "tokenizer.json")) as f:
            vocab.append(json.load(f)["model"]["vocab"])
    model = Seq2SeqTransformer(cfg)
    model.load_state_dict(torch.load(os.path.join(directory, "model.pt")))
    model.eval()
    return model, cfg, vocab[0], vocab[1]


def _logits(model, ys, memory):
    """Next-token logits [N, V] after decoder inputs ys [N, T] over encoder output memory [N, S, d]."""
    return model.generator(model.decode(ys, memory)[:, -1])


def greedy_decode(model, src_ids, bos, eos, max_len):
    """Greedy decoding of one source (a list of ids, no padding) by a Seq2SeqTransformer in eval mode:
    the arg-max token each step after `bos`, at most max_len tokens, stopping at `eos`. Returns the ids
    without EOS (beam_search with beam 1 gives the same)."""
    return greedy_decode_batch(model, [list(src_ids)], bos, eos, max_len)[0]


def greedy_decode_batch(model, srcs, bos, eos, max_len, chunk=512):
    """greedy_decode on many sources, run as batches of sources of equal length (no padding, so each
    result is what greedy_decode gives). Returns one id list (without EOS) per source, in order."""
    import torch
    out = [None] * len(srcs)
    by_len = {}
    for i, s in enumerate(srcs):
        by_len.setdefault(len(s), []).append(i)
    with torch.no_grad():
        for _, idx in sorted(by_len.items()):
            for k in range(0, len(idx), chunk):
                part = idx[k:k + chunk]
                mem = model.encode(torch.tensor([list(srcs[i]) for i in part], dtype=torch.long))
                ys = torch.full((len(part), 1), bos, dtype=torch.long)
                done = torch.zeros(len(part), dtype=torch.bool)
                for _ in range(max_len):
                    nxt = _logits(model, ys, mem).argmax(-1)
                    nxt = torch.where(done, torch.full_like(nxt, eos), nxt)
                    ys = torch.cat([ys, nxt[:, None]], dim=1)
                    done |= nxt == eos
                    if bool(done.all()):
                        break
                for j, i in enumerate(part):
                    seq = ys[j, 1:].tolist()
                    out[i] = seq[:seq.index(eos)] if eos in seq else seq
    return out


def beam_search(model, src_ids, bos, eos, max_len, beam, length_penalty=1.0):
    """Beam search over one source, the rule of runtime/qr_beam.h (OpenNMT / CTranslate2 style):
      - a hypothesis' score is the sum of its tokens' log-probabilities (log-softmax of the logits);
      - each step every active hypothesis h extends by every token v (score cum[h] + logp[h][v]); the
        candidates are taken best first (ties: lower hypothesis index, then lower token id) until `beam`
        continue; an EOS candidate met on the way finishes instead (it takes no place in the beam);
      - finished hypotheses rank by log_prob / length ** length_penalty, length = generated tokens
        including EOS;
      - the search ends once `beam` hypotheses have finished (or none is active), or after max_len tokens:
        the still active ones then finish as they are (length max_len, no EOS).
    Returns [(ids without EOS, score, log_prob)] best first (stable on equal scores). beam 1 = greedy."""
    import torch
    with torch.no_grad():
        mem1 = model.encode(torch.tensor([list(src_ids)], dtype=torch.long))
        hyps, cums = [[]], [0.0]
        finished = []
        for step in range(max_len):
            ys = torch.tensor([[bos] + h for h in hyps], dtype=torch.long)
            logp = torch.log_softmax(_logits(model, ys, mem1.expand(len(hyps), -1, -1)).float(), -1)
            cand = (torch.tensor(cums, dtype=torch.float32)[:, None] + logp).flatten()
            V = logp.size(1)
            # best first; ties by (hypothesis, token) = flat index order, which a stable sort keeps
            order = torch.sort(-cand, stable=True).indices[:2 * beam].tolist()
            nh, nc = [], []
            for flat in order:
                if len(nh) == beam:
                    break
                h, v = divmod(flat, V)
                sc = float(cand[flat])
                if v == eos:
                    finished.append((hyps[h], sc / float(step + 1) ** length_penalty, sc))
                    continue
                nh.append(hyps[h] + [v])
                nc.append(sc)
            hyps, cums = nh, nc
            if len(finished) >= beam or not hyps:
                break
        else:
            finished += [(h, c / float(max_len) ** length_penalty, c) for h, c in zip(hyps, cums)]
    return sorted(finished, key=lambda f: -f[1])


def beam_decode(model, src_ids, bos, eos, max_len, beam, length_penalty=1.0):
    """The best hypothesis of beam_search: its ids without EOS."""
    return beam_search(model, src_ids, bos, eos, max_len, beam, length_penalty)[0][0]


def edit_distance(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def word_accuracy(hyps, refs):
    """Share of words whose phone list is exactly the reference's."""
    return sum(h == r for h, r in zip(hyps, refs)) / len(refs)


def phone_error_rate(hyps, refs):
    """Levenshtein distance over phones summed over the words / the total number of reference phones."""
    return sum(edit_distance(h, r) for h, r in zip(hyps, refs)) / sum(len(r) for r in refs)


def scores(hyps, refs):
    """(word accuracy, phone error rate): hyps and refs are lists of phone lists."""
    right = sum(h == r for h, r in zip(hyps, refs))
    errs = sum(edit_distance(h, r) for h, r in zip(hyps, refs))
    return right / len(refs), errs / sum(len(r) for r in refs)
