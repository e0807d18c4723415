// SPDX-License-Identifier: GPL-2.0
/*
 * blkprobe: what userspace can do with a block device at an offset, one
 * line per way in, each with the errno name of its outcome:
 *
 *   blkprobe DEV OFFSET
 *
 *   size64 BYTES|ERRNO       ioctl(BLKGETSIZE64)
 *   lseek OK|ERRNO           lseek(OFFSET, SEEK_SET)
 *   read N|ERRNO             pread() of 4 KiB at OFFSET, page cache
 *   direct N|ERRNO           the same with O_DIRECT (aligned buffer)
 *   mmap OK|SIGBUS|ERRNO     read the first byte of a page mapped at OFFSET
 *
 * N is the number of bytes read (0: end of file).  A fault on the mapped
 * page is caught and reported as SIGBUS (or SIGSEGV), not a crash.
 * Exit status: 0 when every line was printed, 2 on bad usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#define PROBE_SIZE 4096

static sigjmp_buf fault_jump;

static void on_fault(int sig)
{
	siglongjmp(fault_jump, sig);
}

static const char *errname(int err)
{
	return strerrorname_np(err) ? strerrorname_np(err) : "EUNKNOWN";
}

static void probe_size(int fd)
{
	uint64_t bytes;

	if (ioctl(fd, BLKGETSIZE64, &bytes))
		printf("size64 %s\n", errname(errno));
	else
		printf("size64 %" PRIu64 "\n", bytes);
}

static void probe_lseek(int fd, off_t offset)
{
	printf("lseek %s\n", lseek(fd, offset, SEEK_SET) < 0 ? errname(errno) : "OK");
}

static void probe_read(const char *what, const char *dev, int flags, off_t offset)
{
	void *buf;
	ssize_t n;
	int fd;

	if (posix_memalign(&buf, PROBE_SIZE, PROBE_SIZE)) {
		printf("%s ENOMEM\n", what);
		return;
	}
	fd = open(dev, O_RDONLY | O_CLOEXEC | flags);
	n = fd < 0 ? -1 : pread(fd, buf, PROBE_SIZE, offset);
	if (n < 0)
		printf("%s %s\n", what, errname(errno));
	else
		printf("%s %zd\n", what, n);
	if (fd >= 0)
		close(fd);
	free(buf);
}

static void probe_mmap(int fd, off_t offset)
{
	volatile const char *page;
	int sig;

	page = mmap(NULL, PROBE_SIZE, PROT_READ, MAP_SHARED, fd, offset);
	if (page == MAP_FAILED) {
		printf("mmap %s\n", errname(errno));
		return;
	}
	sig = sigsetjmp(fault_jump, 1);
	if (!sig) {
		(void)page[0];
		puts("mmap OK");
	} else {
		printf("mmap %s\n", sig == SIGBUS ? "SIGBUS" : "SIGSEGV");
	}
	munmap((void *)page, PROBE_SIZE);
}

int main(int argc, char **argv)
{
	struct sigaction fault = { .sa_handler = on_fault };
	char *end;
	off_t offset;
	int fd;

	if (argc != 3) {
		fputs("usage: blkprobe DEV OFFSET\n", stderr);
		return 2;
	}
	errno = 0;
	offset = strtoll(argv[2], &end, 10);
	if (errno || *end || offset < 0 || offset % PROBE_SIZE) {
		fprintf(stderr, "blkprobe: OFFSET %s: a multiple of %d, in bytes\n",
			argv[2], PROBE_SIZE);
		return 2;
	}
	fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		printf("open %s\n", errname(errno));
		return 0;
	}
	sigaction(SIGBUS, &fault, NULL);
	sigaction(SIGSEGV, &fault, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	probe_size(fd);
	probe_lseek(fd, offset);
	probe_read("read", argv[1], 0, offset);
	probe_read("direct", argv[1], O_DIRECT, offset);
	probe_mmap(fd, offset);
	close(fd);
	return 0;
}
