#!/bin/sh
# test_install.sh BUILD PYTHON — libqmap as a user gets it: `make install` into a temporary prefix, then
# examples/simple.c built through pkg-config (shared, and static with --static), run on a small converted
# Llama, and its greedy ids compared with `qmap run --temp 0`; the shared library exports exactly the
# functions qmap.h declares; the Python package installed beside them imports from the prefix (finding the
# prefix's libqmap.so.0 by itself) and generates what `qmap run` generates, and `make install PREFIX=/usr/local`
# puts it in a directory Debian's python3 searches; `make uninstall` leaves nothing behind.
set -eu
BUILD=$1
PYTHON=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL lib: $*"; exit 1; }
passed=0
ok() { echo "ok   lib: $*"; passed=$((passed + 1)); }

make --no-print-directory -s install BUILD="$BUILD" DESTDIR="$T/dest" PREFIX=/opt/qmap >/dev/null
P="$T/dest/opt/qmap"
for f in bin/qmap include/qmap.h include/qmap_errors.h lib/libqmap.a lib/libqmap.so lib/libqmap.so.0 \
         lib/pkgconfig/qmap.pc; do
  [ -e "$P/$f" ] || fail "make install did not install $f"
done
ok "make install puts binary, libraries, headers and qmap.pc under DESTDIR/PREFIX"

# every function qmap.h declares is exported, and nothing else
grep -o 'QMAP_API [^(]*qmap_[a-z_0-9]*(' include/qmap.h | sed 's/.*\(qmap_[a-z_0-9]*\)(/\1/' | sort > "$T/declared"
nm -D --defined-only "$P/lib/libqmap.so" | awk '$2 == "T" || $2 == "W" || $2 == "D" || $2 == "B" {print $3}' \
  | sed 's/@.*//' | sort > "$T/exported"
[ -s "$T/declared" ] || fail "found no QMAP_API declarations in qmap.h"
diff "$T/declared" "$T/exported" > "$T/symdiff" || { cat "$T/symdiff"; fail "exported symbols differ from qmap.h"; }
ok "libqmap.so exports exactly the $(wc -l < "$T/declared") functions qmap.h declares"
soname=$(objdump -p "$P/lib/libqmap.so" | awk '/SONAME/ {print $2}')
[ "$soname" = "libqmap.so.0" ] || fail "soname is '$soname'"
ok "soname libqmap.so.0"

# build the example against the installed copy only
command -v pkg-config >/dev/null || fail "pkg-config is not installed (make deps-test installs it)"
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$T/dest"   # the staged DESTDIR stands in for /
grep -qx 'prefix=/opt/qmap' "$P/lib/pkgconfig/qmap.pc" || fail "qmap.pc does not carry PREFIX /opt/qmap"
pkg-config --exists qmap || fail "pkg-config does not find qmap.pc"
cc -std=c11 -Wall -Wextra -Werror examples/simple.c $(pkg-config --cflags --libs qmap) -o "$T/simple"
cc -std=c11 -Wall -Wextra -Werror examples/simple.c $(pkg-config --cflags qmap) \
   "$P/lib/libqmap.a" $(pkg-config --static --libs-only-other --libs-only-l qmap | sed 's/-lqmap//') -o "$T/simple-static"
ok "examples/simple.c builds through pkg-config (shared and static)"

# a small Llama, converted by the installed qmap
"$PYTHON" - "$T/model" <<'PY'
import json, os, sys, torch
sys.path.insert(0, "tests")
from models import llama
d = sys.argv[1]
os.makedirs(d)
m, cfg = llama.build(seed=5, variant="llama", max_position_embeddings=64)
torch.save(m.state_dict(), os.path.join(d, "model.pt"))
json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
PY
"$P/bin/qmap" convert "$T/model/model.pt" -o "$T/m.qmap" --no-tokenizer --quiet
"$P/bin/qmap" run "$T/m.qmap" --tokens "3 14 15 92 65" -n 16 --temp 0 --json > "$T/run.json"
want=$("$PYTHON" -c "import json,sys; print(' '.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$T/run.json")
got=$(LD_LIBRARY_PATH="$P/lib" "$T/simple" "$T/m.qmap" --ids "3 14 15 92 65" 16)
[ "$got" = "$want" ] || fail "simple (shared) printed '$got', qmap run '$want'"
ok "simple (shared library) generates what qmap run --temp 0 generates: $got"
ldd "$T/simple" | grep -q "$P/lib/libqmap.so.0" || LD_LIBRARY_PATH="$P/lib" ldd "$T/simple" | grep -q "$P/lib/libqmap.so.0" \
  || fail "simple is not linked against the installed libqmap.so.0"
got=$("$T/simple-static" "$T/m.qmap" --ids "3 14 15 92 65" 16)
[ "$got" = "$want" ] || fail "simple (static) printed '$got', qmap run '$want'"
ok "simple (static library) generates the same"
out=$(LD_LIBRARY_PATH="$P/lib" "$T/simple" "$T/m.qmap" "hello" 4 2>&1) && fail "text prompt on a container without a tokenizer succeeded"
echo "$out" | grep -q "no tokenizer" || fail "unexpected error text: $out"
ok "a text prompt without a tokenizer is an error naming the cause"

# the Python package, from the prefix only: no checkout on its path, no QMAP_LIBRARY, no LD_LIBRARY_PATH
site=$(find "$P/lib" -path '*/dist-packages/qmap/__init__.py' | head -1)
[ -n "$site" ] || fail "make install did not install the Python package under $P/lib"
site=${site%/qmap/__init__.py}
"$P/bin/qmap" convert tests/data/kjv_llama -o "$T/kjv.qmap" --quiet
"$P/bin/qmap" run "$T/kjv.qmap" -p "In the beginning" -n 24 --temp 0 -c 64 -t 1 --json > "$T/kjv.json"
want=$("$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['text'])" "$T/kjv.json")
got=$(cd "$T" && env -u QMAP_LIBRARY -u LD_LIBRARY_PATH PYTHONPATH="$site" "$PYTHON" -c '
import sys, qmap
assert qmap.__file__.startswith(sys.argv[1]) and qmap.library_path().startswith(sys.argv[2]), (qmap.__file__, qmap.library_path())
with qmap.Model(sys.argv[3], threads=1, n_ctx=64) as m:
    print(m.generate("In the beginning", max_tokens=24, temperature=0))' "$site" "$P/lib/" "$T/kjv.qmap") \
  || fail "the installed Python package failed"
[ -n "$got" ] && [ "$got" = "$want" ] || fail "qmap.Model.generate gave '$got', qmap run '$want'"
ok "the installed Python package (${site#$P/}) uses the prefix's libqmap.so.0 and generates what qmap run does"
make --no-print-directory -s install BUILD="$BUILD" DESTDIR="$T/local" PREFIX=/usr/local >/dev/null
found=$("$PYTHON" -c "import os, site, sys; print(' '.join(d for d in site.getsitepackages() if os.path.isfile(sys.argv[1] + d + '/qmap/model.py')))" "$T/local")
[ -n "$found" ] || fail "make install PREFIX=/usr/local put the package where $PYTHON does not look"
ok "make install PREFIX=/usr/local puts the package in $found, on $PYTHON's path"

make --no-print-directory -s uninstall BUILD="$BUILD" DESTDIR="$T/dest" PREFIX=/opt/qmap >/dev/null
left=$(find "$P" -type f -o -type l | wc -l)
[ "$left" -eq 0 ] || { find "$P" -type f -o -type l; fail "make uninstall left $left files"; }
ok "make uninstall removes everything it installed"
echo "lib-test: $passed passed, 0 failed"
