# masq: `make` builds everything; `make demo` shows masq on the rxe pair;
# `make test` runs every test; `make bench` measures native vs masq
# (BENCH_ARGS=--quick for a short check). Each installs what it needs first.
CARGO ?= cargo
FUZZ_SECONDS ?= 60

.PHONY: all build deps demo lint test test-rust test-c test-fuzz test-integration \
        testbed-up testbed-down clean

all: build

deps:
	@scripts/install-deps

build: deps
	$(CARGO) build --release --workspace
	$(MAKE) -C frontend-provider
	$(MAKE) -C integration

demo: build
	integration/demo

.PHONY: bench bench-cluster bench-rate
bench: build bench-cluster bench-rate
	integration/bench/run $(BENCH_ARGS)

# Per-endpoint rate limits on software RoCE: limited vs unlimited
# bandwidth and the shaped wire rate against the limit.
bench-rate: build
	integration/bench/ratelimit $(RATE_BENCH_ARGS)

# Cluster mode: 10,000 endpoints and 100 policy changes/s on a loopback
# etcd, and convergence between the two hosts on the rxe pair.
bench-cluster: build
	$(CARGO) build --release --example cluster_scale
	integration/bench/cluster $(CLUSTER_BENCH_ARGS)

lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: build lint test-rust test-c test-fuzz test-integration

test-rust: deps
	$(CARGO) test --workspace

test-c: deps
	$(MAKE) -C frontend-provider test

test-fuzz: deps
	backend/proto/fuzz/run.sh $(FUZZ_SECONDS)
	policy/fuzz/run.sh $(FUZZ_SECONDS)

test-integration: build
	integration/run-tests

testbed-up: deps
	integration/testbed up

testbed-down:
	integration/testbed down

clean:
	$(CARGO) clean
	$(MAKE) -C frontend-provider clean
	$(MAKE) -C integration clean
