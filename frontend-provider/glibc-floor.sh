#!/bin/sh
# Fails when a shared object needs a glibc version past FLOOR, naming the
# version and the functions bound to it: libmasq must load in tenant images
# with an older glibc than the build host's (src/glibc_floor.h).
# Usage: glibc-floor.sh FLOOR OBJECT
set -eu
floor=$1 obj=$2
objdump -T "$obj" | awk -v floor="$floor" -v obj="$obj" '
    # Compare dotted versions numerically: 2.17 < 2.2.5 is false.
    function newer(a, b,    x, y, i, n) {
        n = split(a, x, "."); split(b, y, ".")
        for (i = 1; i <= n || i in y; i++) {
            if (x[i] + 0 != y[i] + 0) return x[i] + 0 > y[i] + 0
        }
        return 0
    }
    /\*UND\*/ && $(NF-1) ~ /^\(?GLIBC_[0-9.]+\)?$/ {
        v = $(NF-1); gsub(/[()]|GLIBC_/, "", v)
        if (newer(v, floor)) { bad[v] = bad[v] " " $NF; n++ }
    }
    END {
        for (v in bad)
            printf "glibc-floor.sh: %s needs GLIBC_%s (past the floor, %s) for:%s\n", obj, v, floor, bad[v] > "/dev/stderr"
        exit n > 0
    }'
