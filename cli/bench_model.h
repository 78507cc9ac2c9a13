/* bench_model.h — `qmap bench MODEL.qmap…` (cli/bench_model.c): pp/tg speed of decoder LMs beside the
 * limits measured in the same run. argv[0] is "bench"; returns the exit code (0, 1 failure, 2 usage). */
#ifndef QM_BENCH_MODEL_H
#define QM_BENCH_MODEL_H

#include <stdint.h>

int bench_model(int argc, char **argv);

/* The model timing that qmap bench and qmap-mpi bench (mpi/bench_tp.c) share. It takes qmap.h's
 * experimental gauges: declared where QMAP_EXPERIMENTAL is defined before qmap.h, as qmap.h's own. */
#ifdef QMAP_EXPERIMENTAL
#include "qmap.h"

/* The token ids every test reads: fixed and spread over the vocabulary, so that speed does not depend on
 * a text. ids[0..n). */
void bench_model_ids(int32_t *ids, long n, uint32_t vocab_size);

/* One timed run of test 0 (pp: one qmap_eval of n ids, the GEMM path) or 1 (tg: n qmap_eval calls of one
 * token each, the decode path), after `depth` untimed tokens (ids[0..depth)) from a fresh state; the test
 * reads ids from ids + depth. *tps: n / the seconds of the timed part. *work: the multiply-adds its
 * products counted (qmap_session_counters), *kv_bytes: the KV cache its attention read
 * (qmap_session_kv_bytes_read), both during the timed part only. */
qmap_status bench_model_time_test(qmap_session *s, int test, const int32_t *ids, long depth, long n, double *tps,
                                  qmap_session_counters *work, uint64_t *kv_bytes, qmap_error *qe);
#endif

#endif
