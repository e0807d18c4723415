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
 *   churn PATH MS        open, read 4 KiB and close PATH in a loop for MS
 *                        milliseconds, racing whatever else happens to the
 *                        device             -> "churn OK opened N failed M"
 *
 * End of input ends the program.  A line that is not a command gets
 * "error EINVAL".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int held = -1;

static void answer(const char *cmd, int err)
{
	printf("%s %s\n", cmd, err ? strerrorname_np(err) : "OK");
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

/* Open, read and close @path until @ms have passed; count the outcomes. */
static void do_churn(const char *path, long long ms)
{
	long long end = now_ms() + ms, opened = 0, failed = 0;
	char buf[4096];
	int fd;

	while (now_ms() < end) {
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			/* Not there (yet): give the one CPU back to the init. */
			failed++;
			nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
			continue;
		}
		opened++;
		if (read(fd, buf, sizeof(buf)) < 0)
			failed++;
		close(fd);
	}
	printf("churn OK opened %lld failed %lld\n", opened, failed);
	fflush(stdout);
}

int main(void)
{
	char line[4096], path[4096];
	long long offset;
	size_t length;

	while (fgets(line, sizeof(line), stdin)) {
		if (sscanf(line, "open %4095s", path) == 1)
			answer("open", do_open(path));
		else if (sscanf(line, "read %lld %zu %4095s", &offset, &length, path) == 3)
			answer("read", held < 0 ? EBADF : do_read(offset, length, path));
		else if (sscanf(line, "churn %4095s %lld", path, &offset) == 2)
			do_churn(path, offset);
		else if (!strcmp(line, "close\n"))
			answer("close", held < 0 ? EBADF : do_close());
		else
			answer("error", EINVAL);
	}
	return 0;
}
