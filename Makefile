# masq: `make` builds everything; `make test` runs every test (installing
# what it needs first).
CARGO ?= cargo
FUZZ_SECONDS ?= 60

.PHONY: all build deps lint test test-rust test-c test-fuzz test-integration \
        testbed-up testbed-down clean

all: build

deps:
	@scripts/install-deps

build: deps
	$(CARGO) build --release --workspace
	$(MAKE) -C frontend-provider

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

test-integration: build
	integration/run-tests

testbed-up: deps
	integration/testbed up

testbed-down:
	integration/testbed down

clean:
	$(CARGO) clean
	$(MAKE) -C frontend-provider clean
