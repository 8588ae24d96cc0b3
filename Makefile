# Makefile -- builds libpocketbrain (core: C11 + libc + libm + pthreads), the pocketbrain CLI and the tests.
#   make            build everything (runtime CPU dispatch: one binary for any x86-64)
#   make run        build, then chat with the embedded default model
#   make test       build, then run every test; ends with "N passed, N failed"
#   make install    PREFIX=/usr/local DESTDIR=: CLI, libpocketbrain.a, pocketbrain.h, man page, pocketbrain.pc
#   make SAN=address,undefined test    sanitizer build of the tests (objects in build-san/)
#   make SAN=thread test               ThreadSanitizer build (objects in build-tsan/)
#   make NATIVE=1   -march=native (opt-in; the binary then needs this CPU)
#   make CROSS=aarch64-linux-gnu-      cross build for ARM64 (tests run under qemu-aarch64)
#   make CUDA=1     adds the CUDA backend (src/cuda, nvcc, sm_90) in build-cuda/; `make CUDA=1 gpu-tests`
#                   builds the GPU parity tests (scripts/gpu_check.sh runs them on a GPU machine)
#   make armcount   qemu plugin counting ARM64 instructions and bytes loaded (bench/arm_compare.sh)

CC       ?= cc
CROSS    ?=
ARCHIVER ?= $(CROSS)ar
ifneq ($(CROSS),)
CC       := $(CROSS)gcc
endif
MACHINE  := $(shell $(CC) -dumpmachine)
ifneq ($(findstring aarch64,$(MACHINE)),)
ARCH     := arm64
else
ARCH     := x86
endif

ifneq ($(CUDA),)
BUILD    ?= build-cuda
endif
ifeq ($(SAN),)
BUILD    ?= build$(if $(CROSS),-$(ARCH))
else ifeq ($(SAN),thread)
BUILD    ?= build-tsan
else
BUILD    ?= build-san
endif

WARN     := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla \
            -Wdouble-promotion -Wformat=2 -Wno-unused-parameter
OPT      ?= -O2
CFLAGS   := -std=c11 $(OPT) -g -D_GNU_SOURCE -fPIC $(WARN) -Iinclude -Isrc $(EXTRA_CFLAGS)
ifeq ($(CI),true)
CFLAGS   += -Werror
endif
ifneq ($(NATIVE),)
CFLAGS   += -march=native
endif
LDFLAGS  := $(EXTRA_LDFLAGS)
ifneq ($(SAN),)
CFLAGS   += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS  += -fsanitize=$(SAN)
endif
ifneq ($(CROSS),)
LDFLAGS  += -static
endif

# ---- core library -----------------------------------------------------------------------------
CORE_ROOMS := base gguf tensor kernels model tokenizer sampler engine
CORE_SRC   := $(foreach r,$(CORE_ROOMS),$(wildcard src/$(r)/*.c))
# ISA files compile with their own flags; the other architecture's files are left out.
ifeq ($(ARCH),x86)
CORE_SRC   := $(filter-out src/kernels/arm_%.c,$(CORE_SRC))
else
CORE_SRC   := $(filter-out src/kernels/x86_%.c,$(CORE_SRC))
endif
# GPU backend (src/cuda): CUDA C++ built by nvcc with CUDA=1; otherwise the C stub that says "built without CUDA".
CUDA_HOME  ?= /usr/local/cuda
NVCC       ?= $(CUDA_HOME)/bin/nvcc
ifneq ($(CUDA),)
CUDA_OBJ   := $(BUILD)/src/cuda/backend.o
CORE_LIBS_CUDA := -L$(CUDA_HOME)/lib64 -lcudart -lstdc++ -ldl -lrt
NVFLAGS    := -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
              -Xcompiler -fPIC,-Wall,-Wextra $(if $(filter true,$(CI)),-Werror all-warnings) $(NVFLAGS_EXTRA)
else
CORE_SRC   += src/cuda/stub.c
CUDA_OBJ   :=
endif
CORE_OBJ   := $(CORE_SRC:%.c=$(BUILD)/%.o) $(CUDA_OBJ)
LIB        := $(BUILD)/libpocketbrain.a

$(BUILD)/src/kernels/x86_avx2.o:   ISA_FLAGS := -mavx2 -mfma -mf16c
$(BUILD)/src/kernels/x86_avx512.o: ISA_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c
# GCC's pre-RA scheduler hoists the tiles' loads and spills what does not fit the 32 vector registers (the
# one-token tiles loaded up to 1.8x their weight bytes, tests/test_armcount_tiles.sh); clang has no such pass.
ARM_SCHED := $(if $(findstring clang,$(CC)),,-fno-schedule-insns)
$(BUILD)/src/kernels/arm_neon.o:   ISA_FLAGS := -march=armv8.2-a+dotprod+fp16 $(ARM_SCHED)
$(BUILD)/src/kernels/arm_i8mm.o:   ISA_FLAGS := -march=armv8.2-a+dotprod+fp16+i8mm $(ARM_SCHED)
ifeq ($(ARCH),arm64)
# aarch64-linux-gnu-gcc 12 hits an internal compiler error (vect_transform_reduction) in test_model.c's
# test_ops; that test binary is built without the loop vectorizer on ARM64.
$(BUILD)/tests/test_model: CFLAGS += -fno-tree-vectorize
endif

# ---- service rooms (Debian libraries allowed; linked into the CLI, not into the core) ----------
SVC_SRC    := $(wildcard src/store/*.c src/server/*.c)
SVC_OBJ    := $(SVC_SRC:%.c=$(BUILD)/%.o)

# ---- CLI --------------------------------------------------------------------------------------
TOOL_SRC   := $(wildcard tools/*.c)
TOOL_OBJ   := $(TOOL_SRC:%.c=$(BUILD)/%.o)
BIN        := $(BUILD)/pocketbrain
SYS_LIBS   := -lsqlite3 -lmicrohttpd -lcjson -lcurl -lcrypto -ledit -lz
ifneq ($(wildcard src/store/*.c),)
SYS_LIBS   += $(shell pkg-config --libs poppler-glib 2>/dev/null)
$(BUILD)/src/store/%.o: EXTRA_INC := $(shell pkg-config --cflags poppler-glib 2>/dev/null)
endif
CORE_LIBS  := -lm -lpthread $(CORE_LIBS_CUDA)

# web UI embedded at build time (web/* -> generated C array)
WEB_FILES  := $(wildcard web/*.html web/*.js web/*.css web/*.svg)
WEB_C      := $(BUILD)/gen/web_assets.c
WEB_OBJ    := $(BUILD)/gen/web_assets.o

# pull catalog embedded at build time (models/catalog.json -> generated C string)
CATALOG_C  := $(BUILD)/gen/catalog.c
CATALOG_OBJ := $(BUILD)/gen/catalog.o

# ---- tests ------------------------------------------------------------------------------------
# tests/test_*.c   unit tests against the core library only (also built for ARM64 under qemu)
# tests/itest_*.c  tests that also link the service rooms and system libraries
UNIT_SRC   := $(wildcard tests/test_*.c)
UNIT_BIN   := $(UNIT_SRC:tests/%.c=$(BUILD)/tests/%)
ITEST_SRC  := $(wildcard tests/itest_*.c)
ITEST_BIN  := $(ITEST_SRC:tests/%.c=$(BUILD)/tests/%)
FUZZ_SRC   := $(wildcard tests/fuzz_*.c)
EXAMPLES   := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))

.PHONY: all lib cli tests deps run test test-unit fuzz clean format cross-test bench install uninstall gpu-tests gpu-dev \
        armcount
all: lib cli tests

lib: $(LIB)
cli: $(BIN)
tests: $(UNIT_BIN) $(ITEST_BIN) $(EXAMPLES)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ISA_FLAGS) $(EXTRA_INC) -MMD -MP -c $< -o $@

$(BUILD)/src/cuda/backend.o: src/cuda/backend.cu src/cuda/weights.cuh src/cuda/prefill.cuh src/cuda/mma.cuh src/cuda/batch.cuh src/cuda/pb_cuda.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

# GPU parity tests (not part of `make test`: CI has no GPU); run by scripts/gpu_check.sh
gpu-tests: $(BUILD)/tests/gpu_parity
$(BUILD)/tests/gpu_parity: tests/gpu_parity.c tests/pb_test.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP $< -o $@ $(LDFLAGS) $(LIB) $(CORE_LIBS)

# make CUDA=1 gpu-dev: the parity test and a CLI for a GPU machine whose image lacks the service libraries, in
# $(GPU_DEV) (git-ignored through .git/info/exclude), for scripts/gpu_check.sh's PB_PAR / PB_BIN (docs/CUDA.md):
# the CUDA runtime and zlib linked statically; cJSON, libmicrohttpd, SQLite and OpenSSL's libcrypto (what `serve`
# needs) with their own dependencies beside the CLI (lib/, found through its rpath), and every other
# service-library function (curl, editline, poppler) a stub that aborts: bench, synth, convert and serve without
# --db never call them. Also packs the binaries into $(GPU_DEV)/cuda-bins.tar.gz (the run tool carries at most 64 MiB
# with the tree: carry that and fix/) and copies the peer Q4_0 / Q4_K_M / Q8_0 fixtures into fix/.
GPU_DEV    ?= .dev-cuda
PB_SHARED  ?= ../shared
CUDART_STATIC := -L$(CUDA_HOME)/lib64 -lcudart_static -lstdc++ -ldl -lrt -lpthread -lm
GPU_DEV_OBJ := $(TOOL_OBJ) $(SVC_OBJ) $(WEB_OBJ) $(CATALOG_OBJ) $(LIB)
GPU_DEV_SVC := -lcjson -lmicrohttpd -lsqlite3 -lcrypto
gpu-dev: $(GPU_DEV)/pocketbrain $(GPU_DEV)/gpu_parity $(GPU_DEV)/test_engine_batch
	cd $(GPU_DEV) && tar czf cuda-bins.tar.gz pocketbrain gpu_parity test_engine_batch lib
	@mkdir -p $(GPU_DEV)/fix
	cp $(foreach t,q4_0 q4_k_m q8_0,$(PB_SHARED)/fixtures/peer/model/gemma2-tiny-v.$(t).gguf) \
	   $(PB_SHARED)/fixtures/peer/model/tokens.bin $(GPU_DEV)/fix/
# the continuous-batching engine test linked with the CUDA backend: its sessions run on the GPU there (gpu_check.sh)
$(GPU_DEV)/test_engine_batch: tests/test_engine_batch.c tests/pb_test.h tests/alloc_count.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(LIB) $(CUDART_STATIC) -lpthread && strip $@
$(GPU_DEV)/gpu_parity: tests/gpu_parity.c tests/pb_test.h tests/topk_ref.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(LIB) $(CUDART_STATIC) && strip $@
$(GPU_DEV)/pocketbrain: $(GPU_DEV_OBJ)
	@rm -rf $(GPU_DEV)/lib && mkdir -p $(GPU_DEV)/lib $(BUILD)/gen
	{ echo '/* generated by make gpu-dev: the service libraries as stubs that abort */'; \
	  echo '#include <stdlib.h>'; echo 'int rl_catch_signals; void *rl_getc_function;'; \
	  $(CC) -o $@ $(GPU_DEV_OBJ) $(GPU_DEV_SVC) -l:libz.a $(CUDART_STATIC) 2>&1 | \
	  sed -n "s/.*undefined reference to \`\([A-Za-z0-9_]*\)'.*/\1/p" | sort -u | \
	  grep -v '^rl_catch_signals$$\|^rl_getc_function$$' | sed 's/.*/void &(void); void &(void) { abort(); }/'; \
	} >$(BUILD)/gen/svc_stubs.c
	$(CC) -O2 -c $(BUILD)/gen/svc_stubs.c -o $(BUILD)/gen/svc_stubs.o
	$(CC) -o $@ $(GPU_DEV_OBJ) $(BUILD)/gen/svc_stubs.o -Wl,--disable-new-dtags,-rpath,'$$ORIGIN/lib' \
	  $(GPU_DEV_SVC) -l:libz.a $(CUDART_STATIC) && strip $@
	ldd $@ | awk '/=> \// {print $$3}' | grep -v '/lib\(c\|m\|dl\|rt\|pthread\|stdc++\|gcc_s\)\.so' | \
	  xargs -I{} cp -L {} $(GPU_DEV)/lib/

$(LIB): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && $(ARCHIVER) rcs $@ $^

$(WEB_C): $(WEB_FILES) scripts/embed_web.sh
	@mkdir -p $(dir $@)
	sh scripts/embed_web.sh $@ $(WEB_FILES)

$(WEB_OBJ): $(WEB_C)
	$(CC) $(CFLAGS) -c $< -o $@

$(CATALOG_C): models/catalog.json
	@mkdir -p $(dir $@)
	{ echo '/* generated from models/catalog.json -- do not edit */'; echo 'extern const char pb_catalog_json[];'; \
	  echo 'const char pb_catalog_json[] = {'; od -An -v -tx1 $< | sed 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'; echo '0x00};'; } > $@

$(CATALOG_OBJ): $(CATALOG_C)
	$(CC) $(CFLAGS) -c $< -o $@

$(BIN): $(TOOL_OBJ) $(SVC_OBJ) $(WEB_OBJ) $(CATALOG_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(SVC_OBJ) $(WEB_OBJ) $(CATALOG_OBJ) $(LIB) $(SYS_LIBS) $(CORE_LIBS)

$(BUILD)/tests/test_%: tests/test_%.c tests/pb_test.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP $< -o $@ $(LDFLAGS) $(LIB) $(CORE_LIBS)

$(BUILD)/tests/itest_%: tests/itest_%.c tests/pb_test.h $(SVC_OBJ) $(WEB_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(EXTRA_INC) $(shell pkg-config --cflags poppler-glib 2>/dev/null) -MMD -MP $< -o $@ $(LDFLAGS) $(SVC_OBJ) $(WEB_OBJ) $(LIB) $(SYS_LIBS) $(CORE_LIBS)

$(BUILD)/examples/%: examples/%.c include/pocketbrain.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iinclude $< -o $@ $(LDFLAGS) $(LIB) $(CORE_LIBS)

# benchmarks (not tests): make bench -> $(BUILD)/bench/<name>, run by hand. Benches that link only the
# core library go in this list; others need their own rule.
BENCH_BIN  := $(BUILD)/bench/quant_bench $(BUILD)/bench/tokenizer_bench $(BUILD)/bench/kernels
bench: $(BENCH_BIN)

# tokenizer_bench also reads tokenizer.json (tools/hf_vocab.c, cJSON)
$(BUILD)/bench/tokenizer_bench: bench/tokenizer_bench.c tools/hf_vocab.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP bench/tokenizer_bench.c tools/hf_vocab.c -o $@ $(LDFLAGS) $(LIB) -lcjson $(CORE_LIBS)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP $< -o $@ $(LDFLAGS) $(LIB) $(CORE_LIBS)

# kb_bench links the store room (SQLite, poppler, OpenSSL): ingest MB/s and search p50/p95
bench: $(BUILD)/bench/kb_bench
$(BUILD)/bench/kb_bench: bench/kb_bench.c $(filter $(BUILD)/src/store/%,$(SVC_OBJ)) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP $< -o $@ $(LDFLAGS) $(filter $(BUILD)/src/store/%,$(SVC_OBJ)) $(LIB) $(SYS_LIBS) $(CORE_LIBS)

# libFuzzer targets (clang): make fuzz -> build-fuzz/fuzz_*. The core library is built by a sub-make
# with clang into build-fuzz/ (each ISA file with its own ISA_FLAGS), instrumented but without
# libFuzzer's main; only the fuzz_*.c link step adds -fsanitize=fuzzer.
FUZZ_BUILD := build-fuzz
FUZZ_SAN   := address,undefined
fuzz:
	@$(MAKE) --no-print-directory CC=clang CROSS= SAN= CI=false NATIVE= BUILD=$(FUZZ_BUILD) OPT=-O1 \
	  EXTRA_CFLAGS='-fsanitize=fuzzer-no-link,$(FUZZ_SAN) -fno-omit-frame-pointer' $(FUZZ_BUILD)/libpocketbrain.a
	@for f in $(FUZZ_SRC); do n=$$(basename $$f .c); \
	  echo "clang $$n"; \
	  clang -std=c11 -O1 -g -D_GNU_SOURCE -Iinclude -Isrc -fsanitize=fuzzer,$(FUZZ_SAN) \
	    $$f $(FUZZ_BUILD)/libpocketbrain.a -o $(FUZZ_BUILD)/$$n -lm -lpthread || exit 1; \
	done

# deps: `make run` installs what building and running need; `make test` adds the test toolchain
deps:
	@sh $(DEPS_SCRIPT) test

# run / test install the packages first and build in a sub-make: the sub-make parses this file again, so
# flags taken from pkg-config (poppler-glib) see the packages deps just installed on a fresh machine.
# DEPS_SCRIPT, BUILD_GOALS and TEST_RUNNER exist for tests/test_make_fresh.sh.
DEPS_SCRIPT ?= scripts/deps.sh
BUILD_GOALS ?= all armcount
TEST_RUNNER ?= sh tests/run.sh
run:
	@sh $(DEPS_SCRIPT) run
	@$(MAKE) --no-print-directory $(BIN)
	@sh scripts/run_default.sh $(BIN)

test:
	@sh $(DEPS_SCRIPT) test
	@$(MAKE) --no-print-directory $(BUILD_GOALS)
	@$(TEST_RUNNER) $(BUILD)

# the C unit tests only (no shell, node or example tests): a quick check while working on the core
test-unit:
	@sh $(DEPS_SCRIPT) test
	@$(MAKE) --no-print-directory $(BUILD_GOALS)
	@$(TEST_RUNNER) $(BUILD) --unit-only

# make install [PREFIX=/usr/local] [DESTDIR=/staging]: the CLI, the static library, the public header,
# the man page and a pkg-config file (pkg-config --cflags --libs pocketbrain).
PREFIX     ?= /usr/local
BINDIR     := $(PREFIX)/bin
LIBDIR     := $(PREFIX)/lib
INCDIR     := $(PREFIX)/include
MANDIR     := $(PREFIX)/share/man/man1
PCDIR      := $(LIBDIR)/pkgconfig
PB_VER     := $(shell sed -n 's/^\#define PB_VERSION_STRING "\(.*\)"/\1/p' include/pocketbrain.h)
$(BUILD)/pocketbrain.pc: include/pocketbrain.h Makefile
	@mkdir -p $(dir $@)
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	  'Name: pocketbrain' 'Description: local LLM engine for Gemma models (C API, pb_ prefix)' \
	  'Version: $(PB_VER)' 'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lpocketbrain -lm -lpthread' >$@

install: $(BIN) $(LIB) $(BUILD)/pocketbrain.pc
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) $(DESTDIR)$(MANDIR) $(DESTDIR)$(PCDIR)
	install -m 755 $(BIN) $(DESTDIR)$(BINDIR)/pocketbrain
	install -m 644 $(LIB) $(DESTDIR)$(LIBDIR)/libpocketbrain.a
	install -m 644 include/pocketbrain.h $(DESTDIR)$(INCDIR)/pocketbrain.h
	install -m 644 docs/pocketbrain.1 $(DESTDIR)$(MANDIR)/pocketbrain.1
	install -m 644 $(BUILD)/pocketbrain.pc $(DESTDIR)$(PCDIR)/pocketbrain.pc

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/pocketbrain $(DESTDIR)$(LIBDIR)/libpocketbrain.a $(DESTDIR)$(INCDIR)/pocketbrain.h \
	  $(DESTDIR)$(MANDIR)/pocketbrain.1 $(DESTDIR)$(PCDIR)/pocketbrain.pc

# armcount: qemu-aarch64 plugin counting what ARM64 code executes and loads (tools/armcount/); a host
# shared object even under CROSS=, always in build/armcount/
HOSTCC   ?= cc
ARMCOUNT := build/armcount/libarmcount.so
armcount: $(ARMCOUNT)
$(ARMCOUNT): tools/armcount/armcount.c tools/armcount/qplugin.h
	@mkdir -p $(dir $@)
	$(HOSTCC) -std=c11 -O2 -D_GNU_SOURCE -shared -fPIC -fvisibility=hidden $(WARN) $(if $(filter true,$(CI)),-Werror) $< -o $@

cross-test:
	@sh scripts/cross_test.sh

tests-unit-only: $(UNIT_BIN)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-san build-tsan build-arm64 build-fuzz build-cuda

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
