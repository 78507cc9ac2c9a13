#!/bin/sh
# run_fuzz.sh — run the reader fuzzer for a fixed time on a fresh seed corpus.
#
#   run_fuzz.sh SECONDS OUTDIR [FUZZER]
#
# Builds nothing. FUZZER (argument or $FUZZER) is the libFuzzer binary built from fuzz_reader.c;
# $MAKE_SEEDS (default build/tests/make_seeds) writes the seed files. OUTDIR receives:
#   OUTDIR/seeds/    the seeds (make_seeds output + tests/golden/{valid,invalid} + tests/fuzz/corpus if present)
#   OUTDIR/corpus/   new interesting inputs found by this run (never the committed tree)
#   OUTDIR/crash-*, leak-*, timeout-*, oom-*   reproducers, if the fuzzer found something
#   OUTDIR/fuzz.log  libFuzzer's output
# Prints the number of executions and exits 0 if nothing was found, 1 if the fuzzer found a crash,
# leak, timeout or OOM (or exited non-zero), 2 on a usage or setup error.
set -u

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: $0 SECONDS OUTDIR [FUZZER]" >&2
    exit 2
fi
SECONDS_TO_RUN=$1
OUTDIR=$2
FUZZER=${3:-${FUZZER:-}}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MAKE_SEEDS=${MAKE_SEEDS:-$ROOT/build/tests/make_seeds}
DICT=$HERE/reader.dict

case $SECONDS_TO_RUN in
    ''|*[!0-9]*) echo "run_fuzz.sh: SECONDS must be a whole number, got '$SECONDS_TO_RUN'" >&2; exit 2 ;;
esac
if [ -z "$FUZZER" ] || [ ! -x "$FUZZER" ]; then
    echo "run_fuzz.sh: fuzzer binary not found (pass it as the third argument or set \$FUZZER): '$FUZZER'" >&2
    exit 2
fi
if [ ! -x "$MAKE_SEEDS" ]; then
    echo "run_fuzz.sh: seed generator not found (set \$MAKE_SEEDS): '$MAKE_SEEDS'" >&2
    exit 2
fi

mkdir -p "$OUTDIR/seeds" "$OUTDIR/corpus" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
# Reproducers from an earlier run in the same OUTDIR would be mistaken for new findings.
rm -f "$OUTDIR"/crash-* "$OUTDIR"/leak-* "$OUTDIR"/timeout-* "$OUTDIR"/oom-*

if ! "$MAKE_SEEDS" "$OUTDIR/seeds" >/dev/null; then
    echo "run_fuzz.sh: $MAKE_SEEDS failed" >&2
    exit 2
fi
for sub in golden/valid golden/invalid; do
    src=$ROOT/tests/$sub
    [ -d "$src" ] || continue
    tag=$(echo "$sub" | tr '/' '-')
    for f in "$src"/*; do
        [ -f "$f" ] || continue
        # Inputs above -max_len would be truncated anyway; skip big ones.
        [ "$(wc -c < "$f")" -le 1048576 ] || continue
        cp "$f" "$OUTDIR/seeds/$tag-$(basename "$f")"
    done
done
if [ -d "$HERE/corpus" ]; then
    cp "$HERE"/corpus/* "$OUTDIR/seeds/" 2>/dev/null
fi
NSEEDS=$(ls "$OUTDIR/seeds" | wc -l)
echo "run_fuzz.sh: $NSEEDS seed inputs, fuzzing for ${SECONDS_TO_RUN}s with $FUZZER"

"$FUZZER" \
    -max_total_time="$SECONDS_TO_RUN" \
    -dict="$DICT" \
    -max_len=65536 \
    -rss_limit_mb=2048 \
    -timeout=10 \
    -print_final_stats=1 \
    -artifact_prefix="$OUTDIR/" \
    "$OUTDIR/corpus" "$OUTDIR/seeds" > "$OUTDIR/fuzz.log" 2>&1
RC=$?

EXECS=$(grep 'stat::number_of_executed_units' "$OUTDIR/fuzz.log" | tail -n 1 | awk '{print $2}')
echo "run_fuzz.sh: executions: ${EXECS:-unknown}"
echo "run_fuzz.sh: corpus: $(ls "$OUTDIR/corpus" | wc -l) new inputs in $OUTDIR/corpus"

FOUND=$(ls "$OUTDIR"/crash-* "$OUTDIR"/leak-* "$OUTDIR"/timeout-* "$OUTDIR"/oom-* 2>/dev/null)
if [ -n "$FOUND" ] || [ "$RC" -ne 0 ]; then
    echo "run_fuzz.sh: FAILED (fuzzer exit code $RC)" >&2
    for f in $FOUND; do echo "run_fuzz.sh: reproducer: $f" >&2; done
    # The sanitizer's summary line(s) and the first frames of the report.
    grep -E 'ERROR: |SUMMARY: |property violated|^ +#[0-9]+ ' "$OUTDIR/fuzz.log" | head -n 14 >&2
    echo "run_fuzz.sh: full log: $OUTDIR/fuzz.log" >&2
    exit 1
fi
echo "run_fuzz.sh: OK, no crash"
exit 0
