# Fusing real PyTorch models by hand: build, run, test, benchmark, plot.
#
#   make chapter-1   build chapter 1, verify and time every version at the KernelBench shape,
#                    print the table, write data/<gpu>/ch01.csv (rows of that shape replaced)
#   make test        unit tests, every chapter's CPU checks, README tables and tagged figures
#                    against their CSVs, header dependencies; GPU checks when a GPU is visible
#   make bench       every chapter over batch 1..default, data/<gpu>/chNN-sweep.csv
#   make plots       gnuplot: plots/<gpu>/ from data/<gpu>/, for every GPU with data
#   make sanitize    compute-sanitizer memcheck, racecheck, synccheck, initcheck, small shape
#   make profile CH=3 V=v10   Nsight Compute's key sections for one version, default shape
#   make record      the tutorial's own data: chapter-N and bench into data/<gpu>/ itself
#   make golden      PyTorch's float64 results on small shapes, data/golden/ (make test reads them);
#                    every chapter, or chapter N's alone with CH=N
#   make peers CH=N  chapter N's PyTorch eager and torch.compile timings in fp32 (TF32 off) and in
#                    PyTorch's default precision (cudnn.allow_tf32 on), data/<gpu>/pytorch-chNN.csv,
#                    its conv's ops alone (pytorch-chNN-ops.csv, the chapters' per-op tables) and
#                    their error against float64 (pytorch-chNN-error.csv); in two parts:
#                    make peers-kb CH=N (the KernelBench shape, the ops, the error) and
#                    make peers-sweep CH=N [BATCHES=1,2,4] (the sweep's other batch sizes)
#   make lib CH=N    chapter N as a C library for PyTorch, build/libchNN.so (python/README.md)
#   make torch-test  the PyTorch package's tests, python/tests/ (a GPU and PyTorch; else SKIP)
#   make kernelbench [CH=N]   KernelBench's protocol: each chapter's ModelNew (python/handfused)
#                    checked and timed against the problem's Model, eager and torch.compile, in
#                    both precisions, forward and training step: data/<gpu>/kernelbench.csv
#                    (data/kernelbench.py); EXPORT=1 adds the exports below
#   make kernelbench-export CH=N   chapter N's ModelNew as one file in KernelBench's submission
#                    format: its library's sources merged into one CUDA source, compiled by
#                    load_inline, build/kernelbench/NN_<problem>.py (python/export_kernelbench.py;
#                    data/kernelbench.py --export checks and times it on a GPU)
#   make check-pytorch CH=N   dump chapter N at an odd shape, compare with PyTorch
#   make all, make clean
#
# <gpu> is the GPU's short name (h100, a100, l4, rtx-4090). Where data/<gpu>/ holds the recorded
# runs the READMEs quote (it has a README.md), chapter-N and bench write data/<gpu>-mine/.
# ARCH: the visible GPU's own (native), sm_90 when none is visible; e.g. make ARCH=sm_80.
# sm_90 (or native on a compute capability 9.0 GPU: H100, H200) builds sm_90a code, Hopper's own
# target, which adds the warpgroup MMA (wgmma, chapter 3's v16 to v18) and runs on compute
# capability 9.0 only; a newer GPU builds its own code (native), where v16 to v18 are skipped.
# (No PTX beside it: compiling the device code a second time for PTX took a quarter of the
# build's CPU time, for a binary that no GPU but one built elsewhere would run.)
# Versions that need Hopper (thread-block clusters) are compiled only for sm_90 and are skipped,
# with the reason, on other GPUs and builds.
# CUDNN: cuDNN is optional. Found (cudnn.h and libcudnn.so in CUDNN_HOME, in nvcc's toolkit, or
# in the system's folders), it gives the library baselines and fast conv inputs; without it
# (or with make CUDNN=0) the conv is common/conv.cu's direct kernels and the cuDNN baselines
# print "skipped: built without cuDNN".

# Every core by default (`make -j1` or any -j given on the command line wins).
ifeq ($(filter -j%,$(MAKEFLAGS)),)
  MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif
# The chapters' CPU references run on OpenMP: threads that wait sleep instead of spinning, so a
# run beside other work does not slow down (build/ch02 --test beside one busy process: 31.7 s
# spinning, 13.1 s passive, 11.6 s alone). Set OMP_WAIT_POLICY yourself to override.
export OMP_WAIT_POLICY ?= passive

NVCC ?= nvcc
CC ?= gcc
HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
ARCH ?= $(if $(HAVE_GPU),native,sm_90)
NATIVE_CC := $(if $(and $(HAVE_GPU),$(filter native,$(ARCH))),$(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .'))
comma := ,
ARCH_TAG := $(if $(or $(filter sm_90 sm_90a,$(ARCH)),$(filter 90,$(NATIVE_CC))),sm_90a,$(ARCH))
ARCH_FLAGS := $(if $(filter sm_90a,$(ARCH_TAG)),-gencode=arch=compute_90a$(comma)code=sm_90a,-arch=$(ARCH))

CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC) 2>/dev/null))
CUDNN_ROOTS := $(CUDNN_HOME) $(CUDA_HOME) /usr/local /usr
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
cudnn_h_in = $(wildcard $(1)/include/cudnn.h $(1)/include/$(MULTIARCH)/cudnn.h)
cudnn_lib_in = $(wildcard $(1)/lib64/libcudnn.so $(1)/lib/libcudnn.so $(1)/lib/$(MULTIARCH)/libcudnn.so)
CUDNN_ROOT := $(firstword $(foreach d,$(CUDNN_ROOTS),$(if $(and $(call cudnn_h_in,$(d)),$(call cudnn_lib_in,$(d))),$(d))))
CUDNN_H := $(if $(CUDNN_ROOT),$(firstword $(call cudnn_h_in,$(CUDNN_ROOT))))
CUDNN_LIB := $(if $(CUDNN_ROOT),$(firstword $(call cudnn_lib_in,$(CUDNN_ROOT))))
ifeq ($(CUDNN),0)
  CUDNN_SAYS := cuDNN: off (CUDNN=0): the conv runs common/conv.cu's direct kernels
else ifneq ($(and $(CUDNN_H),$(CUDNN_LIB)),)
  override CUDNN := 1
  CUDNN_SAYS := cuDNN: $(CUDNN_H), $(CUDNN_LIB)
else ifeq ($(CUDNN),1)
  $(error CUDNN=1, but no cudnn.h and libcudnn.so in $(CUDNN_ROOTS) (set CUDNN_HOME))
else
  override CUDNN := 0
  CUDNN_SAYS := cuDNN: not found in $(CUDNN_ROOTS) (set CUDNN_HOME): building without it; the conv runs common/conv.cu's direct kernels
endif
ifeq ($(MAKELEVEL),0)
  $(info $(CUDNN_SAYS))
endif
CUDNN_FLAGS := -DHAVE_CUDNN=$(CUDNN)
ifeq ($(CUDNN),1)
  CUDNN_FLAGS += -I$(dir $(CUDNN_H))
  CUDNN_LDLIBS := -L$(dir $(CUDNN_LIB)) -Xlinker -rpath,$(dir $(CUDNN_LIB)) -lcudnn
endif

CFLAGS ?= -O2 -std=c11 -Wall -Wextra
# every object also writes its header dependencies (build/....d, read back below): editing any
# header rebuilds exactly the objects that include it, directly or not
DEPFLAGS := -MMD -MP
NVFLAGS ?= -O3 -std=c++17 $(ARCH_FLAGS) -lineinfo -Icommon -Xcompiler -Wall,-Wno-unknown-pragmas,-fopenmp
SM90A_FLAG := -DHAVE_SM90A=$(if $(filter sm_90a,$(ARCH_TAG)),1,0)
NVFLAGS += $(CUDNN_FLAGS) $(SM90A_FLAG)
LDLIBS := $(CUDNN_LDLIBS) -lgomp -lm

CHAPTERS := 01 02 03 04 05
# a chapter's program: every .cu in its folder but api.cu, the C library's own (make lib)
ch_srcs = $(filter-out %/api.cu,$(wildcard chapters/$(1)-*/*.cu))
ch_objs = $(patsubst chapters/%.cu,build/obj/%.o,$(call ch_srcs,$(1)))

# the default (KernelBench) shape of each chapter, a small shape for the sanitizers, the sweep
SHAPE_01 := 128x3x16x32x32
SMALL_01 := 2x3x3x5x7
SWEEP_01 := $(foreach b,1 2 4 8 16 32 64 128,$(b)x3x16x32x32)
# the seed of the timed runs: b ~ N(0, 1) is drawn after x and the weights, so it depends on the
# shape; seed 1 draws b = -1.35 at 128x3x16x32x32, which clamps every output (the check would
# test the clamp alone), seed 5 draws b = 0.22, inside the band where the tail matters
ARGS_01 := --seed 5
SHAPE_02 := 4x32x32x128x128
SMALL_02 := 1x32x3x5x7
SWEEP_02 := $(foreach b,1 2 4,$(b)x32x32x128x128)
# 324 tiles of v10's (2 x 4 x 64 conv outputs, the last row and column partial) for its 132
# persistent blocks on an H100: two or three tiles each, so its stages and barriers are reused;
# the same for b4's dx, and 1020 quads of tiles for b4's dw's 264 position shares
MANY_02 := 4x32x6x34x130
MANY_RUNS_02 := v10:v10_wgmma_conv v11:v10_wgmma_conv b4:b4_d
SHAPE_03 := 128x3x16x32x32
# 4 x 35 x 37: clusters of two blocks, so the sanitizers see the exchanges between blocks
SMALL_03 := 2x3x4x35x37
SWEEP_03 := $(foreach b,1 2 4 8 16 32 64 128,$(b)x3x16x32x32)
# make sanitize also runs the persistent versions where their blocks take more than one piece
# of work (MANY_N: the shape; MANY_RUNS_N: version:kernel pairs), so that the reuse of their
# buffers and barriers runs under the tools: here v15 to v18 at 140 samples, more than twice the
# teams that fit (66 on an H100), so some teams take a third sample. Only the kernels whose names
# contain the given text are instrumented (--kernel-name kns=; chapter 4's: conv_ is v8's
# k_conv_stats and v8_conv_apply, _team_ b3's forward and backward teams): with cuDNN's kernels
# instrumented as well, racecheck ran past
# 400 s at this shape; with v18's alone, 10 s.
MANY_03 := 140x3x4x35x37
MANY_RUNS_03 := v15:v15_register_conv v16:v16_register_conv v17:v17_register_conv v18:v18_register_conv
SHAPE_04 := 128x8x128x128
SMALL_04 := 2x8x5x7
SWEEP_04 := $(foreach b,1 2 4 8 16 32 64 128,$(b)x8x128x128)
# 5 samples: v6's and b3's teams (4 on an H100) take one or two each; 630 tiles of one output
# row for the 264 blocks (on an H100) of v8's, v9's and b4's persistent conv kernels: two or three
# each. (At the small shape every team and block has one. v6's racecheck at 13 samples found a
# race there, since fixed: its comment; this shape was not run on the old code.)
MANY_04 := 5x8x128x128
MANY_RUNS_04 := v6:v6_team v8:conv_ v9:k_conv b3:_team_ b4:b4_dw
SHAPE_05 := 32x32x32x64x64
SMALL_05 := 2x32x3x5x7
SWEEP_05 := $(foreach b,1 2 4 8 16,$(b)x32x32x64x64)
# 162 tiles of v8's (64 pooled cells: 5 x 17 rows of 33, each 4 segments of 8 and one of 1) for
# each of its two channel halves' 66 persistent blocks on an H100: two or three tiles each
MANY_05 := 3x32x10x34x66
MANY_RUNS_05 := v8:v8_convt
# racecheck stops at this shape in the shape checks' v6, before v8 runs (an internal sanitizer
# error, LABBOOK.md); v8's racecheck runs at SMALL_05
MANY_SANITIZERS_05 := memcheck synccheck

BINS := $(foreach c,$(CHAPTERS),build/ch$(c))
COMMON_OBJS := build/common.o build/conv_ref.o build/gpu.o build/conv.o build/harness.o

.PHONY: all test bench plots sanitize clean golden peers peers-kb peers-sweep check-pytorch record \
        profile kernelbench
all: $(BINS) build/test_common build/gpu-tag

# objects remember the ARCH and the CUDNN they were compiled for: one stamp, the others removed
ARCH_STAMP := build/arch-$(ARCH_TAG)-cudnn$(CUDNN)
$(ARCH_STAMP):
	@mkdir -p build && rm -f build/arch-* && touch $@

build/common.o build/conv_ref.o: build/%.o: common/%.c
	@mkdir -p build
	$(CC) $(CFLAGS) $(DEPFLAGS) -fopenmp -c -o $@ $<

build/gpu.o build/conv.o build/harness.o: build/%.o: common/%.cu $(ARCH_STAMP)
	$(NVCC) $(NVFLAGS) $(DEPFLAGS) -c -o $@ $<

build/test_common: common/test_common.c build/common.o build/conv_ref.o
	$(CC) $(CFLAGS) $(DEPFLAGS) -MF build/test_common.d -fopenmp -o $@ $< build/common.o build/conv_ref.o -lm

build/gpu-tag: common/gpu-tag.c build/common.o
	$(CC) $(CFLAGS) $(DEPFLAGS) -MF build/gpu-tag.d -fopenmp -o $@ $< build/common.o -lm

# a chapter: every .cu in its folder, compiled apart, linked with the harness. Each binary's rule
# names its objects (no pattern chain: an object named only by a pattern rule would be an
# intermediate file, which make does not remake when it is missing and the binary is newer)
build/obj/%.o: chapters/%.cu $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(DEPFLAGS) -c -o $@ $<

define binary_rule
build/ch$(1): $(call ch_objs,$(1)) $(COMMON_OBJS)
	$$(NVCC) $$(NVFLAGS) -o $$@ $$^ $$(LDLIBS)
endef
$(foreach c,$(CHAPTERS),$(eval $(call binary_rule,$(c))))

# make solved CH=N: the chapter with each exercise (x1-name.cu, ...) answered by the solution in
# its LABBOOK.md (common/exercise.sh puts it between the stub's markers): build/chNN-solved
ch_xsrcs = $(wildcard chapters/$(1)-*/x[0-9]*.cu)
solved_objs = $(patsubst chapters/%.cu,build/solved/%.o,$(call ch_xsrcs,$(1)))
define solved_rule
build/ch$(1)-solved: $(filter-out $(patsubst chapters/%.cu,build/obj/%.o,$(call ch_xsrcs,$(1))),$(call ch_objs,$(1))) $(call solved_objs,$(1)) $(COMMON_OBJS)
	$$(NVCC) $$(NVFLAGS) -o $$@ $$^ $$(LDLIBS)
endef
$(foreach c,$(CHAPTERS),$(eval $(call solved_rule,$(c))))
define solved_src_rule
build/solved/$(patsubst chapters/%,%,$(1)): $(1) $(dir $(1))LABBOOK.md common/exercise.sh
	@mkdir -p $$(dir $$@)
	sh common/exercise.sh $(1) $(dir $(1))LABBOOK.md $$@
endef
$(foreach x,$(wildcard chapters/*/x[0-9]*.cu),$(eval $(call solved_src_rule,$(x))))
build/solved/%.o: build/solved/%.cu $(ARCH_STAMP)
	$(NVCC) $(NVFLAGS) $(DEPFLAGS) -Ichapters/$(dir $*) -c -o $@ $<
SOLVED := $(foreach c,$(CHAPTERS),$(if $(call ch_xsrcs,$(c)),build/ch$(c)-solved))
.PHONY: solved diff
solved: build/ch0$(CH)-solved

# make diff CH=3 A=v15 B=v16: what version B changed over version A (common/version-diff.sh)
diff: build/ch0$(CH)
	@sh common/version-diff.sh build/ch0$(CH) $(A) $(B)

# make lib CH=N: the chapter as a C library for PyTorch and other callers, build/libchNN.so: its
# api.cu (the functions api.h declares) with the chapter's kernels and common/'s host code, all
# compiled position-independent into build/pic/; not main.cu or problem.cu (the harness's
# program) nor the exercises. python/handfused loads it (python/README.md).
# -fno-gnu-unique: a static variable inside a template function (SMEM_OPT_IN's "opted in on this
# device" bits in chapter 2's conv_mma) is otherwise one object across every library a process
# loads (GCC's STB_GNU_UNIQUE binding), so that a second library with the same template (a
# chapter's KernelBench export beside this one) skipped its own kernels' opt-in and their
# launches failed ("invalid argument")
PIC := -Xcompiler -fPIC,-fno-gnu-unique
lib_srcs = $(filter-out %/main.cu %/problem.cu $(call ch_xsrcs,$(1)),$(wildcard chapters/$(1)-*/*.cu))
LIB_COMMON_SRCS := common/common.c common/conv_ref.c common/gpu.cu common/conv.cu
LIB_COMMON := $(patsubst common/%,build/pic/%.o,$(basename $(LIB_COMMON_SRCS)))
build/pic/common.o build/pic/conv_ref.o: build/pic/%.o: common/%.c
	@mkdir -p build/pic
	$(CC) $(CFLAGS) $(DEPFLAGS) -fPIC -fopenmp -c -o $@ $<
build/pic/gpu.o build/pic/conv.o: build/pic/%.o: common/%.cu $(ARCH_STAMP)
	@mkdir -p build/pic
	$(NVCC) $(NVFLAGS) $(PIC) $(DEPFLAGS) -c -o $@ $<
build/pic/chapters/%.o: chapters/%.cu $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(PIC) $(DEPFLAGS) -c -o $@ $<
# --no-undefined: a symbol only main.cu or problem.cu defines fails here, not at dlopen
define lib_rule
build/libch$(1).so: $(patsubst chapters/%.cu,build/pic/chapters/%.o,$(call lib_srcs,$(1))) $(LIB_COMMON)
	$$(NVCC) $$(NVFLAGS) -shared -Xlinker --no-undefined -o $$@ $$^ $$(LDLIBS)
endef
$(foreach c,$(CHAPTERS),$(if $(wildcard chapters/$(c)-*/api.cu),$(eval $(call lib_rule,$(c)))))
.PHONY: lib torch-test
lib: $(if $(wildcard chapters/0$(CH)-*/api.cu),build/libch0$(CH).so,lib-missing)
.PHONY: lib-missing
lib-missing:
	@echo "error: chapter $(CH) has no C library yet (no api.cu in its folder)"; exit 2

# make kernelbench-export CH=N: the library's sources (lib_srcs, LIB_COMMON_SRCS) as one file in
# KernelBench's submission format, build/kernelbench/NN_<problem>.py; make test checks each
# chapter's on the CPU (python/tests/test_export.py: it compiles the merged source with nvcc and
# these flags, the export's own but the arch, which the export takes from its GPU)
LIB_CHAPTERS := $(foreach c,$(CHAPTERS),$(if $(wildcard chapters/$(c)-*/api.cu),$(c)))
EXPORT_NVFLAGS := -O3 -std=c++17 $(ARCH_FLAGS) $(CUDNN_FLAGS) $(SM90A_FLAG)
space := $(subst ,, )
export_srcs = $(subst $(space),$(comma),$(strip $(call lib_srcs,$(1)) $(LIB_COMMON_SRCS)))
.PHONY: kernelbench-export
kernelbench-export: $(if $(wildcard chapters/0$(CH)-*/api.cu),,lib-missing)
	$(PYTHON) python/export_kernelbench.py --chapter $(CH) --out build/kernelbench \
	    $(call lib_srcs,0$(CH)) $(LIB_COMMON_SRCS)

# make torch-test: the PyTorch package's tests (python/tests/), each chapter with a library;
# one SKIP line and exit 0 where PyTorch or a GPU is missing
TORCH_TESTS := $(foreach c,$(CHAPTERS),$(if $(wildcard chapters/$(c)-*/api.cu),$(wildcard python/tests/test_ch$(c).py)))
TORCH_LIBS := $(foreach c,$(CHAPTERS),$(if $(wildcard chapters/$(c)-*/api.cu),build/libch$(c).so))
torch-test: $(TORCH_LIBS)
	@set -e; for t in $(TORCH_TESTS); do $(PYTHON) $$t; done

# the header dependencies the compilers wrote (absent before the first build: then every object
# is built anyway)
-include $(wildcard build/*.d build/obj/*/*.d build/solved/*/*.d build/pic/*.d build/pic/chapters/*/*.d)

# chapter-1 .. chapter-N (explicit rules: make skips pattern rules for phony targets)
define chapter_rule
.PHONY: chapter-$(patsubst 0%,%,$(1))
chapter-$(patsubst 0%,%,$(1)): build/ch$(1) build/gpu-tag
	@d=$$$$(sh common/datadir.sh) && build/ch$(1) $$(ARGS_$(1)) --csv $$$$d/ch$(1).csv
endef
$(foreach c,$(CHAPTERS),$(eval $(call chapter_rule,$(c))))

test: all $(SOLVED) $(TORCH_LIBS)
	@sh common/run-tests.sh build/test_common \
	    $(foreach c,$(CHAPTERS),'build/ch$(c) --test' 'sh common/test-cli.sh build/ch$(c) $(SMALL_$(c))' \
	        $(if $(call ch_xsrcs,$(c)),'sh common/test-exercises.sh build/ch$(c) build/ch$(c)-solved $(SMALL_$(c))')) \
	    'python3 common/test-layout.py build "$(foreach c,$(CHAPTERS),$(foreach vk,$(MANY_RUNS_$(c)),$(c):$(vk)))"' \
	    'sh data/readme-table.sh --check' 'sh data/figures.sh --check' 'sh data/test-figures.sh' \
	    'sh common/test-deps.sh $(MAKE) --no-print-directory ARCH=$(ARCH) CUDNN=$(CUDNN)' \
	    '$(PYTHON) data/kernelbench.py --self-test' $(foreach t,$(TORCH_TESTS),'$(PYTHON) $(t)') \
	    '$(PYTHON) python/tests/test_export.py --nvcc "$(NVCC) $(EXPORT_NVFLAGS)" --ldlibs "$(CUDNN_LDLIBS)" $(foreach c,$(LIB_CHAPTERS),--chapter $(c) $(call export_srcs,$(c)))'

# one line per size: each version's median per scope, from the table
bench: $(BINS) build/gpu-tag
	@set -e; d=$$(sh common/datadir.sh); $(foreach c,$(CHAPTERS),rm -f $$d/ch$(c)-sweep.csv; \
	    for s in $(SWEEP_$(c)); do \
	        printf 'ch$(c) %-16s' $$s; \
	        build/ch$(c) --shape $$s $(ARGS_$(c)) --csv $$d/ch$(c)-sweep.csv > build/ch$(c)-$$s.log 2>&1 \
	            || { echo FAILED; cat build/ch$(c)-$$s.log; exit 1; }; \
	        awk '/^[vb][0-9]+ / && $$0 !~ /skipped/ {printf " %s:%s %s", $$1, $$(NF-8), $$(NF-7)} END {print " ms"}' build/ch$(c)-$$s.log; \
	    done;) echo "sweeps in $$d/"

# the recorded data the READMEs quote: the default shape and the sweep, into data/<gpu>/
record: $(BINS) build/gpu-tag
	@set -e; d=$$(RECORD=1 sh common/datadir.sh); \
	    $(foreach c,$(CHAPTERS),build/ch$(c) $(ARGS_$(c)) --csv $$d/ch$(c).csv > build/record-ch$(c).log 2>&1 \
	        || { cat build/record-ch$(c).log; exit 1; }; echo "ch$(c): $$d/ch$(c).csv";) \
	    RECORD=1 $(MAKE) -s bench

plots:
	@sh plots/render.sh

SANITIZERS ?= memcheck racecheck synccheck initcheck
# the MANY_ runs leave initcheck out: with one kernel instrumented it does not see what the
# others write (v8 at 5x8x128x128: 1.29 M reads of the shifts k_shifts had written, reported
# as uninitialised); it runs on every kernel at the small shapes
MANY_SANITIZERS ?= $(filter-out initcheck,$(SANITIZERS))
# one compute-sanitizer run of the shell's $$tool, logged to build/sanitize-$(1).log: $(2) its
# options beyond the tool's, $(3) the program and its arguments. NVIDIA_TF32_OVERRIDE=0 hides
# cuDNN's TF32 engines (chapter 2's TF32 peer, then reported skipped): under racecheck their
# search stopped with an internal sanitizer error on the H100 (chapter 2's LABBOOK.md)
sanitize_run = log=build/sanitize-$(1).log; \
	    printf 'compute-sanitizer --tool %-9s %s: ' $$tool "$(strip $(2) $(3))"; \
	    NVIDIA_TF32_OVERRIDE=0 compute-sanitizer --tool $$tool $(2) --error-exitcode 1 \
	        --print-limit 20 $(3) > $$log 2>&1 \
	        || { echo FAILED; tail -n 40 $$log; exit 1; }; \
	    tail -n 1 $$log;
sanitize: $(BINS)
	@set -e; $(foreach c,$(CHAPTERS),for tool in $(SANITIZERS); do \
	    $(call sanitize_run,$(c)-$$tool,,build/ch$(c) --test --shape $(SMALL_$(c))) \
	done; \
	for vk in $(MANY_RUNS_$(c)); do v=$${vk%%:*}; k=$${vk#*:}; \
	    for tool in $(or $(MANY_SANITIZERS_$(c)),$(MANY_SANITIZERS)); do \
	    $(call sanitize_run,$(c)-$$v-$$tool,--kernel-name kns=$$k,build/ch$(c) --test --version $$v --shape $(MANY_$(c))) \
	done; done;) echo "sanitize: clean"

# Nsight Compute on one version at the default shape: the sections the READMEs quote (speed of
# light, occupancy, warp stalls, memory). ncu profiles every kernel of that version's runs;
# NCU_ARGS adds options (e.g. --launch-skip 3 --launch-count 1).
CH ?= 1
V ?= v1
profile: build/ch0$(CH)
	@command -v ncu >/dev/null || { echo "error: ncu (Nsight Compute) is not on PATH"; exit 2; }
	ncu --section SpeedOfLight --section Occupancy --section WarpStateStats \
	    --section MemoryWorkloadAnalysis --section LaunchStats $(NCU_ARGS) \
	    build/ch0$(CH) --version $(V) --reps 1 $(ARGS_0$(CH)) | tee build/profile-ch0$(CH)-$(V).txt

# PyTorch side by side (data/pytorch_peer.py; numpy and PyTorch needed, exit 2 without them)
PYTHON ?= python3
CHECK_SHAPE_01 := 3x3x5x6x7
CHECK_SHAPE_02 := 2x32x5x6x7
CHECK_SHAPE_03 := 3x3x5x6x7
CHECK_SHAPE_04 := 3x8x9x11
CHECK_SHAPE_05 := 2x32x5x6x7
# CH only when given (CH ?= 1 above is profile's default): plain `make golden` rebuilds every chapter
golden:
	$(PYTHON) data/pytorch_peer.py golden --out data/golden$(if $(filter command line environment,$(origin CH)), --chapter $(CH))
# torch.compile compiles once per batch size, scope and precision (chapter 1 at the KernelBench
# shape: 8 compiles; its sweep: 56); peers-kb and peers-sweep split the work, BATCHES the sweep,
# PRECISIONS=fp32 or default one precision (both when unset)
PEER_PREC = $(if $(PRECISIONS),--precisions $(PRECISIONS))
peers: peers-kb peers-sweep
peers-kb:
	$(PYTHON) data/pytorch_peer.py bench --chapter $(CH) --batches kb $(PEER_PREC)
	$(PYTHON) data/pytorch_peer.py ops --chapter $(CH) $(PEER_PREC)
	$(PYTHON) data/pytorch_peer.py error --chapter $(CH) $(PEER_PREC)
# after peers-kb, when both are asked for: one GPU, one run at a time, whatever make's -j
peers-sweep: $(if $(filter peers peers-kb,$(MAKECMDGOALS)),peers-kb)
	$(PYTHON) data/pytorch_peer.py bench --chapter $(CH) --batches $(or $(BATCHES),sweep) $(PEER_PREC)
# KernelBench's protocol on every chapter with a ModelNew and a built library, or chapter CH's
# alone; PRECISIONS as peers', SCOPES=forward,forward_no_grad,train_step (all when unset). Each
# precision compiles Model afresh, once per scope (torch.compile's first calls, their time printed);
# EXPORT=1 adds each chapter's export (make kernelbench-export CH=N first) as the model "export"
kernelbench: $(if $(filter command line environment,$(origin CH)),$(filter build/libch0$(CH).so,$(TORCH_LIBS)),$(TORCH_LIBS))
	$(PYTHON) data/kernelbench.py$(if $(filter command line environment,$(origin CH)), --chapter $(CH))$(if $(SCOPES), --scopes $(SCOPES))$(if $(EXPORT), --export) $(PEER_PREC)
check-pytorch: build/ch0$(CH)
	@rm -rf build/dump-ch0$(CH)
	build/ch0$(CH) --shape $(CHECK_SHAPE_0$(CH)) $(ARGS_0$(CH)) --reps 3 --dump build/dump-ch0$(CH) > build/dump-ch0$(CH).log
	$(PYTHON) data/pytorch_peer.py check build/dump-ch0$(CH) --chapter $(CH)

clean:
	rm -rf build
