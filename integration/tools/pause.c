/* The pod sandbox's process for the testbed's containerd (no registry is
 * reachable, so no registry.k8s.io/pause): as PID 1 of the pod it holds the
 * pod's namespaces, reaps the orphans it inherits and exits on SIGINT or
 * SIGTERM, which PID 1 would otherwise ignore. */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) {
		perror("pause: sigprocmask");
		return 1;
	}
	for (;;) {
		if (sigwait(&set, &sig) != 0)
			return 1;
		if (sig != SIGCHLD)
			return 0;
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
	}
}
