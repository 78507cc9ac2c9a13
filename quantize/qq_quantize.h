/* qq_quantize.h — `qmap quantize` as a library call: an F32 (or F16) container to one whose weight
 * matrices are Q8_ROW (spec/FORMAT.md 6.1) or F16, everything else carried over.
 *
 * Which tensors: rank ≥ 2, name ending in ".weight", not "pos_embd.weight", and matching none of the
 * `keep` globs (spec/ARCHITECTURES.md §1). The rest are copied byte for byte. The input is mapped and the
 * output written tensor by tensor through the atomic writer: memory is O(largest tensor). Rows are
 * quantized in parallel (OpenMP); the output is byte-identical for any thread count.
 *
 * Nothing is printed. Ownership: the report's arrays and strings are owned by the report and released
 * by qq_report_free(). On failure no output file is left and *err says which tensor and why.
 */
#ifndef QQ_QUANTIZE_H
#define QQ_QUANTIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qm_error.h"

typedef enum qq_scheme { QQ_Q8_ROW = 1, QQ_F16 = 2 } qq_scheme;

typedef struct qq_progress { uint64_t tensor, n_tensors, bytes_done, bytes_total; double seconds; } qq_progress;

typedef struct qq_opts {
    const char *input, *output;
    qq_scheme scheme;
    const char *const *keep; size_t n_keep;    /* fnmatch globs on whole tensor names */
    int threads;                               /* 0: OpenMP's default */
    /* > 0: a decoder LM's FFN down projections (blk.N.ffn_down.weight, [dim, ffn]) longer than this
     * are written in column panels of this many columns, as [ffn / panel_cols, dim, panel_cols]
     * (spec/ARCHITECTURES.md §6: the panelled form); a multiple of 64 that divides ffn. 0: none.
     * QQ_PANEL_AUTO: the width qq_panel_cols_auto picks for each (none outside gpt2, gpt_neo, llama). */
    uint64_t panel_cols;
    /* > 0: a decoder LM written for this many tensor-parallel ranks (spec/ARCHITECTURES.md §1a): each
     * attention output in `shards` column panels, each FFN down projection in a panel count that is a
     * multiple of it, and quantize.shards recorded. 0: none (panel_cols alone decides). */
    uint32_t shards;
    void (*on_progress)(void *user, const qq_progress *p);   /* may be NULL */
    void *user;
} qq_opts;

#define QQ_PANEL_AUTO UINT64_MAX

/* The column-panel width QQ_PANEL_AUTO writes a [dim, ffn] down projection in, for the output scheme; 0
 * for none. A decode step reads the activation row once per weight row, and rows stream slower once the
 * activation bytes a row touches pass about 8 KiB (qmap bench kernels --cols): Q8_ROW's two int8 terms
 * hold 2 bytes per column, so rows past 4096 columns are cut; F16's float activations 4, so past 2048.
 * The width is the largest multiple of 64 dividing ffn within that bound, unless that is under half the
 * bound (short rows cost their own per-row work), then the smallest one above it; none if neither exists. */
uint64_t qq_panel_cols_auto(qq_scheme scheme, uint64_t ffn);

typedef enum qq_action { QQ_QUANTIZED = 1, QQ_KEPT = 2, QQ_COPIED = 3 } qq_action;

typedef struct qq_tensor_report {
    char *name;                    /* owned */
    qq_action action;
    uint32_t dtype_in, dtype_out;  /* qm_dtype */
    uint32_t rank; uint64_t dims[4];   /* as written: [panels, dim, cols] for a matrix in column panels */
    uint64_t panels;               /* 1, or the column panels a [dim, ffn] matrix was written in */
    uint64_t bytes_in, bytes_out;
    uint64_t rows;
    double rel_rms_error;          /* ||w - ŵ|| / ||w|| (0 when w = 0); quantized tensors only */
    double max_abs_error;
    uint64_t outlier_rows;         /* Q8_ROW: rows whose max|w| > 8 × the row's RMS */
    double sum_sq_err, sum_sq_w;   /* the sums behind rel_rms_error (for totals) */
} qq_tensor_report;

typedef struct qq_report {
    qq_tensor_report *tensors; uint64_t n_tensors;
    uint64_t bytes_in, bytes_out, n_quantized, n_copied;
    double rel_rms_error;          /* over all quantized tensors together */
    int threads;
    const char *kernels;           /* static: the kernel variant used ("avx512", …) */
    double seconds;
} qq_report;

/* report may be NULL. On failure the report holds what was done before the failure (or nothing). */
qm_status qq_quantize(const qq_opts *opts, qq_report *report, qm_error *err);
void qq_report_free(qq_report *r);

#endif /* QQ_QUANTIZE_H */
