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
