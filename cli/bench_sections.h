/* bench_sections.h — the five sections of `qmap bench kernels`, one file each below the command
 * (bench_kernels.c calls them in order) and above their shared helpers (bench_util.h):
 *   1, 2  bench_baseline.c   memory read bandwidth and instruction peak: the limits of 3 and 4
 *   3     bench_matvec.c     matvec over >= 1 GiB of weights, anonymous and mapped; the first pass
 *   4     bench_gemm.c       GEMM at n = 512 beside the instruction peak
 *   4b    bench_rows.c       a batch's decode step: 1-15 rows of X over section 3's stack
 *   5     bench_accuracy.c   the accuracy of each weight/activation path
 * Each returns 0, or -1 after set_error. */
#ifndef QM_BENCH_SECTIONS_H
#define QM_BENCH_SECTIONS_H

#include "bench_util.h"

int bench_bandwidth(const bench_cfg *c, baseline *base, json_out *j);                            /* 1 */
int bench_peak(const bench_cfg *c, baseline *base, json_out *j);                                 /* 2 */
int bench_matvec(const bench_cfg *c, const qr_kernels *k, const baseline *base, json_out *j);     /* 3 */
int bench_first_pass(const bench_cfg *c, const qr_kernels *k, json_out *j);                       /* 3b */
int bench_gemm(const bench_cfg *c, const qr_kernels *k, const baseline *base, json_out *j);       /* 4 */
int bench_rows(const bench_cfg *c, const qr_kernels *k, const baseline *base, json_out *j);       /* 4b */
int bench_accuracy(const bench_cfg *c, const qr_kernels *k, json_out *j);                         /* 5 */

#endif /* QM_BENCH_SECTIONS_H */
