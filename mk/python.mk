# mk/python.mk — `import qmap` (python/qmap: ctypes over libqmap.so.0) tested with Debian's pytest against
# qmap run / qmap tokenize, torch and the shipped models (tests/python).

DEB_TEST_PACKAGES += python3-pytest python3-numpy

# The package under test is the checkout's (PYTHONPATH=python) over this build's library; pytest's cache
# stays out of the tree. Exit status 5 (no tests collected) fails the target like any other.
python-test: $(BUILD)/qmap lib-qmap
	QMAP_LIBRARY=$(abspath $(BUILD))/libqmap.so QMAP_BIN=$(abspath $(BUILD))/qmap \
	  QMAP_TEST_WORKDIR=$(abspath $(BUILD))/tests/python PYTHONPATH=python \
	  $(PYTHON) -m pytest -q -p no:cacheprovider tests/python
.PHONY: python-test
EXTRA_TESTS += python-test
