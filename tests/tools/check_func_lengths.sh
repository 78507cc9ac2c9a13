#!/bin/sh
# check_func_lengths.sh — no C function longer than MAX lines (default 120), counted by func_lengths.awk from
# the line naming it to its closing brace. Exceptions: convert/qc_pickle.c's step (the unpickler's opcode
# dispatch: one case per opcode reads best as one switch) and the functions listed in func_lengths.allow,
# each held to the length it has there, so that it can shrink but not grow.
# Usage: check_func_lengths.sh [MAX]   (run from the repository's top directory)
max=${1:-120}
here=$(dirname "$0")
files=$(find api cli convert format include mpi quantize runtime serve tests -name '*.c' -not -path '*/build/*' | sort)
awk -f "$here/func_lengths.awk" $files | awk -v max="$max" -v allow="$here/func_lengths.allow" '
BEGIN {
    while ((getline line < allow) > 0) {
        if (line ~ /^#/ || line ~ /^[ \t]*$/) continue
        split(line, f, /[ \t]+/)
        cap[f[1] " " f[2]] = f[3]
    }
}
{
    n = $1; file = $2; sub(/:.*/, "", file); key = file " " $3
    if (file == "convert/qc_pickle.c" && $3 == "step") next
    limit = (key in cap) ? cap[key] : max
    if (n > limit) { printf "%s: %s is %d lines, more than %d\n", $2, $3, n, limit; bad++ }
}
END {
    if (bad) { printf "%d function(s) too long; split them into functions with one job each\n", bad; exit 1 }
}'
