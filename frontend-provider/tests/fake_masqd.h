/* The fake masqd's socket for libmasq's unit tests: a SEQPACKET listener
 * at /tmp/masq-test-<name>.<pid>.sock, named by MASQ_SOCKET, and a thread
 * that serves it (given a pointer to the listening fd). */
#ifndef MASQ_TESTS_FAKE_MASQD_H
#define MASQ_TESTS_FAKE_MASQD_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct fake_masqd {
	struct sockaddr_un addr;
	int lfd;
	pthread_t thread;
};

/* 0, or -1 with the reason printed. */
static int fake_masqd_start(struct fake_masqd *m, const char *name, void *(*serve)(void *))
{
	m->addr = (struct sockaddr_un){ .sun_family = AF_UNIX };
	snprintf(m->addr.sun_path, sizeof(m->addr.sun_path), "/tmp/masq-test-%s.%d.sock", name,
		 (int)getpid());
	unlink(m->addr.sun_path);
	m->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (m->lfd < 0 || bind(m->lfd, (struct sockaddr *)&m->addr, sizeof(m->addr)) < 0 ||
	    listen(m->lfd, 4) < 0) {
		perror("fake masqd");
		return -1;
	}
	setenv("MASQ_SOCKET", m->addr.sun_path, 1);
	if (pthread_create(&m->thread, NULL, serve, &m->lfd)) {
		fprintf(stderr, "fake masqd: cannot start its thread\n");
		return -1;
	}
	return 0;
}

static void fake_masqd_remove(struct fake_masqd *m)
{
	unlink(m->addr.sun_path);
}

#endif
