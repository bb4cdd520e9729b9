/* The CM's verbs, looked up at run time (libibverbs is not linked), and
 * its devices: opened once for the process, with their depth limits. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "masq_loader.h"
#include "masq_vdev.h"

struct masq_cm_verbs masq_cm_vb;

static pthread_once_t vb_once = PTHREAD_ONCE_INIT;

/* As the app sees it: a verb libmasq ever interposes is then libmasq's. */
static void *verb(const char *name)
{
	void *p = masq_app_verb(name);

	if (!p)
		masq_cm_vb.ok = 0;
	return p;
}

static void resolve_verbs(void)
{
	masq_cm_vb.ok = 1;
	masq_cm_vb.alloc_pd = verb("ibv_alloc_pd");
	masq_cm_vb.create_comp_channel = verb("ibv_create_comp_channel");
	masq_cm_vb.destroy_comp_channel = verb("ibv_destroy_comp_channel");
	masq_cm_vb.create_cq = verb("ibv_create_cq");
	masq_cm_vb.destroy_cq = verb("ibv_destroy_cq");
	masq_cm_vb.create_qp = verb("ibv_create_qp");
	masq_cm_vb.free_device_list = verb("ibv_free_device_list");
}

int masq_cm_have_verbs(void)
{
	pthread_once(&vb_once, resolve_verbs);
	if (!masq_cm_vb.ok)
		return fail(ENOSYS);
	return 0;
}

/* ibv_create_qp_ex (an inline of verbs.h) without linking libibverbs. */
struct ibv_qp *masq_cm_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
	struct verbs_context *vctx;

	if (attr->comp_mask == IBV_QP_INIT_ATTR_PD)
		return masq_cm_vb.create_qp(attr->pd, (struct ibv_qp_init_attr *)attr);
	vctx = verbs_get_ctx_op(ctx, create_qp_ex);
	if (!vctx) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return vctx->create_qp_ex(ctx, attr);
}

/*
 * Like librdmacm's cma_dev list: every device opened on first use and kept
 * for the process. An id uses the device whose GID table holds its local
 * address, as the kernel's CM picks the device an address is on.
 */
struct cm_dev {
	struct ibv_context *ctx;
	uint8_t vdev;	   /* the virtual device it is, the N of vrdmaN */
	struct ibv_pd *pd; /* the default PD, allocated on first use */
	uint8_t max_rd_atom, max_init_rd_atom;
	in_addr_t vips[MASQ_MAX_GIDS]; /* its GID table's IPv4 addresses */
	unsigned int nvips;
};

pthread_mutex_t masq_cm_dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cm_dev devs[MASQ_MAX_VDEVS];
static int ndevs; /* 0 until opened */

void masq_cm_add_device(struct ibv_context *ctx, struct ibv_pd *pd, uint8_t max_rd_atom,
			uint8_t max_init_rd_atom, in_addr_t vip)
{
	pthread_mutex_lock(&masq_cm_dev_lock);
	if (ndevs < MASQ_MAX_VDEVS) {
		devs[ndevs] = (struct cm_dev){ .ctx = ctx,
					       .vdev = (uint8_t)ndevs,
					       .pd = pd,
					       .max_rd_atom = max_rd_atom,
					       .max_init_rd_atom = max_init_rd_atom,
					       .vips = { vip },
					       .nvips = 1 };
		ndevs++;
	}
	pthread_mutex_unlock(&masq_cm_dev_lock);
}

static uint8_t clamp_depth(int v)
{
	return (uint8_t)(v > 0xfe ? 0xfe : v);
}

/* Call under masq_cm_dev_lock: open dev as the next device. 0, or -1 with
 * errno. */
static int open_one(struct ibv_device *dev)
{
	struct cm_dev *d = &devs[ndevs];
	struct ibv_device_attr attr;
	struct masq_session *s;

	memset(d, 0, sizeof(*d));
	d->ctx = ibv_open_device(dev);
	if (!d->ctx)
		return -1;
	s = masq_session_of(d->ctx);
	d->vdev = s ? s->vdev : (uint8_t)ndevs;
	d->max_rd_atom = d->max_init_rd_atom = 1;
	if (ibv_query_device(d->ctx, &attr) == 0) {
		d->max_rd_atom = clamp_depth(attr.max_qp_rd_atom);
		d->max_init_rd_atom = clamp_depth(attr.max_qp_init_rd_atom);
	}
	d->nvips = masq_ctx_ipv4s(d->ctx, d->vips, MASQ_MAX_GIDS);
	ndevs++;
	return 0;
}

/* Call under masq_cm_dev_lock: open the masq virtual devices (libmasq's
 * own ibv_get_device_list and ibv_open_device) unless open. 0, or -1 with
 * errno set. */
static int open_devices(void)
{
	struct ibv_device **list;
	int n = 0, i, err = ENODEV;

	if (ndevs)
		return 0;
	if (masq_cm_have_verbs())
		return -1;
	list = ibv_get_device_list(&n);
	if (!list)
		return -1;
	for (i = 0; i < n && ndevs < MASQ_MAX_VDEVS; i++) {
		if (open_one(list[i]) != 0) {
			err = errno;
			masq_log("RDMA CM: cannot open %s: %s", list[i]->name, strerror(err));
		} else {
			err = 0;
		}
	}
	masq_cm_vb.free_device_list(list);
	return ndevs ? 0 : fail(err);
}

/* Call under masq_cm_dev_lock: ctx's device, or NULL. */
static struct cm_dev *dev_of(const struct ibv_context *ctx)
{
	int i;

	for (i = 0; ctx && i < ndevs; i++)
		if (devs[i].ctx == ctx)
			return &devs[i];
	return NULL;
}

/* Call under masq_cm_dev_lock, the devices open: the one holding addr,
 * else device 0 (also for 0.0.0.0, which none holds). */
static struct cm_dev *dev_holding(in_addr_t addr)
{
	unsigned int j;
	int i;

	for (i = 0; i < ndevs; i++)
		for (j = 0; j < devs[i].nvips; j++)
			if (devs[i].vips[j] == addr)
				return &devs[i];
	return &devs[0];
}

struct ibv_context *masq_cm_device(in_addr_t addr)
{
	struct ibv_context *ctx = NULL;

	pthread_mutex_lock(&masq_cm_dev_lock);
	if (open_devices() == 0)
		ctx = dev_holding(addr)->ctx;
	pthread_mutex_unlock(&masq_cm_dev_lock);
	return ctx;
}

/* Device 0's uverbs file, opened with open(2) for the CM connection's
 * OPEN_DEVICE while the app has opened no device through the CM: opening
 * them (ibv_open_device) at the first CM call would hand a child forked
 * after it the parent's contexts, whose verbs sessions are the parent's,
 * so masqd would refuse the child's accept (its ids are the child's). A
 * child keeps this file: masqd asks only that it be the device's. */
static int own_fd = -1;

/* Call under masq_cm_dev_lock: open own_fd. 0, or -1 with errno set. */
static int open_own_fd(void)
{
	struct ibv_device **list;
	struct masq_device info;
	char path[64 + sizeof(list[0]->dev_name)];
	int n = 0, i, err = ENODEV;

	if (masq_cm_have_verbs())
		return -1;
	list = ibv_get_device_list(&n);
	if (!list)
		return -1;
	for (i = 0; i < n && own_fd < 0; i++) {
		if (masq_vdev_lookup(list[i], &info) != 0 || info.vdev != 0)
			continue;
		snprintf(path, sizeof(path), "/dev/infiniband/%s", list[i]->dev_name);
		own_fd = open(path, O_RDWR | O_CLOEXEC);
		if (own_fd < 0)
			err = errno;
	}
	masq_cm_vb.free_device_list(list);
	return own_fd >= 0 ? 0 : fail(err);
}

int masq_cm_device_fd(void)
{
	int i, fd = -1, err = ENODEV;

	pthread_mutex_lock(&masq_cm_dev_lock);
	for (i = 0; i < ndevs && fd < 0; i++)
		if (devs[i].vdev == 0)
			fd = devs[i].ctx->cmd_fd;
	if (fd < 0 && own_fd < 0 && open_own_fd() != 0)
		err = errno;
	if (fd < 0)
		fd = own_fd;
	pthread_mutex_unlock(&masq_cm_dev_lock);
	return fd >= 0 ? fd : fail(err);
}

int masq_cm_devices(struct ibv_context **out, int max)
{
	int i = 0;

	pthread_mutex_lock(&masq_cm_dev_lock);
	if (open_devices() == 0)
		for (; i < ndevs && i < max; i++)
			out[i] = devs[i].ctx;
	pthread_mutex_unlock(&masq_cm_dev_lock);
	return i;
}

struct ibv_pd *masq_cm_default_pd(struct ibv_context *ctx)
{
	struct cm_dev *d;
	struct ibv_pd *pd = NULL;

	pthread_mutex_lock(&masq_cm_dev_lock);
	d = dev_of(ctx);
	if (d && !d->pd)
		d->pd = masq_cm_vb.alloc_pd(ctx);
	if (d)
		pd = d->pd;
	else
		errno = ENODEV;
	pthread_mutex_unlock(&masq_cm_dev_lock);
	return pd;
}

void masq_cm_device_limits(const struct ibv_context *ctx, uint8_t *rd_atom, uint8_t *init_rd_atom)
{
	struct cm_dev *d;

	pthread_mutex_lock(&masq_cm_dev_lock);
	d = dev_of(ctx);
	*rd_atom = d ? d->max_rd_atom : 1;
	*init_rd_atom = d ? d->max_init_rd_atom : 1;
	pthread_mutex_unlock(&masq_cm_dev_lock);
}
