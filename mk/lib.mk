# mk/lib.mk — libqmap (the public API of include/qmap.h over format/ + convert/ + quantize/ + runtime/ + api/), its pkg-config
# file, install/uninstall, and the test that builds examples/simple.c against the installed copy.
#
#   make lib-qmap                 $(BUILD)/libqmap.a and $(BUILD)/libqmap.so.$(QMAP_SOVERSION_FULL)
#   make install PREFIX=/usr/local DESTDIR=
#   make uninstall PREFIX=… DESTDIR=…
#
# install puts the Python package (python/qmap) where Debian's /usr/bin/python3 looks under PREFIX:
# /usr/lib/python3/dist-packages for PREFIX=/usr, PREFIX/lib/python3.X/dist-packages otherwise (Debian's
# site.py lists /usr/local/lib/python3.X/dist-packages; another prefix needs PYTHONPATH). The package finds
# the libqmap.so.0 of the same prefix by its own path.

PREFIX  ?= /usr/local
DESTDIR ?=
QMAP_LIB_VERSION := $(shell sed -n 's/^\#define QMAP_VERSION "\(.*\)"/\1/p' format/qm_version.h)
QMAP_SOVERSION   := 0
QMAP_SONAME      := libqmap.so.$(QMAP_SOVERSION)
QMAP_SOFILE      := libqmap.so.$(QMAP_LIB_VERSION)
PYTHON_SITEDIR   ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')/dist-packages)

# convert/ and quantize/ are in it for qmap_convert and qmap_quantize (api/qmap_convert.c).
LIBQMAP_SRC := $(FORMAT_SRC) $(CONVERT_SRC) $(QUANTIZE_SRC) $(RUNTIME_SRC) $(API_SRC)
LIBQMAP_OBJ := $(LIBQMAP_SRC:%.c=$(BUILD)/obj/%.o)
LIBQMAP_PIC := $(LIBQMAP_SRC:%.c=$(BUILD)/pic-obj/%.o)

# Shared-library objects: position-independent, every symbol hidden unless QMAP_API marks it public.
$(BUILD)/pic-obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fPIC -fvisibility=hidden -DQMAP_BUILDING_LIBRARY $(ISA_FLAGS_$(notdir $*)) -c $< -o $@

$(BUILD)/libqmap.a: $(LIBQMAP_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/$(QMAP_SOFILE): $(LIBQMAP_PIC) lib/libqmap.map
	$(CC) -shared -fopenmp -Wl,-soname,$(QMAP_SONAME) -Wl,--version-script=lib/libqmap.map -Wl,--no-undefined \
	  -o $@ $(LIBQMAP_PIC) -lzip -ljansson -lpcre2-8 -lutf8proc -lz -lxxhash -lm

$(BUILD)/libqmap.so: $(BUILD)/$(QMAP_SOFILE)
	ln -sf $(QMAP_SOFILE) $(BUILD)/$(QMAP_SONAME)
	ln -sf $(QMAP_SONAME) $@

lib-qmap: $(BUILD)/libqmap.a $(BUILD)/libqmap.so

.PHONY: lib-qmap install uninstall lib-test
# qmap.pc is written at install time, for the PREFIX given then.
install: $(BUILD)/qmap lib-qmap
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 $(BUILD)/qmap $(DESTDIR)$(PREFIX)/bin/qmap
	install -m 644 $(BUILD)/libqmap.a $(DESTDIR)$(PREFIX)/lib/libqmap.a
	install -m 755 $(BUILD)/$(QMAP_SOFILE) $(DESTDIR)$(PREFIX)/lib/$(QMAP_SOFILE)
	ln -sf $(QMAP_SOFILE) $(DESTDIR)$(PREFIX)/lib/$(QMAP_SONAME)
	ln -sf $(QMAP_SONAME) $(DESTDIR)$(PREFIX)/lib/libqmap.so
	install -m 644 include/qmap.h include/qmap_errors.h $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(QMAP_LIB_VERSION)|' lib/qmap.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/qmap.pc
	chmod 644 $(DESTDIR)$(PREFIX)/lib/pkgconfig/qmap.pc
	install -d $(DESTDIR)$(PYTHON_SITEDIR)/qmap
	install -m 644 python/qmap/*.py $(DESTDIR)$(PYTHON_SITEDIR)/qmap/

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/qmap $(DESTDIR)$(PREFIX)/lib/libqmap.a $(DESTDIR)$(PREFIX)/lib/$(QMAP_SOFILE) \
	  $(DESTDIR)$(PREFIX)/lib/$(QMAP_SONAME) $(DESTDIR)$(PREFIX)/lib/libqmap.so \
	  $(DESTDIR)$(PREFIX)/include/qmap.h $(DESTDIR)$(PREFIX)/include/qmap_errors.h \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig/qmap.pc
	rm -f $(DESTDIR)$(PYTHON_SITEDIR)/qmap/*.py
	rm -rf $(DESTDIR)$(PYTHON_SITEDIR)/qmap/__pycache__
	rmdir $(DESTDIR)$(PYTHON_SITEDIR)/qmap 2>/dev/null || true

# Install into a temporary prefix, build examples/simple.c there through pkg-config (shared and static),
# run both on a small converted model, compare with qmap run; import the installed Python package and
# generate with it; check the exported symbols and uninstall.
lib-test: $(BUILD)/qmap lib-qmap
	sh tests/lib/test_install.sh $(BUILD) $(PYTHON)

DEB_TEST_PACKAGES += pkg-config
EXTRA_TESTS += lib-test
