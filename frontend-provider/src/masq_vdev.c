/* The virtual devices and the physical ones shown as them; see masq_vdev.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "masq_vdev.h"

/* By vdev index; phys NULL: not shown. */
static struct {
	struct ibv_device *phys;
	struct masq_device info;
} vdevs[MASQ_MAX_VDEVS];
static pthread_mutex_t vdev_lock = PTHREAD_MUTEX_INITIALIZER;

static int is_kept(const struct ibv_device *dev, struct ibv_device *const *kept, int nkept)
{
	int k;

	for (k = 0; k < nkept; k++)
		if (kept[k] == dev)
			return 1;
	return 0;
}

/* Call under vdev_lock: the device of list[0..n) backing d and not kept
 * yet, or NULL. */
static struct ibv_device *backing(struct ibv_device **list, int n, const struct masq_device *d,
				  struct ibv_device *const *kept, int nkept)
{
	const char *old_name = vdevs[d->vdev].info.vdev_name;
	int i;

	for (i = 0; i < n; i++)
		if (!is_kept(list[i], kept, nkept) && strcmp(list[i]->name, d->phys_dev_name) == 0)
			return list[i];
	/* Already renamed by an earlier call: libibverbs keeps its device
	 * structs from one list to the next. */
	for (i = 0; i < n; i++)
		if (!is_kept(list[i], kept, nkept) && list[i] == vdevs[d->vdev].phys &&
		    strcmp(list[i]->name, old_name) == 0)
			return list[i];
	return NULL;
}

/* Call under vdev_lock: make kept[k], described by info[k], the table. */
static void set_table(struct ibv_device **kept, const struct masq_device **info, int nkept)
{
	int k;

	memset(vdevs, 0, sizeof(vdevs));
	for (k = 0; k < nkept; k++) {
		vdevs[info[k]->vdev].phys = kept[k];
		vdevs[info[k]->vdev].info = *info[k];
		/* The name is what apps match -d against and print. */
		snprintf(kept[k]->name, sizeof(kept[k]->name), "%s", info[k]->vdev_name);
	}
}

int masq_vdev_select(struct ibv_device **list, int n, struct ibv_device **others)
{
	struct masq_device info[MASQ_MAX_VDEVS];
	const struct masq_device *kept_info[MASQ_MAX_VDEVS];
	struct ibv_device *kept[MASQ_MAX_VDEVS];
	int nv, nkept = 0, i, j;

	nv = masq_describe_devices(info, MASQ_MAX_VDEVS);
	if (nv < 0) {
		/* errno says why, as it did before: an app may read it after
		 * an empty ibv_get_device_list. */
		errno = -nv;
		/* Fail closed: without masqd there is no virtual device to show.
		 * The table stays: what an earlier list showed keeps its virtual
		 * GUIDs, and opens again once masqd is back. EPERM and EMFILE
		 * are masqd's answers to HELLO (a cgroup the backstop cannot
		 * filter, the endpoint's sessions used up): its log says why. */
		masq_log(errno == EPERM || errno == EMFILE
				 ? "masqd at %s refused this process: %s (its log says why)"
				 : "cannot reach masqd at %s: %s",
			 masq_socket_path(), strerror(errno));
	}
	pthread_mutex_lock(&vdev_lock);
	for (i = 0; i < nv; i++) {
		kept[nkept] = backing(list, n, &info[i], kept, nkept);
		if (kept[nkept])
			kept_info[nkept++] = &info[i];
		else if (n)
			masq_log("masqd serves %s on %s, which this process cannot see",
				 info[i].vdev_name, info[i].phys_dev_name);
	}
	if (nv >= 0)
		set_table(kept, kept_info, nkept);
	pthread_mutex_unlock(&vdev_lock);
	for (i = 0, j = 0; i < n; i++)
		if (!is_kept(list[i], kept, nkept))
			others[j++] = list[i];
	others[j] = NULL;
	for (i = 0; i < nkept; i++)
		list[i] = kept[i];
	list[nkept] = NULL;
	return nkept;
}

int masq_vdev_lookup(const struct ibv_device *phys, struct masq_device *out)
{
	int i, rc = -1;

	pthread_mutex_lock(&vdev_lock);
	for (i = 0; phys && i < MASQ_MAX_VDEVS && rc; i++)
		if (vdevs[i].phys == phys) {
			*out = vdevs[i].info;
			rc = 0;
		}
	pthread_mutex_unlock(&vdev_lock);
	return rc;
}
