# mk/run.mk — decoder-LM runtime tests: parity with PyTorch per family and dtype, prefill vs decode,
# threads, chunking, KV types, API error paths, and no allocation per token (tests/run/).

$(BUILD)/tests/lm_logits: tests/run/lm_logits.c $(LIBS) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

$(BUILD)/asan/lm_logits: tests/run/lm_logits.c $(ASAN_FORMAT_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -DLM_LOGITS_NO_ALLOC_HOOK -o $@ $< $(ASAN_FORMAT_OBJ) $(LDLIBS)

# The suite on the normal build, then the runtime's paths once more under ASan+UBSan.
run-test: $(BUILD)/qmap $(BUILD)/tests/lm_logits $(BUILD)/asan/lm_logits
	$(PYTHON) tests/run/test_lm.py --qmap $(BUILD)/qmap --tool $(BUILD)/tests/lm_logits \
	  --asan-tool $(BUILD)/asan/lm_logits --workdir $(BUILD)/tests/run

EXTRA_TESTS += run-test
