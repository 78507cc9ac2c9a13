# mk/batch.mk — several sequences in one forward pass (qmap_batch, include/qmap.h): batch invariance bit
# for bit on every kernel table, parity with PyTorch, API errors, no allocation per step (tests/run/).

$(BUILD)/tests/batch_logits: tests/run/batch_logits.c tests/run/logits_tool.h $(LIBS) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

$(BUILD)/asan/batch_logits: tests/run/batch_logits.c tests/run/logits_tool.h $(ASAN_FORMAT_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -DLM_LOGITS_NO_ALLOC_HOOK -o $@ $< $(ASAN_FORMAT_OBJ) $(LDLIBS)

# The suite on the normal build (every QMAP_CPU level), once under ASan+UBSan, and qmap bench --parallel.
batch-test: $(BUILD)/qmap $(BUILD)/tests/batch_logits $(BUILD)/asan/batch_logits
	$(PYTHON) tests/run/test_batch.py --qmap $(BUILD)/qmap --tool $(BUILD)/tests/batch_logits \
	  --asan-tool $(BUILD)/asan/batch_logits --workdir $(BUILD)/tests/batch
.PHONY: batch-test

EXTRA_TESTS += batch-test
