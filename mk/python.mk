# mk/python.mk — `import qmap` (python/qmap: ctypes over libqmap.so.0) tested with Debian's pytest against
# qmap run / tokenize / perplexity / convert / quantize / inspect / verify, torch, the numpy reference of
# Q8_ROW and the shipped models (tests/python).

DEB_TEST_PACKAGES += python3-pytest python3-numpy

# The package under test is the checkout's (PYTHONPATH=python) over this build's library; pytest's cache
# stays out of the tree. Exit status 5 (no tests collected) fails the target like any other.
python-test: $(BUILD)/qmap lib-qmap
	QMAP_LIBRARY=$(abspath $(BUILD))/libqmap.so QMAP_BIN=$(abspath $(BUILD))/qmap \
	  QMAP_TEST_WORKDIR=$(abspath $(BUILD))/tests/python PYTHONPATH=python \
	  $(PYTHON) -m pytest -q -p no:cacheprovider tests/python
.PHONY: python-test
EXTRA_TESTS += python-test

# make demo: the shipped KJV Llama, quantized to Q8_ROW, continued from Python (examples/generate.py); then
# converted, quantized and looked into through the library (examples/container.py).
demo-python: $(BUILD)/qmap lib-qmap
	@mkdir -p $(BUILD)/demo
	$(BUILD)/qmap convert tests/data/kjv_llama -o $(BUILD)/demo/kjv-py.qmap --quiet
	$(BUILD)/qmap quantize --q8 $(BUILD)/demo/kjv-py.qmap -o $(BUILD)/demo/kjv-py-q8.qmap --quiet
	QMAP_LIBRARY=$(abspath $(BUILD))/libqmap.so PYTHONPATH=python $(PYTHON) examples/generate.py \
	  $(BUILD)/demo/kjv-py-q8.qmap "In the beginning" 32
	QMAP_LIBRARY=$(abspath $(BUILD))/libqmap.so PYTHONPATH=python $(PYTHON) examples/container.py \
	  tests/data/kjv_llama $(BUILD)/demo
.PHONY: demo-python
EXTRA_DEMO += demo-python
