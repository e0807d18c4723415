// SPDX-License-Identifier: GPL-2.0
/*
 * blkhold: hold a block device open for the harness, in a process of its
 * own, so that a kernel crash on the held file kills this process and not
 * the guest's init.  It reads one command per line on stdin and answers
 * one line on stdout, flushed, with the errno name of the outcome:
 *
 *   open PATH            open(PATH, O_RDONLY)        -> "open OK|ENXIO|..."
 *   read OFFSET LENGTH FILE
 *                        pread() LENGTH bytes at OFFSET of the held file
 *                        and write them to FILE      -> "read OK|EIO|..."
 *   close                close() the held file       -> "close OK|..."
 *   await PATH MS [STOP] open PATH as soon as it can be opened, trying
 *                        every millisecond while it does not exist yet or
 *                        is not ready (ENXIO), for up to MS milliseconds or
 *                        until the file STOP exists: a holder that must be
 *                        there before a driver's init fails.  Given up:
 *                        ENXIO when PATH was there but never opened,
 *                        ENOENT when it never was
 *                                      -> "await OK|ENXIO|ENOENT|ETIMEDOUT"
 *   catch PATH MS STOP PIDFILE NTHFILE
 *                        await PATH without sleeping between tries (a
 *                        misc device is opened between its registration
 *                        and what its init does next only so), and
 *                        write to NTHFILE what the fail-nth of the
 *                        process whose pid is in PIDFILE (the loader:
 *                        modctl MODCTL_PIDFILE) reads when PATH is first
 *                        there, and again once it is open: two lines
 *                        (it creates NTHFILE empty when it starts
 *                        looking, on CPU 1: the loader may start then)
 *                                      -> "catch OK|ENXIO|ENOENT|..."
 *   churn PATH MS [HOLD_MS [STOP]]
 *                        open PATH, read its start through the page cache
 *                        and again for 0 to HOLD_MS milliseconds (drawn;
 *                        default 0), close it, in a loop, racing
 *                        whatever else happens to the device; for MS
 *                        milliseconds, until PATH went away after it
 *                        was opened, or until the file STOP exists (an
 *                        open then held is kept to its end)
 *                                      -> "churn OK opened N failed M"
 *
 * End of input ends the program.  A line that is not a command gets
 * "error EINVAL".  Run by the kernel as its uevent helper, it is a
 * udev-like prober instead (see uevent_probe()).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int held = -1;

/* "OK" for 0, else the errno's name ("EIO"). */
static const char *errno_name(int err)
{
	return err ? strerrorname_np(err) ?: "E?" : "OK";
}

static void answer(const char *cmd, int err)
{
	printf("%s %s\n", cmd, errno_name(err));
	fflush(stdout);
}

static int do_open(const char *path)
{
	if (held >= 0)
		return EBUSY;
	held = open(path, O_RDONLY | O_CLOEXEC);
	return held < 0 ? errno : 0;
}

/* Copy LENGTH bytes at OFFSET of the held file into FILE. */
static int do_read(long long offset, size_t length, const char *file)
{
	char *buf = malloc(length);
	ssize_t got;
	int out, err = 0;

	if (!buf)
		return ENOMEM;
	got = pread(held, buf, length, offset);
	if (got < 0)
		err = errno;
	else if ((size_t)got != length)
		err = ENODATA;
	if (!err) {
		out = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (out < 0 || write(out, buf, length) != (ssize_t)length)
			err = errno;
		if (out >= 0)
			close(out);
	}
	free(buf);
	return err;
}

static int do_close(void)
{
	int fd = held;

	held = -1;
	return close(fd) ? errno : 0;
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* Sleep @ms milliseconds. */
static void sleep_ms(long long ms)
{
	nanosleep(&(struct timespec){ .tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000 }, NULL);
}

/*
 * Open @path the moment it can be: while it is not there yet, or is there
 * but its disk is not ready (ENXIO), try again.  ENOENT once it was seen
 * means it went away again, and so does @stop existing: give up then, with
 * ENXIO if it was seen (a disk that came and could not be opened: its
 * module refused it, or its driver tore it down first) or ENOENT.
 */
/*
 * Append what /proc/PID/fail-nth reads, PID the one in @pidfile, to
 * @nthfile: how many fault-injection sites that task has still to reach
 * before one fails.
 */
static void record_fail_nth(const char *pidfile, const char *nthfile)
{
	char proc[64], count[32] = "?\n";
	FILE *f = fopen(pidfile, "r");
	int pid = 0;

	if (f) {
		if (fscanf(f, "%d", &pid) != 1)
			pid = 0;
		fclose(f);
	}
	snprintf(proc, sizeof(proc), "/proc/%d/fail-nth", pid);
	f = pid ? fopen(proc, "r") : NULL;
	if (f) {
		if (!fgets(count, sizeof(count), f))
			strcpy(count, "?\n");
		fclose(f);
	}
	f = fopen(nthfile, "a");
	if (f) {
		fputs(count, f);
		fclose(f);
	}
}

/*
 * await, and catch with @nthfile: no sleep between tries, and the loader's
 * fail-nth recorded the first time @path is there.
 */
static int do_await(const char *path, long long ms, const char *stop,
		    const char *pidfile, const char *nthfile)
{
	long long deadline = now_ms() + ms;
	bool seen = false, spin = *nthfile, recorded = false;
	cpu_set_t cpu1;
	FILE *ready;
	int err;

	if (spin) {
		/* Off the loader's CPU (modctl MODCTL_PIDFILE: CPU 0). */
		CPU_ZERO(&cpu1);
		CPU_SET(1, &cpu1);
		sched_setaffinity(0, sizeof(cpu1), &cpu1);
		ready = fopen(nthfile, "w");
		if (ready)
			fclose(ready);
	}
	for (;;) {
		/* Before the open, which may wait for the registration's lock. */
		if (spin && !recorded && !access(path, F_OK)) {
			record_fail_nth(pidfile, nthfile);
			recorded = true;
		}
		err = do_open(path);
		if (spin && !err)
			record_fail_nth(pidfile, nthfile);
		if (err == ENXIO)
			seen = true;
		else if (err == ENOENT && seen)
			return ENXIO;
		else if (err != ENOENT)
			return err;
		if (*stop && !access(stop, F_OK))
			return seen ? ENXIO : ENOENT;
		if (now_ms() >= deadline)
			return ETIMEDOUT;
		if (!spin)
			sleep_ms(1);
	}
}

/* A hold drawn from 0 to @max_ms milliseconds (none when @max_ms <= 0). */
static long long draw_ms(unsigned int *seed, long long max_ms)
{
	return max_ms > 0 ? rand_r(seed) % (max_ms + 1) : 0;
}

static unsigned int new_seed(void)
{
	return getpid() ^ (unsigned int)now_ms();
}

/* What a churner's pass reads at most: the start of the disk, as blkid. */
#define PASS_BYTES (256 << 10)

/*
 * Read @fd's first PASS_BYTES (or all of it) through the page cache, then
 * drop what it cached, so that the next pass goes to the driver again: a
 * buffered read misses into readahead, which looks up the disk's fops
 * (bdev_read_page() on 6.1) and queues I/O.  Returns the bytes read, or
 * the read's -errno.
 */
static ssize_t read_pass(int fd)
{
	static char buf[65536];
	ssize_t got = 0;
	off_t at = 0;

	while (at < PASS_BYTES && (got = pread(fd, buf, sizeof(buf), at)) > 0)
		at += got;
	if (got < 0)
		return -errno;
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	return at;
}

/*
 * One open of @path, as a prober or a reader makes it (udev's blkid, a
 * "cat" in a loop): read it, and keep reading it until @hold_ms have
 * passed, then close it.  An opener that still holds the disk after a
 * failed init has been unwound is the use-after-free on vanilla: at its
 * close (a pass after del_gendisk() reads nothing on the whole disk and
 * fails on a partition).  Returns the open's errno; the first read's
 * error goes to @read_err.
 */
static int churn_once(const char *path, long long hold_ms, int *read_err)
{
	long long end = now_ms() + hold_ms;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t got;

	if (fd < 0)
		return errno;
	got = read_pass(fd);
	*read_err = got < 0 ? -got : 0;
	while (now_ms() < end) {
		/*
		 * Once the disk is gone a pass reads nothing (or fails) at
		 * once: wait, rather than take a vCPU from the unwind.
		 */
		if (got <= 0)
			sleep_ms(1);
		got = read_pass(fd);
	}
	close(fd);
	return 0;
}

/*
 * Open, read and close @path until @ms have passed, until it went away
 * (ENOENT, ENXIO) after it was opened: the disk of a failed init is gone
 * for good, or until @stop exists (the harness has what it raced: a load
 * returned).  The open that matters is the one that holds the disk while
 * its driver's init fails and is unwound: drawing each hold from 0 to
 * @max_hold_ms spreads the closes across the unwind.  Count the outcomes.
 */
static void do_churn(const char *path, long long ms, long long max_hold_ms, const char *stop)
{
	long long end = now_ms() + ms, opened = 0, failed = 0;
	unsigned int seed = new_seed();
	int err, read_err = 0;

	while (now_ms() < end && !(*stop && access(stop, F_OK) == 0)) {
		err = churn_once(path, draw_ms(&seed, max_hold_ms), &read_err);
		if (err) {
			failed++;
			if (opened && (err == ENOENT || err == ENXIO))
				break;
			/* Not there (yet): a short pause, then again. */
			sleep_ms(1);
			continue;
		}
		opened++;
		failed += read_err != 0;
	}
	printf("churn OK opened %lld failed %lld\n", opened, failed);
	fflush(stdout);
}

/*
 * As the kernel's uevent helper (/sys/kernel/uevent_helper): a udev-like
 * prober, one process per event, as the kernel forks them.  For a block
 * device's "add" it churns the new device once, kept open 0 to the
 * milliseconds in PROBER_HOLD (drawn), and logs "begin PID NAME" and then
 * "end PID NAME open OK|ERRNO read OK|ERRNO|-" to PROBER_LOG: a begin with
 * no end is a prober that did not finish (an oops killed it, or it hangs).
 */
#ifndef PROBER_DIR
#define PROBER_DIR "/tmp"	/* the self-tests build it with another */
#endif
#define PROBER_HOLD PROBER_DIR "/prober.hold"
#define PROBER_LOG PROBER_DIR "/prober.log"

static void prober_log(const char *line)
{
	int fd = open(PROBER_LOG, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);

	if (fd < 0)
		return;
	/* One write(): lines of concurrent probers do not mix. */
	if (write(fd, line, strlen(line)) < 0)
		perror(PROBER_LOG);
	close(fd);
}

static int uevent_probe(void)
{
	const char *action = getenv("ACTION"), *name = getenv("DEVNAME");
	long long max_hold = 0;
	unsigned int seed = new_seed();
	char path[4200], line[4400];
	int err, read_err = 0;
	FILE *f;

	if (!action || !name || strcmp(action, "add") || strcmp(getenv("SUBSYSTEM") ?: "", "block"))
		return 0;
	f = fopen(PROBER_HOLD, "re");
	if (!f)
		return 0;	/* the prober is off */
	if (fscanf(f, "%lld", &max_hold) != 1)
		max_hold = 0;
	fclose(f);
	snprintf(line, sizeof(line), "begin %d %s\n", getpid(), name);
	prober_log(line);
	snprintf(path, sizeof(path), "/dev/%s", name);
	err = churn_once(path, draw_ms(&seed, max_hold), &read_err);
	snprintf(line, sizeof(line), "end %d %s open %s read %s\n", getpid(), name, errno_name(err),
		 err ? "-" : errno_name(read_err));
	prober_log(line);
	return 0;
}

int main(int argc, char **argv)
{
	char line[4096], path[4096], stop[4096], pidfile[4096], nthfile[4096];
	long long offset, hold;
	size_t length;
	int n;

	/* The kernel runs its uevent helper as "helper SUBSYSTEM". */
	if (argc == 2 && getenv("ACTION") && !strcmp(argv[1], getenv("SUBSYSTEM") ?: ""))
		return uevent_probe();
	while (fgets(line, sizeof(line), stdin)) {
		if (sscanf(line, "open %4095s", path) == 1)
			answer("open", do_open(path));
		else if (sscanf(line, "read %lld %zu %4095s", &offset, &length, path) == 3)
			answer("read", held < 0 ? EBADF : do_read(offset, length, path));
		else if ((n = sscanf(line, "churn %4095s %lld %lld %4095s", path, &offset, &hold,
				     stop)) >= 2)
			do_churn(path, offset, n >= 3 ? hold : 0, n == 4 ? stop : "");
		else if ((n = sscanf(line, "await %4095s %lld %4095s", path, &hold, stop)) >= 2)
			answer("await", do_await(path, hold, n == 3 ? stop : "", "", ""));
		else if (sscanf(line, "catch %4095s %lld %4095s %4095s %4095s", path, &hold, stop,
				pidfile, nthfile) == 5)
			answer("catch", do_await(path, hold, stop, pidfile, nthfile));
		else if (!strcmp(line, "close\n"))
			answer("close", held < 0 ? EBADF : do_close());
		else
			answer("error", EINVAL);
	}
	return 0;
}
