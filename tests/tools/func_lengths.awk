# func_lengths.awk — length in lines of every C function definition, from the line naming it to its closing
# brace. A definition is a line at column 0 that names "identifier(" and, on it or a following line, a body
# opening with "{" at the end of a line; the body closes at the next "}" at column 0.
# Prints "lines file:line name", one function a line. Usage: awk -f func_lengths.awk file.c ...
function fn_name(s,    w, n) { sub(/\(.*/, "", s); n = split(s, w, /[ \t*]+/); return w[n] }
FNR == 1 { infn = 0; cand = 0 }
infn && /^\}/ { print FNR - start + 1, FILENAME ":" start, name; infn = 0; cand = 0; next }
infn { next }
/^[A-Za-z_][A-Za-z0-9_ \t*]*\(/ && !/^(typedef|struct|enum|union|return|if|for|while)[ \t(]/ {
    cand = FNR; name = fn_name($0)
}
cand && /;[ \t]*$/ && !/\{/ { cand = 0 }
cand && /(\)[ \t]*\{|^\{)[ \t]*$/ { infn = 1; start = cand }
