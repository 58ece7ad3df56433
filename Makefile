# cuda-agent - one Makefile: a static library (everything but src/cli), the
# cuda-agent binary, unit-test binaries, and the test runner.
#
#   make                         build build/cuda-agent
#   make test                    build and run every test tier (tests/run.sh)
#   make SANITIZE=address,undefined test
#   make WERROR=1                warnings are errors (CI)
#   make format / format-check   clang-format over C sources

CC ?= cc
PKG_CONFIG ?= pkg-config
PKGS := jansson libxxhash libpcre2-8 libseccomp libelf libcurl sqlite3 libmicrohttpd hiredis \
        libssl libcrypto
SANITIZE ?=
WERROR ?=

ifeq ($(SANITIZE),)
BUILD ?= build
else
BUILD ?= build-san
endif

WARNINGS := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 \
	-Wvla -Wpointer-arith -Wundef -Wno-unused-parameter -Wno-missing-field-initializers -Wimplicit-fallthrough
CFLAGS ?= -O2 -g
CFLAGS += -std=c11 -D_GNU_SOURCE -Isrc -I$(BUILD)/gen $(WARNINGS) \
	$(shell $(PKG_CONFIG) --cflags $(PKGS))
LDLIBS += $(shell $(PKG_CONFIG) --libs $(PKGS)) -lm
ifneq ($(WERROR),)
CFLAGS += -Werror
endif
ifneq ($(SANITIZE),)
CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif
CFLAGS += -MMD -MP

VERSION := $(shell cat VERSION 2>/dev/null || echo 0.0.0)
GIT_REV := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
CFLAGS += -DCA_VERSION='"$(VERSION)"' -DCA_GIT_REV='"$(GIT_REV)"'
# The files that print or record the commit are rebuilt when HEAD moves: the stamp is
# rewritten only when the commit differs from the one it holds.
GIT_REV_STAMP := $(BUILD)/gen/git_rev
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(shell mkdir -p $(BUILD)/gen && { [ "$$(cat $(GIT_REV_STAMP) 2>/dev/null)" = "$(GIT_REV)" ] || echo "$(GIT_REV)" > $(GIT_REV_STAMP); })
endif

LIB_SRC := $(sort $(filter-out src/cli/%,$(wildcard src/*/*.c)))
# ar keeps one member per file name: two library sources of one name would lose one on an
# incremental rebuild of the archive.
DUP_SRC := $(shell printf '%s\n' $(notdir $(LIB_SRC)) | sort | uniq -d)
ifneq ($(DUP_SRC),)
$(error library sources share a file name ($(DUP_SRC)): rename one)
endif
CLI_SRC := $(sort $(wildcard src/cli/*.c))
GEN_SRC := $(BUILD)/gen/embedded_files.c
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(GEN_SRC:.c=.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
LIB := $(BUILD)/libcuda-agent.a
BIN := $(BUILD)/cuda-agent

UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/unit/%)
UNIT_MAIN := $(BUILD)/tests/unit/main.o

# Files compiled into the binary: the workspace template, helper scripts, and the model_new.py
# policy (harness/policy/, run from memory by src/eval/policy_py.c).
EMBED_FILES := $(sort $(shell find template -type f 2>/dev/null)) \
	$(sort $(wildcard src/*/*.py)) $(sort $(wildcard harness/*.py)) \
	$(sort $(wildcard harness/policy/*.py))
EMBED_TOOL := $(BUILD)/tools/embed

.PHONY: all test unit clean format format-check print-libs
all: $(BIN)

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(LIB) $(LDLIBS)

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/src/cli/main.o $(BUILD)/src/cli/cmd_bench.o: $(GIT_REV_STAMP)

$(BUILD)/gen/%.o: $(BUILD)/gen/%.c
	$(CC) $(CFLAGS) -Wno-missing-prototypes -c -o $@ $<

$(EMBED_TOOL): tools/embed.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -O1 -Wall -Wextra -o $@ $<

$(GEN_SRC): $(EMBED_TOOL) $(EMBED_FILES) Makefile
	@mkdir -p $(dir $@)
	$(EMBED_TOOL) $(EMBED_FILES) > $@.tmp && mv $@.tmp $@

$(UNIT_MAIN): tests/unit/main.c tests/unit/test.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/unit/%: tests/unit/%.c $(UNIT_MAIN) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(UNIT_MAIN) $(LIB) $(LDLIBS)

unit: $(UNIT_BIN)

test: $(BIN) $(UNIT_BIN)
	BUILD=$(BUILD) SANITIZE=$(SANITIZE) bash tests/run.sh

clean:
	rm -rf build build-san build-fuzz

FORMAT_SRC = $(shell find src tests/unit tests/fuzz tools bench -name '*.[ch]')
format:
	clang-format -i $(FORMAT_SRC)
format-check:
	clang-format --dry-run --Werror $(FORMAT_SRC)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# Fuzzing (clang + libFuzzer): make fuzz [FUZZ_SECONDS=20]. Each target runs
# from its seed corpus in tests/fuzz/corpus/<name>/ for FUZZ_SECONDS.
FUZZ_SECONDS ?= 20
FUZZ_BUILD := build-fuzz
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
.PHONY: fuzz fuzz-build
fuzz-build:
	$(MAKE) CC=clang BUILD=$(FUZZ_BUILD) SANITIZE=fuzzer-no-link,address,undefined \
		$(FUZZ_BUILD)/libcuda-agent.a
	@for t in $(FUZZ_TARGETS); do \
		echo "clang fuzz_$$t"; \
		clang -std=c11 -D_GNU_SOURCE -Isrc -g -O1 -fsanitize=fuzzer,address,undefined \
			-o $(FUZZ_BUILD)/fuzz_$$t tests/fuzz/fuzz_$$t.c $(FUZZ_BUILD)/libcuda-agent.a \
			$(LDLIBS) || exit 1; \
	done
fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
		mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
		echo "== fuzz $$t for $(FUZZ_SECONDS) s"; \
		$(FUZZ_BUILD)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
			-print_final_stats=0 $(FUZZ_BUILD)/corpus/$$t tests/fuzz/corpus/$$t \
			$$( [ $$t = task ] && echo examples/tasks tests/it/data/tasks/good ) \
			$$( [ $$t = policy ] && echo tests/eval/policy/ok ) \
			2>$(FUZZ_BUILD)/fuzz_$$t.log || { tail -50 $(FUZZ_BUILD)/fuzz_$$t.log; exit 1; }; \
		tail -1 $(FUZZ_BUILD)/fuzz_$$t.log; \
	done

# Benchmarks written in C: make bench, then build/bench/<name>.
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
.PHONY: bench
bench: $(BENCH_BIN)
$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# The link line's libraries (bench/carry.sh links a copy of the binary with them).
print-libs:
	@echo $(LDLIBS)
