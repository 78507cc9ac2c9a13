# mk/mlp.mk — classifiers (mlp): qmap run --input against PyTorch (tests/run/test_mlp.py), on the normal
# build and under ASan+UBSan.

mlp-test: $(BUILD)/qmap $(BUILD)/asan/qmap
	$(PYTHON) tests/run/test_mlp.py --qmap $(BUILD)/qmap --workdir $(BUILD)/tests/mlp
	$(PYTHON) tests/run/test_mlp.py --qmap $(BUILD)/asan/qmap --workdir $(BUILD)/tests/mlp-asan
.PHONY: mlp-test
EXTRA_TESTS += mlp-test

# The Fashion-MNIST test images the shipped classifier is checked on (IDX, gzip).
DEB_TEST_PACKAGES += dataset-fashion-mnist

# make demo, classifiers: the shipped Fashion-MNIST MLP (tests/data/fashion_mlp) converted, quantized to
# Q8_ROW, and run on the 10,000 real test images from Debian's dataset-fashion-mnist in both containers.
DEB_BUILD_PACKAGES += dataset-fashion-mnist
FASHION := /usr/share/datasets/fashion-mnist
demo-mlp: $(BUILD)/qmap
	@mkdir -p $(BUILD)/demo
	$(BUILD)/qmap convert tests/data/fashion_mlp/model.pt -o $(BUILD)/demo/fashion.qmap --quiet
	$(BUILD)/qmap quantize --q8 $(BUILD)/demo/fashion.qmap -o $(BUILD)/demo/fashion-q8.qmap --quiet
	@for m in fashion fashion-q8; do \
	  echo "== qmap run $(BUILD)/demo/$$m.qmap --input $(FASHION)/t10k-images-idx3-ubyte.gz --labels …"; \
	  $(BUILD)/qmap run $(BUILD)/demo/$$m.qmap --input $(FASHION)/t10k-images-idx3-ubyte.gz \
	    --labels $(FASHION)/t10k-labels-idx1-ubyte.gz | grep -v '^ *[0-9]* (' || exit 1; \
	done
	@echo "== the first 5 test images, with their 3 most likely classes"
	@/usr/bin/python3 -c "import gzip,sys; r=gzip.open('$(FASHION)/t10k-images-idx3-ubyte.gz').read(); sys.stdout.buffer.write(bytes([0,0,8,3,0,0,0,5,0,0,0,28,0,0,0,28])+r[16:16+5*784])" > $(BUILD)/demo/first5.idx
	$(BUILD)/qmap run $(BUILD)/demo/fashion-q8.qmap --input $(BUILD)/demo/first5.idx --top 3
	@ls -l $(BUILD)/demo/fashion.qmap $(BUILD)/demo/fashion-q8.qmap | awk '{printf "%-40s %6.1f kB\n", $$9, $$5/1e3}'

EXTRA_DEMO += demo-mlp
