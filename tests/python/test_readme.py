"""The README's Python section runs as written: its shell blocks (from README.md's "## Python" section once
they are there, else the copies below, which are the text proposed for it), run from the checkout's root with
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

# The second block: a container without a model, and convert / quantize through the library.
PROPOSED_CONTAINER = '''```sh
PYTHONPATH=python /usr/bin/python3 - <<'EOF'
import qmap
qmap.convert("tests/data/kjv_llama", "build/kjv-lib.qmap")              # as qmap convert
qmap.quantize("build/kjv-lib.qmap", "build/kjv-lib-q8.qmap", q8=True)   # as qmap quantize --q8
with qmap.open("build/kjv-lib-q8.qmap") as c:
    print(c)
    print(c.metadata["llama.n_layers"], c.metadata["tokenizer.tokens"][:3])
    w = c.tensors["output.weight"]      # Q8_ROW: .q int8 and .scale float32, views of the file
    print(w.q.shape, w.scale.shape, w.dequantize().dtype)
    c.verify()                          # every checksum, as qmap verify
EOF
```'''


def readme_block(index=0):
    """The index-th ```sh block of README.md's "## Python" section, else of the proposed text."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    m = re.search(r"^## Python\n(.*?)(?=^## )", readme + "\n## ", re.S | re.M)
    blocks = re.findall(r"```sh\n(.*?)```", m.group(1), re.S) if m else []
    assert blocks or not m, "README.md's Python section has no ```sh block"
    if len(blocks) <= index:
        blocks = [re.search(r"```sh\n(.*?)```", text, re.S).group(1) for text in (PROPOSED, PROPOSED_CONTAINER)]
    return blocks[index]


def run_block(index):
    """Run a block as a user would, from the checkout's root with only PYTHONPATH=python; (build dir, stdout)."""
    script = "\n".join(line for line in readme_block(index).splitlines() if not line.startswith("make "))
    build = os.path.relpath(os.path.dirname(QMAP_BIN), ROOT)
    if build != "build":
        script = script.replace("build/", build + "/")
    env = {k: v for k, v in os.environ.items() if k not in ("QMAP_LIBRARY", "PYTHONPATH", "LD_LIBRARY_PATH")}
    r = subprocess.run(["sh", "-ec", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return build, r.stdout


def test_readme_python_section_runs():
    build, stdout = run_block(0)
    model = os.path.join(build, "kjv.qmap")
    greedy = json.loads(run_qmap("run", os.path.join(ROOT, model), "-p", "In the beginning", "-n", "24", "--temp", "0",
                                 "--json"))["text"]
    assert stdout.startswith("<qmap.Model %r arch=llama kind=lm dtype=f32 size=" % model)
    assert "\nIn the beginning" + greedy + "\nAnd God said" in stdout
    assert len(stdout.split("And God said")[1]) > 24 and stdout.endswith("\n")


def test_readme_container_block_runs():
    build, stdout = run_block(1)
    q8 = os.path.join(build, "kjv-lib-q8.qmap")
    inspected = json.loads(run_qmap("inspect", "--json", "--max-items", "3", os.path.join(ROOT, q8)))
    meta = {e["key"]: e["value"] for e in inspected["metadata"]}
    assert stdout.startswith("<qmap.Container %r arch=llama tensors=39 (9 F32, 30 Q8_ROW) size=" % q8)
    assert "\n%d %r\n" % (meta["llama.n_layers"], meta["tokenizer.tokens"][:3]) in stdout
    assert stdout.endswith("(4096, 256) (4096,) float32\n")
