# mk/mlp.mk — classifiers (mlp): qmap run --input against PyTorch (tests/run/test_mlp.py), on the normal
# build and under ASan+UBSan.

mlp-test: $(BUILD)/qmap $(BUILD)/asan/qmap
	$(PYTHON) tests/run/test_mlp.py --qmap $(BUILD)/qmap --workdir $(BUILD)/tests/mlp
	$(PYTHON) tests/run/test_mlp.py --qmap $(BUILD)/asan/qmap --workdir $(BUILD)/tests/mlp-asan
.PHONY: mlp-test
EXTRA_TESTS += mlp-test
