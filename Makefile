# masq: `make` builds everything; `make demo` shows masq on the rxe pair;
# `make test` runs the checks, the unit tests and each layer's main cases on
# two hosts within its budget (`make check-budget`); `make test-long` the
# long and extended two-host tests; `make test-cluster` the slower
# three-host cluster tests; `make test-all` every test;
# `make bench` measures native vs masq (BENCH_ARGS=--quick for a short check).
# Each installs what it needs first: `make` only the build set of
# scripts/install-deps (no testbed), the tests, the demo and the benches
# every set.
# `make test-k8s-cluster` a real Kubernetes cluster (control plane, kubelets,
# Multus) on the testbed.
# `make images` builds the node image and the example's tenant image with
# podman (packaging/container/build; REGISTRY=..., TAG=..., BASE=...).
# `make test-deb-clean` installs the package with apt on a clean Debian 12 root;
# `make test-build-clean` then runs `make` in one with only the build set.
# `make check-docs` checks the links of README.md and docs/ (part of `make lint`).
# `make docs-cli` writes the CLI reference of docs/operator-guide.md from the
# CLI definitions (a Rust test fails when it is stale).
# `make test-monitoring` checks the Prometheus rules and the Grafana dashboard;
# `make rules JOB=NAME` writes the rules for a scrape job named NAME.
# `make fuzz-long` fuzzes the CM link's stream and etcd's values under
# libFuzzer (make test runs the same harnesses from cargo test).
CARGO ?= cargo
# No incremental compilation by default: make's builds start from a clean
# target in CI and a fresh clone, where incremental's caches are written and
# never read (set CARGO_INCREMENTAL=1 for an edit-compile loop).
export CARGO_INCREMENTAL ?= 0
FUZZ_SECONDS ?= 20
FUZZ_LONG_SECONDS ?= 300
# make install: where (PREFIX) and under which staging root (DESTDIR).
PREFIX ?= /usr
DESTDIR ?=
SYSCONFDIR ?= /etc
CNI_BIN_DIR ?= $(PREFIX)/lib/cni
UNIT_DIR ?= /lib/systemd/system
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
ARCH := $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
DEB := target/masq_$(VERSION)_$(ARCH).deb
# masqctl's shell completions and the man pages, made by `make` from the
# CLI definitions (backend/src/operator/cli) with masq-cli-gen.
CLI_GEN := target/cli
# Every Go build, vet and test of the project with one set of flags, in one
# workspace (go.work: one build list for all four modules), so Go's build
# cache compiles client-go and its kin once for all of them: with flags that
# differed per command, a cold make test compiled them six times (~7 min).
GO := CGO_ENABLED=0 GOFLAGS=-trimpath go

.PHONY: all build deps deps-build deps-deb lint-deb test-build-clean demo lint check-docs test test-parts check-budget test-all test-rust test-c test-fuzz test-integration \
        test-long test-cluster testbed-up testbed-down clean install deb images rules test-deb-clean \
        check-modules test-monitoring docs-cli nri test-nri signer test-signer netpol test-netpol test-k8s test-k8s-cluster test-manifests test-rails test-engines fuzz-long

all: build

# The system packages by set (scripts/install-deps --help): deps-build what
# `make` needs, deps-deb that and debhelper and lintian, deps everything the
# tests and the testbed need.
deps:
	@scripts/install-deps test

deps-build:
	@scripts/install-deps build

deps-deb:
	@scripts/install-deps deb

build: deps-build nri signer netpol
	$(CARGO) build --release --workspace
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null) target/release/masq-cli-gen $(CLI_GEN)
	$(MAKE) -C frontend-provider
	$(MAKE) -C integration

# masq-nri, the NRI plugin (Go; its modules from the Go module proxy).
NRI := target/release/masq-nri
nri: deps-build
	cd cni/nri && $(GO) build -o ../../$(NRI) .
	cd cni/nri && $(GO) vet ./...

# masq-nri's unit tests: a pod that did not ask for masq is never failed
# and never waits on masqd; one that did fails in time, saying why.
test-nri: deps
	cd cni/nri && $(GO) test ./...

# masq-signer: a node's certificate and etcd role through a Kubernetes CSR
# (join, the DaemonSet's init container) signed by a controller that alone
# holds the CA (docs/kubernetes.md). Go, its modules from the proxy.
SIGNER := target/release/masq-signer
signer: deps-build
	cd cni/signer && $(GO) build -o ../../$(SIGNER) .
	cd cni/signer && $(GO) vet ./...

# masq-signer's unit tests: each check that denies a CSR, the certificate
# signed, and join keeping only a certificate that still fits its node.
test-signer: deps-build
	cd cni/signer && $(GO) test ./...

# masq-netpol: Kubernetes NetworkPolicy's mirror, the API's namespaces,
# masq pods and policies copied below {prefix}/k8s/ in etcd for masqd
# (docs/kubernetes.md, "NetworkPolicy's mirror"). Go, its modules from the
# proxy.
NETPOL := target/release/masq-netpol
netpol: deps-build
	cd cni/netpol && $(GO) build -o ../../$(NETPOL) .
	cd cni/netpol && $(GO) vet ./...

# masq-netpol's unit tests: client-go's fake API server and a real etcd
# (skipped, saying so, without one): the first sync, changes, deletions,
# non-masq pods left out, stale keys gone, nothing written outside k8s/.
test-netpol: deps
	cd cni/netpol && $(GO) test ./...

demo: deps build
	integration/demo

.PHONY: bench bench-cluster bench-rate
bench: deps build bench-cluster bench-rate
	integration/bench/run $(BENCH_ARGS)

# Per-endpoint rate limits on software RoCE: limited vs unlimited
# bandwidth and the shaped wire rate against the limit.
bench-rate: deps build
	integration/bench/ratelimit $(RATE_BENCH_ARGS)

# Cluster mode: 10,000 endpoints and 100 policy changes/s on a loopback
# etcd, and convergence between the two hosts on the rxe pair.
bench-cluster: deps build
	$(CARGO) build --release --example cluster_scale
	integration/bench/cluster $(CLUSTER_BENCH_ARGS)

# No import cycle in any crate of the workspace, no use against masqd's
# layer order (docs/design.md, "Layers inside masqd and libmasq"), no
# circle among libmasq's files or folders and no libmasq header declaring
# another file's functions, and no hand-written source over 800 lines unless
# scripts/long-files.txt says why. Python standard library only, so no
# deps: it fails within a second. The self-test plants each kind first, so
# the check cannot pass by finding nothing.
check-modules:
	@python3 scripts/check-modules --self-test
	@python3 scripts/check-modules --max-lines 800

lint: deps-build check-modules check-docs
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Every relative link of README.md and docs/ resolves in a clone, none leaves
# the repository, every page is reachable from README.md (python3 only).
check-docs:
	scripts/check-docs

# The CLI reference in docs/operator-guide.md, from the CLI definitions
# (masq-cli-gen --docs); `cargo test` fails while it differs.
docs-cli:
	$(CARGO) run -q -p masq-backend --bin masq-cli-gen -- --docs docs/operator-guide.md

# make test: every part below, then its time against the budget
# (docs/testbed.md#the-budget): past it, a loud warning here, and `make
# check-budget` fails.
test:
	@started=$$(date +%s); $(MAKE) --no-print-directory test-parts; rc=$$?; \
		scripts/test-budget check --warn --started $$started; exit $$rc

test-parts: deps check-modules build lint test-rust test-nri test-signer test-netpol test-c test-fuzz test-monitoring test-manifests \
	test-integration

# The integration suite's last run (target/test-times/default.json) against
# its share of make test's 40 minutes on the slowest machine seen.
check-budget:
	scripts/test-budget check

test-rust: deps
	$(CARGO) test --workspace

test-c: deps
	$(MAKE) -C frontend-provider test

test-fuzz: deps
	backend/proto/fuzz/run.sh $(FUZZ_SECONDS)
	policy/fuzz/run.sh $(FUZZ_SECONDS)

# masqd's harnesses for what other hosts hand it (backend/src/fuzz: the CM
# link's stream, etcd's values) under libFuzzer, FUZZ_LONG_SECONDS each.
# Not in make test: masq-backend under cargo-fuzz takes many minutes to
# build cold; make test-rust runs the same harnesses over their seeds and
# mutated inputs (docs/testbed.md).
fuzz-long: deps
	backend/fuzz/run.sh $(FUZZ_LONG_SECONDS)

# The Prometheus rules and the Grafana dashboard (packaging/prometheus,
# packaging/grafana; docs/metrics.md): promtool, from Debian's prometheus
# package, checks the rules and runs their unit tests; check-monitoring
# checks the dashboard's JSON and that every alert is tested firing and
# not; a Rust test that every masq_ name in them is one masqd serves.
PROMTOOL ?= promtool
# The Prometheus rules for a scrape job with another name than masqd
# (JOB=NAME): target/prometheus/masq-rules.yml, checked by promtool.
JOB ?= masqd
rules: deps
	@echo '$(JOB)' | grep -Eqx '[A-Za-z0-9_.:-]+' || { echo "rules: JOB='$(JOB)':" \
		"a job name of letters, digits, '_', '.', ':' and '-'" >&2; exit 2; }
	mkdir -p target/prometheus
	sed 's/job="masqd"/job="$(JOB)"/g' packaging/prometheus/masq-rules.yml >target/prometheus/masq-rules.yml
	$(PROMTOOL) check rules target/prometheus/masq-rules.yml

test-monitoring: deps
	@command -v $(PROMTOOL) >/dev/null || { echo "test-monitoring: no $(PROMTOOL):" \
		"install Debian's prometheus package (scripts/install-deps does, as root)" >&2; exit 1; }
	$(PROMTOOL) check rules packaging/prometheus/masq-rules.yml
	$(PROMTOOL) test rules packaging/prometheus/masq-rules.test.yml
	$(MAKE) --no-print-directory rules JOB=kubernetes-pods
	grep -q 'up{job="kubernetes-pods"}' target/prometheus/masq-rules.yml
	python3 scripts/check-monitoring --self-test
	python3 scripts/check-monitoring
	$(CARGO) test --workspace --lib the_rules_and_dashboard_name_only_metrics_masqd_serves

test-integration: deps build deb
	integration/run-tests

# The two-host tests kept out of make test's budget: the long ones (soaks: a
# policy applied through connection churn, a second VPC arriving under a
# live connection, a late container delete, an etcd outage; a guest wedged
# on purpose) and the extended ones (the further cases of each layer whose
# main case make test runs). On two testbeds side by side.
test-long: deps build deb
	integration/run-tests --long

# Every test there is: make test, then the suites kept out of its budget.
test-all: test test-long test-cluster test-rails test-k8s test-k8s-cluster test-engines fuzz-long

# Three hosts, a three-member etcd cluster: a host powered off and back, an
# endpoint that moves between hosts (integration/tests/test_cluster3.py).
test-cluster: deps build
	integration/run-tests --cluster

# The Kubernetes deploy files (packaging/kubernetes): each kustomization
# built with kustomize and every object decoded strictly by Kubernetes' own
# serializer (packaging/kubernetes/check; Go modules from the proxy), and
# that check's test that each kind of mistake is caught.
test-manifests: deps
	cd packaging/kubernetes/check && $(GO) test -count=1 ./... && $(GO) vet ./... && \
		$(GO) build -o ../../../target/check-manifests .
	target/check-manifests packaging/kubernetes packaging/kubernetes/example packaging/kubernetes/netpol

# Kubernetes' runtime path: containerd 2 driven by crictl as a kubelet
# drives it, masq-cni in the pods' network, masq-nri giving pods their
# device (integration/tests/test_k8s.py), and the node image built from the
# package (integration/k8s/images). Builds containerd and crictl from the Go
# module proxy and the image's Debian base once (cached).
test-k8s: deps build deb
	integration/run-tests --k8s

# A real Kubernetes cluster on the testbed: kube-apiserver (on an etcd of its
# own), kube-controller-manager and kube-scheduler on host1, a kubelet on
# each host against containerd 2, Multus' thin plugin as the pods' CNI
# (integration/tests/test_k8s_cluster.py, integration/guest/kube.sh). Builds
# Kubernetes, kubectl and Multus from the Go module proxy once (about 15
# minutes on 2 cores; integration/k8s/control-plane), before the guests
# boot: they see this machine's root as it was at their boot.
test-k8s-cluster: deps build deb
	integration/k8s/tools >/dev/null
	nice -n 10 integration/k8s/control-plane >/dev/null
	integration/run-tests --k8s-cluster

# Podman 5 and Docker 26 as Debian 13 ships them, each running a stock app
# through masq by docs/containers.md's route (integration/tests/
# test_engines.py): their Debian 13 root made by debootstrap once (cached,
# about 450 MB) before the guests boot, as they see this machine's root as
# it was at their boot.
test-engines: deps build
	integration/engines-root >/dev/null
	integration/run-tests --engines

# Hosts with two rails (`testbed up --rails 2`: a NIC and an rxe device per
# rail, each rail a segment of its own; integration/tests/test_rails.py).
test-rails: deps build
	integration/run-tests --rails

# masqd, masqctl, libmasq (and its facades), the CNI plugin, the NRI plugin, masqctl's
# bash, zsh and fish completions and the man pages (masqctl(1) and one per
# command, masqd(8)) from target/cli, the systemd unit, an example config,
# the Prometheus rules (and their tests) and the
# Grafana dashboard under share/masq, and the documentation (README.md,
# docs/ without the working plans, policy/README.md and the published
# plots, at their places in the repository so that the pages' links hold;
# packaging/prometheus and packaging/grafana there are links to share/masq);
# nothing is built here (run make first).
install:
	install -D -m 0755 target/release/masqd $(DESTDIR)$(PREFIX)/sbin/masqd
	install -D -m 0755 target/release/masqctl $(DESTDIR)$(PREFIX)/bin/masqctl
	install -D -m 0755 target/release/masq-cni $(DESTDIR)$(CNI_BIN_DIR)/masq-cni
	install -D -m 0755 $(NRI) $(DESTDIR)$(PREFIX)/bin/masq-nri
	install -D -m 0755 $(SIGNER) $(DESTDIR)$(PREFIX)/bin/masq-signer
	install -D -m 0755 $(NETPOL) $(DESTDIR)$(PREFIX)/bin/masq-netpol
	install -D -m 0644 $(CLI_GEN)/completions/bash/masqctl \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions/masqctl
	install -D -m 0644 $(CLI_GEN)/completions/zsh/_masqctl \
		$(DESTDIR)$(PREFIX)/share/zsh/vendor-completions/_masqctl
	install -D -m 0644 $(CLI_GEN)/completions/fish/masqctl.fish \
		$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/masqctl.fish
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man8
	install -m 0644 $(CLI_GEN)/man/man1/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 $(CLI_GEN)/man/man8/*.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	install -d $(DESTDIR)$(PREFIX)/lib/masq
	install -m 0644 frontend-provider/build/libmasq.so frontend-provider/build/libmasq-ibverbs.so \
		frontend-provider/build/libmasq-rdmacm.so $(DESTDIR)$(PREFIX)/lib/masq/
	install -d $(DESTDIR)$(UNIT_DIR) $(DESTDIR)$(SYSCONFDIR)/masq $(DESTDIR)$(PREFIX)/share/doc/masq
	sed 's|@PREFIX@|$(PREFIX)|g' packaging/masqd.service >$(DESTDIR)$(UNIT_DIR)/masqd.service
	sed 's|@PREFIX@|$(PREFIX)|g' packaging/masqd.yaml.example \
		>$(DESTDIR)$(SYSCONFDIR)/masq/masqd.yaml.example
	install -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/masq/README.md
	install -d $(DESTDIR)$(PREFIX)/share/doc/masq/docs $(DESTDIR)$(PREFIX)/share/doc/masq/policy \
		$(DESTDIR)$(PREFIX)/share/doc/masq/integration/bench/published
	install -m 0644 docs/*.md $(DESTDIR)$(PREFIX)/share/doc/masq/docs/
	install -m 0644 policy/README.md $(DESTDIR)$(PREFIX)/share/doc/masq/policy/README.md
	install -m 0644 integration/bench/published/*.png \
		$(DESTDIR)$(PREFIX)/share/doc/masq/integration/bench/published/
	install -d $(DESTDIR)$(PREFIX)/share/masq/prometheus $(DESTDIR)$(PREFIX)/share/masq/grafana \
		$(DESTDIR)$(PREFIX)/share/doc/masq/packaging
	install -m 0644 packaging/prometheus/masq-rules.yml packaging/prometheus/masq-rules.test.yml \
		$(DESTDIR)$(PREFIX)/share/masq/prometheus/
	install -m 0644 packaging/grafana/masq-dashboard.json $(DESTDIR)$(PREFIX)/share/masq/grafana/
	ln -sfn ../../../masq/prometheus $(DESTDIR)$(PREFIX)/share/doc/masq/packaging/prometheus
	ln -sfn ../../../masq/grafana $(DESTDIR)$(PREFIX)/share/doc/masq/packaging/grafana

# A Debian package of `make install` (PREFIX=/usr), made by debhelper
# (debian/: compat 13, Depends from dh_shlibdeps, the unit's maintainer
# scripts from dh_installsystemd, /etc files as conffiles): apt install
# ./$(DEB). The .buildinfo and .changes land beside it in target/.
# `make lint-deb` checks it with lintian (make test-deb-clean does).
deb: deps-deb build
	@v=$$(dpkg-parsechangelog -S Version); [ "$$v" = "$(VERSION)" ] || { echo "deb: debian/changelog" \
		"is at $$v, Cargo.toml at $(VERSION): add a changelog entry (dch -v $(VERSION))" >&2; exit 1; }
	rm -f $(DEB)
	dpkg-buildpackage -b --no-sign \
		--buildinfo-file=target/masq_$(VERSION)_$(ARCH).buildinfo --buildinfo-option=-utarget \
		--changes-file=target/masq_$(VERSION)_$(ARCH).changes --changes-option=-utarget
	@test -f $(DEB) || { echo "deb: dpkg-buildpackage made no $(DEB)" >&2; exit 1; }

# lintian on the package: no error or warning but those debian/masq.lintian-overrides
# explains.
lint-deb: deps-deb
	lintian --fail-on error,warning --display-info $(DEB)

# The node image and the Kubernetes example's tenant image
# (packaging/container/build says what REGISTRY, TAG and BASE change).
images: deb
	packaging/container/build

# apt install ./$(DEB) on a clean Debian 12 (a debootstrapped minbase root,
# cached under /var/tmp/masq-deb-clean), apt fetching the dependencies from
# deb.debian.org; then its binaries run, ldd finds their libraries, the
# completions and man pages are there, purge leaves nothing, and
# systemd-analyze verifies the unit. About 30s once cached.
test-deb-clean: deb lint-deb
	scripts/test-deb-clean $(DEB)

# test-deb-clean, then `scripts/install-deps build` and `make` in a second
# clean Debian 12 root (this machine's Rust and Go mounted in): make builds
# with only the build set. A cold release build: long.
test-build-clean: deb lint-deb
	scripts/test-deb-clean --build $(DEB)

testbed-up: deps
	integration/testbed up

testbed-down:
	integration/testbed down

clean:
	$(CARGO) clean
	$(MAKE) -C frontend-provider clean
	$(MAKE) -C integration clean
