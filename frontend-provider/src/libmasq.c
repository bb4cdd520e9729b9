/*
 * libmasq.so: the masq frontend, preloaded into unmodified verbs apps.
 *
 * It interposes the libibverbs entry points that carry identity or
 * addresses and leaves everything else, above all post/poll, to the vendor
 * provider. The physical device is opened through stock libibverbs; its
 * uverbs fd goes to masqd, which answers device/GID queries with the
 * endpoint's virtual view and executes every QP change that carries an
 * address (and every move to RTR) itself.
 *
 * Only the public libibverbs API and <infiniband/verbs.h> are used.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/ah.h"
#include "cmd/qp.h"
#include "libmasq.h"
#include "masq_gid.h"
#include "masq_loader.h"
#include "masq_vdev.h"
#include "transport/transport.h"

#define IBVERBS_VERSION "IBVERBS_1.1"

/* One opened context = one masqd session. */
struct masq_ctx {
	struct ibv_context *ctx;
	struct masq_device dev; /* the virtual device it is */
	struct masq_session sess;
	struct masq_gid_view gt;
	int (*real_query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *, size_t);
	int (*real_query_device_ex)(struct ibv_context *, const struct ibv_query_device_ex_input *,
				    struct ibv_device_attr_ex *, size_t);
	struct masq_ctx *next;
};

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct masq_ctx *ctx_list;

static struct {
	struct ibv_device **(*get_device_list)(int *);
	void (*free_device_list)(struct ibv_device **);
	struct ibv_context *(*open_device)(struct ibv_device *);
	int (*close_device)(struct ibv_context *);
	int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
	int (*query_port)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *);
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
	int (*query_qp)(struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *);
	int (*destroy_qp)(struct ibv_qp *);
	struct ibv_ah *(*create_ah)(struct ibv_pd *, struct ibv_ah_attr *);
	int (*destroy_ah)(struct ibv_ah *);
	int (*init_ah_from_wc)(struct ibv_context *, uint8_t, struct ibv_wc *, struct ibv_grh *,
			       struct ibv_ah_attr *);
	int (*resolve_eth_l2_from_gid)(struct ibv_context *, struct ibv_ah_attr *, uint8_t *,
				       uint16_t *);
	__be64 (*get_device_guid)(struct ibv_device *);
} real;

static void *real_sym(const char *name, const char *version)
{
	void *p = masq_real_verb(name, version);

	if (!p) {
		/* Only libibverbs hands out the functions that call this. */
		masq_log("libibverbs is not loaded or has no %s", name);
		abort();
	}
	return p;
}

static pthread_once_t real_once = PTHREAD_ONCE_INIT;

/*
 * Set while this thread runs the provider's create_ah with the physical
 * attributes masqd gave: the provider calls public verbs (ibv_query_gid,
 * ibv_resolve_eth_l2_from_gid) through the PLT, and those calls must see
 * the physical device its attributes are about, not the app's view.
 */
static __thread int in_provider;

static void resolve_real(void)
{
	real.get_device_list = real_sym("ibv_get_device_list", IBVERBS_VERSION);
	real.free_device_list = real_sym("ibv_free_device_list", IBVERBS_VERSION);
	real.open_device = real_sym("ibv_open_device", IBVERBS_VERSION);
	real.close_device = real_sym("ibv_close_device", IBVERBS_VERSION);
	real.query_device = real_sym("ibv_query_device", IBVERBS_VERSION);
	real.query_port = real_sym("ibv_query_port", IBVERBS_VERSION);
	real.query_gid = real_sym("ibv_query_gid", IBVERBS_VERSION);
	real.modify_qp = real_sym("ibv_modify_qp", IBVERBS_VERSION);
	real.query_qp = real_sym("ibv_query_qp", IBVERBS_VERSION);
	real.destroy_qp = real_sym("ibv_destroy_qp", IBVERBS_VERSION);
	real.create_ah = real_sym("ibv_create_ah", IBVERBS_VERSION);
	real.destroy_ah = real_sym("ibv_destroy_ah", IBVERBS_VERSION);
	real.init_ah_from_wc = real_sym("ibv_init_ah_from_wc", IBVERBS_VERSION);
	real.resolve_eth_l2_from_gid = real_sym("ibv_resolve_eth_l2_from_gid", IBVERBS_VERSION);
	real.get_device_guid = real_sym("ibv_get_device_guid", IBVERBS_VERSION);
}

static void init_real(void)
{
	pthread_once(&real_once, resolve_real);
}

static struct masq_ctx *find_ctx(struct ibv_context *ctx)
{
	struct masq_ctx *m;

	pthread_mutex_lock(&ctx_lock);
	for (m = ctx_list; m && m->ctx != ctx; m = m->next)
		;
	pthread_mutex_unlock(&ctx_lock);
	return m;
}

struct masq_session *masq_session_of(struct ibv_context *ctx)
{
	struct masq_ctx *m = find_ctx(ctx);

	return m ? &m->sess : NULL;
}

unsigned int masq_ctx_ipv4s(struct ibv_context *ctx, in_addr_t *out, unsigned int max)
{
	static const uint8_t v4_mapped[12] = { [10] = 0xff, [11] = 0xff };
	struct masq_ctx *m = find_ctx(ctx);
	unsigned int i, n = 0;

	/* The table is set once, at open. */
	for (i = 0; m && i < m->gt.ngids && n < max; i++)
		if (memcmp(m->gt.gids[i].gid, v4_mapped, sizeof(v4_mapped)) == 0)
			memcpy(&out[n++], &m->gt.gids[i].gid[12], sizeof(*out));
	return n;
}

/* ------------------------------------------------------------ devices */

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list, **others;
	int n = 0;

	init_real();
	list = real.get_device_list(&n);
	if (!list)
		return NULL;
	others = calloc((size_t)n + 1, sizeof(*others));
	if (!others) {
		real.free_device_list(list);
		errno = ENOMEM;
		return NULL;
	}
	n = masq_vdev_select(list, n, others);
	/* Drop our references to every other device: the real free puts each
	 * device of the array it is given and frees that array. */
	real.free_device_list(others);
	if (num_devices)
		*num_devices = n;
	return list;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	struct masq_device d;

	init_real();
	if (masq_vdev_lookup(device, &d) == 0)
		return htobe64(d.node_guid);
	return real.get_device_guid(device);
}

/* ------------------------------------------------------------ context */

static int masq_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr,
			   size_t attr_size)
{
	struct masq_ctx *m = find_ctx(ctx);
	int rc;

	if (!m)
		return EINVAL;
	rc = m->real_query_port(ctx, port, attr, attr_size);
	if (rc == 0)
		attr->gid_tbl_len = (int)m->gt.len;
	return rc;
}

static void virtualize_device_attr(const struct masq_ctx *m, struct ibv_device_attr *attr)
{
	attr->node_guid = htobe64(m->dev.node_guid);
	attr->sys_image_guid = htobe64(m->dev.sys_image_guid);
}

static int masq_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
				struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct masq_ctx *m = find_ctx(ctx);
	int rc;

	if (!m)
		return EINVAL;
	rc = m->real_query_device_ex(ctx, in, attr, attr_size);
	if (rc == 0)
		virtualize_device_attr(m, &attr->orig_attr);
	return rc;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct verbs_context *vctx;
	struct ibv_context *ctx;
	struct masq_ctx *m;
	int err;

	init_real();
	m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	/* Only a device libmasq listed: masqd serves no other. */
	if (masq_vdev_lookup(device, &m->dev) != 0) {
		masq_log("refusing to open %s: not a device ibv_get_device_list listed",
			 device ? device->name : "(null)");
		free(m);
		errno = ENODEV;
		return NULL;
	}
	ctx = real.open_device(device);
	if (!ctx) {
		free(m);
		return NULL;
	}
	m->ctx = ctx;
	/* Both return -errno; err is the errno ibv_open_device sets. */
	err = -masq_session_open(&m->sess, ctx->cmd_fd, m->dev.vdev, 1);
	if (!err)
		err = -masq_query_gid_table(&m->sess, m->gt.gids, &m->gt.ngids);
	if (!err) {
		/* As long as the physical port's table, as the kernel shows it:
		 * the entries past the virtual GIDs are empty ones. */
		struct ibv_port_attr pa;

		memset(&pa, 0, sizeof(pa));
		m->gt.port = m->sess.port;
		if (real.query_port(ctx, m->sess.port, (struct _compat_ibv_port_attr *)&pa))
			pa.gid_tbl_len = 0;
		masq_gid_view_set_len(&m->gt, pa.gid_tbl_len);
	}
	if (err) {
		masq_log("masqd refused the device: %s", strerror(err));
		masq_session_close(&m->sess);
		free(m);
		real.close_device(ctx);
		errno = err;
		return NULL;
	}
	/* Port and extended device queries go through the context's op table
	 * (inline helpers in verbs.h), so they are patched there. */
	vctx = verbs_get_ctx(ctx);
	if (vctx) {
		if (vctx->query_port) {
			m->real_query_port = vctx->query_port;
			vctx->query_port = masq_query_port;
		}
		if (verbs_get_ctx_op(ctx, query_device_ex)) {
			m->real_query_device_ex = vctx->query_device_ex;
			vctx->query_device_ex = masq_query_device_ex;
		}
	}
	pthread_mutex_lock(&ctx_lock);
	m->next = ctx_list;
	ctx_list = m;
	pthread_mutex_unlock(&ctx_lock);
	return ctx;
}

int ibv_close_device(struct ibv_context *ctx)
{
	struct masq_ctx **pp, *m = NULL;

	init_real();
	pthread_mutex_lock(&ctx_lock);
	for (pp = &ctx_list; *pp; pp = &(*pp)->next)
		if ((*pp)->ctx == ctx) {
			m = *pp;
			*pp = m->next;
			break;
		}
	pthread_mutex_unlock(&ctx_lock);
	if (m) {
		masq_session_close(&m->sess);
		free(m);
	}
	return real.close_device(ctx);
}

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	struct masq_ctx *m;
	int rc;

	init_real();
	rc = real.query_device(ctx, attr);
	m = find_ctx(ctx);
	if (rc == 0 && m)
		virtualize_device_attr(m, attr);
	return rc;
}

/* The exported (compat) entry point; verbs.h's inline normally calls the
 * op-table function patched above. Its struct is a prefix of
 * struct ibv_port_attr, which is where gid_tbl_len sits. */
#undef ibv_query_port
int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *cattr);
int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *cattr)
{
	struct ibv_port_attr *attr = (struct ibv_port_attr *)cattr;
	struct masq_ctx *m;
	int rc;

	init_real();
	rc = real.query_port(ctx, port, cattr);
	m = find_ctx(ctx);
	if (rc == 0 && m)
		attr->gid_tbl_len = (int)m->gt.len;
	return rc;
}

/* ------------------------------------------------------------ GIDs */

/* The virtual table's answers are masq_gid.c's, shaped like the kernel's. */

int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	struct masq_ctx *m;

	init_real();
	m = find_ctx(ctx);
	if (!m || in_provider)
		return real.query_gid(ctx, port, index, gid);
	return masq_gid_query(&m->gt, port, index, gid);
}

int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);
int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	int (*real_ex)(struct ibv_context *, uint32_t, uint32_t, struct ibv_gid_entry *, uint32_t,
		       size_t);
	struct masq_ctx *m = find_ctx(ctx);

	if (!m || in_provider) {
		real_ex = real_sym("_ibv_query_gid_ex", "IBVERBS_1.11");
		return real_ex(ctx, port, index, entry, flags, entry_size);
	}
	return masq_gid_query_ex(&m->gt, port, index, entry, flags, entry_size);
}

ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size);
ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	ssize_t (*real_tbl)(struct ibv_context *, struct ibv_gid_entry *, size_t, uint32_t,
			    size_t);
	struct masq_ctx *m = find_ctx(ctx);

	if (!m) {
		real_tbl = real_sym("_ibv_query_gid_table", "IBVERBS_1.11");
		return real_tbl(ctx, entries, max_entries, flags, entry_size);
	}
	return masq_gid_query_table(&m->gt, entries, max_entries, flags, entry_size);
}

/*
 * rdma-core's private helper, used by ibv_devinfo to print GID types and by
 * providers. It lives in libibverbs' private ABI, whose version
 * (IBVERBS_PRIVATE_<n>) follows the rdma-core release, and an image's app
 * binds the version of the image's rdma-core, not the build host's. So it
 * is exported under every private ABI rdma-core has used since release 22
 * and the next ones, none as the default: nothing links against libmasq.
 */
int masq_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index,
			unsigned int *type);
int masq_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index,
			unsigned int *type)
{
	int (*real_type)(struct ibv_context *, uint8_t, unsigned int, unsigned int *);
	struct masq_ctx *m = find_ctx(ctx);

	if (!m || in_provider) {
		real_type = real_sym("ibv_query_gid_type", NULL);
		return real_type(ctx, port, index, type);
	}
	return masq_gid_query_type(&m->gt, port, index, type);
}

#define GID_TYPE_AT_PABI(n)                                                                     \
	__asm__(".symver masq_query_gid_type_" #n ", ibv_query_gid_type@IBVERBS_PRIVATE_" #n); \
	int masq_query_gid_type_##n(struct ibv_context *, uint8_t, unsigned int, unsigned int *) \
		__attribute__((alias("masq_query_gid_type")));
GID_TYPE_AT_PABI(22) GID_TYPE_AT_PABI(23) GID_TYPE_AT_PABI(24) GID_TYPE_AT_PABI(25)
GID_TYPE_AT_PABI(26) GID_TYPE_AT_PABI(27) GID_TYPE_AT_PABI(28) GID_TYPE_AT_PABI(29)
GID_TYPE_AT_PABI(30) GID_TYPE_AT_PABI(31) GID_TYPE_AT_PABI(32) GID_TYPE_AT_PABI(33)
GID_TYPE_AT_PABI(34) GID_TYPE_AT_PABI(35) GID_TYPE_AT_PABI(36) GID_TYPE_AT_PABI(37)
GID_TYPE_AT_PABI(38) GID_TYPE_AT_PABI(39) GID_TYPE_AT_PABI(40) GID_TYPE_AT_PABI(41)
GID_TYPE_AT_PABI(42) GID_TYPE_AT_PABI(43) GID_TYPE_AT_PABI(44) GID_TYPE_AT_PABI(45)
GID_TYPE_AT_PABI(46) GID_TYPE_AT_PABI(47) GID_TYPE_AT_PABI(48) GID_TYPE_AT_PABI(49)
GID_TYPE_AT_PABI(50) GID_TYPE_AT_PABI(51) GID_TYPE_AT_PABI(52) GID_TYPE_AT_PABI(53)
GID_TYPE_AT_PABI(54) GID_TYPE_AT_PABI(55) GID_TYPE_AT_PABI(56) GID_TYPE_AT_PABI(57)
GID_TYPE_AT_PABI(58) GID_TYPE_AT_PABI(59) GID_TYPE_AT_PABI(60) GID_TYPE_AT_PABI(61)
GID_TYPE_AT_PABI(62) GID_TYPE_AT_PABI(63) GID_TYPE_AT_PABI(64)

/* ------------------------------------------------------------ QPs */

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	struct masq_ctx *m;
	int err;

	init_real();
	m = find_ctx(qp->context);
	if (!m)
		return real.modify_qp(qp, attr, attr_mask);
	if (masq_modify_is_local(&m->sess, attr, attr_mask)) {
		/* No address: the provider runs it on the app's fd (as the app
		 * could itself); masqd hears of it without a reply. */
		err = real.modify_qp(qp, attr, attr_mask);
		if (!err)
			masq_qp_moved(&m->sess, qp, attr, attr_mask);
		return err;
	}
	err = masq_modify_qp(&m->sess, qp, attr, attr_mask);
	if (err) {
		errno = err;
		return err;
	}
	if (attr_mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr)
{
	struct masq_ctx *m;
	int err;

	init_real();
	m = find_ctx(qp->context);
	if (!m)
		return real.query_qp(qp, attr, attr_mask, init_attr);
	/* init_attr and the capabilities come from the provider; every
	 * address comes from masqd, which translates them back to virtual. */
	err = real.query_qp(qp, attr, attr_mask, init_attr);
	if (err)
		return err;
	err = masq_query_qp(&m->sess, qp, attr, attr_mask);
	if (err) {
		memset(&attr->ah_attr, 0, sizeof(attr->ah_attr));
		memset(&attr->alt_ah_attr, 0, sizeof(attr->alt_ah_attr));
		errno = err;
		return err;
	}
	qp->state = attr->qp_state;
	return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct ibv_context *ctx = qp->context;
	uint32_t handle = qp->handle, qpn = qp->qp_num;
	struct masq_ctx *m;
	int rc;

	init_real();
	rc = real.destroy_qp(qp);
	m = find_ctx(ctx);
	if (rc == 0 && m)
		masq_destroy_qp(&m->sess, handle, qpn);
	return rc;
}

/* ------------------------------------------------------------ UD AHs */

/*
 * masqd translates the virtual destination and admits it; the provider
 * then builds its AH (in the app's memory, and the kernel's) from the
 * physical attributes; masqd learns the kernel handle to track it.
 */
struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct ibv_ah_attr phys;
	struct masq_ctx *m;
	struct ibv_ah *ah;
	uint32_t ah_id;
	int err;

	init_real();
	m = find_ctx(pd->context);
	if (!m)
		return real.create_ah(pd, attr);
	err = masq_create_ah_admit(&m->sess, attr, &phys, &ah_id);
	if (err) {
		errno = err;
		return NULL;
	}
	in_provider = 1;
	ah = real.create_ah(pd, &phys);
	err = errno;
	in_provider = 0;
	if (!ah) {
		errno = err ? err : EIO;
		return NULL;
	}
	err = masq_bind_ah(&m->sess, ah_id, ah->handle, attr);
	if (err) {
		real.destroy_ah(ah);
		errno = err;
		return NULL;
	}
	return ah;
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
	struct ibv_context *ctx = ah->context;
	uint32_t handle = ah->handle;
	struct masq_ctx *m;
	int rc;

	init_real();
	rc = real.destroy_ah(ah);
	m = find_ctx(ctx);
	if (rc == 0 && m)
		masq_destroy_ah(&m->sess, handle);
	return rc;
}

/*
 * Inside the provider's create_ah (in_provider) the destination MAC of the
 * physical next hop cannot be resolved here: the app's network namespace
 * has no underlay. The kernel resolves it itself when it creates the AH
 * (rdma_create_user_ah), and rxe sends by the kernel's AH, so the user
 * copy stays zero. Apps calling it themselves get their vNIC's answer.
 */
int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
				uint8_t eth_mac[6], uint16_t *vid)
{
	init_real();
	if (in_provider && find_ctx(context)) {
		memset(eth_mac, 0, 6);
		if (vid)
			*vid = 0xffff; /* no VLAN */
		return 0;
	}
	return real.resolve_eth_l2_from_gid(context, attr, eth_mac, vid);
}

/* A received packet's GRH holds the sending host's physical address:
 * masqd names the sender's endpoint instead (its virtual GID). */
int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
			struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)
{
	struct masq_grh_info g;
	struct masq_ctx *m;
	int err;

	init_real();
	m = find_ctx(context);
	if (!m)
		return real.init_ah_from_wc(context, port_num, wc, grh, ah_attr);
	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port_num;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0; /* RoCE always has one; nothing to translate without */
	err = masq_parse_grh(grh, &g);
	if (!err)
		err = masq_resolve_grh(&m->sess, wc->src_qp, &g, ah_attr->grh.dgid.raw,
				       &ah_attr->grh.sgid_index);
	if (err) {
		memset(&ah_attr->grh, 0, sizeof(ah_attr->grh));
		errno = err;
		return -1;
	}
	ah_attr->is_global = 1;
	ah_attr->grh.flow_label = g.flow_label;
	ah_attr->grh.hop_limit = g.hop_limit;
	ah_attr->grh.traffic_class = g.traffic_class;
	return 0;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
				     uint8_t port_num)
{
	struct ibv_ah_attr attr;

	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr))
		return NULL;
	return ibv_create_ah(pd, &attr);
}

/* Multicast groups are not virtualized: a physical group would join the
 * tenant to the underlay's multicast, outside its VPC. */
int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	int (*real_attach)(struct ibv_qp *, const union ibv_gid *, uint16_t);

	init_real();
	if (find_ctx(qp->context)) {
		masq_log("ibv_attach_mcast refused: multicast is not virtualized by masq");
		errno = ENOSYS;
		return ENOSYS;
	}
	real_attach = real_sym("ibv_attach_mcast", IBVERBS_VERSION);
	return real_attach(qp, gid, lid);
}

/* A context imported from a uverbs fd was never opened through masqd, so
 * nothing would translate or admit its QPs. PDs, MRs and DMs are imported
 * into a context the app already holds, which can only be one masqd opened,
 * so ibv_import_pd/_mr/_dm stay the provider's. */
struct ibv_context *ibv_import_device(int cmd_fd)
{
	masq_log("ibv_import_device(fd %d) refused: a context masqd did not open would bypass "
		 "it; open the device from ibv_get_device_list",
		 cmd_fd);
	errno = EOPNOTSUPP;
	return NULL;
}
