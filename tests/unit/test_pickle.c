/* test_pickle — the restricted unpickler (convert/qc_pickle.c) and the torch.save zip importer
 * (convert/qc_torch.c).
 *
 * Pickles are assembled opcode by opcode by the small writers below, so each test shows the program it
 * feeds. Archives are the fixtures tests/fuzz/make_torch_seeds.py wrote with torch.save into
 * $QM_SEEDS_DIR/torchzip (default tests/fuzz/seeds/torchzip: the tests run from the repository root);
 * their values are arange()s, checked here element by element.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "qc_pickle.h"
#include "qc_source.h"
#include "test_util.h"

/* ---- a pickle writer ---- */

typedef struct pk { uint8_t *b; size_t n, cap; } pk;

static void pk_bytes(pk *p, const void *d, size_t n)
{
    if (p->n + n > p->cap) {
        p->cap = (p->n + n) * 2 + 64;
        p->b = realloc(p->b, p->cap);
        assert_non_null(p->b);
    }
    memcpy(p->b + p->n, d, n);
    p->n += n;
}
static void pk_op(pk *p, uint8_t op) { pk_bytes(p, &op, 1); }
static void pk_u32(pk *p, uint32_t v)
{
    uint8_t b[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
    pk_bytes(p, b, 4);
}
static void pk_u64(pk *p, uint64_t v) { pk_u32(p, (uint32_t)v); pk_u32(p, (uint32_t)(v >> 32)); }
static void pk_proto(pk *p) { pk_op(p, 0x80); pk_op(p, 2); }
static void pk_str(pk *p, const char *s)                 /* BINUNICODE */
{
    pk_op(p, 'X');
    pk_u32(p, (uint32_t)strlen(s));
    pk_bytes(p, s, strlen(s));
}
static void pk_int(pk *p, int32_t v)                     /* BININT */
{
    pk_op(p, 'J');
    pk_u32(p, (uint32_t)v);
}
static void pk_global(pk *p, const char *mod, const char *name)   /* GLOBAL "mod\nname\n" */
{
    pk_op(p, 'c');
    pk_bytes(p, mod, strlen(mod));
    pk_op(p, '\n');
    pk_bytes(p, name, strlen(name));
    pk_op(p, '\n');
}
static void pk_int_tuple(pk *p, uint32_t n, const int32_t *v)    /* MARK v… TUPLE */
{
    pk_op(p, '(');
    for (uint32_t i = 0; i < n; i++) pk_int(p, v[i]);
    pk_op(p, 't');
}

/* _rebuild_tensor_v2(('storage', torch.<storage>, key, 'cpu', numel), offset, shape, stride, False,
 * OrderedDict()) — what torch.save writes for one tensor. */
static void pk_tensor(pk *p, const char *storage, const char *key, int32_t numel, int32_t offset, uint32_t rank,
                      const int32_t *shape, const int32_t *stride)
{
    pk_global(p, "torch._utils", "_rebuild_tensor_v2");
    pk_op(p, '(');
    pk_op(p, '(');
    pk_str(p, "storage");
    pk_global(p, "torch", storage);
    pk_str(p, key);
    pk_str(p, "cpu");
    pk_int(p, numel);
    pk_op(p, 't');
    pk_op(p, 'Q');                                        /* BINPERSID */
    pk_int(p, offset);
    pk_int_tuple(p, rank, shape);
    pk_int_tuple(p, rank, stride);
    pk_op(p, 0x89);                                       /* NEWFALSE */
    pk_global(p, "collections", "OrderedDict");
    pk_op(p, ')');
    pk_op(p, 'R');
    pk_op(p, 't');
    pk_op(p, 'R');
}

static void pk_vector(pk *p, const char *key, int32_t n)
{
    int32_t shape[1] = { n }, stride[1] = { 1 };
    pk_tensor(p, "FloatStorage", key, n, 0, 1, shape, stride);
}

/* OrderedDict() MARK … SETITEMS: open with pk_odict_begin, add key/values, close with pk_odict_end. */
static void pk_odict_begin(pk *p)
{
    pk_global(p, "collections", "OrderedDict");
    pk_op(p, ')');
    pk_op(p, 'R');
    pk_op(p, '(');
}
static void pk_odict_end(pk *p) { pk_op(p, 'u'); }
static void pk_stop(pk *p) { pk_op(p, '.'); }

/* {"w": float[4] of storage "0"} */
static pk valid_pickle(void)
{
    pk p = { 0 };
    pk_proto(&p);
    pk_odict_begin(&p);
    pk_str(&p, "w");
    pk_vector(&p, "0", 4);
    pk_odict_end(&p);
    pk_stop(&p);
    return p;
}

static qm_status run(const pk *p, qc_pickle_result *r, qm_error *err)
{
    /* an exact-size heap copy, so that ASan sees any read past the end */
    uint8_t *copy = malloc(p->n ? p->n : 1);
    assert_non_null(copy);
    if (p->n) memcpy(copy, p->b, p->n);
    qm_status st = qc_pickle_read_state_dict(copy, p->n, "t.pkl", r, err);
    free(copy);
    if (st != QM_OK) {
        assert_int_equal(err->code, st);
        assert_null(r->tensors);
        assert_int_equal(r->n_tensors, 0);
    }
    return st;
}

/* Run `p`, expect `code` and a message containing `needle` (if not NULL); frees p. */
static void expect(pk *p, qm_status code, const char *needle)
{
    qc_pickle_result r;
    qm_error err;
    qm_status st = run(p, &r, &err);
    if (st != code) fail_msg("expected %s, got %s: %s", qm_status_name(code), qm_status_name(st), err.message);
    if (needle && !strstr(err.message, needle)) fail_msg("message lacks '%s': %s", needle, err.message);
    qc_pickle_result_free(&r);
    free(p->b);
    *p = (pk){ 0 };
}

/* ---- the reader's rules ---- */

static void test_valid_minimal(void **state)
{
    (void)state;
    pk p = valid_pickle();
    qc_pickle_result r;
    qm_error err;
    assert_int_equal(run(&p, &r, &err), QM_OK);
    assert_int_equal(r.n_tensors, 1);
    assert_string_equal(r.tensors[0].name, "w");
    assert_string_equal(r.tensors[0].storage_key, "0");
    assert_int_equal(r.tensors[0].dtype, QC_F32);
    assert_int_equal(r.tensors[0].storage_numel, 4);
    assert_int_equal(r.tensors[0].rank, 1);
    assert_int_equal(r.tensors[0].shape[0], 4);
    assert_int_equal(r.tensors[0].stride[0], 1);
    qc_pickle_result_free(&r);
    free(p.b);
}

/* A plain dict built with EMPTY_DICT/SETITEM, a parameter, memo reuse, and a strided view. */
static void test_valid_plain_dict_parameter_memo(void **state)
{
    (void)state;
    pk p = { 0 };
    pk_proto(&p);
    pk_op(&p, '}');
    pk_str(&p, "a");
    int32_t shape[2] = { 3, 2 }, stride[2] = { 1, 3 };
    pk_tensor(&p, "HalfStorage", "7", 6, 0, 2, shape, stride);
    pk_op(&p, 'q'); pk_op(&p, 5);                          /* BINPUT 5 */
    pk_op(&p, 's');
    pk_str(&p, "b");
    pk_op(&p, 'h'); pk_op(&p, 5);                          /* BINGET 5: the same tensor again (tied) */
    pk_op(&p, 's');
    pk_str(&p, "c");
    pk_global(&p, "torch._utils", "_rebuild_parameter");
    pk_vector(&p, "1", 2);
    pk_op(&p, 0x88);                                      /* NEWTRUE */
    pk_op(&p, '}');
    pk_op(&p, 0x87);                                      /* TUPLE3 */
    pk_op(&p, 'R');
    pk_op(&p, 's');
    pk_stop(&p);
    qc_pickle_result r;
    qm_error err;
    assert_int_equal(run(&p, &r, &err), QM_OK);
    assert_int_equal(r.n_tensors, 3);
    assert_string_equal(r.tensors[1].name, "b");
    assert_int_equal(r.tensors[1].dtype, QC_F16);
    assert_int_equal(r.tensors[1].stride[1], 3);
    assert_string_equal(r.tensors[1].storage_key, "7");
    assert_string_equal(r.tensors[2].name, "c");
    assert_string_equal(r.tensors[2].storage_key, "1");
    qc_pickle_result_free(&r);
    free(p.b);
}

static void test_forbidden_globals(void **state)
{
    (void)state;
    pk p = { 0 };
    /* GLOBAL os.system + REDUCE: refused at the GLOBAL (offset 2), before anything could be called */
    pk_proto(&p);
    pk_global(&p, "os", "system");
    pk_str(&p, "echo pwned");
    pk_op(&p, 0x85);
    pk_op(&p, 'R');
    pk_stop(&p);
    qc_pickle_result r;
    qm_error err;
    assert_int_equal(run(&p, &r, &err), QM_ERR_FORBIDDEN);
    assert_int_equal(err.offset, 2);
    assert_string_equal(err.field, "GLOBAL");
    assert_true(tu_contains(err.message, "'os.system'"));
    free(p.b);
    p = (pk){ 0 };

    pk_proto(&p);
    pk_global(&p, "builtins", "eval");
    expect(&p, QM_ERR_FORBIDDEN, "builtins.eval");

    /* STACK_GLOBAL names the callable with two strings on the stack */
    pk_proto(&p);
    pk_str(&p, "posix");
    pk_str(&p, "system");
    pk_op(&p, 0x93);
    expect(&p, QM_ERR_FORBIDDEN, "posix.system");

    /* near misses of allowlisted names */
    pk_proto(&p);
    pk_global(&p, "torch", "load");
    expect(&p, QM_ERR_FORBIDDEN, "torch.load");
    pk_proto(&p);
    pk_global(&p, "torch._utils", "_rebuild_tensor_v2x");
    expect(&p, QM_ERR_FORBIDDEN, "_rebuild_tensor_v2x");
    pk_proto(&p);
    pk_global(&p, "collections ", "OrderedDict");
    expect(&p, QM_ERR_FORBIDDEN, NULL);

    /* allowlisted but not callable: a storage type or dtype may not be REDUCEd */
    pk_proto(&p);
    pk_global(&p, "torch", "FloatStorage");
    pk_op(&p, ')');
    pk_op(&p, 'R');
    expect(&p, QM_ERR_FORBIDDEN, "torch.FloatStorage");
    pk_proto(&p);
    pk_global(&p, "torch", "float32");
    pk_op(&p, ')');
    pk_op(&p, 'R');
    expect(&p, QM_ERR_FORBIDDEN, "torch.float32");
    /* REDUCE of something that is not a global at all */
    pk_proto(&p);
    pk_str(&p, "os.system");
    pk_op(&p, ')');
    pk_op(&p, 'R');
    expect(&p, QM_ERR_FORBIDDEN, "REDUCE");
    /* BUILD may only set attributes of an OrderedDict or a tensor */
    pk_proto(&p);
    pk_op(&p, ']');
    pk_op(&p, '}');
    pk_op(&p, 'b');
    expect(&p, QM_ERR_FORBIDDEN, "BUILD");
}

static void test_forbidden_opcodes(void **state)
{
    (void)state;
    static const struct { uint8_t op; const char *name; } ops[] = {
        { 'i', "INST" }, { 'o', "OBJ" }, { 0x81, "NEWOBJ" }, { 0x92, "NEWOBJ_EX" }, { 0x82, "EXT1" },
        { 0x83, "EXT2" }, { 0x84, "EXT4" }, { 'P', "PERSID" }, { 'S', "STRING" }, { 'I', "INT" },
        { 'F', "FLOAT" }, { 'V', "UNICODE" }, { 'p', "PUT" }, { 'g', "GET" }, { '0', "POP" },
        { '2', "DUP" }, { 0x8f, "EMPTY_SET" }, { 0x96, "BYTEARRAY8" }, { 0x97, "NEXT_BUFFER" },
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        pk p = { 0 };
        pk_proto(&p);
        pk_op(&p, ops[i].op);
        pk_bytes(&p, "os\nsystem\n", 10);                  /* INST's operands, harmless for the others */
        qc_pickle_result r;
        qm_error err;
        assert_int_equal(run(&p, &r, &err), QM_ERR_FORBIDDEN);
        assert_string_equal(err.field, ops[i].name);
        assert_int_equal(err.offset, 2);
        free(p.b);
    }
    pk p = { 0 };
    pk_proto(&p);
    pk_op(&p, 0xff);
    expect(&p, QM_ERR_FORBIDDEN, "unknown opcode 0xff");
}

static void test_stack_and_memo_errors(void **state)
{
    (void)state;
    pk p = { 0 };
    pk_proto(&p);
    pk_op(&p, 0x85);                                      /* TUPLE1 on an empty stack */
    expect(&p, QM_ERR_BAD_SOURCE, "underflow");
    pk_proto(&p);
    pk_op(&p, 'N');
    pk_op(&p, '(');
    pk_op(&p, 0x85);                                      /* a pop may not cross a MARK */
    expect(&p, QM_ERR_BAD_SOURCE, "underflow");
    pk_proto(&p);
    pk_op(&p, 'R');
    expect(&p, QM_ERR_BAD_SOURCE, "underflow");
    pk_proto(&p);
    pk_op(&p, '.');
    expect(&p, QM_ERR_BAD_SOURCE, "underflow");
    pk_proto(&p);
    pk_op(&p, 't');                                       /* TUPLE without MARK */
    expect(&p, QM_ERR_BAD_SOURCE, "MARK");
    pk_proto(&p);
    pk_op(&p, 'h'); pk_op(&p, 3);                          /* BINGET of a key never set */
    expect(&p, QM_ERR_BAD_SOURCE, "memo key 3");
    pk_proto(&p);
    pk_op(&p, 'N');
    pk_op(&p, 'r'); pk_u32(&p, 0xffffffffu);               /* LONG_BINPUT far above the cap */
    expect(&p, QM_ERR_BAD_SOURCE, "memo key 4294967295");
    pk_proto(&p);
    pk_op(&p, 'j'); pk_u32(&p, 0xffffffffu);               /* LONG_BINGET far above */
    expect(&p, QM_ERR_BAD_SOURCE, "memo key");
    pk_proto(&p);
    pk_op(&p, 'q'); pk_op(&p, 0);                          /* BINPUT with nothing to store */
    expect(&p, QM_ERR_BAD_SOURCE, "underflow");
    pk_proto(&p);
    pk_op(&p, 'N');
    pk_op(&p, 'a');                                       /* APPEND to None */
    pk_op(&p, 'N');
    expect(&p, QM_ERR_BAD_SOURCE, NULL);
    pk_proto(&p);
    pk_op(&p, ']');
    pk_op(&p, 'N');
    pk_op(&p, 'N');
    pk_op(&p, 's');                                       /* SETITEM on a list */
    expect(&p, QM_ERR_BAD_SOURCE, "not a dict");
    pk_proto(&p);
    pk_op(&p, '}');
    pk_op(&p, '(');
    pk_op(&p, 'N');
    pk_op(&p, 'u');                                       /* SETITEMS with an odd count */
    expect(&p, QM_ERR_BAD_SOURCE, "odd");
}

static void test_lengths_and_truncation(void **state)
{
    (void)state;
    pk p = { 0 };
    pk_proto(&p);
    pk_op(&p, 'X'); pk_u32(&p, 0xffffffffu);               /* BINUNICODE of 4 GiB - 1 */
    expect(&p, QM_ERR_BAD_SOURCE, NULL);
    pk_proto(&p);
    pk_op(&p, 'X'); pk_u32(&p, 100); pk_bytes(&p, "abc", 3);
    expect(&p, QM_ERR_BAD_SOURCE, "truncated");
    pk_proto(&p);
    pk_op(&p, 0x8d); pk_u64(&p, UINT64_MAX);              /* BINUNICODE8 of 2^64 - 1 */
    expect(&p, QM_ERR_BAD_SOURCE, "cap");
    pk_proto(&p);
    pk_op(&p, 0x8e); pk_u64(&p, 1ull << 62);              /* BINBYTES8 */
    expect(&p, QM_ERR_BAD_SOURCE, NULL);
    pk_proto(&p);
    pk_op(&p, 'T'); pk_u32(&p, 0x80000000u);              /* BINSTRING: a negative length */
    expect(&p, QM_ERR_BAD_SOURCE, "negative");
    pk_proto(&p);
    pk_op(&p, 0x95); pk_u64(&p, UINT64_MAX);              /* FRAME longer than the input */
    expect(&p, QM_ERR_BAD_SOURCE, "frame");
    pk_proto(&p);
    pk_op(&p, 0x8b); pk_u32(&p, 0x7fffffffu);             /* LONG4 of 2 GiB */
    expect(&p, QM_ERR_BAD_SOURCE, "64 bits");
    pk_proto(&p);
    pk_op(&p, 0x8a); pk_op(&p, 9);                        /* LONG1 of 9 bytes */
    pk_bytes(&p, "\0\0\0\0\0\0\0\0\1", 9);
    expect(&p, QM_ERR_BAD_SOURCE, "64 bits");
    pk_proto(&p);
    pk_op(&p, 'c');
    for (int i = 0; i < 300; i++) pk_op(&p, 'a');          /* a GLOBAL line without end */
    pk_op(&p, '\n');
    expect(&p, QM_ERR_FORBIDDEN, "longer");
    pk_proto(&p);
    pk_op(&p, 'c');
    pk_bytes(&p, "torch", 5);                             /* GLOBAL cut before its newline */
    expect(&p, QM_ERR_BAD_SOURCE, "truncated");
    pk_proto(&p);
    pk_op(&p, 'X'); pk_u32(&p, 2); pk_bytes(&p, "\xc3\x28", 2);   /* not UTF-8 */
    expect(&p, QM_ERR_BAD_SOURCE, "UTF-8");
    pk_proto(&p);
    pk_op(&p, 0x80); pk_op(&p, 6);
    expect(&p, QM_ERR_UNSUPPORTED, "protocol 6");
    /* empty input, and a valid pickle with a byte after STOP */
    expect(&p, QM_ERR_BAD_SOURCE, "STOP");
    p = valid_pickle();
    pk_op(&p, 'N');
    expect(&p, QM_ERR_BAD_SOURCE, "follow STOP");

    /* every proper prefix of a valid pickle is truncated, never accepted and never forbidden */
    pk full = valid_pickle();
    for (size_t n = 0; n < full.n; n++) {
        pk cut = { .b = full.b, .n = n };
        qc_pickle_result r;
        qm_error err;
        qm_status st = run(&cut, &r, &err);
        if (st != QM_ERR_BAD_SOURCE) fail_msg("prefix of %zu bytes: %s", n, err.message);
    }
    free(full.b);
}

static void test_bounds(void **state)
{
    (void)state;
    pk p = { 0 };
    /* open MARKs */
    pk_proto(&p);
    for (int i = 0; i < 1000; i++) pk_op(&p, '(');
    expect(&p, QM_ERR_BAD_SOURCE, "MARK");
    /* nesting: () wrapped a million times by TUPLE1, refused at depth 65 without recursion */
    pk_proto(&p);
    pk_op(&p, ')');
    for (int i = 0; i < 1000000; i++) pk_op(&p, 0x85);
    expect(&p, QM_ERR_BAD_SOURCE, "deeper");
    /* a list appended to itself */
    pk_proto(&p);
    pk_op(&p, ']');
    pk_op(&p, 'q'); pk_op(&p, 0);
    for (int i = 0; i < 100; i++) { pk_op(&p, 'h'); pk_op(&p, 0); pk_op(&p, 'a'); }
    expect(&p, QM_ERR_BAD_SOURCE, "deeper");
    /* stack depth */
    pk_proto(&p);
    for (uint32_t i = 0; i <= QC_PICKLE_MAX_STACK; i++) pk_op(&p, 'N');
    expect(&p, QM_ERR_BAD_SOURCE, "stack holds more");
    /* total values: None appended to one list, over and over */
    pk_proto(&p);
    pk_op(&p, ']');
    for (uint32_t i = 0; i <= QC_PICKLE_MAX_VALUES; i++) { pk_op(&p, 'N'); pk_op(&p, 'a'); }
    expect(&p, QM_ERR_BAD_SOURCE, "values");
    /* total container elements: one value appended over and over (BINGET makes no new value) */
    pk_proto(&p);
    pk_op(&p, ']');
    pk_op(&p, 'N');
    pk_op(&p, 'q'); pk_op(&p, 0);                          /* memo[0] = None */
    pk_op(&p, 'a');
    for (uint32_t i = 0; i <= QC_PICKLE_MAX_ITEMS; i++) { pk_op(&p, 'h'); pk_op(&p, 0); pk_op(&p, 'a'); }
    expect(&p, QM_ERR_BAD_SOURCE, "container elements");
}

static void test_tensor_arguments(void **state)
{
    (void)state;
    pk p = { 0 };
    int32_t shape9[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 }, one[1] = { 1 }, neg[1] = { -1 };
    pk_proto(&p);
    pk_tensor(&p, "FloatStorage", "0", 1, 0, 9, shape9, shape9);
    expect(&p, QM_ERR_UNSUPPORTED, "9 dimensions");
    pk_proto(&p);
    pk_tensor(&p, "FloatStorage", "0", 1, -1, 1, one, one);
    expect(&p, QM_ERR_BAD_SOURCE, "storage_offset");
    pk_proto(&p);
    pk_tensor(&p, "FloatStorage", "0", 1, 0, 1, neg, one);
    expect(&p, QM_ERR_BAD_SOURCE, "size[0]");
    pk_proto(&p);
    pk_tensor(&p, "FloatStorage", "0", -5, 0, 1, one, one);
    expect(&p, QM_ERR_BAD_SOURCE, "storage size");
    pk_proto(&p);
    pk_tensor(&p, "FloatStorage", "../../etc/passwd", 1, 0, 1, one, one);
    expect(&p, QM_ERR_BAD_SOURCE, "storage key");
    pk_proto(&p);
    pk_tensor(&p, "FloatStorage", "", 1, 0, 1, one, one);
    expect(&p, QM_ERR_BAD_SOURCE, "storage key");
    pk_proto(&p);
    pk_tensor(&p, "ComplexFloatStorage", "0", 1, 0, 1, one, one);
    expect(&p, QM_ERR_FORBIDDEN, "torch.ComplexFloatStorage");
    /* a persistent id of another kind */
    pk_proto(&p);
    pk_str(&p, "module");
    pk_op(&p, 0x85);
    pk_op(&p, 'Q');
    expect(&p, QM_ERR_UNSUPPORTED, "persistent id");
    /* _rebuild_tensor_v2 with metadata (conjugate bit) */
    pk_proto(&p);
    pk_global(&p, "torch._utils", "_rebuild_tensor_v2");
    pk_op(&p, '(');
    pk_op(&p, '(');
    pk_str(&p, "storage"); pk_global(&p, "torch", "FloatStorage"); pk_str(&p, "0"); pk_str(&p, "cpu"); pk_int(&p, 1);
    pk_op(&p, 't');
    pk_op(&p, 'Q');
    pk_int(&p, 0);
    pk_int_tuple(&p, 1, one);
    pk_int_tuple(&p, 1, one);
    pk_op(&p, 0x89);
    pk_op(&p, '}');
    pk_op(&p, '}'); pk_str(&p, "conj"); pk_op(&p, 0x88); pk_op(&p, 's');
    pk_op(&p, 't');
    pk_op(&p, 'R');
    expect(&p, QM_ERR_UNSUPPORTED, "metadata");
    /* wrong argument count, wrong argument type */
    pk_proto(&p);
    pk_global(&p, "torch._utils", "_rebuild_tensor_v2");
    pk_op(&p, ')');
    pk_op(&p, 'R');
    expect(&p, QM_ERR_BAD_SOURCE, "6 or 7");
    pk_proto(&p);
    pk_global(&p, "torch._utils", "_rebuild_parameter");
    pk_op(&p, 'N'); pk_op(&p, 0x89); pk_op(&p, '}');
    pk_op(&p, 0x87);
    pk_op(&p, 'R');
    expect(&p, QM_ERR_BAD_SOURCE, "not a tensor");
}

static void test_top_level_shapes(void **state)
{
    (void)state;
    qc_pickle_result r;
    qm_error err;
    pk p = { 0 };
    /* {"model": {"w": t}, "epoch": 3} */
    pk_proto(&p);
    pk_op(&p, '}');
    pk_op(&p, '(');
    pk_str(&p, "epoch"); pk_int(&p, 3);
    pk_str(&p, "model");
    pk_odict_begin(&p); pk_str(&p, "w"); pk_vector(&p, "0", 2); pk_odict_end(&p);
    pk_op(&p, 'u');
    pk_stop(&p);
    assert_int_equal(run(&p, &r, &err), QM_OK);
    assert_int_equal(r.n_tensors, 1);
    assert_string_equal(r.tensors[0].name, "w");
    qc_pickle_result_free(&r);
    free(p.b);
    p = (pk){ 0 };
    /* both "model" and "state_dict" hold tensors: ambiguous */
    pk_proto(&p);
    pk_op(&p, '}');
    pk_op(&p, '(');
    pk_str(&p, "epoch"); pk_int(&p, 3);
    pk_str(&p, "model");
    pk_odict_begin(&p); pk_str(&p, "w"); pk_vector(&p, "0", 2); pk_odict_end(&p);
    pk_str(&p, "state_dict");
    pk_odict_begin(&p); pk_str(&p, "v"); pk_vector(&p, "1", 2); pk_odict_end(&p);
    pk_op(&p, 'u');
    pk_stop(&p);
    expect(&p, QM_ERR_UNSUPPORTED, "ambiguous");
    /* tensors mixed with other values, no wrapper key */
    pk_proto(&p);
    pk_op(&p, '}');
    pk_op(&p, '(');
    pk_str(&p, "w"); pk_vector(&p, "0", 2);
    pk_str(&p, "epoch"); pk_int(&p, 3);
    pk_op(&p, 'u');
    pk_stop(&p);
    expect(&p, QM_ERR_UNSUPPORTED, "'epoch' is a int");
    /* not a dict */
    pk_proto(&p);
    pk_op(&p, ']');
    pk_stop(&p);
    expect(&p, QM_ERR_BAD_SOURCE, "is a list");
    /* duplicate names */
    pk_proto(&p);
    pk_odict_begin(&p);
    pk_str(&p, "w"); pk_vector(&p, "0", 2);
    pk_str(&p, "v"); pk_vector(&p, "1", 2);
    pk_str(&p, "w"); pk_vector(&p, "2", 2);
    pk_odict_end(&p);
    pk_stop(&p);
    expect(&p, QM_ERR_BAD_SOURCE, "duplicate tensor name 'w'");
    /* a name with a NUL byte */
    pk_proto(&p);
    pk_op(&p, '}');
    pk_op(&p, 'X'); pk_u32(&p, 3); pk_bytes(&p, "a\0b", 3);
    pk_vector(&p, "0", 2);
    pk_op(&p, 's');
    pk_stop(&p);
    expect(&p, QM_ERR_BAD_SOURCE, "NUL");
    /* an empty dict: no tensors, not an error here */
    pk_proto(&p);
    pk_op(&p, '}');
    pk_stop(&p);
    assert_int_equal(run(&p, &r, &err), QM_OK);
    assert_int_equal(r.n_tensors, 0);
    qc_pickle_result_free(&r);
    free(p.b);
}

/* ---- archives ---- */

static const char *seeds_dir(void)
{
    const char *d = getenv("QM_SEEDS_DIR");
    return d && *d ? d : "tests/fuzz/seeds";
}

static char *fixture(char out[TU_PATH_MAX], const char *name)
{
    snprintf(out, TU_PATH_MAX, "%s/torchzip/%s", seeds_dir(), name);
    return out;
}

static qc_source *open_ok(const char *name)
{
    char path[TU_PATH_MAX];
    qc_source *s = NULL;
    qm_error err;
    qm_status st = qc_open_file(QC_INPUT_TORCH_ZIP, fixture(path, name), &s, &err);
    if (st != QM_OK) fail_msg("%s: %s", name, err.message);
    assert_non_null(s);
    assert_string_equal(s->kind, "torch.save zip");
    return s;
}

static void open_fails(const char *name, qm_status code, const char *needle)
{
    char path[TU_PATH_MAX];
    qc_source *s = (qc_source *)(uintptr_t)1;
    qm_error err;
    qm_status st = qc_open_file(QC_INPUT_TORCH_ZIP, fixture(path, name), &s, &err);
    if (st != code) fail_msg("%s: expected %s, got %s: %s", name, qm_status_name(code), qm_status_name(st),
                             st ? err.message : "");
    assert_null(s);
    assert_true(tu_contains(err.message, name));
    if (needle && !tu_contains(err.message, needle)) fail_msg("%s: message lacks '%s': %s", name, needle, err.message);
}

static const qc_tensor *find(const qc_source *s, const char *name)
{
    for (uint64_t i = 0; i < s->n_tensors; i++)
        if (!strcmp(s->tensors[i].name, name)) return &s->tensors[i];
    fail_msg("no tensor '%s'", name);
    return NULL;
}

static const uint8_t *load(qc_source *s, const qc_tensor *t)
{
    const uint8_t *b = NULL;
    qm_error err;
    if (qc_source_load(s, t->storage, &b, &err) != QM_OK) fail_msg("%s: %s", t->name, err.message);
    return b;
}

static float f32_at(const uint8_t *b, uint64_t i)
{
    float f;
    memcpy(&f, b + 4 * i, 4);
    return f;
}

static void test_zip_dtypes(void **state)
{
    (void)state;
    qc_source *s = open_ok("dtypes.pt");
    assert_int_equal(s->n_tensors, 10);
    assert_int_equal(s->n_storages, 10);
    static const struct { const char *name; qc_dtype t; } want[] = {
        { "f32", QC_F32 }, { "f16", QC_F16 }, { "bf16", QC_BF16 }, { "f64", QC_F64 }, { "i64", QC_I64 },
        { "i32", QC_I32 }, { "i16", QC_I16 }, { "i8", QC_I8 }, { "u8", QC_U8 }, { "bool", QC_BOOL },
    };
    for (size_t i = 0; i < 10; i++) {
        assert_string_equal(s->tensors[i].name, want[i].name);
        assert_int_equal(s->tensors[i].dtype, want[i].t);
    }
    const qc_tensor *t = find(s, "f32");
    assert_int_equal(t->rank, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    const uint8_t *b = load(s, t);
    for (int i = 0; i < 6; i++) assert_true(f32_at(b, (uint64_t)i) == (float)i);
    b = load(s, find(s, "f16"));
    assert_int_equal(tu_rd16(b + 2), 0x3C00);             /* 1.0 */
    assert_int_equal(tu_rd16(b + 6), 0x4200);             /* 3.0 */
    b = load(s, find(s, "bf16"));
    assert_int_equal(tu_rd16(b + 2), 0x3F80);
    assert_int_equal(tu_rd16(b + 6), 0x4040);
    b = load(s, find(s, "f64"));
    double d;
    memcpy(&d, b + 16, 8);
    assert_true(d == 2.0);
    b = load(s, find(s, "i64"));
    assert_int_equal(tu_rd64(b + 8), 1);
    b = load(s, find(s, "bool"));
    assert_int_equal(b[0], 1);
    assert_int_equal(b[1], 0);
    qc_source_free(s);
}

static void test_zip_tied_and_views(void **state)
{
    (void)state;
    qc_source *s = open_ok("tied.pt");
    assert_int_equal(s->n_tensors, 2);
    assert_int_equal(s->n_storages, 1);                   /* one storage, two names */
    assert_int_equal(find(s, "embed.weight")->storage, 0);
    assert_int_equal(find(s, "lm_head.weight")->storage, 0);
    assert_string_equal(s->storages[0].key, "data/0");
    assert_int_equal(s->storages[0].nbytes, 48);
    qc_source_free(s);

    static const char *const names[] = { "views.pt", "deflated.pt", "zip64.pt" };
    for (int k = 0; k < 3; k++) {
        s = open_ok(names[k]);
        assert_int_equal(s->n_storages, 1);
        const qc_tensor *t = find(s, "t"), *rows = find(s, "rows");
        assert_int_equal(t->shape[0], 4);
        assert_int_equal(t->shape[1], 3);
        assert_int_equal(t->stride[0], 1);
        assert_int_equal(t->stride[1], 4);
        assert_false(qc_tensor_is_contiguous(t));
        assert_int_equal(rows->offset, 4);
        assert_int_equal(rows->shape[0], 2);
        assert_true(qc_tensor_is_contiguous(rows));
        const uint8_t *b = load(s, t);
        assert_true(f32_at(b, rows->offset) == 4.0f);      /* rows[0][0] = w[1][0] */
        assert_true(f32_at(b, 11) == 11.0f);
        qc_source_free(s);
    }
}

static void test_zip_wrappers_and_kinds(void **state)
{
    (void)state;
    static const char *const wrapped[] = { "wrap_state_dict.pt", "wrap_model.pt" };
    for (int k = 0; k < 2; k++) {
        qc_source *s = open_ok(wrapped[k]);
        assert_int_equal(s->n_tensors, 2);
        assert_int_equal(find(s, "layer.weight")->shape[1], 4);
        assert_int_equal(find(s, "layer.bias")->shape[0], 4);
        qc_source_free(s);
    }
    qc_source *s = open_ok("parameter.pt");
    assert_int_equal(s->n_tensors, 1);
    assert_true(f32_at(load(s, find(s, "p")), 2) == 2.0f);
    qc_source_free(s);
    s = open_ok("scalar.pt");
    assert_int_equal(find(s, "s")->rank, 0);
    assert_true(f32_at(load(s, find(s, "s")), 0) == 3.0f);
    qc_source_free(s);
    static const char *const linear[] = { "linear.pt", "linear_proto4.pt", "byteorder_little.pt" };
    for (int k = 0; k < 3; k++) {
        s = open_ok(linear[k]);
        assert_int_equal(s->n_tensors, 2);
        qc_source_free(s);
    }
}

static void test_zip_refused(void **state)
{
    (void)state;
    open_fails("legacy.pt", QM_ERR_UNSUPPORTED, "torch >= 1.6");
    open_fails("byteorder_big.pt", QM_ERR_UNSUPPORTED, "little-endian");
    open_fails("hostile_os_system.pt", QM_ERR_FORBIDDEN, "system");
    open_fails("bad_storage_size.pt", QM_ERR_BAD_SOURCE, "44 bytes");
    open_fails("missing_storage.pt", QM_ERR_BAD_SOURCE, "archive/data/0");
    open_fails("two_folders.pt", QM_ERR_BAD_SOURCE, "other/x");
    open_fails("no_data_pkl.pt", QM_ERR_BAD_SOURCE, "data.pkl");

    qc_source *s = (qc_source *)(uintptr_t)1;
    qm_error err;
    static const uint8_t junk[64] = "this is not a zip archive, nor anything else";
    assert_int_equal(qc_open_buffer(QC_INPUT_TORCH_ZIP, junk, sizeof junk, "junk.pt", &s, &err), QM_ERR_BAD_SOURCE);
    assert_null(s);
    assert_true(tu_contains(err.message, "not a zip archive"));
    assert_int_equal(qc_open_buffer(QC_INPUT_TORCH_ZIP, NULL, 0, "empty.pt", &s, &err), QM_ERR_BAD_SOURCE);
    assert_int_equal(qc_open_file(QC_INPUT_TORCH_ZIP, "/nonexistent/qmap-test.pt", &s, &err), QM_ERR_IO);
    assert_null(s);
}

/* Open a buffer (an exact-size heap copy); on success every storage must load or fail cleanly. */
static qm_status open_copy(const uint8_t *data, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, data, len);
    qc_source *s = (qc_source *)(uintptr_t)1;
    qm_error err;
    qm_status st = qc_open_buffer(QC_INPUT_TORCH_ZIP, copy, len, "cut.pt", &s, &err);
    if (st == QM_OK) {
        for (uint32_t i = 0; i < s->n_storages; i++) {
            const uint8_t *b;
            qm_status ls = qc_source_load(s, i, &b, &err);
            if (ls != QM_OK) assert_int_equal(err.code, ls);
        }
        qc_source_free(s);
    } else {
        assert_null(s);
        assert_int_equal(err.code, st);
        assert_true(err.message[0] != 0);
    }
    free(copy);
    return st;
}

static void test_zip_truncated_and_flipped(void **state)
{
    (void)state;
    static const char *const names[] = { "tied.pt", "deflated.pt", "linear_proto4.pt" };
    for (int k = 0; k < 3; k++) {
        char path[TU_PATH_MAX];
        size_t len;
        uint8_t *b = tu_read_file(fixture(path, names[k]), &len);
        assert_int_equal(open_copy(b, len), QM_OK);
        /* every proper prefix: the end-of-central-directory record is gone, so none may open */
        for (size_t n = 0; n < len; n++)
            if (open_copy(b, n) == QM_OK) fail_msg("%s cut to %zu bytes opened", names[k], n);
        /* every byte flipped: must never crash, whatever the outcome */
        for (size_t i = 0; i < len; i++) {
            b[i] ^= 0xff;
            open_copy(b, len);
            b[i] ^= 0xff;
        }
        free(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_minimal),
        cmocka_unit_test(test_valid_plain_dict_parameter_memo),
        cmocka_unit_test(test_forbidden_globals),
        cmocka_unit_test(test_forbidden_opcodes),
        cmocka_unit_test(test_stack_and_memo_errors),
        cmocka_unit_test(test_lengths_and_truncation),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_tensor_arguments),
        cmocka_unit_test(test_top_level_shapes),
        cmocka_unit_test(test_zip_dtypes),
        cmocka_unit_test(test_zip_tied_and_views),
        cmocka_unit_test(test_zip_wrappers_and_kinds),
        cmocka_unit_test(test_zip_refused),
        cmocka_unit_test(test_zip_truncated_and_flipped),
    };
    return cmocka_run_group_tests_name("torch.save importer and restricted unpickler", tests, NULL, NULL);
}
