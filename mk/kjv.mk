# mk/kjv.mk — the King James Llama that ships in tests/data/kjv_llama (trained by
# tests/tools/train_kjv_llama.py on Debian's bible-kjv, every 7th book held out: tests/tools/kjv_data.py).

# Its accuracy through qmap (tests/run/test_kjv.py): tokenize = sentencepiece on the held-out books, F32
# perplexity = torch's on llama-perplexity's windows (relative 2e-6), F16 within +0.05%, Q8_ROW within +0.5%
# and 98% same top; each --act mode and the --keep variants measured, with llama-perplexity's KL statistics.
DEB_TEST_PACKAGES += bible-kjv python3-sentencepiece
kjv-test: $(BUILD)/qmap
	$(PYTHON) tests/run/test_kjv.py --qmap $(BUILD)/qmap --workdir $(BUILD)/tests/kjv
.PHONY: kjv-test
EXTRA_TESTS += kjv-test

# make demo: the model converted, quantized to Q8_ROW, continuing "In the beginning" greedily and sampled,
# then F32 and Q8_ROW side by side (size, held-out perplexity, tokens/s).
DEB_BUILD_PACKAGES += bible-kjv
demo-kjv: $(BUILD)/qmap
	$(PYTHON) tests/tools/kjv_demo.py --qmap $(BUILD)/qmap --workdir $(BUILD)/demo/kjv
.PHONY: demo-kjv
EXTRA_DEMO += demo-kjv
