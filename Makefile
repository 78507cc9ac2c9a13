# qmap — build, test, fuzz and benchmark. `make help` lists the targets.
#
# Module dependencies (see README.md "Architecture"): format/ depends on nothing of ours; convert/ and
# quantize/ write containers through format/; runtime/ only reads them; cli/ ties the commands together.

ifeq ($(origin CC),default)
CC       := gcc
endif
CLANG    ?= clang
PYTHON   ?= /usr/bin/python3
BUILD    ?= build
CSTD     := -std=c11 -D_DEFAULT_SOURCE
WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2
OPT      ?= -O2 -g
CFLAGS   ?= $(OPT)
INCLUDES := -Iinclude -Iformat -Iconvert -Iquantize -Iruntime -Iapi -Icli
ALL_CFLAGS = $(CSTD) $(WARN) $(CFLAGS) -fopenmp $(INCLUDES)
LDLIBS   := -lzip -ljansson -lpcre2-8 -lutf8proc -lz -lxxhash -lm
SAN      := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
# make fuzz runs FUZZ_SECONDS; make test runs a bounded TEST_FUZZ_SECONDS
FUZZ_SECONDS      ?= 600
TEST_FUZZ_SECONDS ?= 45
CRASH_TRIALS      ?= 60
IMPORT_FUZZ_SECONDS ?= 15

# Debian 12 packages: the build (make deps, for demo) and the tests besides (make deps-test).
DEB_BUILD_PACKAGES := gcc make libc6-dev zlib1g-dev libxxhash-dev libzip-dev libjansson-dev libpcre2-dev libutf8proc-dev
# libopenblas0-pthread: Debian's torch calls libblas.so.3, which is the reference BLAS (6 GFLOPS here) unless
# OpenBLAS provides it; the tests and benchmarks compare against torch as a deployment would run it.
DEB_TEST_PACKAGES  := $(DEB_BUILD_PACKAGES) libcmocka-dev clang libclang-rt-14-dev libomp-dev \
                      python3 python3-numpy python3-xxhash python3-torch python3-sklearn libopenblas0-pthread

FORMAT_SRC := $(wildcard format/*.c)
CONVERT_SRC := $(wildcard convert/*.c)
QUANTIZE_SRC := $(wildcard quantize/*.c)
RUNTIME_SRC := $(wildcard runtime/*.c)
API_SRC    := $(wildcard api/*.c)
CLI_SRC    := $(wildcard cli/*.c)
FORMAT_OBJ := $(FORMAT_SRC:%.c=$(BUILD)/obj/%.o)
CONVERT_OBJ := $(CONVERT_SRC:%.c=$(BUILD)/obj/%.o)
QUANTIZE_OBJ := $(QUANTIZE_SRC:%.c=$(BUILD)/obj/%.o)
RUNTIME_OBJ := $(RUNTIME_SRC:%.c=$(BUILD)/obj/%.o)
API_OBJ    := $(API_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ    := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
HEADERS    := $(wildcard include/*.h format/*.h convert/*.h quantize/*.h runtime/*.h api/*.h cli/*.h)
FUZZ_HEADERS := $(wildcard tests/fuzz/*.h)

UNIT_SRC   := $(filter-out tests/unit/test_util.c,$(wildcard tests/unit/test_*.c))
UNIT_UTIL  := $(wildcard tests/unit/test_util.c)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
UNIT_ASAN  := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/asan/%)

.PHONY: all lib deps deps-test install-packages test unit unit-asan spec-test golden-check fuzz fuzz-replay fuzz-import fuzz-import-replay \
        convert-test quantize-test crash-test bench demo clean help
.DEFAULT_GOAL := all

all: $(BUILD)/qmap

help:
	@echo "make            build $(BUILD)/qmap"
	@echo "make demo       install deps, build; convert, quantize and run the shipped KJV Llama (also from Python),"
	@echo "                classifiers and translators"
	@echo "make test       install deps, then every test: unit (once per CPU level), sanitizers, spec reader, fuzz (bounded), crash,"
	@echo "                convert against PyTorch (also under ASan), quantize against numpy, importer fuzzing (bounded)"
	@echo "make fuzz       run the reader fuzzer for FUZZ_SECONDS (default $(FUZZ_SECONDS))"
	@echo "make fuzz-import   fuzz every importer for IMPORT_FUZZ_SECONDS each (default $(IMPORT_FUZZ_SECONDS))"
	@echo "make convert-test  qmap convert against PyTorch only"
	@echo "make quantize-test qmap quantize against a numpy reference only"
	@echo "make bench      open-time, verify, convert and quantize throughput, qmap bench kernels (matmul), tokenizer MB/s,"
	@echo "                classifier/G2P against torch, qmap bench on Llama 110M / TinyLlama 1.1B / GPT-2 (make bench-models)"
	@echo "make run-test   decoder LMs against PyTorch (gpt2, gpt_neo, llama/mistral/qwen2; F32, F16, Q8_ROW)"
	@echo "make tokenizer-test  real GPT-2 / Llama-2 tokenizers against the npm reference encoders (+ tokenizer-fuzz)"
	@echo "make lib-test   install into a temporary prefix, build examples/simple.c through pkg-config, run it"
	@echo "make python-test  the Python package (python/qmap) against qmap run, qmap tokenize and torch (pytest)"
	@echo "make install    PREFIX=/usr/local DESTDIR= : qmap, libqmap.a/.so, qmap.h, qmap.pc, the Python package"
	@echo "                (make uninstall removes them)"
	@echo "make deps       apt-get install whatever build packages are missing (needs root); deps-test: test ones too"

# ---- dependencies ----------------------------------------------------------------------------
deps:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DEB_BUILD_PACKAGES)"

deps-test:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DEB_TEST_PACKAGES)"

install-packages:
	@missing=""; for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "make deps: run as root (apt-get)"; exit 1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# ---- library and CLI -------------------------------------------------------------------------
$(BUILD)/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(ISA_FLAGS_$(notdir $*)) -c $< -o $@

# per-file ISA flags: these files are only called after a runtime CPU check
ISA_FLAGS_qm_hash_avx2   := -mavx2
ISA_FLAGS_qm_hash_avx512 := -mavx512f -mavx512bw -mavx2
# the NaN scan and element conversion loops of convert want the vectoriser (gcc 12 -O2 barely uses it)
ISA_FLAGS_qc_convert     := -O3
ISA_FLAGS_qq_quantize    := -O3
ISA_FLAGS_qq_kernels_ref := -O3
ISA_FLAGS_qq_kernels_avx2 := -O3 -mavx2
ISA_FLAGS_qq_kernels_avx512 := -O3 -mavx512f -mavx512bw -mavx2
ISA_FLAGS_qr_matmul      := -O3
ISA_FLAGS_qr_kernels_ref := -O3
ISA_FLAGS_qr_kernels_avx2 := -O3 -mavx2 -mfma -mf16c
ISA_FLAGS_qr_kernels_avx512 := -O3 -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c

# The same library sources built with sanitizers (unit-asan, replay) and for libFuzzer (clang).
ASAN_FORMAT_OBJ := $(FORMAT_SRC:%.c=$(BUILD)/asan-obj/%.o) $(CONVERT_SRC:%.c=$(BUILD)/asan-obj/%.o) $(QUANTIZE_SRC:%.c=$(BUILD)/asan-obj/%.o) \
                   $(RUNTIME_SRC:%.c=$(BUILD)/asan-obj/%.o) $(API_SRC:%.c=$(BUILD)/asan-obj/%.o)
FUZZ_FORMAT_OBJ := $(FORMAT_SRC:%.c=$(BUILD)/fuzz-obj/%.o) $(CONVERT_SRC:%.c=$(BUILD)/fuzz-obj/%.o) $(QUANTIZE_SRC:%.c=$(BUILD)/fuzz-obj/%.o)
SAN_CFLAGS = $(CSTD) $(WARN) -O1 -g $(SAN) -fopenmp $(INCLUDES)
FUZZ_CFLAGS = $(CSTD) -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fopenmp $(INCLUDES)

$(BUILD)/asan-obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) $(ISA_FLAGS_$(notdir $*)) -c $< -o $@

$(BUILD)/fuzz-obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(ISA_FLAGS_$(notdir $*)) -c $< -o $@

$(BUILD)/libqmformat.a: $(FORMAT_OBJ)
	ar rcs $@ $^

$(BUILD)/libqmconvert.a: $(CONVERT_OBJ)
	ar rcs $@ $^

$(BUILD)/libqmquantize.a: $(QUANTIZE_OBJ)
	ar rcs $@ $^

$(BUILD)/libqmruntime.a: $(RUNTIME_OBJ)
	ar rcs $@ $^

$(BUILD)/libqmapi.a: $(API_OBJ)
	ar rcs $@ $^

lib: $(BUILD)/libqmformat.a $(BUILD)/libqmconvert.a $(BUILD)/libqmquantize.a $(BUILD)/libqmruntime.a $(BUILD)/libqmapi.a

LIBS := $(BUILD)/libqmapi.a $(BUILD)/libqmruntime.a $(BUILD)/libqmquantize.a $(BUILD)/libqmconvert.a $(BUILD)/libqmformat.a

# CLI_EXTRA_OBJ / CLI_EXTRA_LDLIBS: modules of the command beside cli/ (mk/serve.mk adds serve/)
$(BUILD)/qmap: $(CLI_OBJ) $(LIBS)
	$(CC) $(ALL_CFLAGS) -o $@ $(CLI_OBJ) $(CLI_EXTRA_OBJ) $(LIBS) $(LDLIBS) $(CLI_EXTRA_LDLIBS)

# ---- test programs ---------------------------------------------------------------------------
$(BUILD)/tests/%: tests/unit/%.c $(UNIT_UTIL) $(LIBS) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/unit -o $@ $< $(UNIT_UTIL) $(LIBS) -lcmocka $(LDLIBS)

# sanitizer build: library sources compiled into each binary with the same flags
$(BUILD)/asan/%: tests/unit/%.c $(UNIT_UTIL) $(ASAN_FORMAT_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -Itests/unit -o $@ $< $(UNIT_UTIL) $(ASAN_FORMAT_OBJ) -lcmocka $(LDLIBS)

$(BUILD)/tests/write_fixture: tests/tools/write_fixture.c $(BUILD)/libqmformat.a $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libqmformat.a $(LDLIBS)

$(BUILD)/tests/make_seeds: tests/fuzz/make_seeds.c $(BUILD)/libqmformat.a $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libqmformat.a $(LDLIBS)

$(BUILD)/tests/crash_writer: tests/crash/crash_writer.c $(BUILD)/libqmformat.a $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libqmformat.a $(LDLIBS)

$(BUILD)/bench_format: tests/bench/bench_format.c $(BUILD)/libqmformat.a $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O3 -march=native -o $@ $< $(BUILD)/libqmformat.a $(LDLIBS)

# libFuzzer target (clang) and its replay twin (no libFuzzer, same sanitizers)
$(BUILD)/fuzz/fuzz_reader: tests/fuzz/fuzz_reader.c $(FUZZ_FORMAT_OBJ) $(HEADERS) $(FUZZ_HEADERS)
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ tests/fuzz/fuzz_reader.c $(FUZZ_FORMAT_OBJ) $(LDLIBS)

$(BUILD)/fuzz/replay_reader: tests/fuzz/fuzz_reader.c tests/fuzz/replay_main.c $(ASAN_FORMAT_OBJ) $(HEADERS) $(FUZZ_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -o $@ tests/fuzz/fuzz_reader.c tests/fuzz/replay_main.c $(ASAN_FORMAT_OBJ) $(LDLIBS)

# Importer fuzz targets (convert/): tests/fuzz/fuzz_<name>.c, seeds in tests/fuzz/seeds/<name>/.
IMPORT_FUZZERS := $(filter-out reader model,$(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c)))

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_FORMAT_OBJ) $(HEADERS) $(FUZZ_HEADERS)
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_FORMAT_OBJ) $(LDLIBS)

$(BUILD)/fuzz/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay_main.c $(ASAN_FORMAT_OBJ) $(HEADERS) $(FUZZ_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -o $@ $< tests/fuzz/replay_main.c $(ASAN_FORMAT_OBJ) $(LDLIBS)

# Replay every importer's seeds under ASan+UBSan; fuzz each importer for IMPORT_FUZZ_SECONDS.
fuzz-import-replay: $(IMPORT_FUZZERS:%=$(BUILD)/fuzz/replay_%)
	@set -e; for t in $(IMPORT_FUZZERS); do echo "== replay $$t"; $(BUILD)/fuzz/replay_$$t tests/fuzz/seeds/$$t; done

fuzz-import: $(IMPORT_FUZZERS:%=$(BUILD)/fuzz/fuzz_%)
	@set -e; for t in $(IMPORT_FUZZERS); do \
	  rm -rf $(BUILD)/fuzz/corpus-$$t && mkdir -p $(BUILD)/fuzz/corpus-$$t; \
	  echo "== fuzz $$t for $(IMPORT_FUZZ_SECONDS) s"; \
	  dict=""; [ -f tests/fuzz/$$t.dict ] && dict="-dict=tests/fuzz/$$t.dict"; \
	  $(BUILD)/fuzz/fuzz_$$t -max_total_time=$(IMPORT_FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 $$dict \
	    -artifact_prefix=$(BUILD)/fuzz/$$t- $(BUILD)/fuzz/corpus-$$t tests/fuzz/seeds/$$t \
	    > $(BUILD)/fuzz/$$t.log 2>&1 || { tail -40 $(BUILD)/fuzz/$$t.log; exit 1; }; \
	  grep -E "stat::number_of_executed_units" $(BUILD)/fuzz/$$t.log; \
	done

# ---- tests -----------------------------------------------------------------------------------
# The whole unit suite once per kernel variant this CPU has (QMAP_CPU caps every per-ISA choice).
CPU_LEVELS = generic $(shell grep -qw avx2 /proc/cpuinfo 2>/dev/null && echo avx2) \
             $(shell grep -qw avx512_vnni /proc/cpuinfo 2>/dev/null && grep -qw avx512bw /proc/cpuinfo && echo avx512)
unit: $(UNIT_BIN)
	@set -e; for lvl in $(CPU_LEVELS); do for t in $(UNIT_BIN); do echo "== $$t (QMAP_CPU=$$lvl)"; \
	  QMAP_CPU=$$lvl QM_GOLDEN_DIR=tests/golden $$t; done; done

unit-asan: $(UNIT_ASAN)
	@set -e; for t in $(UNIT_ASAN); do echo "== $$t (ASan+UBSan)"; \
	  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 QM_GOLDEN_DIR=tests/golden $$t; done

spec-test: $(BUILD)/qmap $(BUILD)/tests/write_fixture
	$(PYTHON) tests/test_spec_reader.py --fixture-tool $(BUILD)/tests/write_fixture --qmap $(BUILD)/qmap \
	  --workdir $(BUILD)/tests/spec

# The committed golden files must be exactly what the generator makes.
golden-check:
	@rm -rf $(BUILD)/golden-regen && mkdir -p $(BUILD)/golden-regen
	$(PYTHON) tests/golden/make_golden.py --out $(BUILD)/golden-regen
	diff -r $(BUILD)/golden-regen/valid tests/golden/valid
	diff -r $(BUILD)/golden-regen/invalid tests/golden/invalid
	diff -r $(BUILD)/golden-regen/verify tests/golden/verify
	diff $(BUILD)/golden-regen/README.md tests/golden/README.md
	@echo "golden files: up to date"

fuzz-replay: $(BUILD)/fuzz/replay_reader $(BUILD)/tests/make_seeds
	@rm -rf $(BUILD)/fuzz/seeds && mkdir -p $(BUILD)/fuzz/seeds
	$(BUILD)/tests/make_seeds $(BUILD)/fuzz/seeds
	$(BUILD)/fuzz/replay_reader $(BUILD)/fuzz/seeds tests/golden/valid tests/golden/invalid tests/golden/verify $(wildcard tests/fuzz/regressions)

fuzz-bounded: $(BUILD)/fuzz/fuzz_reader $(BUILD)/tests/make_seeds
	FUZZER=$(BUILD)/fuzz/fuzz_reader MAKE_SEEDS=$(BUILD)/tests/make_seeds \
	  sh tests/fuzz/run_fuzz.sh $(TEST_FUZZ_SECONDS) $(BUILD)/fuzz/corpus

fuzz: $(BUILD)/fuzz/fuzz_reader $(BUILD)/tests/make_seeds
	FUZZER=$(BUILD)/fuzz/fuzz_reader MAKE_SEEDS=$(BUILD)/tests/make_seeds \
	  sh tests/fuzz/run_fuzz.sh $(FUZZ_SECONDS) $(BUILD)/fuzz/corpus

# The qmap command built with ASan+UBSan (convert-test runs its whole suite, hostile inputs included, on it).
ASAN_CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/asan-obj/%.o)
$(BUILD)/asan/qmap: $(ASAN_CLI_OBJ) $(ASAN_FORMAT_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -o $@ $(ASAN_CLI_OBJ) $(ASAN_CLI_EXTRA_OBJ) $(ASAN_FORMAT_OBJ) $(LDLIBS) $(CLI_EXTRA_LDLIBS)

# qmap convert against PyTorch: every architecture through every input route, hostile inputs; then the
# same suite on the sanitizer build.
convert-test: $(BUILD)/qmap $(BUILD)/asan/qmap
	$(PYTHON) tests/convert/test_convert.py --qmap $(BUILD)/qmap --workdir $(BUILD)/tests/convert
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(PYTHON) tests/convert/test_convert.py --qmap $(BUILD)/asan/qmap --workdir $(BUILD)/tests/convert-asan \
	  > $(BUILD)/tests/convert-asan.log 2>&1 || { grep -v '^ok ' $(BUILD)/tests/convert-asan.log | tail -40; exit 1; }
	@echo "convert-test under ASan+UBSan: $$(tail -1 $(BUILD)/tests/convert-asan.log)"

# qmap quantize against a numpy reference written from spec 6.1: bytes, bounds, determinism, report,
# refusals, end to end; then the same suite with the portable kernels forced, and on the sanitizer build.
quantize-test: $(BUILD)/qmap $(BUILD)/asan/qmap
	$(PYTHON) tests/quantize/test_quantize.py --qmap $(BUILD)/qmap --workdir $(BUILD)/tests/quantize > $(BUILD)/tests/quantize.log 2>&1 \
	  || { grep -v '^ok ' $(BUILD)/tests/quantize.log | tail -40; exit 1; }
	@echo "quantize-test: $$(tail -1 $(BUILD)/tests/quantize.log)"
	QMAP_CPU=generic $(PYTHON) tests/quantize/test_quantize.py --qmap $(BUILD)/qmap --workdir $(BUILD)/tests/quantize-generic \
	  > $(BUILD)/tests/quantize-generic.log 2>&1 || { grep -v '^ok ' $(BUILD)/tests/quantize-generic.log | tail -40; exit 1; }
	@echo "quantize-test with the generic kernels (QMAP_CPU=generic): $$(tail -1 $(BUILD)/tests/quantize-generic.log)"
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(PYTHON) tests/quantize/test_quantize.py --qmap $(BUILD)/asan/qmap --workdir $(BUILD)/tests/quantize-asan \
	  > $(BUILD)/tests/quantize-asan.log 2>&1 || { grep -v '^ok ' $(BUILD)/tests/quantize-asan.log | tail -40; exit 1; }
	@echo "quantize-test under ASan+UBSan: $$(tail -1 $(BUILD)/tests/quantize-asan.log)"

crash-test: $(BUILD)/tests/crash_writer $(BUILD)/qmap
	$(PYTHON) tests/crash/run_crash_test.py --writer $(BUILD)/tests/crash_writer --qmap $(BUILD)/qmap \
	  --trials $(CRASH_TRIALS) --dir $(BUILD)/tests/crash

test: deps-test
	$(MAKE) --no-print-directory all
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory unit-asan
	$(MAKE) --no-print-directory golden-check
	$(MAKE) --no-print-directory spec-test
	$(MAKE) --no-print-directory fuzz-replay
	$(MAKE) --no-print-directory fuzz-bounded
	$(MAKE) --no-print-directory crash-test
	$(MAKE) --no-print-directory convert-test
	$(MAKE) --no-print-directory quantize-test
	$(MAKE) --no-print-directory fuzz-import-replay
	$(MAKE) --no-print-directory fuzz-import IMPORT_FUZZ_SECONDS=$(IMPORT_FUZZ_SECONDS)
	@set -e; for t in $(EXTRA_TESTS); do $(MAKE) --no-print-directory $$t; done
	@echo "make test: all suites passed"

# ---- demo and benchmarks -----------------------------------------------------------------------
# The quick start: the demo steps of mk/*.mk in file order (the King James Llama first: mk/kjv.mk), then
# the digits classifier that ships in tests/data (a torch.save file, read in C) quantized, inspected, verified.
demo: deps
	$(MAKE) --no-print-directory all
	@set -e; for t in $(EXTRA_DEMO); do $(MAKE) --no-print-directory $$t; done
	$(BUILD)/qmap convert tests/data/digits_mlp/model.pt -o $(BUILD)/digits_mlp.qmap
	$(BUILD)/qmap quantize --q8 $(BUILD)/digits_mlp.qmap -o $(BUILD)/digits_mlp-q8.qmap
	$(BUILD)/qmap inspect $(BUILD)/digits_mlp-q8.qmap
	$(BUILD)/qmap verify --full $(BUILD)/digits_mlp-q8.qmap

bench: $(BUILD)/bench_format $(BUILD)/qmap
	$(BUILD)/bench_format --dir $(BUILD)/bench
	$(PYTHON) tests/bench/bench_convert.py --qmap $(BUILD)/qmap --dir $(BUILD)/bench
	$(PYTHON) tests/bench/bench_quantize.py --qmap $(BUILD)/qmap --dir $(BUILD)/bench
	$(BUILD)/qmap bench kernels --dir $(BUILD)/bench
	$(MAKE) --no-print-directory bench-tokenizer
	$(PYTHON) tests/bench/bench_mlp.py --qmap $(BUILD)/qmap --dir $(BUILD)/bench/mlp
	$(PYTHON) tests/bench/bench_g2p.py --qmap $(BUILD)/qmap --dir $(BUILD)/bench/g2p
	$(MAKE) --no-print-directory bench-models

clean:
	rm -rf $(BUILD)

# Each part of the runtime keeps its own build and test rules in mk/NAME.mk: test targets appended to
# EXTRA_TESTS run at the end of make test (in file-name order), packages appended to DEB_TEST_PACKAGES
# are installed by deps-test, demo steps appended to EXTRA_DEMO run at the end of make demo.
include $(sort $(wildcard mk/*.mk))
