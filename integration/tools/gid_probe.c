/*
 * gid_probe: what a plain libibverbs program sees of port 1's GID table,
 * for comparing a device through masq with the physical one. It scans the
 * table for populated and empty entries and prints, one "key value" per
 * line:
 *
 *   gid_tbl_len N            ibv_query_port
 *   populated N              indexes where ibv_query_gid_ex succeeds
 *   first_empty I            the first index it answers ENODATA for (-1: none)
 *   empty_ex_errno E         ibv_query_gid_ex's return there
 *   empty_query_gid RC Z     ibv_query_gid's return there, Z=1 if the GID is zero
 *   past_end_ex_errno E      ibv_query_gid_ex at index gid_tbl_len
 *   past_end_query_gid RC E  ibv_query_gid there, and errno
 *   table_count N            ibv_query_gid_table with room for the whole table
 *   table_matches 0|1        its indexes are exactly the populated ones
 *   table_short N            ibv_query_gid_table with room for one fewer
 *   sysfs_gids N             files in /sys/class/infiniband/DEVICE/ports/1/gids
 *   sysfs_empty_gid TEXT     the file gids/FIRST_EMPTY
 *   sysfs_empty_type RC E    reading gid_attrs/types/FIRST_EMPTY: open (-1) or
 *                            read's result, and errno
 *
 *   gid_probe DEVICE
 *
 * Exit: 0 when it could ask everything, 1 otherwise.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int is_zero(const union ibv_gid *g)
{
	static const union ibv_gid zero;

	return memcmp(g, &zero, sizeof(*g)) == 0;
}

static void sysfs(const char *dev, int first_empty)
{
	char path[512], buf[128];
	struct dirent *d;
	ssize_t n;
	int files = 0, fd;
	DIR *dir;

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/gids", dev);
	dir = opendir(path);
	while (dir && (d = readdir(dir)) != NULL)
		files += d->d_name[0] != '.';
	if (dir)
		closedir(dir);
	printf("sysfs_gids %d\n", files);
	if (first_empty < 0)
		return;
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/gids/%d", dev, first_empty);
	fd = open(path, O_RDONLY);
	n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	printf("sysfs_empty_gid %s\n", n > 0 ? buf : "-");
	if (fd >= 0)
		close(fd);
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/gid_attrs/types/%d", dev,
		 first_empty);
	errno = 0;
	fd = open(path, O_RDONLY);
	n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
	printf("sysfs_empty_type %zd %d\n", n, n < 0 ? errno : 0);
	if (fd >= 0)
		close(fd);
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_port_attr port;
	struct ibv_gid_entry e, *table;
	union ibv_gid gid;
	int i, n, rc, populated = 0, first_empty = -1, matches = 1;
	ssize_t count, j;

	if (argc != 2) {
		fprintf(stderr, "usage: gid_probe DEVICE\n");
		return 1;
	}
	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), argv[1]) == 0)
			ctx = ibv_open_device(list[i]);
	if (!ctx || ibv_query_port(ctx, 1, &port)) {
		fprintf(stderr, "gid_probe: cannot open %s\n", argv[1]);
		return 1;
	}
	printf("gid_tbl_len %d\n", port.gid_tbl_len);
	for (i = 0; i < port.gid_tbl_len; i++) {
		rc = ibv_query_gid_ex(ctx, 1, (uint32_t)i, &e, 0);
		if (rc == 0)
			populated++;
		else if (rc == ENODATA && first_empty < 0)
			first_empty = i;
		else if (rc != ENODATA) {
			fprintf(stderr, "gid_probe: index %d: %s\n", i, strerror(rc));
			return 1;
		}
	}
	printf("populated %d\nfirst_empty %d\n", populated, first_empty);
	if (first_empty >= 0) {
		printf("empty_ex_errno %d\n", ibv_query_gid_ex(ctx, 1, (uint32_t)first_empty, &e, 0));
		memset(&gid, 0xff, sizeof(gid));
		rc = ibv_query_gid(ctx, 1, first_empty, &gid);
		printf("empty_query_gid %d %d\n", rc, is_zero(&gid));
	}
	printf("past_end_ex_errno %d\n",
	       ibv_query_gid_ex(ctx, 1, (uint32_t)port.gid_tbl_len, &e, 0));
	errno = 0;
	rc = ibv_query_gid(ctx, 1, port.gid_tbl_len, &gid);
	printf("past_end_query_gid %d %d\n", rc, rc ? errno : 0);

	table = calloc((size_t)port.gid_tbl_len + 1, sizeof(*table));
	if (!table)
		return 1;
	count = ibv_query_gid_table(ctx, table, (size_t)port.gid_tbl_len, 0);
	printf("table_count %zd\n", count);
	for (j = 0; j < count; j++)
		if (ibv_query_gid_ex(ctx, 1, table[j].gid_index, &e, 0) ||
		    memcmp(&e.gid, &table[j].gid, sizeof(e.gid)))
			matches = 0;
	printf("table_matches %d\n", matches && count == populated);
	if (count > 0)
		printf("table_short %zd\n", ibv_query_gid_table(ctx, table, (size_t)count - 1, 0));
	free(table);
	sysfs(argv[1], first_empty);
	fflush(stdout);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
