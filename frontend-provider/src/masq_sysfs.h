/*
 * Where libibverbs finds the physical device's sysfs inside a tenant.
 */
#ifndef MASQ_SYSFS_H
#define MASQ_SYSFS_H

/* The physical sysfs, next to the endpoint's socket (see masq_sysfs.c). */
#define MASQ_PHYS_SYSFS_DIR "phys-sys"

/*
 * Point libibverbs at the physical sysfs (SYSFS_PATH) when it is unset and
 * a sysfs is mounted at MASQ_PHYS_SYSFS_DIR beside masq_socket_path().
 * 1 if it set SYSFS_PATH, 0 if not. Runs once at load; exposed for tests.
 */
int masq_sysfs_setup(void);

#endif
