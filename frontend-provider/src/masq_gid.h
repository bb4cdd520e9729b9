/*
 * The virtual GID table as apps query it, shaped like the kernel's table of
 * the physical port: `len` entries (the physical port's gid_tbl_len), of
 * which the ones masqd gave are populated, at their own indexes, and the
 * others empty. Each call answers as the kernel and rdma-core answer for
 * the physical port:
 *
 *   entry               ibv_query_gid    ibv_query_gid_ex  ibv_query_gid_type
 *   populated           0, the GID       0, the entry      0, its type
 *   empty               0, zero GID (*)  ENODATA           0, IB/RoCE v1 (*)
 *   past len, or not    -1, EINVAL       EINVAL            -1, EINVAL
 *   the device's port
 *
 * (*) errno is left at ENODATA, as the failed ioctl leaves it.
 * ibv_query_gid_table lists the populated entries only, and fails with
 * -EINVAL when they do not fit in max_entries.
 *
 * The kernel: rdma_get_gid_attr (-EINVAL past the table, -ENODATA for an
 * empty entry) and rdma_query_gid_table (skips empty entries) in
 * drivers/infiniband/core/cache.c, reached through the uverbs methods
 * UVERBS_METHOD_QUERY_GID_ENTRY and _TABLE; rdma-core: ibv_query_gid and
 * ibv_query_gid_type (libibverbs/verbs.c) turn ENODATA into a zero GID and
 * into IB/RoCE v1.
 */
#ifndef MASQ_GID_H
#define MASQ_GID_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <sys/types.h>

#include "transport/transport.h"

struct masq_gid_view {
	struct masq_gid gids[MASQ_MAX_GIDS]; /* the populated entries */
	unsigned int ngids;
	uint32_t port; /* the one port of the device */
	uint32_t len;  /* gid_tbl_len */
};

/* The table's length: the physical port's, phys_len (0 if unknown), but
 * never short of an entry masqd gave. */
void masq_gid_view_set_len(struct masq_gid_view *t, int phys_len);

/* The entry at (port, index): 0 and *g, ENODATA (empty) or EINVAL. */
int masq_gid_lookup(const struct masq_gid_view *t, uint32_t port, uint32_t index,
		    const struct masq_gid **g);

/* ibv_query_gid: 0, or -1 with errno set. */
int masq_gid_query(const struct masq_gid_view *t, uint32_t port, int index, union ibv_gid *gid);

/* ibv_query_gid_ex: 0 or an errno (also in errno). */
int masq_gid_query_ex(const struct masq_gid_view *t, uint32_t port, uint32_t index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);

/* ibv_query_gid_table: the number of entries, or -errno. */
ssize_t masq_gid_query_table(const struct masq_gid_view *t, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size);

/* rdma-core's ibv_query_gid_type (enum ibv_gid_type_sysfs: 0 = IB/RoCE v1,
 * 1 = RoCE v2): 0, or -1 with errno set. */
int masq_gid_query_type(const struct masq_gid_view *t, uint32_t port, uint32_t index,
			unsigned int *type);

#endif
