# mk/hostile.mk — the I/O faults of issue 43 (1, 2, 4, 5, 6, 12): writers onto devices, FIFOs and
# directories, symlinks planted at temporary names, FIFOs and /dev/zero as text, a gzip bomb as classifier
# input, a model file truncated under a run (tests/run/test_hostile_io.py); on the normal build, then once
# under ASan+UBSan.
hostile-io-test: $(BUILD)/qmap $(BUILD)/asan/qmap
	$(PYTHON) tests/run/test_hostile_io.py --qmap $(BUILD)/qmap --workdir $(BUILD)/tests/hostile
	$(PYTHON) tests/run/test_hostile_io.py --qmap $(BUILD)/asan/qmap --asan --workdir $(BUILD)/tests/hostile-asan
.PHONY: hostile-io-test
EXTRA_TESTS += hostile-io-test
