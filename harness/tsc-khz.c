// SPDX-License-Identifier: GPL-2.0
/*
 * tsc-khz: print this host's TSC rate in kHz, measured.
 *
 * Under TCG a guest's TSC is the host's own counter, so the host's rate
 * is the guest's.  A kernel that calibrates its TSC against the emulated
 * PIT fails when the host is busy ("tsc: Unable to calibrate against
 * PIT"), and Debian's 7.3 then never gets a tick on microvm (no HPET, no
 * PM timer).  Every TCG guest is told the rate instead (harness/clock.py).
 *
 * The rate is counted against CLOCK_MONOTONIC_RAW over a few short
 * intervals; the median of them is printed, rounded to a MHz so that a
 * measurement's noise does not change the guest's command line.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

#define SAMPLES 5
#define INTERVAL_NS 40000000L

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double one_sample_khz(void)
{
	struct timespec wait = { 0, INTERVAL_NS };
	int64_t t0 = now_ns();
	uint64_t c0 = __rdtsc();
	int64_t t1;
	uint64_t c1;

	nanosleep(&wait, NULL);
	t1 = now_ns();
	c1 = __rdtsc();
	return (double)(c1 - c0) * 1e6 / (double)(t1 - t0);
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(void)
{
	double khz[SAMPLES];
	int i;

	for (i = 0; i < SAMPLES; i++)
		khz[i] = one_sample_khz();
	qsort(khz, SAMPLES, sizeof(khz[0]), by_value);
	printf("%lld\n", (long long)(khz[SAMPLES / 2] / 1000.0 + 0.5) * 1000LL);
	return 0;
}
