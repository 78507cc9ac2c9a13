# mk/spm.mk — SentencePiece tokenizer.model files (convert/qc_spm.c) against python3-sentencepiece.
#
# The models are trained by the test itself on the King James Bible (bible-kjv), a few seconds each; the
# suite runs on the normal qmap, then on the ASan+UBSan one.
DEB_TEST_PACKAGES += python3-sentencepiece bible-kjv

spm-test: $(BUILD)/qmap $(BUILD)/asan/qmap $(BUILD)/libqmap.so
	$(PYTHON) tests/tokenizer/test_spm.py --qmap $(BUILD)/qmap --lib $(BUILD)/libqmap.so \
	  --workdir $(BUILD)/tests/spm > $(BUILD)/tests/spm.log 2>&1 || { grep -v '^ok ' $(BUILD)/tests/spm.log | tail -40; exit 1; }
	@echo "spm-test: $$(tail -1 $(BUILD)/tests/spm.log)"
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(PYTHON) tests/tokenizer/test_spm.py --qmap $(BUILD)/asan/qmap --lib $(BUILD)/libqmap.so \
	  --workdir $(BUILD)/tests/spm-asan > $(BUILD)/tests/spm-asan.log 2>&1 || { grep -v '^ok ' $(BUILD)/tests/spm-asan.log | tail -40; exit 1; }
	@echo "spm-test under ASan+UBSan: $$(tail -1 $(BUILD)/tests/spm-asan.log)"

.PHONY: spm-test
EXTRA_TESTS += spm-test
