#!/usr/bin/env python3
"""Print the README's qmap serve examples, pointed at a port, for the tests and make demo to run as written.

    readme_examples.py curl|js PORT [--readme README.md]

The examples are read from README.md's `## Server` section; until that section exists, from the proposed
copy tests/serve/readme_server.md. curl: every ```sh block line of the section from the first `curl` on
(the `qmap serve` line that starts the server is left out); js: the ```js block. 8080 becomes PORT."""
import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def server_section(readme):
    if os.path.exists(readme):
        text = open(readme, encoding="utf-8").read()
        m = re.search(r"^## Server\n(.*?)(?=^## |\Z)", text, re.M | re.S)
        if m:
            return m.group(1)
    return open(os.path.join(HERE, "readme_server.md"), encoding="utf-8").read()


def blocks(section, lang):
    return re.findall(r"^```" + lang + r"\n(.*?)^```", section, re.M | re.S)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["curl", "js"])
    ap.add_argument("port")
    ap.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    a = ap.parse_args()
    section = server_section(a.readme)
    if a.kind == "curl":
        code = "".join(b for b in blocks(section, "sh") if b.lstrip().startswith("curl"))
    else:
        code = "".join(blocks(section, "js"))
    if not code:
        sys.exit(f"readme_examples.py: no {a.kind} example in the Server section")
    sys.stdout.write(code.replace("8080", a.port))


if __name__ == "__main__":
    main()
