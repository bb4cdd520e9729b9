#!/usr/bin/env bash
# Fuzz masq-proto's decoders for SECONDS (default 60); the corpus starts
# from the golden vectors.
set -euo pipefail
secs=${1:-60}
cd "$(dirname "$0")"

corpus=corpus/decode
mkdir -p "$corpus"
for f in ../golden/*.hex; do
	hex=$(sed 's/#.*//' "$f" | tr -d ' \n')
	printf '%b' "$(sed 's/../\\x&/g' <<<"$hex")" >"$corpus/golden-$(basename "$f" .hex)"
done
exec ../../../scripts/cargo-fuzz-run . decode "$secs" "$corpus"
