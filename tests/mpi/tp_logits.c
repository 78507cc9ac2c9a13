/* tp_logits — the MPI suite's window into a tensor-parallel session (tests/mpi/test_mpi.py):
 *
 *   mpirun -np N tp_logits MODEL OUT.f32 [--act auto|int8|f32|int8x2|precise] [--kv f16|f32] [--step] ID...
 *
 * Every rank opens MODEL with its shard (mpi/tp.c, the same collectives as qmap-mpi) and evaluates the IDs
 * (one qmap_eval, or one per token with --step: the decode path); rank 0 writes the logits of every
 * position as float32 [n_ids][vocab] to OUT. Exit 1 on any error (on any rank).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmap.h"
#include "tp.h"

static int fail(const char *what, const qmap_error *e)
{
    fprintf(stderr, "tp_logits: %s: %s\n", what, e->message);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

static qmap_act_mode act_named(const char *a)
{
    return !strcmp(a, "int8")      ? QMAP_ACT_INT8
           : !strcmp(a, "f32")     ? QMAP_ACT_F32
           : !strcmp(a, "int8x2")  ? QMAP_ACT_INT8X2
           : !strcmp(a, "precise") ? QMAP_ACT_PRECISE
                                   : QMAP_ACT_AUTO;
}

int main(int argc, char **argv)
{
    /* the session's worker threads and the watchdog never call MPI: only the main thread does */
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (argc < 4) {
        fprintf(stderr, "usage: tp_logits MODEL OUT [--act MODE] [--kv f16|f32] [--step] ID...\n");
        MPI_Finalize();
        return 2;
    }
    qmap_session_params sp;
    qmap_session_params_default(&sp);
    sp.threads = 1;
    sp.logits_all = true;
    bool step = false;
    int i = 3;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--act") && i + 1 < argc) sp.act = act_named(argv[++i]);
        else if (!strcmp(argv[i], "--kv") && i + 1 < argc) sp.kv_type = !strcmp(argv[++i], "f32") ? QMAP_KV_F32 : QMAP_KV_F16;
        else if (!strcmp(argv[i], "--step")) step = true;
        else { fprintf(stderr, "tp_logits: unknown option %s\n", argv[i]); MPI_Finalize(); return 2; }
    }
    size_t n = (size_t)(argc - i);
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    for (size_t k = 0; k < n; k++) ids[k] = atoi(argv[i + (int)k]);

    tp_ctx ctx;
    if (tp_init(&ctx, MPI_COMM_WORLD, 60) != 0) { fprintf(stderr, "tp_logits: tp_init\n"); return 1; }
    qmap_shard shard = tp_shard(&ctx);
    qmap_model_params mp;
    qmap_model_params_default(&mp);
    mp.shard = &shard;
    qmap_error e;
    qmap_model *m;
    if (qmap_model_open(argv[1], &mp, &m, &e) != QMAP_OK) return fail("open", &e);
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    qmap_session *s;
    if (qmap_session_new(m, &sp, &s, &e) != QMAP_OK) return fail("session", &e);
    FILE *out = ctx.rank == 0 ? fopen(argv[2], "wb") : NULL;
    if (ctx.rank == 0 && !out) { perror(argv[2]); MPI_Abort(MPI_COMM_WORLD, 1); }
    size_t nb = step ? 1 : n;
    for (size_t off = 0; off < n; off += nb) {
        if (qmap_eval(s, ids + off, nb, &e) != QMAP_OK) return fail("eval", &e);
        for (size_t k = 0; out && k < nb; k++) fwrite(qmap_logits(s, k), sizeof(float), in.vocab_size, out);
    }
    if (out && fclose(out) != 0) { perror(argv[2]); MPI_Abort(MPI_COMM_WORLD, 1); }
    qmap_session_free(s);
    qmap_model_close(m);
    free(ids);
    tp_free(&ctx);
    MPI_Finalize();
    return 0;
}
