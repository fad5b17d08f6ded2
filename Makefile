# Seriema for Go. `make demo` and `make test` are the whole set-up on a
# machine with Go installed; see README.md.
GO       ?= go
BIN      ?= bin
FUZZTIME ?= 30s
# The race detector slows the suite about 5×; it still fits 10 minutes on 2 cores.
TESTFLAGS ?= -race -timeout 15m

.PHONY: all build build-ofi demo test lint vet fmt-check bench fuzz setup clean soak mutate cover

all: build

build:
	$(GO) build ./...

$(BIN)/mctsbench: FORCE
	@mkdir -p $(BIN)
	$(GO) build -o $@ ./cmd/mctsbench
FORCE:

# mctsbench with the ofi transport (libfabric; needs cgo and libfabric-dev).
build-ofi:
	@mkdir -p $(BIN)
	$(GO) build -tags ofi -o $(BIN)/mctsbench ./cmd/mctsbench

# Runs the distributed MCTS Hex demo on the embedded default (self-launched
# processes over shared memory).
demo: $(BIN)/mctsbench
	$(BIN)/mctsbench demo

# Best-effort machine set-up the tests can use (2 MiB hugepages when root).
setup:
	@sh scripts/reserve-hugepages.sh

# The Transmitter hammer (8 goroutines × 1 M operations over loop and the
# late transport, which runs the whole protocol) and the messenger
# sequence test (10 M calls per sender) also run at full size without the
# race detector, which would make them take many minutes; so does the
# doorbell's lost-wake-up test, whose race only the plain stores of a build
# without the race detector can show (dtutils/release_amd64.go), and the
# heap pre-touch test, which counts page faults the detector's shadow
# memory would swamp. Then a 30-second soak of every primitive, and the
# bench/peers module's own tests. The ofi provider (build tag ofi,
# libfabric) is tested by scripts/test-ofi.sh.
test: setup lint $(BIN)/mctsbench
	GO=$(GO) sh scripts/gotest.sh $(TESTFLAGS) ./...
	@GO=$(GO) TESTFLAGS="$(TESTFLAGS)" sh scripts/test-ofi.sh
	GO=$(GO) sh scripts/gotest.sh -count=1 -run 'TestTransmitterHammer|TestDoorbellNoLostWakeup' ./dtutils
	GO=$(GO) sh scripts/gotest.sh -count=1 -run 'TestOracle' ./mcts/hexgame
	GO=$(GO) sh scripts/gotest.sh -count=1 -run 'TestPreTouchHeap' ./cmd/mctsbench
	SERIEMA_FULL=1 GO=$(GO) sh scripts/gotest.sh -count=1 -timeout 10m -run 'TestMessengerSequence' ./riutils
	$(BIN)/mctsbench soak -procs 3 -threads 2 -duration 30s
	@sh scripts/test-peers.sh

# The 10-minute soak of docs/reliability.md.
soak: $(BIN)/mctsbench
	$(BIN)/mctsbench soak -procs 3 -threads 2 -duration 10m

lint: fmt-check vet

fmt-check:
	@out=$$(gofmt -l .); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# Every benchmark in one go: package benchmarks, the paper's Table 2 and
# Fig. 2 (mctsbench micro), latency, the Go peers (bench/peers: net/rpc and
# gRPC over a unix socket) and the MCTS scaling figure; then rewrites the
# generated part of docs/benchmarks.md and the charts in docs/img.
bench:
	@GO=$(GO) BIN=$(BIN) sh scripts/bench.sh

# Runs every fuzz target for FUZZTIME each; crashers land in testdata/fuzz
# and are kept as seeds.
fuzz:
	@FUZZTIME=$(FUZZTIME) GO=$(GO) sh scripts/fuzz.sh

# Applies each named protocol mutation (scripts/mutate) to a scratch copy,
# runs the package's tests and prints which test caught it; fails when one
# survives or is caught after 60 s. docs/reliability.md has the table.
mutate:
	mkdir -p $(BIN)
	$(GO) run ./scripts/mutate -md $(BIN)/mutate.md

# Statement coverage per package from one profile (bin/cover.out), the
# self-launched ranks of multi-process tests included (scripts/cover.sh).
cover:
	@GO=$(GO) BIN=$(BIN) sh scripts/cover.sh

clean:
	rm -rf $(BIN)
