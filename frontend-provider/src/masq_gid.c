/*
 * The virtual GID table's answers, as the kernel gives them for the
 * physical port (see masq_gid.h).
 */
#include <errno.h>
#include <string.h>

#include "masq_gid.h"

void masq_gid_view_set_len(struct masq_gid_view *t, int phys_len)
{
	uint32_t len = phys_len > 0 ? (uint32_t)phys_len : 0;
	unsigned int i;

	for (i = 0; i < t->ngids; i++)
		if (t->gids[i].index >= len)
			len = t->gids[i].index + 1;
	t->len = len;
}

int masq_gid_lookup(const struct masq_gid_view *t, uint32_t port, uint32_t index,
		    const struct masq_gid **g)
{
	unsigned int i;

	if (port != t->port || index >= t->len)
		return EINVAL;
	for (i = 0; i < t->ngids; i++)
		if (t->gids[i].index == index) {
			*g = &t->gids[i];
			return 0;
		}
	return ENODATA;
}

int masq_gid_query(const struct masq_gid_view *t, uint32_t port, int index, union ibv_gid *gid)
{
	const struct masq_gid *g = NULL;
	int err = index < 0 ? EINVAL : masq_gid_lookup(t, port, (uint32_t)index, &g);

	if (err == ENODATA) {
		/* rdma-core keeps the old API's answer for an empty entry. */
		errno = ENODATA;
		memset(gid, 0, sizeof(*gid));
		return 0;
	}
	if (err) {
		errno = err;
		return -1;
	}
	memcpy(gid->raw, g->gid, sizeof(gid->raw));
	return 0;
}

static void fill_entry(struct ibv_gid_entry *e, const struct masq_gid *g, uint32_t port)
{
	memset(e, 0, sizeof(*e));
	memcpy(e->gid.raw, g->gid, sizeof(e->gid.raw));
	e->gid_index = g->index;
	e->port_num = port;
	e->gid_type = g->type;
	e->ndev_ifindex = 0; /* the vNIC lives in the endpoint's namespace */
}

int masq_gid_query_ex(const struct masq_gid_view *t, uint32_t port, uint32_t index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	const struct masq_gid *g = NULL;
	int err = flags || entry_size < sizeof(*entry) ? EINVAL
						       : masq_gid_lookup(t, port, index, &g);

	if (err) {
		errno = err;
		return err;
	}
	fill_entry(entry, g, port);
	return 0;
}

ssize_t masq_gid_query_table(const struct masq_gid_view *t, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	unsigned int i;

	if (flags || entry_size < sizeof(*entries) || !max_entries || max_entries < t->ngids) {
		errno = EINVAL;
		return -EINVAL;
	}
	for (i = 0; i < t->ngids; i++)
		fill_entry((struct ibv_gid_entry *)((char *)entries + i * entry_size), &t->gids[i],
			   t->port);
	return (ssize_t)t->ngids;
}

int masq_gid_query_type(const struct masq_gid_view *t, uint32_t port, uint32_t index,
			unsigned int *type)
{
	const struct masq_gid *g = NULL;
	int err = masq_gid_lookup(t, port, index, &g);

	if (err == ENODATA) {
		/* rdma-core keeps the old API's answer for an empty entry. */
		errno = ENODATA;
		*type = 0;
		return 0;
	}
	if (err) {
		errno = err;
		return -1;
	}
	*type = g->type == IBV_GID_TYPE_ROCE_V2 ? 1 : 0;
	return 0;
}
