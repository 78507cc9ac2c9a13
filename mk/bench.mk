# mk/bench.mk — the benchmarks' measuring module (cli/bench_measure.c) is CLI code, outside the libraries the
# unit tests link: its unit test (tests/unit/test_bench_measure.c) links the object itself, in the normal
# and the sanitizer build.
$(BUILD)/tests/test_bench_measure: tests/unit/test_bench_measure.c $(BUILD)/obj/cli/bench_measure.o $(BUILD)/obj/cli/json_out.o $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/unit -o $@ $< $(BUILD)/obj/cli/bench_measure.o $(BUILD)/obj/cli/json_out.o -lcmocka -lm

$(BUILD)/asan/test_bench_measure: tests/unit/test_bench_measure.c $(BUILD)/asan-obj/cli/bench_measure.o $(BUILD)/asan-obj/cli/json_out.o $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -Itests/unit -o $@ $< $(BUILD)/asan-obj/cli/bench_measure.o $(BUILD)/asan-obj/cli/json_out.o -lcmocka -lm

# make bench: `qmap bench` over random-init models at real shapes (tests/tools/make_lm.py: Llama 110M,
# TinyLlama 1.1B, GPT-2 124M), each converted to F32 and quantized to F16 and Q8_ROW, 1 and 2 threads.
# About 12 GB of disk in $(BUILD)/bench/models, and some minutes; not part of make test.
BENCH_SHAPES ?= llama-110m tinyllama-1.1b gpt2-124m
BENCH_MODEL_FLAGS ?= -p 512 -n 128 -r 5 -t 1,2
# These shapes' Q8_ROW and F16 once more with their FFN down projections as stored ([d, F], quantize
# --panel-cols 0), benched beside the default files (column panels where --panel-cols auto cuts them;
# docs/perf/2026-11-26-zen4.md: "Why long rows stream slower"). Every file is kept between runs: delete
# $(BUILD)/bench/models/*-q8.qmap *-f16.qmap after a change to how quantize writes them.
BENCH_AS_STORED ?= tinyllama-1.1b
bench-models: $(BUILD)/qmap
	@mkdir -p $(BUILD)/bench/models
	@set -e; list=""; for s in $(BENCH_SHAPES); do d=$(BUILD)/bench/models/$$s; \
	  [ -f $$d-f32.qmap ] || { $(PYTHON) tests/tools/make_lm.py $$s $$d; \
	    $(BUILD)/qmap convert $$d/model.safetensors -o $$d-f32.qmap --quiet; rm -rf $$d; }; \
	  for q in f16 q8; do [ -f $$d-$$q.qmap ] || $(BUILD)/qmap quantize --$$q $$d-f32.qmap -o $$d-$$q.qmap --quiet; done; \
	  list="$$list $$d-q8.qmap $$d-f16.qmap $$d-f32.qmap"; done; \
	for s in $(BENCH_AS_STORED); do d=$(BUILD)/bench/models/$$s; \
	  case " $(BENCH_SHAPES) " in *" $$s "*) ;; *) continue;; esac; \
	  for q in q8 f16; do [ -f $$d-$$q-as-stored.qmap ] || $(BUILD)/qmap quantize --$$q $$d-f32.qmap \
	    -o $$d-$$q-as-stored.qmap --panel-cols 0 --quiet; list="$$list $$d-$$q-as-stored.qmap"; done; done; \
	$(BUILD)/qmap bench $$list $(BENCH_MODEL_FLAGS)
.PHONY: bench-models

# A smoke test of `qmap bench kernels` in make test (about 10 s: --quick, 1 thread, the matvec section):
# it finishes, and its JSON keeps every run's ratio to the bandwidth within (0, 1.05] with reruns counted.
bench-kernels-test: $(BUILD)/qmap
	$(PYTHON) tests/run/test_bench_kernels.py --qmap $(BUILD)/qmap --dir $(BUILD)/bench-smoke
EXTRA_TESTS += bench-kernels-test
.PHONY: bench-kernels-test
