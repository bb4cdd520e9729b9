/* The CM's verbs, looked up at run time (libibverbs is not linked), and
 * its device: opened once for the process, with its depth limits. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>

#include "internal.h"
#include "masq_loader.h"

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

/* Like librdmacm's cma_dev: opened once, kept for the process. */
pthread_mutex_t masq_cm_dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_context *dev_ctx;
static struct ibv_pd *dev_pd;
static uint8_t dev_max_rd_atom = 1, dev_max_init_rd_atom = 1;

void masq_cm_set_device(struct ibv_context *ctx, struct ibv_pd *pd, uint8_t max_rd_atom,
			uint8_t max_init_rd_atom)
{
	pthread_mutex_lock(&masq_cm_dev_lock);
	dev_ctx = ctx;
	dev_pd = pd;
	dev_max_rd_atom = max_rd_atom;
	dev_max_init_rd_atom = max_init_rd_atom;
	pthread_mutex_unlock(&masq_cm_dev_lock);
}

/* The masq virtual device (libmasq's own ibv_get_device_list and
 * ibv_open_device), or NULL with errno set. */
struct ibv_context *masq_cm_device(void)
{
	struct ibv_device_attr attr;
	struct ibv_device **list;
	struct ibv_context *ctx;
	int n = 0;

	pthread_mutex_lock(&masq_cm_dev_lock);
	if (dev_ctx) {
		ctx = dev_ctx;
		pthread_mutex_unlock(&masq_cm_dev_lock);
		return ctx;
	}
	if (masq_cm_have_verbs()) {
		pthread_mutex_unlock(&masq_cm_dev_lock);
		return NULL;
	}
	list = ibv_get_device_list(&n);
	if (!list) {
		pthread_mutex_unlock(&masq_cm_dev_lock);
		return NULL;
	}
	ctx = n > 0 ? ibv_open_device(list[0]) : NULL;
	if (n <= 0)
		errno = ENODEV;
	masq_cm_vb.free_device_list(list);
	if (ctx) {
		if (ibv_query_device(ctx, &attr) == 0) {
			dev_max_rd_atom = (uint8_t)(attr.max_qp_rd_atom > 0xfe ? 0xfe
							   : attr.max_qp_rd_atom);
			dev_max_init_rd_atom = (uint8_t)(attr.max_qp_init_rd_atom > 0xfe
								? 0xfe
								: attr.max_qp_init_rd_atom);
		}
		dev_ctx = ctx;
	}
	pthread_mutex_unlock(&masq_cm_dev_lock);
	return ctx;
}

/* The default PD of the CM device, for QPs created without one. */
struct ibv_pd *masq_cm_default_pd(void)
{
	struct ibv_context *ctx = masq_cm_device();
	struct ibv_pd *pd;

	if (!ctx)
		return NULL;
	pthread_mutex_lock(&masq_cm_dev_lock);
	if (!dev_pd)
		dev_pd = masq_cm_vb.alloc_pd(ctx);
	pd = dev_pd;
	pthread_mutex_unlock(&masq_cm_dev_lock);
	return pd;
}

void masq_cm_device_limits(uint8_t *rd_atom, uint8_t *init_rd_atom)
{
	pthread_mutex_lock(&masq_cm_dev_lock);
	*rd_atom = dev_max_rd_atom;
	*init_rd_atom = dev_max_init_rd_atom;
	pthread_mutex_unlock(&masq_cm_dev_lock);
}
