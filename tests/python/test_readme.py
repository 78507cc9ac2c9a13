"""The README's Python section runs as written: its shell block (from README.md's "## Python" section once
it is there, else the copy below, which is the text proposed for it), run from the checkout's root with
only PYTHONPATH=python to find the package and build/libqmap.so; its greedy line is qmap run's. Its `make` line is left out (make
python-test has built those targets), and build/ becomes this build tree when BUILD is not build."""
import json
import os
import re
import subprocess

from conftest import QMAP_BIN, ROOT, run_qmap

PROPOSED = '''```sh
make lib-qmap build/qmap
build/qmap convert tests/data/kjv_llama -o build/kjv.qmap --quiet
PYTHONPATH=python /usr/bin/python3 - <<'EOF'
import qmap
with qmap.Model("build/kjv.qmap", threads=2) as m:
    print(m, m.tokenize("In the beginning"))
    print("In the beginning" + m.generate("In the beginning", max_tokens=24, temperature=0))
    print("And God said", end="")
    for piece in m.generate("And God said", max_tokens=24, seed=1, stream=True):
        print(piece, end="", flush=True)
    print()
EOF
```'''


def readme_block():
    readme = open(os.path.join(ROOT, "README.md")).read()
    m = re.search(r"^## Python\n(.*?)(?=^## )", readme + "\n## ", re.S | re.M)
    text = m.group(1) if m else PROPOSED
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert block, "README.md's Python section has no ```sh block"
    return block.group(1)


def test_readme_python_section_runs():
    script = "\n".join(line for line in readme_block().splitlines() if not line.startswith("make "))
    build = os.path.relpath(os.path.dirname(QMAP_BIN), ROOT)
    if build != "build":
        script = script.replace("build/", build + "/")
    env = {k: v for k, v in os.environ.items() if k not in ("QMAP_LIBRARY", "PYTHONPATH", "LD_LIBRARY_PATH")}
    r = subprocess.run(["sh", "-ec", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    model = os.path.join(build, "kjv.qmap")
    greedy = json.loads(run_qmap("run", os.path.join(ROOT, model), "-p", "In the beginning", "-n", "24", "--temp", "0",
                                 "--json"))["text"]
    assert r.stdout.startswith("<qmap.Model %r arch=llama kind=lm dtype=f32 size=" % model)
    assert "\nIn the beginning" + greedy + "\nAnd God said" in r.stdout
    assert len(r.stdout.split("And God said")[1]) > 24 and r.stdout.endswith("\n")
