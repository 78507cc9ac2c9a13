# Convert against inputs built to cost memory (issue 11 item 9): JSON size caps and tree budget,
# --json-limit, zip entries that inflate like a bomb, --allow-large (tests/convert/test_hostile_sizes.py).
hostile-sizes-test: $(BUILD)/qmap
	$(PYTHON) tests/convert/test_hostile_sizes.py --qmap $(BUILD)/qmap --workdir $(BUILD)/tests/hostile-sizes
.PHONY: hostile-sizes-test
EXTRA_TESTS += hostile-sizes-test

# Inputs that shrink while they are read (issue 11 item 8): verify, quantize and convert with the input
# truncated or overwritten in place at random moments must fail with an error naming it, never SIGBUS.
shrinking-inputs-test: $(BUILD)/qmap
	$(PYTHON) tests/convert/test_shrinking_inputs.py --qmap $(BUILD)/qmap --workdir $(BUILD)/tests/shrinking-inputs
	rm -rf $(BUILD)/tests/shrinking-inputs
.PHONY: shrinking-inputs-test
EXTRA_TESTS += shrinking-inputs-test
