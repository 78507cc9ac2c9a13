/* test_rows.c — runtime/qr_rows.h: a batch op split between a pool's threads gives the same bits as the
 * qr_ops.h call it stands for (row by row for the norms and RoPE, one call over all elements for the
 * elementwise ops), on the calling thread (NULL pool) and on pools of 2 and 3 threads, for batches below and
 * well above QR_ROWS_PARALLEL_MIN, and for element counts that are not multiples of the split's alignment
 * (so a chunk that skipped, repeated or overlapped elements at its ends would show). The arithmetic itself
 * is test_ops.c's to check. `make unit` runs this at every QMAP_CPU level. PRNG: splitmix64 (tu_rng). */
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

#include "qr_ops.h"
#include "qr_rows.h"
#include "test_pools.h"

static float *fill(size_t n, uint64_t seed)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    uint64_t st = seed;
    for (size_t i = 0; i < n; i++) x[i] = (float)((double)(tu_rng(&st) >> 11) * 0x1.0p-53) * 8.0f - 4.0f;
    return x;
}

static float *copy(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof *y);
    assert_non_null(y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

static void same_bits(const float *a, const float *b, size_t n, const char *what, int threads, size_t size)
{
    if (memcmp(a, b, n * sizeof *a) != 0) {
        size_t i = 0;
        while (memcmp(a + i, b + i, sizeof *a) == 0) i++;
        fail_msg("%s, %d threads, size %zu: element %zu differs (%a against %a)", what, threads, size, i, a[i], b[i]);
    }
}

static const int thread_counts[] = { 1, 2, 3 };
#define N_THREADS (sizeof thread_counts / sizeof thread_counts[0])

static void test_norms(void **state)
{
    (void)state;
    static const size_t shapes[][2] = { { 1, 64 }, { 7, 257 }, { 300, 2048 }, { 513, 768 } };   /* n, d */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const size_t n = shapes[s][0], d = shapes[s][1];
        float *x = fill(n * d, 11 + s), *w = fill(d, 12 + s), *b = fill(d, 13 + s);
        float *ref = malloc(n * d * sizeof *ref), *got = malloc(n * d * sizeof *got);
        assert_non_null(ref);
        assert_non_null(got);
        for (size_t t = 0; t < N_THREADS; t++) {
            qr_pool *pool = pools_get(thread_counts[t]);
            for (size_t i = 0; i < n; i++) qr_rmsnorm(ref + i * d, x + i * d, w, d, 1e-5f);
            memset(got, 0xff, n * d * sizeof *got);
            qr_rows_rmsnorm(pool, got, x, w, n, d, 1e-5f);
            same_bits(got, ref, n * d, "rmsnorm", thread_counts[t], n * d);
            for (size_t i = 0; i < n; i++) qr_layernorm(ref + i * d, x + i * d, w, b, d, 1e-5f);
            memset(got, 0xff, n * d * sizeof *got);
            qr_rows_layernorm(pool, got, x, w, b, n, d, 1e-5f);
            same_bits(got, ref, n * d, "layernorm", thread_counts[t], n * d);
            /* in place (y == x), as the families may call it */
            float *inplace = copy(x, n * d);
            qr_rows_rmsnorm(pool, inplace, inplace, w, n, d, 1e-5f);
            for (size_t i = 0; i < n; i++) qr_rmsnorm(ref + i * d, x + i * d, w, d, 1e-5f);
            same_bits(inplace, ref, n * d, "rmsnorm in place", thread_counts[t], n * d);
            free(inplace);
        }
        free(x); free(w); free(b); free(ref); free(got);
    }
}

static void test_rope(void **state)
{
    (void)state;
    /* q and k heads in one row of stride ld, as a layer's qkv rows: only the first n_heads·hd floats of a
     * row are rotated, the rest (k, v here) must stay as they are */
    static const size_t shapes[][3] = { { 1, 32, 64 }, { 5, 4, 16 }, { 512, 32, 64 }, { 77, 12, 64 } };   /* n, heads, hd */
    float inv_freq[64];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const size_t n = shapes[s][0], heads = shapes[s][1], hd = shapes[s][2], ld = heads * hd + 3 * hd;
        qr_rope_freqs(inv_freq, hd, 10000.0f);
        float *x = fill(n * ld, 21 + s);
        for (size_t t = 0; t < N_THREADS; t++) {
            float *ref = copy(x, n * ld), *got = copy(x, n * ld);
            for (size_t i = 0; i < n; i++) qr_rope_half(ref + i * ld, heads, hd, 17 + (uint32_t)i, inv_freq);
            qr_rows_rope_half(pools_get(thread_counts[t]), got, ld, n, heads, hd, 17, inv_freq);
            same_bits(got, ref, n * ld, "rope_half", thread_counts[t], n * heads * hd);
            free(ref);
            free(got);
        }
        free(x);
    }
}

static void test_elementwise(void **state)
{
    (void)state;
    static const size_t counts[] = { 1, 63, 65, 4097, (size_t)1 << 16, ((size_t)1 << 17) + 5, 512 * 5632 + 33 };
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        const size_t n = counts[c];
        float *a = fill(n, 31 + c), *b = fill(n, 32 + c);
        for (size_t t = 0; t < N_THREADS; t++) {
            qr_pool *pool = pools_get(thread_counts[t]);
            float *ref = copy(a, n), *got = copy(a, n);
            qr_swiglu(ref, b, n);
            qr_rows_swiglu(pool, got, b, n);
            same_bits(got, ref, n, "swiglu", thread_counts[t], n);
            memcpy(ref, a, n * sizeof *ref);
            memcpy(got, a, n * sizeof *got);
            qr_add(ref, b, n);   /* an element added twice or not at all shows */
            qr_rows_add(pool, got, b, n);
            same_bits(got, ref, n, "add", thread_counts[t], n);
            static const qr_actfn fns[] = { QR_ACTFN_GELU_TANH, QR_ACTFN_GELU_ERF, QR_ACTFN_RELU, QR_ACTFN_SILU };
            for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++) {
                memcpy(ref, a, n * sizeof *ref);
                memcpy(got, a, n * sizeof *got);
                qr_activate(fns[f], ref, n);
                qr_rows_activate(pool, fns[f], got, n);
                same_bits(got, ref, n, qr_actfn_name(fns[f]), thread_counts[t], n);
            }
            free(ref);
            free(got);
        }
        free(a);
        free(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_elementwise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
