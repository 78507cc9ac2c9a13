/* qc_pickle.c — the restricted pickle reader of qc_pickle.h.
 *
 * A pickle is a program for a stack machine; Python's unpickler runs it, calling whatever globals it
 * names. Here the opcodes only build inert values in an arena (indices, not pointers, so the memo and
 * containers can share values freely), and the few allowlisted "calls" are interpreted: REDUCE on
 * _rebuild_tensor_v2 records a tensor view, on OrderedDict makes an empty dict. Opcode semantics follow
 * CPython's Lib/pickle.py (_Unpickler) and Lib/pickletools.py; the allowlist follows the part of
 * torch/_weights_only_unpickler.py a state_dict of dense tensors uses.
 *
 * Nothing here recurses: values are built bottom-up by the opcodes, and the state_dict is read from at
 * most two dict levels at the end, so a hostile nesting depth costs no C stack. Depth is still capped,
 * so that any later walker of these values can rely on it.
 */
#include "qc_pickle.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qm_bytes.h"
#include "qm_format.h"

/* ---- opcodes (protocols 0-5, pickletools names) ---- */

enum {
    OP_MARK = '(', OP_STOP = '.', OP_BININT = 'J', OP_BININT1 = 'K', OP_BININT2 = 'M', OP_NONE = 'N',
    OP_BINPERSID = 'Q', OP_REDUCE = 'R', OP_BINSTRING = 'T', OP_SHORT_BINSTRING = 'U', OP_BINUNICODE = 'X',
    OP_APPEND = 'a', OP_BUILD = 'b', OP_GLOBAL = 'c', OP_DICT = 'd', OP_EMPTY_DICT = '}', OP_APPENDS = 'e',
    OP_BINGET = 'h', OP_LONG_BINGET = 'j', OP_LIST = 'l', OP_EMPTY_LIST = ']', OP_BINPUT = 'q',
    OP_LONG_BINPUT = 'r', OP_SETITEM = 's', OP_TUPLE = 't', OP_EMPTY_TUPLE = ')', OP_SETITEMS = 'u',
    OP_BINFLOAT = 'G', OP_BINBYTES = 'B', OP_SHORT_BINBYTES = 'C',
    OP_PROTO = 0x80, OP_TUPLE1 = 0x85, OP_TUPLE2 = 0x86, OP_TUPLE3 = 0x87, OP_NEWTRUE = 0x88,
    OP_NEWFALSE = 0x89, OP_LONG1 = 0x8a, OP_LONG4 = 0x8b, OP_SHORT_BINUNICODE = 0x8c, OP_BINUNICODE8 = 0x8d,
    OP_BINBYTES8 = 0x8e, OP_STACK_GLOBAL = 0x93, OP_MEMOIZE = 0x94, OP_FRAME = 0x95,
};

/* Every opcode Python knows, so that a refused one is named in the message. */
static const char *const op_names[256] = {
    ['('] = "MARK", ['.'] = "STOP", ['0'] = "POP", ['1'] = "POP_MARK", ['2'] = "DUP", ['F'] = "FLOAT",
    ['I'] = "INT", ['J'] = "BININT", ['K'] = "BININT1", ['L'] = "LONG", ['M'] = "BININT2", ['N'] = "NONE",
    ['P'] = "PERSID", ['Q'] = "BINPERSID", ['R'] = "REDUCE", ['S'] = "STRING", ['T'] = "BINSTRING",
    ['U'] = "SHORT_BINSTRING", ['V'] = "UNICODE", ['X'] = "BINUNICODE", ['a'] = "APPEND", ['b'] = "BUILD",
    ['c'] = "GLOBAL", ['d'] = "DICT", ['}'] = "EMPTY_DICT", ['e'] = "APPENDS", ['g'] = "GET",
    ['h'] = "BINGET", ['i'] = "INST", ['j'] = "LONG_BINGET", ['l'] = "LIST", [']'] = "EMPTY_LIST",
    ['o'] = "OBJ", ['p'] = "PUT", ['q'] = "BINPUT", ['r'] = "LONG_BINPUT", ['s'] = "SETITEM",
    ['t'] = "TUPLE", [')'] = "EMPTY_TUPLE", ['u'] = "SETITEMS", ['G'] = "BINFLOAT", ['B'] = "BINBYTES",
    ['C'] = "SHORT_BINBYTES", [0x80] = "PROTO", [0x81] = "NEWOBJ", [0x82] = "EXT1", [0x83] = "EXT2",
    [0x84] = "EXT4", [0x85] = "TUPLE1", [0x86] = "TUPLE2", [0x87] = "TUPLE3", [0x88] = "NEWTRUE",
    [0x89] = "NEWFALSE", [0x8a] = "LONG1", [0x8b] = "LONG4", [0x8c] = "SHORT_BINUNICODE",
    [0x8d] = "BINUNICODE8", [0x8e] = "BINBYTES8", [0x8f] = "EMPTY_SET", [0x90] = "ADDITEMS",
    [0x91] = "FROZENSET", [0x92] = "NEWOBJ_EX", [0x93] = "STACK_GLOBAL", [0x94] = "MEMOIZE",
    [0x95] = "FRAME", [0x96] = "BYTEARRAY8", [0x97] = "NEXT_BUFFER", [0x98] = "READONLY_BUFFER",
};

/* ---- values ---- */

typedef enum pv_type {
    PV_NONE, PV_BOOL, PV_INT, PV_FLOAT, PV_STR, PV_BYTES, PV_TUPLE, PV_LIST, PV_DICT,
    PV_GLOBAL, PV_STORAGE, PV_TENSOR,
} pv_type;

static const char *const pv_names[] = {
    "None", "bool", "int", "float", "str", "bytes", "tuple", "list", "dict", "global", "storage", "tensor",
};

typedef enum glob_id {
    G_ORDERED_DICT, G_REBUILD_TENSOR_V2, G_REBUILD_PARAMETER, G_REBUILD_PARAMETER_WITH_STATE,
    G_STORAGE_TYPE, G_DTYPE,
} glob_id;

static const struct allowed {
    const char *module, *name;
    glob_id id;
    qc_dtype dtype;            /* G_STORAGE_TYPE, G_DTYPE */
} allowlist[] = {
    { "collections", "OrderedDict", G_ORDERED_DICT, 0 },
    { "torch._utils", "_rebuild_tensor_v2", G_REBUILD_TENSOR_V2, 0 },
    { "torch._utils", "_rebuild_parameter", G_REBUILD_PARAMETER, 0 },
    { "torch._utils", "_rebuild_parameter_with_state", G_REBUILD_PARAMETER_WITH_STATE, 0 },
    { "torch", "FloatStorage", G_STORAGE_TYPE, QC_F32 },   { "torch", "HalfStorage", G_STORAGE_TYPE, QC_F16 },
    { "torch", "BFloat16Storage", G_STORAGE_TYPE, QC_BF16 }, { "torch", "DoubleStorage", G_STORAGE_TYPE, QC_F64 },
    { "torch", "LongStorage", G_STORAGE_TYPE, QC_I64 },    { "torch", "IntStorage", G_STORAGE_TYPE, QC_I32 },
    { "torch", "ShortStorage", G_STORAGE_TYPE, QC_I16 },   { "torch", "CharStorage", G_STORAGE_TYPE, QC_I8 },
    { "torch", "ByteStorage", G_STORAGE_TYPE, QC_U8 },     { "torch", "BoolStorage", G_STORAGE_TYPE, QC_BOOL },
    { "torch", "float32", G_DTYPE, QC_F32 },  { "torch", "float", G_DTYPE, QC_F32 },
    { "torch", "float16", G_DTYPE, QC_F16 },  { "torch", "half", G_DTYPE, QC_F16 },
    { "torch", "bfloat16", G_DTYPE, QC_BF16 }, { "torch", "float64", G_DTYPE, QC_F64 },
    { "torch", "double", G_DTYPE, QC_F64 },   { "torch", "int64", G_DTYPE, QC_I64 },
    { "torch", "long", G_DTYPE, QC_I64 },     { "torch", "int32", G_DTYPE, QC_I32 },
    { "torch", "int", G_DTYPE, QC_I32 },      { "torch", "int16", G_DTYPE, QC_I16 },
    { "torch", "short", G_DTYPE, QC_I16 },    { "torch", "int8", G_DTYPE, QC_I8 },
    { "torch", "uint8", G_DTYPE, QC_U8 },     { "torch", "bool", G_DTYPE, QC_BOOL },
};
#define N_ALLOWED (sizeof allowlist / sizeof allowlist[0])

/* A storage or a tensor is kept as the index of the tuple it was made from (the persistent id, the
 * _rebuild_tensor_v2 arguments), checked when made and decoded at the end: tuples never change, and
 * a value costs the same 32 bytes whatever it is, so the value cap bounds all memory. */
typedef struct pv {
    uint8_t type;              /* pv_type */
    uint8_t depth;             /* containers: 1 + deepest element seen; scalars: 0 */
    uint32_t n, cap;           /* containers: elements (a dict holds key, value, key, value, …);
                                * PV_TENSOR: n = offset of its REDUCE in the input (< 2^30) */
    union {
        int64_t i;             /* PV_BOOL, PV_INT */
        double f;
        struct { const uint8_t *p; uint32_t len; } s;   /* PV_STR, PV_BYTES: points into the input */
        uint32_t *items;       /* PV_TUPLE, PV_LIST, PV_DICT */
        uint32_t rec;          /* PV_GLOBAL: allowlist row; PV_STORAGE: its persistent id tuple;
                                * PV_TENSOR: its _rebuild_tensor_v2 argument tuple */
    } u;
} pv;

#define NO_VALUE UINT32_MAX

typedef struct vm {
    const uint8_t *data; size_t len, pos;
    size_t op_off; uint8_t op;          /* the opcode being run, for messages */
    const char *file; qm_error *err;
    const char *field;                  /* set once the pickle has run: errors are about its result */
    pv *vals; uint32_t n_vals, cap_vals;
    uint64_t n_items;
    uint32_t *stack; uint32_t sp, stack_cap;
    uint32_t marks[QC_PICKLE_MAX_DEPTH]; uint32_t n_marks;
    uint32_t *memo; uint32_t memo_cap, memo_count;
} vm;

static const char *op_field(const vm *m)
{
    if (m->field) return m->field;
    return op_names[m->op] ? op_names[m->op] : "opcode";
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static qm_status fail(vm *m, qm_status code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qm_fail(m->err, code, m->file, op_field(m), m->op_off, "%s", msg);
}

static qm_status nomem(vm *m)
{
    return fail(m, QM_ERR_NOMEM, "out of memory");
}

/* Grow *arr (elements of `elem` bytes, capacity *cap) so that index `need` fits, up to `limit`. */
static bool grow_to(void **arr, uint32_t *cap, uint32_t need, uint32_t limit, size_t elem)
{
    if (need < *cap) return true;
    uint64_t c = *cap ? *cap : 16;
    while (c <= need) c *= 2;
    if (c > limit) c = limit;
    if (c <= need || c > SIZE_MAX / elem) return false;
    void *p = realloc(*arr, (size_t)c * elem);
    if (!p) return false;
    *arr = p;
    *cap = (uint32_t)c;
    return true;
}

static qm_status new_value(vm *m, pv_type type, uint32_t *out)
{
    if (m->n_vals >= QC_PICKLE_MAX_VALUES)
        return fail(m, QM_ERR_BAD_SOURCE, "more than %u values: not a state_dict", QC_PICKLE_MAX_VALUES);
    if (!grow_to((void **)&m->vals, &m->cap_vals, m->n_vals, QC_PICKLE_MAX_VALUES, sizeof *m->vals))
        return nomem(m);
    m->vals[m->n_vals] = (pv){ .type = (uint8_t)type };
    *out = m->n_vals++;
    return QM_OK;
}

static bool is_container(const pv *v)
{
    return v->type == PV_TUPLE || v->type == PV_LIST || v->type == PV_DICT;
}

/* Append element `child` to container `c`, keeping the depth and the item count within their caps. */
static qm_status add_item(vm *m, uint32_t c, uint32_t child)
{
    unsigned d = (unsigned)m->vals[child].depth + 1;
    if (d > QC_PICKLE_MAX_DEPTH)
        return fail(m, QM_ERR_BAD_SOURCE, "containers nest deeper than %u levels", QC_PICKLE_MAX_DEPTH);
    if (m->n_items >= QC_PICKLE_MAX_ITEMS)
        return fail(m, QM_ERR_BAD_SOURCE, "more than %u container elements: not a state_dict",
                    QC_PICKLE_MAX_ITEMS);
    pv *v = &m->vals[c];
    if (!grow_to((void **)&v->u.items, &v->cap, v->n, QC_PICKLE_MAX_ITEMS, sizeof *v->u.items))
        return nomem(m);
    v->u.items[v->n++] = child;
    if (d > v->depth) v->depth = (uint8_t)d;
    m->n_items++;
    return QM_OK;
}

/* ---- stack, marks, memo ---- */

static uint32_t stack_base(const vm *m)
{
    return m->n_marks ? m->marks[m->n_marks - 1] : 0;
}

static qm_status push(vm *m, uint32_t v)
{
    if (m->sp >= QC_PICKLE_MAX_STACK)
        return fail(m, QM_ERR_BAD_SOURCE, "stack holds more than %u values", QC_PICKLE_MAX_STACK);
    if (!grow_to((void **)&m->stack, &m->stack_cap, m->sp, QC_PICKLE_MAX_STACK, sizeof *m->stack))
        return nomem(m);
    m->stack[m->sp++] = v;
    return QM_OK;
}

/* Python keeps the values above the last MARK on a separate list, so a pop never crosses a MARK. */
static qm_status pop(vm *m, uint32_t *v)
{
    if (m->sp <= stack_base(m)) return fail(m, QM_ERR_BAD_SOURCE, "stack underflow");
    *v = m->stack[--m->sp];
    return QM_OK;
}

static qm_status top(vm *m, uint32_t *v)
{
    if (m->sp <= stack_base(m)) return fail(m, QM_ERR_BAD_SOURCE, "stack underflow (no value to use)");
    *v = m->stack[m->sp - 1];
    return QM_OK;
}

/* Remove the values above the last MARK and the MARK: they are stack[*first .. *first + *count). They
 * stay readable until the next push. */
static qm_status pop_mark(vm *m, uint32_t *first, uint32_t *count)
{
    if (!m->n_marks) return fail(m, QM_ERR_BAD_SOURCE, "no MARK to pop to");
    uint32_t base = m->marks[--m->n_marks];
    *first = base;
    *count = m->sp - base;
    m->sp = base;
    return QM_OK;
}

static qm_status memo_put(vm *m, uint64_t key)
{
    uint32_t v = 0;
    qm_status st = top(m, &v);
    if (st) return st;
    if (key >= QC_PICKLE_MAX_MEMO)
        return fail(m, QM_ERR_BAD_SOURCE, "memo key %llu is above the cap of %u", (unsigned long long)key,
                    QC_PICKLE_MAX_MEMO);
    uint32_t old_cap = m->memo_cap;
    if (!grow_to((void **)&m->memo, &m->memo_cap, (uint32_t)key, QC_PICKLE_MAX_MEMO, sizeof *m->memo))
        return nomem(m);
    for (uint32_t i = old_cap; i < m->memo_cap; i++) m->memo[i] = NO_VALUE;
    if (m->memo[key] == NO_VALUE) m->memo_count++;
    m->memo[key] = v;
    return QM_OK;
}

static qm_status memo_get(vm *m, uint64_t key)
{
    if (key >= m->memo_cap || m->memo[key] == NO_VALUE)
        return fail(m, QM_ERR_BAD_SOURCE, "memo key %llu was never set", (unsigned long long)key);
    return push(m, m->memo[key]);
}

/* ---- reading operands ---- */

static qm_status need(vm *m, uint64_t n, const uint8_t **p)
{
    if (n > m->len - m->pos)
        return fail(m, QM_ERR_BAD_SOURCE, "truncated: needs %llu bytes, %llu left", (unsigned long long)n,
                    (unsigned long long)(m->len - m->pos));
    *p = m->data + m->pos;
    m->pos += (size_t)n;
    return QM_OK;
}

static qm_status push_new(vm *m, pv_type type)
{
    uint32_t v = 0;
    qm_status st = new_value(m, type, &v);
    if (st) return st;
    return push(m, v);
}

static qm_status push_int(vm *m, int64_t i)
{
    uint32_t v = 0;
    qm_status st = new_value(m, PV_INT, &v);
    if (st) return st;
    m->vals[v].u.i = i;
    return push(m, v);
}

/* LONG1/LONG4: little-endian two's complement of n bytes; only what fits int64 is accepted. */
static qm_status push_long(vm *m, uint64_t n)
{
    if (n > 8)
        return fail(m, QM_ERR_BAD_SOURCE, "integer of %llu bytes does not fit 64 bits", (unsigned long long)n);
    const uint8_t *p = NULL;
    qm_status st = need(m, n, &p);
    if (st) return st;
    uint64_t u = 0;
    for (uint64_t k = 0; k < n; k++) u |= (uint64_t)p[k] << (8 * k);
    if (n > 0 && n < 8 && (p[n - 1] & 0x80)) u |= ~0ull << (8 * n);
    return push_int(m, (int64_t)u);
}

static qm_status push_string(vm *m, uint64_t len, bool is_str)
{
    if (len > QC_PICKLE_MAX_STRING)
        return fail(m, QM_ERR_BAD_SOURCE, "string of %llu bytes is longer than the cap of %u",
                    (unsigned long long)len, QC_PICKLE_MAX_STRING);
    const uint8_t *p = NULL;
    qm_status st = need(m, len, &p);
    if (st) return st;
    if (is_str && !qm_utf8_valid(p, len, true))
        return fail(m, QM_ERR_BAD_SOURCE, "string is not valid UTF-8");
    uint32_t v = 0;
    if ((st = new_value(m, is_str ? PV_STR : PV_BYTES, &v))) return st;
    m->vals[v].u.s.p = p;
    m->vals[v].u.s.len = (uint32_t)len;
    return push(m, v);
}

/* ---- globals ---- */

static qm_status push_global(vm *m, const uint8_t *mod, size_t mod_len, const uint8_t *name, size_t name_len)
{
    for (uint32_t i = 0; i < N_ALLOWED; i++) {
        const struct allowed *a = &allowlist[i];
        if (strlen(a->module) == mod_len && !memcmp(a->module, mod, mod_len) && strlen(a->name) == name_len &&
            !memcmp(a->name, name, name_len)) {
            uint32_t v = 0;
            qm_status st = new_value(m, PV_GLOBAL, &v);
            if (st) return st;
            m->vals[v].u.rec = i;
            return push(m, v);
        }
    }
    int ml = mod_len > 120 ? 120 : (int)mod_len, nl = name_len > 120 ? 120 : (int)name_len;
    return fail(m, QM_ERR_FORBIDDEN, "global '%.*s.%.*s' is not allowed: a state_dict only needs "
                "OrderedDict, torch._utils._rebuild_* and torch storage types", ml, (const char *)mod, nl,
                (const char *)name);
}

/* GLOBAL's operands are two newline-terminated lines. */
static qm_status read_line(vm *m, const uint8_t **p, size_t *len)
{
    size_t left = m->len - m->pos, lim = left < QC_PICKLE_MAX_GLOBAL + 1 ? left : QC_PICKLE_MAX_GLOBAL + 1;
    const uint8_t *nl = memchr(m->data + m->pos, '\n', lim);
    if (!nl) {
        if (lim == left) return fail(m, QM_ERR_BAD_SOURCE, "truncated: line has no newline");
        return fail(m, QM_ERR_FORBIDDEN, "global name longer than %u bytes is not allowed", QC_PICKLE_MAX_GLOBAL);
    }
    *p = m->data + m->pos;
    *len = (size_t)(nl - *p);
    m->pos += *len + 1;
    return QM_OK;
}

static const struct allowed *global_of(const vm *m, uint32_t v)
{
    return m->vals[v].type == PV_GLOBAL ? &allowlist[m->vals[v].u.rec] : NULL;
}

/* ---- calls ---- */

static const pv *item(const vm *m, const pv *c, uint32_t k)
{
    return &m->vals[c->u.items[k]];
}

static bool get_int(const pv *v, int64_t *out)
{
    if (v->type != PV_INT && v->type != PV_BOOL) return false;
    *out = v->u.i;
    return true;
}

/* A parameter's saved Python state: None, a dict, or a (dict|None, dict|None) pair (torch's
 * _get_obj_state). Its contents are attributes, not weights, and are ignored. */
static bool simple_state(const vm *m, const pv *s)
{
    if (s->type == PV_NONE || s->type == PV_DICT) return true;
    if (s->type != PV_TUPLE || s->n != 2) return false;
    for (uint32_t k = 0; k < 2; k++) {
        uint8_t t = item(m, s, k)->type;
        if (t != PV_NONE && t != PV_DICT) return false;
    }
    return true;
}

/* _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]) */
static qm_status rebuild_tensor(vm *m, uint32_t a)
{
    const pv *args = &m->vals[a];
    if (args->n != 6 && args->n != 7)
        return fail(m, QM_ERR_BAD_SOURCE, "_rebuild_tensor_v2 takes 6 or 7 arguments, not %u", args->n);
    const pv *storage = item(m, args, 0), *size = item(m, args, 2), *stride = item(m, args, 3);
    const pv *hooks = item(m, args, 5);
    int64_t off, flag;
    if (storage->type != PV_STORAGE)
        return fail(m, QM_ERR_BAD_SOURCE, "_rebuild_tensor_v2 argument 1 is a %s, not a storage",
                    pv_names[storage->type]);
    if (!get_int(item(m, args, 1), &off) || off < 0)
        return fail(m, QM_ERR_BAD_SOURCE, "_rebuild_tensor_v2 storage_offset is not an int >= 0");
    if (size->type != PV_TUPLE || stride->type != PV_TUPLE)
        return fail(m, QM_ERR_BAD_SOURCE, "_rebuild_tensor_v2 size and stride must be tuples");
    if (size->n != stride->n)
        return fail(m, QM_ERR_BAD_SOURCE, "_rebuild_tensor_v2 has %u sizes but %u strides", size->n, stride->n);
    if (size->n > QC_MAX_RANK)
        return fail(m, QM_ERR_UNSUPPORTED, "tensor has %u dimensions; at most %d are supported", size->n,
                    QC_MAX_RANK);
    if (!get_int(item(m, args, 4), &flag))
        return fail(m, QM_ERR_BAD_SOURCE, "_rebuild_tensor_v2 requires_grad is a %s, not a bool",
                    pv_names[item(m, args, 4)->type]);
    if (hooks->type != PV_DICT && hooks->type != PV_NONE)
        return fail(m, QM_ERR_BAD_SOURCE, "_rebuild_tensor_v2 backward_hooks is a %s, not a dict",
                    pv_names[hooks->type]);
    if (args->n == 7) {
        /* torch adds metadata only when it is non-empty (conjugate/negative bits): such a view of the
         * bytes is not the tensor's value */
        const pv *meta = item(m, args, 6);
        if (meta->type == PV_DICT && meta->n > 0)
            return fail(m, QM_ERR_UNSUPPORTED, "tensor carries metadata (conjugate or negative bit)");
        if (meta->type != PV_DICT && meta->type != PV_NONE)
            return fail(m, QM_ERR_BAD_SOURCE, "_rebuild_tensor_v2 metadata is a %s, not a dict",
                        pv_names[meta->type]);
    }
    for (uint32_t k = 0; k < size->n; k++) {
        int64_t d, s;
        if (!get_int(item(m, size, k), &d) || d < 0)
            return fail(m, QM_ERR_BAD_SOURCE, "size[%u] is not an int >= 0", k);
        if (!get_int(item(m, stride, k), &s))
            return fail(m, QM_ERR_BAD_SOURCE, "stride[%u] is not an int", k);
    }
    uint32_t v = 0;
    qm_status st = new_value(m, PV_TENSOR, &v);
    if (st) return st;
    m->vals[v].u.rec = a;
    m->vals[v].n = (uint32_t)m->op_off;
    return push(m, v);
}

static qm_status op_reduce(vm *m)
{
    uint32_t a = 0, f = 0;
    qm_status st;
    if ((st = pop(m, &a)) || (st = pop(m, &f))) return st;
    const pv *args = &m->vals[a];
    const struct allowed *g = global_of(m, f);
    if (!g)
        return fail(m, QM_ERR_FORBIDDEN, "REDUCE calls a %s; only allowlisted globals may be called",
                    pv_names[m->vals[f].type]);
    if (g->id == G_STORAGE_TYPE || g->id == G_DTYPE)
        return fail(m, QM_ERR_FORBIDDEN, "REDUCE may not call %s.%s", g->module, g->name);
    if (args->type != PV_TUPLE)
        return fail(m, QM_ERR_BAD_SOURCE, "REDUCE arguments are a %s, not a tuple", pv_names[args->type]);
    uint32_t v = 0;
    switch (g->id) {
    case G_ORDERED_DICT:
        if (args->n != 0)
            return fail(m, QM_ERR_UNSUPPORTED, "collections.OrderedDict called with %u arguments", args->n);
        if ((st = new_value(m, PV_DICT, &v))) return st;
        return push(m, v);
    case G_REBUILD_TENSOR_V2:
        return rebuild_tensor(m, a);
    case G_REBUILD_PARAMETER:
    case G_REBUILD_PARAMETER_WITH_STATE: {
        uint32_t want = g->id == G_REBUILD_PARAMETER ? 3 : 4;
        if (args->n != want)
            return fail(m, QM_ERR_BAD_SOURCE, "%s takes %u arguments, not %u", g->name, want, args->n);
        uint32_t data = args->u.items[0];
        int64_t flag;
        if (m->vals[data].type != PV_TENSOR)
            return fail(m, QM_ERR_BAD_SOURCE, "%s argument 1 is a %s, not a tensor", g->name,
                        pv_names[m->vals[data].type]);
        if (!get_int(item(m, args, 1), &flag))
            return fail(m, QM_ERR_BAD_SOURCE, "%s requires_grad is not a bool", g->name);
        uint8_t ht = item(m, args, 2)->type;
        if (ht != PV_DICT && ht != PV_NONE)
            return fail(m, QM_ERR_BAD_SOURCE, "%s backward_hooks is a %s, not a dict", g->name, pv_names[ht]);
        if (want == 4 && !simple_state(m, item(m, args, 3)))
            return fail(m, QM_ERR_UNSUPPORTED, "parameter state is a %s, not a dict",
                        pv_names[item(m, args, 3)->type]);
        return push(m, data);   /* a Parameter is its tensor, as far as the weights go */
    }
    case G_STORAGE_TYPE:
    case G_DTYPE:
        break;
    }
    return fail(m, QM_ERR_FORBIDDEN, "REDUCE may not call %s.%s", g->module, g->name);
}

static bool storage_key_ok(const uint8_t *k, uint32_t len)
{
    if (len == 0 || len > 64) return false;
    if ((len == 1 && k[0] == '.') || (len == 2 && k[0] == '.' && k[1] == '.')) return false;
    for (uint32_t i = 0; i < len; i++) {
        uint8_t c = k[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              c == '.' || c == '-'))
            return false;
    }
    return true;
}

/* BINPERSID: ('storage', torch.<T>Storage, key, location, numel) names the archive entry data/<key>. */
static qm_status op_persid(vm *m)
{
    uint32_t p = 0;
    qm_status st = pop(m, &p);
    if (st) return st;
    const pv *pid = &m->vals[p];
    if (pid->type != PV_TUPLE || pid->n == 0)
        return fail(m, QM_ERR_BAD_SOURCE, "persistent id is a %s, not a ('storage', …) tuple", pv_names[pid->type]);
    const pv *kind = item(m, pid, 0);
    if (kind->type != PV_STR || kind->u.s.len != 7 || memcmp(kind->u.s.p, "storage", 7) != 0)
        return fail(m, QM_ERR_UNSUPPORTED, "persistent id is not a 'storage' record");
    if (pid->n != 5)
        return fail(m, QM_ERR_BAD_SOURCE, "storage persistent id has %u fields, not 5", pid->n);
    const struct allowed *g = global_of(m, pid->u.items[1]);
    const pv *key = item(m, pid, 2), *loc = item(m, pid, 3);
    int64_t numel;
    if (!g || g->id != G_STORAGE_TYPE)
        return fail(m, QM_ERR_BAD_SOURCE, "storage persistent id field 2 is not a torch storage type");
    if (key->type != PV_STR || !storage_key_ok(key->u.s.p, key->u.s.len))
        return fail(m, QM_ERR_BAD_SOURCE, "storage key is not 1-64 characters of [A-Za-z0-9_.-]");
    if (loc->type != PV_STR)
        return fail(m, QM_ERR_BAD_SOURCE, "storage location is a %s, not a str", pv_names[loc->type]);
    if (!get_int(item(m, pid, 4), &numel) || numel < 0)
        return fail(m, QM_ERR_BAD_SOURCE, "storage size is not an int >= 0");
    uint32_t v = 0;
    if ((st = new_value(m, PV_STORAGE, &v))) return st;   /* moves m->vals: pid, key, loc are stale */
    m->vals[v].u.rec = p;
    return push(m, v);
}

/* BUILD sets Python attributes (an OrderedDict's _metadata, a Parameter's __dict__): never weights. */
static qm_status op_build(vm *m)
{
    uint32_t s = 0, o = 0;
    qm_status st;
    if ((st = pop(m, &s)) || (st = top(m, &o))) return st;
    uint8_t t = m->vals[o].type;
    if (t != PV_DICT && t != PV_TENSOR)
        return fail(m, QM_ERR_FORBIDDEN, "BUILD on a %s is not allowed (only on an OrderedDict or a tensor)",
                    pv_names[t]);
    if (!simple_state(m, &m->vals[s]))
        return fail(m, QM_ERR_BAD_SOURCE, "BUILD state is a %s, not a dict", pv_names[m->vals[s].type]);
    return QM_OK;
}

/* ---- containers ---- */

static qm_status make_container(vm *m, pv_type type, uint32_t first, uint32_t count)
{
    uint32_t v = 0;
    qm_status st = new_value(m, type, &v);
    if (st) return st;
    for (uint32_t k = 0; k < count; k++)
        if ((st = add_item(m, v, m->stack[first + k]))) return st;
    return push(m, v);   /* the slot of the popped values is reused: they were copied above */
}

static qm_status append_to(vm *m, uint32_t c, pv_type want, uint32_t first, uint32_t count)
{
    if (m->vals[c].type != want)
        return fail(m, QM_ERR_BAD_SOURCE, "target is a %s, not a %s", pv_names[m->vals[c].type], pv_names[want]);
    if (want == PV_DICT && count % 2)
        return fail(m, QM_ERR_BAD_SOURCE, "odd number (%u) of keys and values", count);
    for (uint32_t k = 0; k < count; k++) {
        qm_status st = add_item(m, c, m->stack[first + k]);
        if (st) return st;
    }
    return QM_OK;
}

/* ---- the loop ---- */

static qm_status step(vm *m, bool *stop)
{
    const uint8_t *p = NULL;
    uint32_t a = 0, b = 0, first = 0, count = 0, v = 0;
    qm_status st;
    m->op_off = m->pos;
    m->op = m->data[m->pos++];
    switch (m->op) {
    case OP_PROTO:
        if ((st = need(m, 1, &p))) return st;
        if (p[0] < 2 || p[0] > 5) return fail(m, QM_ERR_UNSUPPORTED, "pickle protocol %u (2-5 supported)", p[0]);
        return QM_OK;
    case OP_FRAME:
        /* frames only group the bytes for buffered reading; the whole pickle is in memory */
        if ((st = need(m, 8, &p))) return st;
        if (qm_load_u64(p) > m->len - m->pos)
            return fail(m, QM_ERR_BAD_SOURCE, "truncated: frame of %llu bytes, %llu left",
                        (unsigned long long)qm_load_u64(p), (unsigned long long)(m->len - m->pos));
        return QM_OK;
    case OP_STOP:
        if ((st = pop(m, &v))) return st;
        m->stack[m->sp++] = v;   /* leave the result on the stack for the caller */
        *stop = true;
        return QM_OK;
    case OP_NONE: return push_new(m, PV_NONE);
    case OP_NEWTRUE:
    case OP_NEWFALSE:
        if ((st = new_value(m, PV_BOOL, &v))) return st;
        m->vals[v].u.i = m->op == OP_NEWTRUE;
        return push(m, v);
    case OP_BININT:
        if ((st = need(m, 4, &p))) return st;
        return push_int(m, (int32_t)qm_load_u32(p));
    case OP_BININT1:
        if ((st = need(m, 1, &p))) return st;
        return push_int(m, p[0]);
    case OP_BININT2:
        if ((st = need(m, 2, &p))) return st;
        return push_int(m, qm_load_u16(p));
    case OP_LONG1:
        if ((st = need(m, 1, &p))) return st;
        return push_long(m, p[0]);
    case OP_LONG4: {
        if ((st = need(m, 4, &p))) return st;
        int32_t n = (int32_t)qm_load_u32(p);
        if (n < 0) return fail(m, QM_ERR_BAD_SOURCE, "negative length %d", (int)n);
        return push_long(m, (uint64_t)n);
    }
    case OP_BINFLOAT: {
        if ((st = need(m, 8, &p))) return st;
        uint64_t u = 0;
        for (int k = 0; k < 8; k++) u = (u << 8) | p[k];   /* big-endian, unlike everything else */
        if ((st = new_value(m, PV_FLOAT, &v))) return st;
        memcpy(&m->vals[v].u.f, &u, sizeof u);
        return push(m, v);
    }
    case OP_SHORT_BINUNICODE:
    case OP_SHORT_BINSTRING:
    case OP_SHORT_BINBYTES:
        if ((st = need(m, 1, &p))) return st;
        return push_string(m, p[0], m->op != OP_SHORT_BINBYTES);
    case OP_BINUNICODE:
    case OP_BINBYTES:
        if ((st = need(m, 4, &p))) return st;
        return push_string(m, qm_load_u32(p), m->op == OP_BINUNICODE);
    case OP_BINSTRING: {
        if ((st = need(m, 4, &p))) return st;
        int32_t n = (int32_t)qm_load_u32(p);
        if (n < 0) return fail(m, QM_ERR_BAD_SOURCE, "negative length %d", (int)n);
        return push_string(m, (uint64_t)n, true);   /* torch.load decodes py2 strings as UTF-8 */
    }
    case OP_BINUNICODE8:
    case OP_BINBYTES8:
        if ((st = need(m, 8, &p))) return st;
        return push_string(m, qm_load_u64(p), m->op == OP_BINUNICODE8);
    case OP_EMPTY_DICT: return push_new(m, PV_DICT);
    case OP_EMPTY_LIST: return push_new(m, PV_LIST);
    case OP_EMPTY_TUPLE: return push_new(m, PV_TUPLE);
    case OP_MARK:
        if (m->n_marks >= QC_PICKLE_MAX_DEPTH)
            return fail(m, QM_ERR_BAD_SOURCE, "more than %u open MARKs", QC_PICKLE_MAX_DEPTH);
        m->marks[m->n_marks++] = m->sp;
        return QM_OK;
    case OP_TUPLE:
        if ((st = pop_mark(m, &first, &count))) return st;
        return make_container(m, PV_TUPLE, first, count);
    case OP_TUPLE1:
    case OP_TUPLE2:
    case OP_TUPLE3:
        count = (uint32_t)(m->op - OP_TUPLE1 + 1);
        if (m->sp - stack_base(m) < count)
            return fail(m, QM_ERR_BAD_SOURCE, "stack underflow: needs %u values", count);
        m->sp -= count;
        return make_container(m, PV_TUPLE, m->sp, count);
    case OP_LIST:
        if ((st = pop_mark(m, &first, &count))) return st;
        return make_container(m, PV_LIST, first, count);
    case OP_DICT:
        if ((st = pop_mark(m, &first, &count))) return st;
        if (count % 2) return fail(m, QM_ERR_BAD_SOURCE, "odd number (%u) of keys and values", count);
        return make_container(m, PV_DICT, first, count);
    case OP_APPEND:
        if ((st = pop(m, &a)) || (st = top(m, &b))) return st;
        if (m->vals[b].type != PV_LIST)
            return fail(m, QM_ERR_BAD_SOURCE, "target is a %s, not a list", pv_names[m->vals[b].type]);
        return add_item(m, b, a);
    case OP_APPENDS:
        if ((st = pop_mark(m, &first, &count)) || (st = top(m, &b))) return st;
        return append_to(m, b, PV_LIST, first, count);
    case OP_SETITEM: {
        uint32_t key = 0;
        if ((st = pop(m, &v)) || (st = pop(m, &key)) || (st = top(m, &b))) return st;
        if (m->vals[b].type != PV_DICT)
            return fail(m, QM_ERR_BAD_SOURCE, "target is a %s, not a dict", pv_names[m->vals[b].type]);
        if ((st = add_item(m, b, key))) return st;
        return add_item(m, b, v);
    }
    case OP_SETITEMS:
        if ((st = pop_mark(m, &first, &count)) || (st = top(m, &b))) return st;
        return append_to(m, b, PV_DICT, first, count);
    case OP_BINPUT:
        if ((st = need(m, 1, &p))) return st;
        return memo_put(m, p[0]);
    case OP_LONG_BINPUT:
        if ((st = need(m, 4, &p))) return st;
        return memo_put(m, qm_load_u32(p));
    case OP_MEMOIZE:
        return memo_put(m, m->memo_count);
    case OP_BINGET:
        if ((st = need(m, 1, &p))) return st;
        return memo_get(m, p[0]);
    case OP_LONG_BINGET:
        if ((st = need(m, 4, &p))) return st;
        return memo_get(m, qm_load_u32(p));
    case OP_GLOBAL: {
        const uint8_t *mod, *name;
        size_t ml, nl;
        if ((st = read_line(m, &mod, &ml)) || (st = read_line(m, &name, &nl))) return st;
        return push_global(m, mod, ml, name, nl);
    }
    case OP_STACK_GLOBAL: {
        if ((st = pop(m, &b)) || (st = pop(m, &a))) return st;
        const pv *mod = &m->vals[a], *name = &m->vals[b];
        if (mod->type != PV_STR || name->type != PV_STR)
            return fail(m, QM_ERR_BAD_SOURCE, "STACK_GLOBAL operands are a %s and a %s, not strings",
                        pv_names[mod->type], pv_names[name->type]);
        return push_global(m, mod->u.s.p, mod->u.s.len, name->u.s.p, name->u.s.len);
    }
    case OP_REDUCE: return op_reduce(m);
    case OP_BUILD: return op_build(m);
    case OP_BINPERSID: return op_persid(m);
    default:
        if (op_names[m->op])
            return fail(m, QM_ERR_FORBIDDEN, "opcode %s (0x%02x) is not allowed in a state_dict pickle",
                        op_names[m->op], m->op);
        return fail(m, QM_ERR_FORBIDDEN, "unknown opcode 0x%02x", m->op);
    }
}

/* ---- the state_dict ---- */

static bool is_tensor_dict(const vm *m, const pv *d)
{
    if (d->type != PV_DICT) return false;
    for (uint32_t k = 0; k < d->n; k += 2)
        if (item(m, d, k)->type != PV_STR || item(m, d, k + 1)->type != PV_TENSOR) return false;
    return true;
}

static bool key_is(const pv *k, const char *s)
{
    size_t n = strlen(s);
    return k->type == PV_STR && k->u.s.len == n && !memcmp(k->u.s.p, s, n);
}

typedef struct name_ref { const uint8_t *p; uint32_t len; uint32_t pickle_offset; } name_ref;

static int cmp_name(const void *x, const void *y)
{
    const name_ref *a = x, *b = y;
    uint32_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->p, b->p, n);
    if (c) return c;
    return (a->len > b->len) - (a->len < b->len);
}

static qm_status emit(vm *m, const pv *d, qc_pickle_result *out)
{
    size_t n = d->n / 2;
    name_ref *names = malloc((n ? n : 1) * sizeof *names);
    out->tensors = calloc(n ? n : 1, sizeof *out->tensors);
    if (!names || !out->tensors) { free(names); return nomem(m); }
    for (size_t k = 0; k < n; k++) {
        const pv *key = item(m, d, (uint32_t)(2 * k)), *val = item(m, d, (uint32_t)(2 * k + 1));
        names[k] = (name_ref){ key->u.s.p, key->u.s.len, val->n };
    }
    qsort(names, n, sizeof *names, cmp_name);
    for (size_t k = 0; k + 1 < n; k++)
        if (!cmp_name(&names[k], &names[k + 1])) {
            qm_status st = qm_fail(m->err, QM_ERR_BAD_SOURCE, m->file, "state_dict", names[k + 1].pickle_offset,
                                   "duplicate tensor name '%.*s'", (int)(names[k].len > 200 ? 200 : names[k].len),
                                   (const char *)names[k].p);
            free(names);
            return st;
        }
    free(names);
    for (size_t k = 0; k < n; k++) {
        const pv *key = item(m, d, (uint32_t)(2 * k));
        const pv *tv = item(m, d, (uint32_t)(2 * k + 1));
        if (memchr(key->u.s.p, 0, key->u.s.len) || key->u.s.len == 0)
            return qm_fail(m->err, QM_ERR_BAD_SOURCE, m->file, "state_dict", tv->n,
                           "tensor name is empty or holds a NUL byte");
        /* rebuild_tensor() and op_persid() checked every field used here */
        const pv *args = &m->vals[tv->u.rec];
        const pv *pid = &m->vals[item(m, args, 0)->u.rec];
        const pv *skey = item(m, pid, 2), *size = item(m, args, 2), *stride = item(m, args, 3);
        qc_pickle_tensor *o = &out->tensors[out->n_tensors];
        o->name = malloc((size_t)key->u.s.len + 1);
        o->storage_key = malloc((size_t)skey->u.s.len + 1);
        out->n_tensors++;   /* counted now so that a failure below frees what was allocated */
        if (!o->name || !o->storage_key) return nomem(m);
        memcpy(o->name, key->u.s.p, key->u.s.len);
        o->name[key->u.s.len] = 0;
        memcpy(o->storage_key, skey->u.s.p, skey->u.s.len);
        o->storage_key[skey->u.s.len] = 0;
        o->dtype = global_of(m, pid->u.items[1])->dtype;
        o->storage_numel = (uint64_t)item(m, pid, 4)->u.i;
        o->offset = (uint64_t)item(m, args, 1)->u.i;
        o->rank = size->n;
        for (uint32_t j = 0; j < size->n; j++) {
            o->shape[j] = (uint64_t)item(m, size, j)->u.i;
            o->stride[j] = item(m, stride, j)->u.i;
        }
        o->pickle_offset = tv->n;
    }
    return QM_OK;
}

/* The state_dict is the top-level dict if all its values are tensors, else its one "state_dict" or
 * "model" entry that is such a dict (a training checkpoint: {"model": …, "optimizer": …, "epoch": 3}). */
static qm_status find_state_dict(vm *m, uint32_t root, const pv **out)
{
    const pv *r = &m->vals[root];
    m->field = "top-level object";
    if (r->type != PV_DICT)
        return fail(m, QM_ERR_BAD_SOURCE, "the pickled object is a %s, not a dict of tensors", pv_names[r->type]);
    if (is_tensor_dict(m, r)) { *out = r; return QM_OK; }
    const pv *found = NULL;
    unsigned n_found = 0;
    for (uint32_t k = 0; k < r->n; k += 2) {
        const pv *key = item(m, r, k), *val = item(m, r, k + 1);
        if ((key_is(key, "state_dict") || key_is(key, "model")) && is_tensor_dict(m, val)) {
            found = val;
            n_found++;
        }
    }
    if (n_found == 1) { *out = found; return QM_OK; }
    if (n_found > 1)
        return fail(m, QM_ERR_UNSUPPORTED, "both 'state_dict' and 'model' entries hold tensors: which one is "
                    "the model is ambiguous");
    for (uint32_t k = 0; k < r->n; k += 2) {
        const pv *key = item(m, r, k), *val = item(m, r, k + 1);
        if (key->type != PV_STR)
            return fail(m, QM_ERR_UNSUPPORTED, "the top-level dict has a %s key, and no 'state_dict' or "
                        "'model' entry holding a dict of tensors", pv_names[key->type]);
        if (val->type != PV_TENSOR)
            return fail(m, QM_ERR_UNSUPPORTED, "top-level entry '%.*s' is a %s, and no 'state_dict' or 'model' "
                        "entry holds a dict of tensors", (int)(key->u.s.len > 100 ? 100 : key->u.s.len),
                        (const char *)key->u.s.p, pv_names[val->type]);
    }
    return fail(m, QM_ERR_UNSUPPORTED, "no dict of tensors found");   /* not reached: r would be one */
}

static void vm_free(vm *m)
{
    for (uint32_t i = 0; i < m->n_vals; i++)
        if (is_container(&m->vals[i])) free(m->vals[i].u.items);
    free(m->vals);
    free(m->stack);
    free(m->memo);
}

void qc_pickle_result_free(qc_pickle_result *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n_tensors; i++) {
        free(r->tensors[i].name);
        free(r->tensors[i].storage_key);
    }
    free(r->tensors);
    r->tensors = NULL;
    r->n_tensors = 0;
}

qm_status qc_pickle_read_state_dict(const uint8_t *data, size_t len, const char *file,
                                    qc_pickle_result *out, qm_error *err)
{
    *out = (qc_pickle_result){ 0 };
    vm m = { .data = data, .len = len, .file = file, .err = err };
    if (len > QC_PICKLE_MAX_INPUT)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, NULL, QM_NO_OFFSET, "pickle of %llu bytes is above the cap "
                       "of %llu", (unsigned long long)len, (unsigned long long)QC_PICKLE_MAX_INPUT);
    qm_status st = QM_OK;
    bool stop = false;
    while (!st && !stop) {
        if (m.pos >= m.len) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, file, NULL, m.pos, "truncated: the pickle ends without STOP");
            break;
        }
        st = step(&m, &stop);
    }
    if (!st && m.pos != m.len)
        st = qm_fail(err, QM_ERR_BAD_SOURCE, file, "STOP", m.op_off, "%llu bytes follow STOP",
                     (unsigned long long)(m.len - m.pos));
    const pv *sd = NULL;
    if (!st) st = find_state_dict(&m, m.stack[m.sp - 1], &sd);
    if (!st) st = emit(&m, sd, out);
    if (st) qc_pickle_result_free(out);
    vm_free(&m);
    return st;
}
