/* qmap_convert.c — qmap_convert and qmap_quantize (include/qmap.h): convert/'s qc_convert and quantize/'s
 * qq_quantize, the functions `qmap convert` and `qmap quantize` run, behind the public names, parameters
 * and error reports. Nothing is converted or quantized here. */
#include <stdio.h>
#include <string.h>

#include "qa_internal.h"
#include "qc_arch.h"
#include "qc_convert.h"
#include "qc_json.h"
#include "qm_format.h"
#include "qq_quantize.h"

/* The caller's progress callback, called with the public struct (the two modules' structs have the same
 * fields but are separate types). */
typedef struct progress_relay {
    qmap_progress_fn fn;
    void *user;
} progress_relay;

static void relay_convert_progress(void *user, const qc_progress *p)
{
    const progress_relay *r = user;
    qmap_progress out = { p->tensor, p->n_tensors, p->bytes_done, p->bytes_total, p->seconds };
    r->fn(r->user, &out);
}

static void relay_quantize_progress(void *user, const qq_progress *p)
{
    const progress_relay *r = user;
    qmap_progress out = { p->tensor, p->n_tensors, p->bytes_done, p->bytes_total, p->seconds };
    r->fn(r->user, &out);
}

/* ---- convert ------------------------------------------------------------------------------------------- */

void qmap_convert_params_default(qmap_convert_params *p)
{
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->dtype = QMAP_DTYPE_F32;
}

_Static_assert(QMAP_CONVERT_JSON_LIMIT_MAX == QC_JSON_MAX_LIMIT, "qmap.h's JSON limit is convert's");

const char *qmap_convert_arch_list(void) { return qc_arch_list(); }

/* convert's warnings and progress both go through one `user` pointer; this carries both callbacks. */
typedef struct convert_relay {
    progress_relay progress;
    void (*warning)(void *user, const char *message);
    void *warning_user;
} convert_relay;

static void relay_convert_warning(void *user, const char *message)
{
    const convert_relay *r = user;
    if (r->warning) r->warning(r->warning_user, message);
}

static void relay_convert_progress_of(void *user, const qc_progress *p)
{
    convert_relay *r = user;
    if (r->progress.fn) relay_convert_progress(&r->progress, p);
}

static void export_convert_result(const qc_convert_summary *s, qmap_convert_result *out)
{
    memset(out, 0, sizeof *out);
    out->arch = s->arch;
    snprintf(out->input_kind, sizeof out->input_kind, "%s", s->kinds);
    snprintf(out->config, sizeof out->config, "%s", s->config);
    snprintf(out->tokenizer, sizeof out->tokenizer, "%s", s->tokenizer);
    out->input_files = s->n_inputs_files;
    out->input_bytes = s->in_bytes;
    out->n_tensors = s->n_tensors;
    out->n_params = s->n_params;
    out->n_skipped = s->n_skipped;
    out->output_bytes = s->out_bytes;
    out->nonfinite_values = s->n_nonfinite;
    out->compressed_bytes = s->inflated_from;
    out->inflated_bytes = s->inflated_to;
    out->tied_output = s->tied_output;
    out->seconds = s->seconds_total;
    out->write_seconds = s->seconds_write;
}

static qmap_status check_convert_args(const char *const *src, size_t n_src, const char *dst,
                                      const qmap_convert_params *p, qmap_error *err)
{
    if (!src || n_src == 0) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_convert: no source given");
    for (size_t i = 0; i < n_src; i++)
        if (!src[i]) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_convert: src[%zu] is NULL", i);
    if (!dst) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_convert: dst is NULL");
    if (p->dtype != QMAP_DTYPE_F32 && p->dtype != QMAP_DTYPE_F16)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_convert: dtype %d: convert writes F32 (%d) or F16 (%d)",
                       (int)p->dtype, (int)QMAP_DTYPE_F32, (int)QMAP_DTYPE_F16);
    if (p->json_limit > QMAP_CONVERT_JSON_LIMIT_MAX)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_convert: json_limit %llu is above QMAP_CONVERT_JSON_LIMIT_MAX",
                       (unsigned long long)p->json_limit);
    return QMAP_OK;
}

qmap_status qmap_convert(const char *const *src, size_t n_src, const char *dst, const qmap_convert_params *params,
                         qmap_progress_fn progress, void *progress_user, qmap_convert_result *result, qmap_error *err)
{
    qmap_convert_params defaults;
    if (!params) {
        qmap_convert_params_default(&defaults);
        params = &defaults;
    }
    qmap_status st = check_convert_args(src, n_src, dst, params, err);
    if (st != QMAP_OK) return st;
    convert_relay relay = { { progress, progress_user }, params->warning, params->warning_user };
    qc_convert_opts o = {
        .inputs = src,
        .n_inputs = n_src,
        .output = dst,
        .config_path = params->config_path,
        .arch = params->arch,
        .tokenizer_path = params->tokenizer_path,
        .src_tokenizer_path = params->src_tokenizer_path,
        .tgt_tokenizer_path = params->tgt_tokenizer_path,
        .no_tokenizer = params->no_tokenizer,
        .dtype = params->dtype == QMAP_DTYPE_F16 ? QM_DTYPE_F16 : QM_DTYPE_F32,
        .strict = params->strict,
        .allow_large = params->allow_large,
        .json_limit = params->json_limit,
        .on_progress = relay_convert_progress_of,
        .on_warning = relay_convert_warning,
        .user = &relay,
    };
    qc_convert_summary s;
    qm_error e;
    qm_error_clear(&e);
    if (qc_convert(&o, &s, &e) != QM_OK) return qa_error_export(err, &e);
    if (result) export_convert_result(&s, result);
    return QMAP_OK;
}

/* ---- quantize ------------------------------------------------------------------------------------------ */

void qmap_quantize_params_default(qmap_quantize_params *p)
{
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->scheme = QMAP_QUANT_Q8_ROW;
    p->panel_cols = QMAP_PANEL_COLS_AUTO;
}

static qmap_status check_quantize_args(const char *src, const char *dst, const qmap_quantize_params *p,
                                       qmap_error *err)
{
    if (!src || !dst) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_quantize: %s is NULL", src ? "dst" : "src");
    if (p->scheme != QMAP_QUANT_Q8_ROW && p->scheme != QMAP_QUANT_F16)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_quantize: scheme %d is neither Q8_ROW (%d) nor F16 (%d)",
                       (int)p->scheme, (int)QMAP_QUANT_Q8_ROW, (int)QMAP_QUANT_F16);
    if (p->n_keep && !p->keep) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_quantize: keep is NULL");
    for (size_t i = 0; i < p->n_keep; i++)
        if (!p->keep[i]) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_quantize: keep[%zu] is NULL", i);
    if (p->threads < 0 || p->threads > 1024)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_quantize: threads %d is not in 0..1024", p->threads);
    uint64_t pc = p->panel_cols;
    if (pc != QMAP_PANEL_COLS_AUTO && pc != 0 && (pc % 64 != 0 || pc > (1ull << 30)))
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT,
                       "qmap_quantize: panel_cols %llu is not 0, QMAP_PANEL_COLS_AUTO or a multiple of 64",
                       (unsigned long long)pc);
    if (p->shards > QMAP_QUANTIZE_SHARDS_MAX)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_quantize: shards %u is not in 0..%d", p->shards,
                       QMAP_QUANTIZE_SHARDS_MAX);
    return QMAP_OK;
}

static void export_quantize_result(const qq_report *r, qmap_quantize_result *out)
{
    memset(out, 0, sizeof *out);
    out->n_quantized = r->n_quantized;
    out->n_copied = r->n_copied;
    out->bytes_in = r->bytes_in;
    out->bytes_out = r->bytes_out;
    out->rel_rms_error = r->rel_rms_error;
    out->threads = r->threads;
    out->kernels = r->kernels ? r->kernels : "";
    out->seconds = r->seconds;
}

/* The report's tensors, one call each, as the public struct. */
static void report_tensors(const qq_report *r, const qmap_quantize_params *p)
{
    for (uint64_t i = 0; i < r->n_tensors; i++) {
        const qq_tensor_report *t = &r->tensors[i];
        bool quantized = t->action == QQ_QUANTIZED;
        qmap_quantize_tensor out = {
            .name = t->name,
            .action = t->action == QQ_QUANTIZED ? QMAP_QUANT_QUANTIZED
                      : t->action == QQ_KEPT    ? QMAP_QUANT_KEPT : QMAP_QUANT_COPIED,
            .dtype_in = (qmap_dtype)t->dtype_in,
            .dtype_out = (qmap_dtype)t->dtype_out,
            .rank = t->rank,
            .panels = t->panels,
            .bytes_in = t->bytes_in,
            .bytes_out = t->bytes_out,
            .rows = quantized ? t->rows : 0,
            .rel_rms_error = quantized ? t->rel_rms_error : 0,
            .max_abs_error = quantized ? t->max_abs_error : 0,
            .outlier_rows = quantized ? t->outlier_rows : 0,
        };
        memcpy(out.dims, t->dims, sizeof out.dims);
        p->on_tensor(p->tensor_user, &out);
    }
}

qmap_status qmap_quantize(const char *src, const char *dst, const qmap_quantize_params *params,
                          qmap_progress_fn progress, void *progress_user, qmap_quantize_result *result,
                          qmap_error *err)
{
    qmap_quantize_params defaults;
    if (!params) {
        qmap_quantize_params_default(&defaults);
        params = &defaults;
    }
    qmap_status st = check_quantize_args(src, dst, params, err);
    if (st != QMAP_OK) return st;
    progress_relay relay = { progress, progress_user };
    qq_opts o = {
        .input = src,
        .output = dst,
        .scheme = params->scheme == QMAP_QUANT_F16 ? QQ_F16 : QQ_Q8_ROW,
        .keep = params->keep,
        .n_keep = params->n_keep,
        .threads = params->threads,
        .panel_cols = params->panel_cols == QMAP_PANEL_COLS_AUTO ? QQ_PANEL_AUTO : params->panel_cols,
        .shards = params->shards,
        .on_progress = progress ? relay_quantize_progress : NULL,
        .user = &relay,
    };
    qq_report r;
    memset(&r, 0, sizeof r);
    qm_error e;
    qm_error_clear(&e);
    qm_status s = qq_quantize(&o, &r, &e);
    if (s == QM_OK && result) export_quantize_result(&r, result);
    if (s == QM_OK && params->on_tensor) report_tensors(&r, params);
    qq_report_free(&r);
    return s == QM_OK ? QMAP_OK : qa_error_export(err, &e);
}
