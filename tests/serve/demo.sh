#!/bin/sh
# make demo, qmap serve: the King James Llama served on a free loopback port, the curl examples of the
# README's Server section (tests/serve/readme_examples.py) run against it, then SIGTERM.
# usage: demo.sh QMAP MODEL.qmap
set -e
qmap=$1 model=$2
out=$(mktemp)
"$qmap" serve "$model" --port 0 --parallel 2 -q > "$out" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; rm -f "$out"' EXIT
for i in $(seq 1 100); do grep -q 'http://' "$out" && break; sleep 0.1; done
cat "$out"
port=$(sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$out" | head -1)
python3 "$(dirname "$0")/readme_examples.py" curl "$port" | sed 's/^curl/echo; echo "== curl"; curl/' > "$out.sh"
bash -e "$out.sh"
rm -f "$out.sh"
kill -TERM $pid
wait $pid
echo "qmap serve: stopped with exit status $?"
