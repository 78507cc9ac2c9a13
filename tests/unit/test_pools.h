/* test_pools.h — thread pools for the unit tests that compare thread counts: pools_get(t) is a pool of t
 * threads (t <= 0: one per CPU), made on first use and kept for the test binary's life; pools_get(1) is
 * NULL, which runs on the calling thread, as a session of one thread does. */
#ifndef TEST_POOLS_H
#define TEST_POOLS_H

#include "qr_pool.h"

#define TEST_POOLS_MAX 8

static qr_pool *pools_get(int threads)
{
    static qr_pool *pools[TEST_POOLS_MAX + 1];   /* [0]: the default size */
    if (threads == 1) return NULL;
    int i = threads <= 0 ? 0 : threads;
    if (i > TEST_POOLS_MAX) fail_msg("pools_get: %d threads is more than the tests use", threads);
    if (!pools[i]) {
        qm_error err;
        if (qr_pool_new(threads, &pools[i], &err) != QM_OK) fail_msg("qr_pool_new(%d): %s", threads, err.message);
    }
    return pools[i];
}

#endif /* TEST_POOLS_H */
