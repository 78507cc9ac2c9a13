#!/usr/bin/python3
"""generate.py — the Python counterpart of simple.c: open a model with `import qmap`, continue a prompt
greedily, then sampled, streaming the text as it comes.

    PYTHONPATH=python /usr/bin/python3 examples/generate.py MODEL.qmap ["PROMPT"] [N]
"""
import sys

import qmap


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    prompt = sys.argv[2] if len(sys.argv) > 2 else "In the beginning"
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    try:
        with qmap.Model(sys.argv[1], threads=2) as m:
            print(m)
            print("greedy:  " + prompt + m.generate(prompt, max_tokens=n, temperature=0))
            print("sampled: " + prompt, end="", flush=True)
            for piece in m.generate(prompt, max_tokens=n, seed=42, stream=True):
                print(piece, end="", flush=True)
            print()
    except qmap.Error as e:
        print("generate.py: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
