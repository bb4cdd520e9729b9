/*
 * How libmasq finds libibverbs, and how apps that load verbs themselves
 * still find libmasq.
 *
 * An app gets libmasq's entry points whichever way verbs arrive:
 * - linked at build time, or brought in by a plugin or an extension module
 *   loaded later (Python, UCX, MPI components): the loader resolves their
 *   references through the global scope, where the preloaded libmasq comes
 *   before libibverbs;
 * - dlopen("libibverbs.so[.1]" or "librdmacm.so[.1]") and dlsym/dlvsym on
 *   that handle (NCCL, ctypes), with any flags (RTLD_LOCAL, RTLD_DEEPBIND):
 *   such a handle searches only that library's own scope, so libmasq's
 *   dlopen hands back instead a "facade": an empty library whose
 *   dependencies are libmasq.so and then the real library. The dynamic
 *   loader itself then answers every dlsym/dlvsym on the handle: libmasq's
 *   function for what masq virtualizes, the real one for the rest.
 * Not covered: a plugin opened with RTLD_DEEPBIND that links libibverbs
 * (its own references bind to libibverbs first), dlsym on the handle of such
 * a plugin, and dlmopen into a new namespace (preloads are not loaded there).
 *
 * libmasq's own calls to the real library go through a handle on the
 * loaded libibverbs, so they work however late it was loaded.
 */
#ifndef MASQ_LOADER_H
#define MASQ_LOADER_H

/* The real libibverbs's `name` at `version` (or its default version when
 * `version` is NULL or absent), or NULL when libibverbs is not loaded or
 * lacks it. */
void *masq_real_verb(const char *name, const char *version);

/* What an app looking up `name` gets: libmasq's own function when masq
 * interposes it, else the real libibverbs's. NULL when neither has it. */
void *masq_app_verb(const char *name);

#endif
