#!/usr/bin/env bash
# Fuzz the policy parser for SECONDS (default 60); the corpus starts from
# every policy file in the repository (examples, test configs).
set -euo pipefail
secs=${1:-60}
cd "$(dirname "$0")"

corpus=corpus/parse
mkdir -p "$corpus"
for f in ../examples/*.yaml ../../examples/policy.yaml ../../integration/tests/configs/*/policy*.yaml; do
	cp "$f" "$corpus/seed-$(echo "$f" | tr '/.' '__')"
done
exec ../../scripts/cargo-fuzz-run . parse "$secs" "$corpus"
