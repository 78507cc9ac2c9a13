# Convert against inputs built to cost memory (issue 11 item 9): JSON size caps and tree budget,
# --json-limit, zip entries that inflate like a bomb, --allow-large (tests/convert/test_hostile_sizes.py).
hostile-sizes-test: $(BUILD)/qmap
	$(PYTHON) tests/convert/test_hostile_sizes.py --qmap $(BUILD)/qmap --workdir $(BUILD)/tests/hostile-sizes
.PHONY: hostile-sizes-test
EXTRA_TESTS += hostile-sizes-test
