/*
 * rogue_qp: an RC QP driven with plain libibverbs, the way a tenant that
 * skips libmasq would: it opens the physical device itself and connects to
 * whatever QPN and GID it is told, with no masqd in the loop.
 *
 *   rogue_qp DEVICE GID_INDEX [COUNT]
 *
 * Prints "QPN <n> GID <gid>", reads "<peer qpn> <peer gid>" from stdin,
 * connects, posts COUNT receives and COUNT 64-byte SENDs, and polls for up
 * to ~10 s. Prints "sent <ok> send_errors <n> (<status>) received <n>",
 * then keeps the QP until stdin reaches EOF.
 * Two instances pointed at each other move COUNT messages each way when
 * the path is open; the integration tests run it where masq must stop it.
 *
 * With ROGUE_TELL_MASQD=<endpoint socket> it also plays a hostile libmasq:
 * once its QP is at RTS (moved by itself), it opens a masqd session with
 * its own uverbs fd and posts QP_MOVED for INIT and RTS, as libmasq does
 * after moving a QP on its own fd, then waits for a reply to a QUERY_QP so
 * that masqd has read them. Prints "told masqd".
 *
 * With ROGUE_THREAD=qp the QP is created by a thread that exits before the
 * QP leaves RESET (the kernel then names no creator of the QP, only of its
 * PD); with ROGUE_THREAD=all the device is opened and the PD, MR, CQ and
 * QP are created by that thread (no creator of the QP, its PD or its
 * context is named: only the uverbs fd the process holds leads to it).
 * The main thread then moves the QP on the same fd (issue 51).
 * Exit: 0 ran to the end, 2 usage, 3 setup failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "masq_proto.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MSG 64
#define MAX_COUNT 64

static int fail(const char *what)
{
    perror(what);
    return 3;
}

static int send_fd(int sock, const void *msg, size_t len, int fd)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {(void *)msg, len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&ctl, 0, sizeof ctl);
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof ctl.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

/* The reply to the last request: its status (0 or -errno), or -EPROTO. */
static int reply_status(int sock)
{
    uint8_t buf[MASQ_MAX_MESSAGE];
    struct masq_hdr h;
    ssize_t n = recv(sock, buf, sizeof buf, 0);
    if (n <= 0 || masq_hdr_decode(buf, (size_t)n, &h))
        return -EPROTO;
    return h.status;
}

/* See ROGUE_TELL_MASQD above. 0, or -1 with the reason on stderr. */
static int tell_masqd(const char *path, struct ibv_context *ctx, struct ibv_qp *qp)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof sa)) {
        perror("rogue_qp: connect to masqd");
        return -1;
    }
    struct masq_msg_hello_req hello;
    masq_msg_hello_req_init(&hello);
    masq_hdr_set_request_id(&hello, 1);
    hello.body.features = MASQ_FEATURE_POSTED;
    masq_copy_name(hello.body.app_name, sizeof hello.body.app_name, "rogue_qp");
    struct masq_msg_open_device_req open;
    masq_msg_open_device_req_init(&open);
    masq_hdr_set_request_id(&open, 2);
    int err;
    if (send_fd(sock, &hello, sizeof hello, -1) || (err = reply_status(sock)) ||
        send_fd(sock, &open, sizeof open, ctx->cmd_fd) || (err = reply_status(sock))) {
        fprintf(stderr, "rogue_qp: masqd session: %s\n", strerror(errno));
        return -1;
    }
    uint8_t states[] = {IBV_QPS_INIT, IBV_QPS_RTS};
    for (unsigned i = 0; i < sizeof states; i++) {
        struct masq_msg_qp_moved_req m;
        masq_msg_qp_moved_req_init(&m);
        masq_hdr_set_request_id(&m, 3 + i);
        m.body.qp_handle = qp->handle;
        m.body.qp_num = qp->qp_num;
        m.body.qp_type = IBV_QPT_RC;
        m.body.attr_mask = IBV_QP_STATE;
        m.body.qp_state = states[i];
        if (send_fd(sock, &m, sizeof m, -1)) {
            perror("rogue_qp: QP_MOVED");
            return -1;
        }
    }
    /* Requests are read in order: once this is answered, so were those. */
    struct masq_msg_query_qp_req q;
    masq_msg_query_qp_req_init(&q);
    masq_hdr_set_request_id(&q, 9);
    q.body.qp_handle = qp->handle;
    q.body.attr_mask = IBV_QP_STATE;
    if (send_fd(sock, &q, sizeof q, -1) || (err = reply_status(sock)) != 0) {
        fprintf(stderr, "rogue_qp: QUERY_QP after QP_MOVED failed\n");
        return -1;
    }
    printf("told masqd\n");
    fflush(stdout);
    /* The session stays open (its QP record too) while the QP lives. */
    return 0;
}

/* What the QP needs, made by the main thread or by a thread that exits
 * (ROGUE_THREAD). */
struct setup {
    const char *name;
    struct ibv_device **list;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    int all; /* the thread opens the device too */
    int err; /* the thread's exit code, 0 if it made everything */
};

static char buf[2 * MAX_COUNT * MSG];

/* Opens the device and makes the PD, MR and CQ: 0, or an exit code. */
static int open_ctx(struct setup *st)
{
    int n = 0;
    st->list = ibv_get_device_list(&n);
    struct ibv_device *dev = NULL;
    for (int i = 0; st->list && i < n; i++)
        if (strcmp(ibv_get_device_name(st->list[i]), st->name) == 0)
            dev = st->list[i];
    if (!dev) {
        fprintf(stderr, "rogue_qp: no device %s\n", st->name);
        return 3;
    }
    st->ctx = ibv_open_device(dev);
    if (!st->ctx)
        return fail("ibv_open_device");
    st->pd = ibv_alloc_pd(st->ctx);
    st->mr = st->pd ? ibv_reg_mr(st->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
    st->cq = ibv_create_cq(st->ctx, 4 * MAX_COUNT, NULL, NULL, 0);
    if (!st->pd || !st->mr || !st->cq)
        return fail("pd/mr/cq");
    return 0;
}

static int create_qp(struct setup *st)
{
    struct ibv_qp_init_attr qia = {
        .send_cq = st->cq,
        .recv_cq = st->cq,
        .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = MAX_COUNT, .max_recv_wr = MAX_COUNT,
                .max_send_sge = 1, .max_recv_sge = 1},
    };
    st->qp = ibv_create_qp(st->pd, &qia);
    return st->qp ? 0 : fail("ibv_create_qp");
}

static void *setup_thread(void *arg)
{
    struct setup *st = arg;
    st->err = st->all ? open_ctx(st) : 0;
    if (!st->err)
        st->err = create_qp(st);
    return NULL;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: rogue_qp DEVICE GID_INDEX [COUNT]\n");
        return 2;
    }
    int gid_index = atoi(argv[2]);
    int count = argc == 4 ? atoi(argv[3]) : 8;
    if (count < 1 || count > MAX_COUNT) {
        fprintf(stderr, "rogue_qp: COUNT must be 1..%d\n", MAX_COUNT);
        return 2;
    }

    const char *thread = getenv("ROGUE_THREAD");
    struct setup st = {.name = argv[1]};
    if (thread && *thread && strcmp(thread, "qp") && strcmp(thread, "all")) {
        fprintf(stderr, "rogue_qp: ROGUE_THREAD must be qp or all\n");
        return 2;
    }
    st.all = thread && !strcmp(thread, "all");
    int err;
    if (!st.all && (err = open_ctx(&st)))
        return err;
    if (thread && *thread) {
        /* Joined: the thread has exited before the QP leaves RESET. */
        pthread_t t;
        if (pthread_create(&t, NULL, setup_thread, &st) || pthread_join(t, NULL))
            return fail("pthread");
        if (st.err)
            return st.err;
    } else if ((err = create_qp(&st))) {
        return err;
    }
    struct ibv_context *ctx = st.ctx;
    struct ibv_pd *pd = st.pd;
    struct ibv_mr *mr = st.mr;
    struct ibv_cq *cq = st.cq;
    struct ibv_qp *qp = st.qp;
    struct ibv_device **list = st.list;
    union ibv_gid gid;
    if (ibv_query_gid(ctx, 1, gid_index, &gid))
        return fail("ibv_query_gid");
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, gid.raw, text, sizeof text);
    printf("QPN %u GID %s\n", qp->qp_num, text);
    fflush(stdout);

    unsigned peer_qpn;
    char peer_text[64];
    union ibv_gid peer;
    if (scanf("%u %63s", &peer_qpn, peer_text) != 2 ||
        inet_pton(AF_INET6, peer_text, peer.raw) != 1) {
        fprintf(stderr, "rogue_qp: expected '<peer qpn> <peer gid>' on stdin\n");
        return 2;
    }

    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                  IBV_QP_ACCESS_FLAGS))
        return fail("modify INIT");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer_qpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = peer;
    a.ah_attr.grh.sgid_index = gid_index;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return fail("modify RTR");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14; /* ~67 ms per try */
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                  IBV_QP_MAX_QP_RD_ATOMIC))
        return fail("modify RTS");
    const char *tell = getenv("ROGUE_TELL_MASQD");
    if (tell && *tell && tell_masqd(tell, ctx, qp))
        return 3;

    for (int i = 0; i < count; i++) {
        struct ibv_sge sge = {(uintptr_t)(buf + i * MSG), MSG, mr->lkey};
        struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
        if (ibv_post_recv(qp, &wr, &bad))
            return fail("ibv_post_recv");
    }
    for (int i = 0; i < count; i++) {
        char *m = buf + (MAX_COUNT + i) * MSG;
        snprintf(m, MSG, "rogue message %d", i);
        struct ibv_sge sge = {(uintptr_t)m, MSG, mr->lkey};
        struct ibv_send_wr wr = {.wr_id = MAX_COUNT + i, .sg_list = &sge, .num_sge = 1,
                                 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
                           *bad;
        if (ibv_post_send(qp, &wr, &bad))
            return fail("ibv_post_send");
    }

    int sent = 0, send_errors = 0, received = 0;
    enum ibv_wc_status first_error = IBV_WC_SUCCESS;
    /* Long enough for the peer to answer late and for the retries
     * (7 x ~67 ms, longer under emulation) to run out. */
    double deadline = now() + 10;
    while (now() < deadline && (sent + send_errors < count || received < count)) {
        struct ibv_wc wc[16];
        int got = ibv_poll_cq(cq, 16, wc);
        if (got < 0)
            return fail("ibv_poll_cq");
        for (int i = 0; i < got; i++) {
            if (wc[i].wr_id >= MAX_COUNT) {
                if (wc[i].status == IBV_WC_SUCCESS) {
                    sent++;
                } else {
                    if (!send_errors)
                        first_error = wc[i].status;
                    send_errors++;
                }
            } else if (wc[i].status == IBV_WC_SUCCESS) {
                received++;
            }
        }
        if (!got) {
            struct timespec pause = {0, 1000000};
            nanosleep(&pause, NULL);
        }
    }
    printf("sent %d send_errors %d (%s) received %d\n", sent, send_errors,
           ibv_wc_status_str(first_error), received);
    fflush(stdout);
    /* Keep the QP until stdin closes, so a test can look at it alive. */
    while (getchar() != EOF)
        ;
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
    ibv_dereg_mr(mr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return 0;
}
