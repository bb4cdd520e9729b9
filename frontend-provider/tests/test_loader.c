/*
 * libmasq's dlopen (src/masq_loader.h), without RDMA: an app that loads
 * libibverbs or librdmacm itself and looks functions up on the handle gets
 * libmasq's for what masq virtualizes, the real library's for the rest;
 * other libraries load exactly as without libmasq.
 *
 * Runs itself again with libmasq preloaded (and no masqd to reach), like a
 * tenant app. Not linked against libibverbs: it arrives late, as in Python.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static const char *lib_of(void *p)
{
	Dl_info info;
	const char *slash;

	if (!p || !dladdr(p, &info) || !info.dli_fname)
		return "(none)";
	slash = strrchr(info.dli_fname, '/');
	return slash ? slash + 1 : info.dli_fname;
}

#define CHECK_FROM(p, lib)                                                        \
	do {                                                                      \
		const char *got_ = lib_of(p);                                     \
		if (strncmp(got_, lib, strlen(lib)) != 0) {                       \
			fprintf(stderr, "%s:%d: %s: %s is from %s, want %s\n",     \
				__FILE__, __LINE__, __func__, #p, got_, lib);     \
			cur_failed = 1;                                           \
		}                                                                 \
	} while (0)

static void check_verbs_handle(const char *name, int mode)
{
	void *h = dlopen(name, mode);

	CHECK(h != NULL);
	if (!h) {
		fprintf(stderr, "dlopen(%s): %s\n", name, dlerror());
		return;
	}
	CHECK_FROM(dlsym(h, "ibv_get_device_list"), "libmasq.so");
	CHECK_FROM(dlsym(h, "ibv_open_device"), "libmasq.so");
	CHECK_FROM(dlvsym(h, "ibv_modify_qp", "IBVERBS_1.1"), "libmasq.so");
	CHECK_FROM(dlvsym(h, "ibv_query_gid", "IBVERBS_1.1"), "libmasq.so");
	CHECK_FROM(dlsym(h, "_ibv_query_gid_ex"), "libmasq.so");
	/* What masq leaves alone comes from the real library. */
	CHECK_FROM(dlsym(h, "ibv_alloc_pd"), "libibverbs.so");
	CHECK_FROM(dlvsym(h, "ibv_reg_mr", "IBVERBS_1.1"), "libibverbs.so");
	dlclose(h);
}

static void test_dlopen_libibverbs_local(void)
{
	check_verbs_handle("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
}

static void test_dlopen_libibverbs_deepbind(void)
{
	check_verbs_handle("libibverbs.so.1", RTLD_LAZY | RTLD_DEEPBIND);
}

static void test_dlopen_by_dev_name_and_global(void)
{
	/* NCCL tries the unversioned development name first. */
	check_verbs_handle("libibverbs.so", RTLD_NOW | RTLD_GLOBAL);
}

static void test_import_device_is_refused(void)
{
	void *h = dlopen("libibverbs.so.1", RTLD_NOW);
	struct ibv_context *(*import)(int);

	CHECK(h != NULL);
	if (!h)
		return;
	import = (struct ibv_context * (*)(int)) dlvsym(h, "ibv_import_device", "IBVERBS_1.10");
	CHECK_FROM(import, "libmasq.so");
	if (import) {
		errno = 0;
		CHECK(import(0) == NULL);
		CHECK_EQ(errno, EOPNOTSUPP);
	}
	dlclose(h);
}

static void test_dlopen_librdmacm(void)
{
	void *h = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_LOCAL);

	CHECK(h != NULL);
	if (!h)
		return;
	CHECK_FROM(dlsym(h, "rdma_create_id"), "libmasq.so");
	CHECK_FROM(dlsym(h, "rdma_get_cm_event"), "libmasq.so");
	dlclose(h);
}

static void test_noload_of_what_is_not_loaded(void)
{
	/* librdmacm is loaded above only through handles since closed, so
	 * which answer is right depends on the order; a name never loaded
	 * must stay NULL, as without libmasq. */
	CHECK(dlopen("libibverbs.so.999", RTLD_NOW | RTLD_NOLOAD) == NULL);
}

static void test_late_loaded_verbs_work_without_masqd(void)
{
	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
	struct ibv_device **(*get_list)(int *);
	void (*free_list)(struct ibv_device **);
	struct ibv_device **list;
	int n = -1;

	CHECK(h != NULL);
	if (!h)
		return;
	get_list = (struct ibv_device **(*)(int *))dlsym(h, "ibv_get_device_list");
	free_list = (void (*)(struct ibv_device **))dlsym(h, "ibv_free_device_list");
	/* libmasq finds the real library through the handle, not the global
	 * scope it is not in (it used to abort here); no masqd: no device,
	 * fail closed. */
	list = get_list(&n);
	if (list) { /* a machine without RDMA has no list at all */
		CHECK_EQ(n, 0);
		free_list(list);
	}
	dlclose(h);
}

static void test_other_libraries_keep_the_callers_runpath(void)
{
	/* Found only through this program's RUNPATH ($ORIGIN/origin): the
	 * real dlopen must still see the program as its caller. */
	void *h = dlopen("libmasq_origin_probe.so", RTLD_NOW);

	CHECK(h != NULL);
	if (!h)
		fprintf(stderr, "%s\n", dlerror());
	else
		dlclose(h);
}

int main(int argc, char **argv)
{
	(void)argc;
	if (!getenv("MASQ_TEST_PRELOADED")) {
		const char *lib = getenv("MASQ_TEST_LIBMASQ");

		setenv("MASQ_TEST_PRELOADED", "1", 1);
		setenv("LD_PRELOAD", lib ? lib : "build/libmasq.so", 1);
		setenv("MASQ_SOCKET", "/nonexistent/masq.sock", 1);
		execv("/proc/self/exe", argv);
		perror("execv");
		return 2;
	}
	run_with("dlopen_libibverbs_local", NULL, test_dlopen_libibverbs_local);
	run_with("dlopen_libibverbs_deepbind", NULL, test_dlopen_libibverbs_deepbind);
	run_with("dlopen_by_dev_name_and_global", NULL, test_dlopen_by_dev_name_and_global);
	run_with("dlopen_librdmacm", NULL, test_dlopen_librdmacm);
	run_with("import_device_is_refused", NULL, test_import_device_is_refused);
	run_with("noload_of_what_is_not_loaded", NULL, test_noload_of_what_is_not_loaded);
	run_with("late_loaded_verbs_work_without_masqd", NULL,
		 test_late_loaded_verbs_work_without_masqd);
	run_with("other_libraries_keep_the_callers_runpath", NULL,
		 test_other_libraries_keep_the_callers_runpath);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
