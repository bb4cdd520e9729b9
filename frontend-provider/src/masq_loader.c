/* libmasq's dlopen and its look-ups of the real libibverbs; see masq_loader.h. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "transport/transport.h"
#include "masq_loader.h"

enum verbs_lib { LIB_OTHER, LIB_IBVERBS, LIB_RDMACM };

static const char *const facade_name[] = {
	[LIB_IBVERBS] = "libmasq-ibverbs.so",
	[LIB_RDMACM] = "libmasq-rdmacm.so",
};

static void *(*real_dlopen)(const char *, int);

static void resolve_dlopen(void)
{
	void *(*p)(const char *, int);

	/* libmasq defines dlopen, so the real one is the next object's; dlvsym
	 * is not interposed. glibc 2.34 moved dlopen into libc under a new
	 * version; older builds of apps bind the 2.2.5 one. */
	p = (void *(*)(const char *, int))dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.34");
	if (!p)
		p = (void *(*)(const char *, int))dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.2.5");
	if (!p)
		p = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
	__atomic_store_n(&real_dlopen, p, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void loader_init(void)
{
	resolve_dlopen();
}

/* The real dlopen, also when called from a constructor that ran before ours. */
static void *(*dlopen_fn(void))(const char *, int)
{
	void *(*real)(const char *, int) = __atomic_load_n(&real_dlopen, __ATOMIC_ACQUIRE);

	if (!real) {
		resolve_dlopen();
		real = real_dlopen;
	}
	return real;
}

static enum verbs_lib verbs_library(const char *file)
{
	const char *base = strrchr(file, '/');

	base = base ? base + 1 : file;
	if (strncmp(base, "libibverbs.so", strlen("libibverbs.so")) == 0)
		return LIB_IBVERBS;
	if (strncmp(base, "librdmacm.so", strlen("librdmacm.so")) == 0)
		return LIB_RDMACM;
	return LIB_OTHER;
}

/* Where libmasq itself was loaded from; the facades sit beside it. */
static const char *self_path(void)
{
	Dl_info info;

	if (!dladdr((void *)masq_real_verb, &info) || !info.dli_fname)
		return NULL;
	return info.dli_fname;
}

static void *open_facade(enum verbs_lib lib, const char *file, int mode)
{
	char path[PATH_MAX];
	const char *self = self_path(), *slash;
	void *real, *facade;

	/* The real library first, with the app's own flags and search rules. */
	real = dlopen_fn()(file, mode);
	if (!real)
		return NULL;
	slash = self ? strrchr(self, '/') : NULL;
	if (!slash || snprintf(path, sizeof(path), "%.*s/%s", (int)(slash - self), self,
			       facade_name[lib]) >= (int)sizeof(path)) {
		masq_log("cannot tell where libmasq.so lives; refusing dlopen(\"%s\")", file);
		dlclose(real);
		return NULL;
	}
	/* The facade's dependencies resolve to the objects already loaded
	 * (libmasq.so by its soname, the real library just opened). Fail
	 * closed without it: the real handle would show the physical device. */
	facade = dlopen_fn()(path, mode & ~RTLD_NOLOAD);
	if (!facade)
		masq_log("dlopen(\"%s\"): cannot open %s (%s); refused", file, path, dlerror());
	dlclose(real); /* the facade holds it now */
	return facade;
}

/* Exported as dlopen@@GLIBC_2.34, the version apps built against glibc
 * 2.34 or later bind; and, for apps built against an older glibc (NCCL's
 * binaries among them), as dlopen@GLIBC_2.2.5, which newer glibc still
 * serves. Named apart from dlopen: GNU ld drops a C-named default version
 * when the same object also gives that name a .symver. */
__asm__(".symver masq_dlopen, dlopen@@GLIBC_2.34");
__asm__(".symver masq_dlopen_compat, dlopen@GLIBC_2.2.5");
void *masq_dlopen(const char *file, int mode);
void *masq_dlopen_compat(const char *file, int mode) __attribute__((alias("masq_dlopen")));

void *masq_dlopen(const char *file, int mode)
{
	enum verbs_lib lib = file ? verbs_library(file) : LIB_OTHER;

	if (lib == LIB_OTHER)
		/* A sibling call: glibc takes its caller from the return
		 * address, and the caller's RUNPATH and $ORIGIN decide where a
		 * bare name is searched, so the app must stay the caller. */
		return dlopen_fn()(file, mode);
	return open_facade(lib, file, mode);
}

/* A handle on the loaded libibverbs, once it is loaded; kept for good. */
static void *real_ibverbs(void)
{
	static void *kept;
	void *h, *expected = NULL;

	h = __atomic_load_n(&kept, __ATOMIC_ACQUIRE);
	if (h)
		return h;
	h = dlopen_fn()("libibverbs.so.1", RTLD_NOLOAD | RTLD_LAZY);
	if (!h)
		return NULL;
	if (!__atomic_compare_exchange_n(&kept, &expected, h, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		dlclose(h); /* another thread kept one first */
		return expected;
	}
	return h;
}

void *masq_real_verb(const char *name, const char *version)
{
	void *h = real_ibverbs(), *p = NULL;

	if (!h)
		return NULL;
	/* A handle searches libibverbs's own scope, which libmasq is not in. */
	if (version)
		p = dlvsym(h, name, version);
	return p ? p : dlsym(h, name);
}

void *masq_app_verb(const char *name)
{
	static void *self;
	void *h = __atomic_load_n(&self, __ATOMIC_ACQUIRE), *p;
	const char *path;

	if (!h && (path = self_path()) != NULL) {
		h = dlopen_fn()(path, RTLD_NOLOAD | RTLD_LAZY);
		if (h)
			__atomic_store_n(&self, h, __ATOMIC_RELEASE);
	}
	/* libmasq's own scope holds only what it defines (and libc). Linked
	 * into a test program, libmasq has no handle: use the global scope. */
	p = dlsym(h ? h : RTLD_DEFAULT, name);
	return p ? p : masq_real_verb(name, NULL);
}
