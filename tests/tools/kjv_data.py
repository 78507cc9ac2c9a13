"""kjv_data.py — the King James Bible corpus of the shipped Llama (tests/data/kjv_llama), defined once for
the training script (train_kjv_llama.py), the test (tests/run/test_kjv.py) and the demo (kjv_demo.py).

Source: Debian's bible-kjv, `bible -f 'Gen1:1-Rev22:21'`, one verse per line as "Ge1:1 In the beginning
...". The reference (book abbreviation, chapter:verse) is dropped; a book's text is its verses, each
followed by a newline. The 66 books are numbered from Genesis = 1; every 7th book (7 Judges, 14 2 Chronicles,
21 Ecclesiastes, 28 Hosea, 35 Habakkuk, 42 Luke, 49 Ephesians, 56 Titus, 63 2 John) is held out for
evaluation, the other 57 are the training split. The held-out text (`heldout_text`) is the held-out books'
texts concatenated in canonical order: exactly the bytes `qmap perplexity -f` and `qmap tokenize -f` read
from the file `write_heldout` writes.
"""
import re
import subprocess

RANGE = "Gen1:1-Rev22:21"
HOLDOUT_EVERY = 7
_REF = re.compile(r"^(.+?)(\d+):(\d+) (.*)$")


def read_books():
    """[(abbreviation, [verse text, ...]), ...] for the 66 books in canonical order."""
    out = subprocess.run(["bible", "-f", RANGE], capture_output=True, text=True, check=True).stdout
    books = []
    for line in out.split("\n"):
        if not line:
            continue
        m = _REF.match(line)
        if not m:
            raise ValueError("bible-kjv: unexpected line %r" % line[:80])
        name, text = m.group(1), m.group(4)
        if not books or books[-1][0] != name:
            books.append((name, []))
        books[-1][1].append(text)
    if len(books) != 66:
        raise ValueError("bible-kjv: %d books, expected 66" % len(books))
    return books


def is_held_out(index):
    """index: 0-based book index (Genesis = 0)."""
    return (index + 1) % HOLDOUT_EVERY == 0


def book_text(verses):
    return "".join(v + "\n" for v in verses)


def split(books=None):
    """(training books, held-out books), each a list of (abbreviation, text)."""
    books = read_books() if books is None else books
    train, held = [], []
    for i, (name, verses) in enumerate(books):
        (held if is_held_out(i) else train).append((name, book_text(verses)))
    return train, held


def heldout_text(books=None):
    return "".join(t for _, t in split(books)[1])


def write_heldout(path, books=None):
    """Write the held-out text to `path` (UTF-8, here plain ASCII); returns the text."""
    text = heldout_text(books)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return text
