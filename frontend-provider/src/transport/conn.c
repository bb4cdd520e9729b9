/*
 * Talking to masqd: SOCK_SEQPACKET, one message per datagram, the uverbs fd
 * as SCM_RIGHTS with OPEN_DEVICE. Layouts and validation come from
 * include/masq_proto.h, generated from the protocol's single definition.
 * Here: connect, HELLO, one request and its reply, the CM's plain
 * connection, and logging.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"
#include "masq_proto.h"

const char *masq_socket_path(void)
{
	const char *p = getenv("MASQ_SOCKET");

	return p && *p ? p : MASQ_DEFAULT_SOCKET;
}

/* A connected socket, or -errno. */
static int connect_masqd(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	strcpy(addr.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

int masq_send_msg(int sock, const void *buf, size_t len, int pass_fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;
	ssize_t n;

	if (pass_fd >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof(ctl.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EPROTO;
}

/* Close every descriptor an SCM_RIGHTS message of mh carried, but hand the
 * first to *keep when keep is not NULL. */
static void take_fds(struct msghdr *mh, int *keep)
{
	struct cmsghdr *c;

	for (c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		size_t i, n;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (keep && *keep < 0)
				*keep = fd;
			else
				close(fd);
		}
	}
}

/*
 * Send a request and wait for the datagram answering it, skipping any
 * asynchronous notices that arrive first. Returns the reply's length in
 * buf (to be checked by the typed masq_msg_*_decode), or -errno. *sent
 * tells whether the request left (then masqd may have acted on it). A
 * descriptor the reply carries goes to *got_fd (-1 if none) when got_fd
 * is not NULL, else it is closed.
 */
ssize_t masq_roundtrip(int sock, uint32_t *next_id, void *req, size_t req_len, int pass_fd,
		       uint8_t buf[MASQ_MAX_MESSAGE], int *sent, int *got_fd)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = MASQ_MAX_MESSAGE };
	struct msghdr mh;
	struct masq_hdr hdr;
	uint32_t id = ++*next_id;
	ssize_t n;
	int err, fd;

	*sent = 0;
	if (got_fd)
		*got_fd = -1;
	masq_hdr_set_request_id(req, id);
	err = masq_send_msg(sock, req, req_len, pass_fd);
	if (err)
		return err;
	*sent = 1;
	for (;;) {
		memset(&mh, 0, sizeof(mh));
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof(ctl.buf);
		do
			n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		fd = -1;
		take_fds(&mh, &fd);
		err = masq_hdr_decode(buf, (size_t)n, &hdr);
		if (!err && masq_opcode_is_notice(hdr.opcode)) {
			if (fd >= 0)
				close(fd);
			continue; /* no notice needs the frontend's action yet */
		}
		if (!err && hdr.request_id != id)
			err = -EPROTO;
		if (err || !got_fd) {
			if (fd >= 0)
				close(fd);
			if (err)
				return err;
		} else {
			*got_fd = fd;
		}
		return n;
	}
}

/* The connection to masqd is gone (as opposed to a refused request). */
int masq_lost(ssize_t n)
{
	return n == -ECONNRESET || n == -EPIPE || n == -ENOTCONN || n == -ECONNREFUSED ||
	       n == -ECONNABORTED;
}

long masq_reconnect_wait_ms(void)
{
	const char *v = getenv("MASQ_RECONNECT_WAIT_MS");
	char *end;
	long ms;

	if (!v || !*v)
		return 10000;
	ms = strtol(v, &end, 10);
	return *end || ms < 0 ? 10000 : ms;
}

void masq_log(const char *fmt, ...)
{
	va_list ap;

	fputs("libmasq: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int masq_debug_on(void)
{
	const char *v = getenv("MASQ_DEBUG");

	return v && *v && strcmp(v, "0") != 0;
}

/* HELLO naming vdev, asking for `features`. 0 or -errno. */
static int hello(int sock, uint32_t *next_id, struct masq_msg_hello_reply *rep,
		 uint32_t features, uint8_t vdev)
{
	extern char *program_invocation_short_name;
	struct masq_msg_hello_req req;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;
	int sent;

	masq_msg_hello_req_init(&req);
	req.body.features = features;
	req.body.vdev = vdev;
	masq_copy_name(req.body.app_name, sizeof(req.body.app_name),
		       program_invocation_short_name);
	n = masq_roundtrip(sock, next_id, &req, sizeof(req), -1, buf, &sent, NULL);
	if (n < 0)
		return (int)n;
	return masq_msg_hello_reply_decode(buf, (size_t)n, rep);
}

/* OPEN_DEVICE, handing masqd cmd_fd (SCM_RIGHTS) after HELLO. 0 or
 * -errno. */
static int open_device(int sock, uint32_t *next_id, int cmd_fd)
{
	struct masq_msg_open_device_req req;
	struct masq_msg_open_device_reply rep;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;
	int sent;

	masq_msg_open_device_req_init(&req);
	n = masq_roundtrip(sock, next_id, &req, sizeof(req), cmd_fd, buf, &sent, NULL);
	return n < 0 ? (int)n : masq_msg_open_device_reply_decode(buf, (size_t)n, &rep);
}

static void fill_device(struct masq_device *out, uint8_t vdev, const struct masq_hello_reply *r)
{
	memset(out, 0, sizeof(*out));
	masq_copy_name(out->vdev_name, sizeof(out->vdev_name), r->vdev_name);
	masq_copy_name(out->phys_dev_name, sizeof(out->phys_dev_name), r->phys_dev_name);
	out->node_guid = r->node_guid;
	out->sys_image_guid = r->sys_image_guid;
	out->phys_port = r->phys_port;
	out->gid_count = r->gid_count;
	out->vdev = vdev;
	out->vdev_count = r->vdev_count ? r->vdev_count : 1;
}

/* HELLO naming vdev on a short-lived connection. 0 or -errno. */
static int describe_device(uint8_t vdev, struct masq_device *out)
{
	struct masq_msg_hello_reply rep;
	uint32_t id = 0;
	int sock, err;

	sock = connect_masqd(masq_socket_path());
	if (sock < 0)
		return sock;
	err = hello(sock, &id, &rep, 0, vdev);
	close(sock);
	if (!err)
		fill_device(out, vdev, &rep.body);
	return err;
}

int masq_describe_devices(struct masq_device *out, unsigned int max)
{
	unsigned int count, v, n = 1;
	int err = describe_device(0, &out[0]);

	if (err)
		return err;
	/* Only a masqd that counted more takes a non-zero vdev. */
	count = out[0].vdev_count;
	if (count > max) {
		masq_log("masqd serves %u devices; only the first %u are shown", count, max);
		count = max;
	}
	for (v = 1; v < count; v++) {
		err = describe_device((uint8_t)v, &out[n]);
		if (err)
			masq_log("masqd does not describe device %u: %s", v, strerror(-err));
		else
			n++;
	}
	return (int)n;
}

int masq_conn_open(struct masq_conn *c, int cmd_fd)
{
	struct masq_msg_hello_reply rep;
	int err;

	c->next_request = 0;
	c->fd = connect_masqd(masq_socket_path());
	if (c->fd < 0) {
		err = c->fd;
		c->fd = -1;
		return err;
	}
	/* The CM's requests name addresses, not a device: device 0, which
	 * every masqd takes. masqd serves them only once the device is open,
	 * so a process that opened none makes it hold nothing. */
	err = hello(c->fd, &c->next_request, &rep, 0, 0);
	if (!err)
		err = open_device(c->fd, &c->next_request, cmd_fd);
	if (err) {
		close(c->fd);
		c->fd = -1;
	}
	return err;
}

void masq_conn_close(struct masq_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

ssize_t masq_conn_call(struct masq_conn *c, void *req, size_t len, uint8_t buf[MASQ_MAX_MESSAGE],
		       int *got_fd)
{
	ssize_t n;
	int sent;

	if (got_fd)
		*got_fd = -1;
	if (c->fd < 0)
		return -ENOTCONN;
	n = masq_roundtrip(c->fd, &c->next_request, req, len, -1, buf, &sent, got_fd);
	if (n < 0 && masq_lost(n)) {
		masq_conn_close(c);
		return -ECONNRESET;
	}
	return n;
}

/* Connect, HELLO naming vdev, OPEN_DEVICE with cmd_fd: a new session
 * socket, or -errno. */
int masq_open_session(const char *path, int cmd_fd, uint8_t vdev, uint32_t *next_id,
		      uint32_t *session_id, uint8_t *port, uint32_t *features)
{
	struct masq_msg_hello_reply hrep;
	int sock, err;

	sock = connect_masqd(path);
	if (sock < 0)
		return sock;
	*next_id = 0;
	err = hello(sock, next_id, &hrep, MASQ_FEATURE_POSTED, vdev);
	if (!err) {
		*session_id = hrep.body.session_id;
		*features = hrep.body.features;
		*port = hrep.body.phys_port;
		err = open_device(sock, next_id, cmd_fd);
	}
	if (err) {
		close(sock);
		return err;
	}
	return sock;
}
