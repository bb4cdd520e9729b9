/* The wire's IPv4 socket address <-> struct sockaddr_in. */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <string.h>

#include "internal.h"

void masq_cm_addr_to_wire(struct masq_cm_addr *w, const struct sockaddr_in *sin)
{
	memset(w, 0, sizeof(*w));
	memcpy(w->addr, &sin->sin_addr.s_addr, sizeof(w->addr));
	w->port = ntohs(sin->sin_port);
}

void masq_cm_addr_from_wire(struct sockaddr_in *sin, const struct masq_cm_addr *w)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	memcpy(&sin->sin_addr.s_addr, w->addr, sizeof(w->addr));
	sin->sin_port = htons(w->port);
}
