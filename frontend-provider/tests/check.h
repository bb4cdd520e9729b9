/* Checks and the test runner shared by the unit tests: a failed check
 * prints where and why and marks the current test failed; run() counts. */
#ifndef MASQ_TESTS_CHECK_H
#define MASQ_TESTS_CHECK_H

#include <stdio.h>

static int passed, failed, cur_failed;

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "%s:%d: %s: check failed: %s\n", __FILE__, \
				__LINE__, __func__, #cond);                      \
			cur_failed = 1;                                          \
		}                                                                \
	} while (0)

#define CHECK_EQ(a, b)                                                           \
	do {                                                                     \
		long long a_ = (long long)(a), b_ = (long long)(b);              \
		if (a_ != b_) {                                                  \
			fprintf(stderr, "%s:%d: %s: %s = %lld, want %lld\n",     \
				__FILE__, __LINE__, __func__, #a, a_, b_);       \
			cur_failed = 1;                                          \
		}                                                                \
	} while (0)

/* Run one test; `setup` (may be NULL) runs first. */
static void run_with(const char *name, void (*setup)(void), void (*fn)(void))
{
	cur_failed = 0;
	if (setup)
		setup();
	fn();
	if (cur_failed) {
		failed++;
		printf("FAIL %s\n", name);
	} else {
		passed++;
		printf("ok   %s\n", name);
	}
}

#endif
