# mk/mpi.mk — qmap-mpi: tensor-parallel decoding of the decoder LMs over Open MPI (mpi/, issue 51).
# Only mpi/ includes mpi.h or links libmpi; qmap, libqmap and the rest of make test never need MPI.
DEB_TEST_PACKAGES += libopenmpi-dev openmpi-bin

MPICC    ?= mpicc
MPI_SRC  := $(wildcard mpi/*.c)
MPI_OBJ  := $(MPI_SRC:%.c=$(BUILD)/mpi-obj/%.o)
# the commands of qmap without its main() (cli/main.c): qmap-mpi calls cmd_run_shard, cmd_perplexity_shard
# and qmap bench's timing (cli/bench_model.h)
MPI_CLI_OBJ := $(filter-out $(BUILD)/obj/cli/main.o,$(CLI_OBJ))

$(BUILD)/mpi-obj/%.o: %.c $(HEADERS) $(wildcard mpi/*.h)
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(ALL_CFLAGS) -Impi -c $< -o $@

$(BUILD)/qmap-mpi: $(MPI_OBJ) $(MPI_CLI_OBJ) $(LIBS)
	OMPI_CC=$(CC) $(MPICC) $(ALL_CFLAGS) -o $@ $(MPI_OBJ) $(MPI_CLI_OBJ) $(CLI_EXTRA_OBJ) $(LIBS) $(LDLIBS) \
	  $(CLI_EXTRA_LDLIBS) -lpthread

mpi: $(BUILD)/qmap-mpi
.PHONY: mpi

$(BUILD)/tests/tp_logits: tests/mpi/tp_logits.c $(BUILD)/mpi-obj/mpi/tp.o $(LIBS) $(HEADERS)
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(ALL_CFLAGS) -Impi -o $@ $< $(BUILD)/mpi-obj/mpi/tp.o $(LIBS) $(LDLIBS) -lpthread

# Tensor parallel against one rank (tests/mpi/test_mpi.py): greedy continuations and logits at N = 1, 2, 4
# for a small llama (GQA) and gpt2, F32 and Q8_ROW, and Q8_ROW written by quantize --shards 2 and 4 (default
# --act); a rank count that does not divide the heads, a container that differs between ranks, a killed rank;
# qmap-mpi bench's --json. mpirun as root on 2 cores needs both flags.
MPIRUN ?= mpirun --allow-run-as-root --oversubscribe
mpi-test: $(BUILD)/qmap $(BUILD)/qmap-mpi $(BUILD)/tests/tp_logits
	$(PYTHON) tests/mpi/test_mpi.py --qmap $(BUILD)/qmap --qmap-mpi $(BUILD)/qmap-mpi \
	  --tp-logits $(BUILD)/tests/tp_logits --mpirun "$(MPIRUN)" --workdir $(BUILD)/tests/mpi
.PHONY: mpi-test
EXTRA_TESTS += mpi-test
