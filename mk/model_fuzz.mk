# mk/model_fuzz.mk — the model loaders' fuzz target (tests/fuzz/fuzz_model.c): valid containers of every
# kind (tests/fuzz/make_model_seeds.py) with lying metadata and tensor tables, checksums repaired, opened
# with qmap_model_open and run, under ASan+UBSan. make test runs it for MODEL_FUZZ_SECONDS; a longer run:
#   make model-fuzz MODEL_FUZZ_SECONDS=600
MODEL_FUZZ_SECONDS ?= 25
MODEL_FUZZ_DIR := $(BUILD)/fuzz/model
FUZZ_MODEL_OBJ := $(FORMAT_SRC:%.c=$(BUILD)/fuzz-obj/%.o) $(CONVERT_SRC:%.c=$(BUILD)/fuzz-obj/%.o) $(QUANTIZE_SRC:%.c=$(BUILD)/fuzz-obj/%.o) \
                  $(RUNTIME_SRC:%.c=$(BUILD)/fuzz-obj/%.o) $(API_SRC:%.c=$(BUILD)/fuzz-obj/%.o)

# clang 14 knows no __builtin_cpu_supports("f16c"): the fuzz build of the runtime picks the portable kernels
# (the SIMD ones are checked against them by make unit), which is what a fuzzer of the loaders needs anyway.
$(RUNTIME_SRC:%.c=$(BUILD)/fuzz-obj/%.o): FUZZ_CFLAGS += -D'__builtin_cpu_supports(feature)=0'

$(BUILD)/fuzz/fuzz_model: tests/fuzz/fuzz_model.c $(FUZZ_MODEL_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_MODEL_OBJ) $(LDLIBS)

$(MODEL_FUZZ_DIR)/seeds/.made: tests/fuzz/make_model_seeds.py $(BUILD)/qmap
	@rm -rf $(MODEL_FUZZ_DIR)/seeds && mkdir -p $(MODEL_FUZZ_DIR)/seeds
	$(PYTHON) tests/fuzz/make_model_seeds.py --qmap $(BUILD)/qmap --out $(MODEL_FUZZ_DIR)/seeds
	@touch $@

# A fresh corpus each run, started from the seed inputs and the committed regressions (tests/fuzz/model-inputs).
model-fuzz: $(BUILD)/fuzz/fuzz_model $(MODEL_FUZZ_DIR)/seeds/.made
	@rm -rf $(MODEL_FUZZ_DIR)/corpus $(MODEL_FUZZ_DIR)/crash-* $(MODEL_FUZZ_DIR)/leak-* $(MODEL_FUZZ_DIR)/timeout-* \
	  $(MODEL_FUZZ_DIR)/oom-*; mkdir -p $(MODEL_FUZZ_DIR)/corpus
	@echo "== fuzz the model loaders for $(MODEL_FUZZ_SECONDS) s"
	@QMAP_FUZZ_MODELS=$(MODEL_FUZZ_DIR)/seeds $(BUILD)/fuzz/fuzz_model -max_total_time=$(MODEL_FUZZ_SECONDS) \
	  -len_control=0 -max_len=512 -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 -artifact_prefix=$(MODEL_FUZZ_DIR)/ \
	  $(MODEL_FUZZ_DIR)/corpus $(MODEL_FUZZ_DIR)/seeds/inputs tests/fuzz/model-inputs > $(MODEL_FUZZ_DIR)/fuzz.log 2>&1 \
	  || { grep -E 'ERROR: |SUMMARY: |property violated|^ +#[0-9]+ ' $(MODEL_FUZZ_DIR)/fuzz.log | head -30; exit 1; }
	@grep -E "stat::number_of_executed_units" $(MODEL_FUZZ_DIR)/fuzz.log
.PHONY: model-fuzz
EXTRA_TESTS += model-fuzz
