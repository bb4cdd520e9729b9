#!/bin/sh
# Prints the linker version script of libmasq.so: each function libmasq
# defines is exported under the default version its real library gives it
# (libibverbs, librdmacm, libc), so that apps' versioned references and
# dlvsym(handle, name, "IBVERBS_1.1") find libmasq's as they would the real
# one; everything else stays local. Read off the installed libraries, so
# the versions follow the rdma-core the apps run with.
# Usage: version-script.sh LIBIBVERBS LIBRDMACM LIBC OBJECT...
set -eu
libs="$1 $2 $3"
shift 3
# "NAME VERSION" for every default-version function of the real libraries.
for lib in $libs; do
    objdump -T "$lib" | awk 'NF >= 7 && $0 ~ / DF \.text/ && $(NF-1) !~ /^\(/ { print $NF, $(NF-1) }'
done >"${TMPDIR:-/tmp}/masq-real-versions.$$"
trap 'rm -f "${TMPDIR:-/tmp}/masq-real-versions.$$"' EXIT
nm -g --defined-only "$@" | awk 'NF == 3 && $2 ~ /^[TW]$/ { print $3 }' | sort -u |
    awk -v real="${TMPDIR:-/tmp}/masq-real-versions.$$" '
    BEGIN { while ((getline line < real) > 0) { split(line, f, " "); version[f[1]] = f[2] } }
    /^masq_/ { next }  # libmasq-internal, used across its files
    /@/ { n = split($1, f, "@+"); names[f[n]] = names[f[n]]; next }  # set by .symver
    {
        if (!($1 in version)) {
            printf "version-script.sh: libmasq defines %s, which no real library exports\n", $1 > "/dev/stderr"
            bad = 1; next
        }
        names[version[$1]] = names[version[$1]] "\t\t" $1 ";\n"
    }
    END {
        if (bad) exit 1
        for (v in names)
            if (names[v] == "") printf "%s {\n};\n", v
            else printf "%s {\n\tglobal:\n%s};\n", v, names[v]
        print "MASQ_PRIVATE {\n\tlocal: *;\n};"
    }'
