#!/usr/bin/env bash
# Fuzz masq-proto's decoders for SECONDS (default 60) with cargo-fuzz
# (libFuzzer + ASan). Only a stable toolchain is guaranteed here, so the
# nightly-only flags cargo-fuzz passes are allowed with RUSTC_BOOTSTRAP=1.
# The corpus starts from the golden vectors; a crash leaves its input in
# artifacts/decode/ and makes this script fail.
set -euo pipefail
secs=${1:-60}
cd "$(dirname "$0")"

if ! cargo fuzz --version >/dev/null 2>&1; then
	cargo install --locked cargo-fuzz
fi
command -v c++ >/dev/null || { echo "run.sh: libFuzzer needs a C++ compiler (apt-get install g++)" >&2; exit 1; }

corpus=corpus/decode
mkdir -p "$corpus"
for f in ../golden/*.hex; do
	hex=$(sed 's/#.*//' "$f" | tr -d ' \n')
	printf '%b' "$(sed 's/../\\x&/g' <<<"$hex")" >"$corpus/golden-$(basename "$f" .hex)"
done

export RUSTC_BOOTSTRAP=1
cargo fuzz build decode
cargo fuzz run decode "$corpus" -- -max_total_time="$secs" -max_len=4096 -print_final_stats=1
