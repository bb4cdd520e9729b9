/* What the files of src/transport share and nothing else uses: the socket
 * primitives of conn.c and the watcher of reconnect.c. */
#ifndef MASQ_TRANSPORT_INTERNAL_H
#define MASQ_TRANSPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "transport.h"

/* Send one datagram, with pass_fd as SCM_RIGHTS unless it is -1. 0,
 * -errno, or -EPROTO when it was cut short. */
int masq_send_msg(int sock, const void *buf, size_t len, int pass_fd);

/*
 * Send a request and wait for the datagram answering it, skipping any
 * asynchronous notices that arrive first. Returns the reply's length in
 * buf (to be checked by the typed masq_msg_*_decode), or -errno. *sent
 * tells whether the request left (then masqd may have acted on it). A
 * descriptor the reply carries goes to *got_fd (-1 if none) when got_fd
 * is not NULL, else it is closed.
 */
ssize_t masq_roundtrip(int sock, uint32_t *next_id, void *req, size_t req_len, int pass_fd,
		       uint8_t buf[MASQ_MAX_MESSAGE], int *sent, int *got_fd);

/* The connection to masqd is gone (as opposed to a refused request). */
int masq_lost(ssize_t n);

/* Connect, HELLO naming vdev, OPEN_DEVICE with cmd_fd: a new session
 * socket, or -errno. */
int masq_open_session(const char *path, int cmd_fd, uint8_t vdev, uint32_t *next_id,
		      uint32_t *session_id, uint8_t *port, uint32_t *features);

/* Wake s's watcher (it polls the socket and an eventfd). */
void masq_wake_watcher(struct masq_session *s);

/* Start s's watcher thread. 0 or -errno. */
int masq_start_watcher(struct masq_session *s);

#endif
