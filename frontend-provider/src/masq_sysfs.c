/*
 * Inside a tenant, /sys/class/infiniband is masqd's view of the virtual
 * devices (vrdma0, vrdma1, ..., virtual GIDs), bound over the real
 * directory so that apps reading sysfs (NCCL, UCX) see what verbs report.
 * libmasq itself must still open the physical devices through stock
 * libibverbs, which finds them in sysfs. libibverbs takes sysfs's location
 * from $SYSFS_PATH, read once when the device list is first built
 * (rdma-core's ibv_get_sysfs_path), so setting it at load time, before any
 * verbs call, is enough. The tenant's runtime mounts the real sysfs at
 * MASQ_PHYS_SYSFS_DIR in the endpoint's socket directory
 * (/run/masq/phys-sys).
 */
#define _GNU_SOURCE
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>

#include "transport/transport.h"
#include "masq_sysfs.h"

int masq_sysfs_setup(void)
{
	const char *sock = masq_socket_path();
	const char *slash = strrchr(sock, '/');
	char path[4096];
	struct statfs st;
	size_t dirlen;
	int n;

	/* Whoever set it knows better (and a test harness may). */
	if (getenv("SYSFS_PATH") || !slash)
		return 0;
	dirlen = (size_t)(slash - sock);
	if (dirlen >= sizeof(path))
		return 0;
	n = snprintf(path, sizeof(path), "%.*s/%s", (int)dirlen, sock, MASQ_PHYS_SYSFS_DIR);
	if (n < 0 || (size_t)n >= sizeof(path))
		return 0;
	/* Only a mounted sysfs: masqd leaves an empty directory there, and
	 * pointing libibverbs at it would hide every device. */
	if (statfs(path, &st) != 0 || st.f_type != (__typeof__(st.f_type))SYSFS_MAGIC)
		return 0;
	if (setenv("SYSFS_PATH", path, 0) != 0)
		return 0;
	if (getenv("MASQ_DEBUG"))
		masq_log("physical sysfs at %s", path);
	return 1;
}

__attribute__((constructor)) static void masq_sysfs_init(void)
{
	masq_sysfs_setup();
}
