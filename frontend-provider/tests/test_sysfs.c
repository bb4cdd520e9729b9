/*
 * masq_sysfs_setup: SYSFS_PATH points at the physical sysfs beside the
 * endpoint's socket only when a sysfs is mounted there and nobody set it.
 * The machine's /sys, reached through a symlink, stands in for the mount.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "masq_sysfs.h"
#include "check.h"

static char dir[] = "/tmp/masq-sysfs-XXXXXX";
static char phys[256], sock[256];

static void reset(void)
{
	unsetenv("SYSFS_PATH");
	unlink(phys);
	rmdir(phys);
}

static void test_a_mounted_sysfs_is_used(void)
{
	CHECK(symlink("/sys", phys) == 0);
	CHECK_EQ(masq_sysfs_setup(), 1);
	CHECK(getenv("SYSFS_PATH") && strcmp(getenv("SYSFS_PATH"), phys) == 0);
}

static void test_an_empty_mount_point_is_not(void)
{
	CHECK(mkdir(phys, 0755) == 0);
	CHECK_EQ(masq_sysfs_setup(), 0);
	CHECK(getenv("SYSFS_PATH") == NULL);
	rmdir(phys);
	CHECK_EQ(masq_sysfs_setup(), 0);
	CHECK(getenv("SYSFS_PATH") == NULL);
}

static void test_a_set_sysfs_path_is_kept(void)
{
	CHECK(symlink("/sys", phys) == 0);
	setenv("SYSFS_PATH", "/elsewhere", 1);
	CHECK_EQ(masq_sysfs_setup(), 0);
	CHECK(strcmp(getenv("SYSFS_PATH"), "/elsewhere") == 0);
}

static void test_odd_socket_paths(void)
{
	setenv("MASQ_SOCKET", "masq.sock", 1); /* no directory */
	CHECK_EQ(masq_sysfs_setup(), 0);
	static char longp[8192];
	memset(longp, 'a', sizeof(longp) - 1);
	longp[0] = '/';
	longp[5000] = '/';
	setenv("MASQ_SOCKET", longp, 1);
	CHECK_EQ(masq_sysfs_setup(), 0);
	CHECK(getenv("SYSFS_PATH") == NULL);
	setenv("MASQ_SOCKET", sock, 1);
}

int main(void)
{
	/* The constructor already ran with the caller's environment. */
	unsetenv("SYSFS_PATH");
	if (!mkdtemp(dir)) {
		perror("test_sysfs: mkdtemp");
		return 1;
	}
	snprintf(phys, sizeof(phys), "%s/%s", dir, MASQ_PHYS_SYSFS_DIR);
	snprintf(sock, sizeof(sock), "%s/masq.sock", dir);
	setenv("MASQ_SOCKET", sock, 1);

	run_with("a_mounted_sysfs_is_used", reset, test_a_mounted_sysfs_is_used);
	run_with("an_empty_mount_point_is_not", reset, test_an_empty_mount_point_is_not);
	run_with("a_set_sysfs_path_is_kept", reset, test_a_set_sysfs_path_is_kept);
	run_with("odd_socket_paths", reset, test_odd_socket_paths);

	reset();
	rmdir(dir);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
