/* test_api_convert.c — qmap_convert and qmap_quantize (include/qmap.h): arguments refused before any work,
 * callbacks, results that agree with the container written, and nothing left behind on failure. That the
 * outputs are the CLI's byte for byte is tests/python/test_convert_api.py's job. Run from the checkout's
 * root (make unit): the source is tests/data/digits_mlp/model.pt. */
#include "test_util.h"

#include <string.h>

#include "qmap.h"

#define SOURCE "tests/data/digits_mlp/model.pt"

typedef struct calls {
    int progress, tensors, quantized;
    qmap_progress last;
} calls;

static void on_progress(void *user, const qmap_progress *p)
{
    calls *c = user;
    c->progress++;
    c->last = *p;
}

static void on_tensor(void *user, const qmap_quantize_tensor *t)
{
    calls *c = user;
    c->tensors++;
    if (t->action == QMAP_QUANT_QUANTIZED) {
        c->quantized++;
        assert_int_equal(t->dtype_out, QMAP_DTYPE_Q8_ROW);
        assert_true(t->rows > 0 && t->rel_rms_error > 0 && t->rel_rms_error < 0.05);
    } else {
        assert_int_equal(t->dtype_out, t->dtype_in);
        assert_int_equal(t->rows, 0);
    }
}

static uint64_t tensor_count(const char *path)
{
    qmap_container *c;
    qmap_error err;
    if (qmap_container_open(path, &c, &err) != QMAP_OK) fail_msg("%s", err.message);
    qmap_container_info info;
    qmap_container_get_info(c, &info);
    qmap_container_close(c);
    return info.tensor_count;
}

static void test_convert_then_quantize(void **state)
{
    (void)state;
    char f32[TU_PATH_MAX], q8[TU_PATH_MAX];
    tu_path(f32, "digits.qmap");
    tu_path(q8, "digits-q8.qmap");
    const char *src[] = { SOURCE };
    calls c = { 0 };
    qmap_convert_result r;
    qmap_error err;
    if (qmap_convert(src, 1, f32, NULL, on_progress, &c, &r, &err) != QMAP_OK) fail_msg("%s", err.message);
    assert_string_equal(r.arch, "mlp");
    assert_int_equal(r.n_tensors, tensor_count(f32));
    assert_true(c.progress > 0);
    assert_int_equal(c.last.tensor, c.last.n_tensors);
    assert_int_equal(c.last.bytes_done, c.last.bytes_total);

    qmap_quantize_params p;
    qmap_quantize_params_default(&p);
    assert_int_equal(p.scheme, QMAP_QUANT_Q8_ROW);
    assert_true(p.panel_cols == QMAP_PANEL_COLS_AUTO);
    p.on_tensor = on_tensor;
    p.tensor_user = &c;
    p.threads = 1;
    qmap_quantize_result q;
    c.progress = 0;
    if (qmap_quantize(f32, q8, &p, on_progress, &c, &q, &err) != QMAP_OK) fail_msg("%s", err.message);
    assert_int_equal(c.tensors, r.n_tensors);
    assert_int_equal(c.quantized, q.n_quantized);
    assert_int_equal(q.n_quantized + q.n_copied, tensor_count(q8));
    assert_true(q.n_quantized > 0 && q.bytes_out < q.bytes_in);
    assert_non_null(q.kernels);
    assert_true(c.progress > 0);
    /* NULL params, callbacks and result are allowed */
    assert_int_equal(qmap_quantize(f32, q8, NULL, NULL, NULL, NULL, NULL), QMAP_OK);
    assert_int_equal(qmap_convert(src, 1, f32, NULL, NULL, NULL, NULL, NULL), QMAP_OK);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    char out[TU_PATH_MAX];
    tu_path(out, "never.qmap");
    const char *src[] = { SOURCE };
    const char *null_src[] = { NULL };
    qmap_error err;
    assert_int_equal(qmap_convert(NULL, 1, out, NULL, NULL, NULL, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_convert(src, 0, out, NULL, NULL, NULL, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_convert(null_src, 1, out, NULL, NULL, NULL, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_convert(src, 1, NULL, NULL, NULL, NULL, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    qmap_convert_params cp;
    qmap_convert_params_default(&cp);
    cp.dtype = QMAP_DTYPE_Q8_ROW;
    assert_int_equal(qmap_convert(src, 1, out, &cp, NULL, NULL, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_true(tu_contains(err.message, "dtype"));

    assert_int_equal(qmap_quantize(NULL, out, NULL, NULL, NULL, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_quantize(SOURCE, NULL, NULL, NULL, NULL, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    qmap_quantize_params qp;
    qmap_quantize_params_default(&qp);
    qp.scheme = (qmap_quant_scheme)7;
    assert_int_equal(qmap_quantize(SOURCE, out, &qp, NULL, NULL, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    qmap_quantize_params_default(&qp);
    qp.n_keep = 1;
    assert_int_equal(qmap_quantize(SOURCE, out, &qp, NULL, NULL, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    qmap_quantize_params_default(&qp);
    qp.panel_cols = 100;
    assert_int_equal(qmap_quantize(SOURCE, out, &qp, NULL, NULL, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    qmap_quantize_params_default(&qp);
    qp.threads = -2;
    assert_int_equal(qmap_quantize(SOURCE, out, &qp, NULL, NULL, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    qmap_convert_params_default(NULL);
    qmap_quantize_params_default(NULL);
    assert_false(tu_exists(out));
}

static void test_failures_leave_nothing(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX], out[TU_PATH_MAX], junk[TU_PATH_MAX];
    tu_mkdir(dir, "failures");
    tu_path(out, "failures/failed.qmap");
    static const char zip_magic_only[] = "PK\x03\x04 not a zip";
    tu_write_file(tu_path(junk, "failures/junk.pt"), zip_magic_only, sizeof zip_magic_only - 1);
    const char *src[] = { junk };
    qmap_error err;
    assert_true(qmap_convert(src, 1, out, NULL, NULL, NULL, NULL, &err) != QMAP_OK);
    assert_true(tu_contains(err.message, "junk.pt"));
    assert_false(tu_exists(out));
    assert_true(qmap_quantize(junk, out, NULL, NULL, NULL, NULL, &err) != QMAP_OK);   /* not a container */
    assert_true(tu_contains(err.message, "junk.pt"));
    assert_false(tu_exists(out));
    assert_int_equal(tu_dir_count(dir), 1);   /* junk.pt only: no temporary file either */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_convert_then_quantize),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_failures_leave_nothing),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
