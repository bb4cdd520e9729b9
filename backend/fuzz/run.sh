#!/usr/bin/env bash
# Fuzz what other hosts hand masqd, each target for SECONDS (default 60):
# the CM's masqd-to-masqd stream (peer_stream) and etcd's values
# (etcd_values). The corpus starts from seeds/, which `cargo test` runs
# too (src/fuzz/tests.rs). A crash leaves its input in artifacts/TARGET/;
# copy it into seeds/TARGET/ once fixed, and cargo test replays it.
#
# Not in make test: building masq-backend under cargo-fuzz (ASan, coverage)
# takes many minutes cold (docs/testbed.md); make fuzz-long runs this.
set -euo pipefail
secs=${1:-60}
cd "$(dirname "$0")"

# This package is a workspace of its own: build it with the workspace's
# versions, which are in cargo's cache already.
[ -f Cargo.lock ] || cp ../../Cargo.lock .
for target in peer_stream etcd_values; do
	corpus=corpus/$target
	mkdir -p "$corpus"
	cp seeds/"$target"/* "$corpus"/
	../../scripts/cargo-fuzz-run . "$target" "$secs" "$corpus"
done
