# mk/pool.mk — the thread pool (runtime/qr_pool.c) under ThreadSanitizer: its unit test, with the pool and the
# format library (the tests' helpers use its errors and writer; qm_verify, which uses OpenMP, is left out)
# built with -fsanitize=thread. The rest of the unit suite runs the pool in the normal and ASan builds. TSan sees the C11 atomics and pthread calls the pool is made of, so a missing happens-before
# between a chunk's writes and the caller shows as a race report, which fails the run.
TSAN_CFLAGS = $(CSTD) $(WARN) -O1 -g -fsanitize=thread $(INCLUDES)

POOL_TSAN_SRC := tests/unit/test_pool.c runtime/qr_pool.c tests/unit/test_util.c $(filter-out format/qm_verify.c,$(wildcard format/*.c))

$(BUILD)/tsan/test_pool: $(POOL_TSAN_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(TSAN_CFLAGS) -Itests/unit -o $@ $(POOL_TSAN_SRC) -lcmocka -lxxhash -lz -lpthread

pool-tsan: $(BUILD)/tsan/test_pool
	TSAN_OPTIONS=halt_on_error=1:exitcode=66 $(BUILD)/tsan/test_pool
.PHONY: pool-tsan
EXTRA_TESTS += pool-tsan
