/*
 * Force-included into every libmasq object (see the Makefile).
 *
 * libmasq is preloaded into tenants' images, whose glibc may be older than
 * the build host's. glibc 2.34 moved libdl's and libpthread's functions into
 * libc under a new version (pthread_sigmask got one in 2.32), and a plain
 * link on a newer host binds those, which no older glibc serves: the image's
 * app then fails to start ("version `GLIBC_2.34' not found"). These bind the
 * first version instead, which every glibc of the architecture serves (2.34
 * and later from libc, older ones from libdl and libpthread, which the
 * Makefile keeps as dependencies). glibc-floor.sh checks the link needs no
 * version past MASQ_GLIBC_FLOOR.
 */
#ifndef MASQ_GLIBC_FLOOR_H
#define MASQ_GLIBC_FLOOR_H

#if defined(__x86_64__)
#define MASQ_GLIBC_FIRST "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define MASQ_GLIBC_FIRST "GLIBC_2.17"
#else
#error "libmasq: the first glibc version of this architecture is not known (glibc_floor.h)"
#endif

#define MASQ_BIND_FIRST(fn) __asm__(".symver " #fn ", " #fn "@" MASQ_GLIBC_FIRST)
MASQ_BIND_FIRST(dladdr);
MASQ_BIND_FIRST(dlclose);
MASQ_BIND_FIRST(dlerror);
MASQ_BIND_FIRST(dlsym);
MASQ_BIND_FIRST(dlvsym);
MASQ_BIND_FIRST(pthread_create);
MASQ_BIND_FIRST(pthread_join);
MASQ_BIND_FIRST(pthread_once);
MASQ_BIND_FIRST(pthread_sigmask);
#undef MASQ_BIND_FIRST

#endif
