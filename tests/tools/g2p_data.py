"""g2p_data.py — the CMU Pronouncing Dictionary as Debian's festlex-cmu ships it, for the G2P model
(tests/tools/train_g2p.py trains it, tests/run/test_seq2seq.py checks qmap against it).

Entries look like  ("kemble" nil (((k eh m) 1) ((b ax l) 0)))  : a word, a part of speech (nil for most),
then syllables of phones with a stress digit. The target spelling of a word is its phones in order with
the syllable's stress digit appended to each vowel phone ("k eh1 m b ax0 l"); consonants carry none.
Rules: lines that are not entries (the "MNCL" header) are skipped; words with a character outside a-z and
the apostrophe are skipped; a word listed more than once (homographs: "a" as dt and as n) keeps its first
entry. The held-out words are those whose CRC-32 is 0 mod 20 (5%), a fixed rule independent of any seed.
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
    return zlib.crc32(word.encode()) % 20 == 0


def vocabularies(entries):
    """Source (characters) and target (phones) token lists, specials first, the rest sorted."""
    chars = sorted({c for w, _ in entries for c in w})
    phones = sorted({p for _, ps in entries for p in ps})
    return SRC_SPECIALS + chars, TGT_SPECIALS + phones


def edit_distance(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def scores(hyps, refs):
    """(word accuracy, phone error rate): hyps and refs are lists of phone lists."""
    right = sum(h == r for h, r in zip(hyps, refs))
    errs = sum(edit_distance(h, r) for h, r in zip(hyps, refs))
    return right / len(refs), errs / sum(len(r) for r in refs)
