// SPDX-License-Identifier: GPL-2.0
/*
 * modctl: load or unload a kernel module with exactly one system call and
 * print the outcome as an errno name ("OK", "EIO", "EBUSY", ...).
 *
 * busybox insmod falls back to init_module() when finit_module() fails, so a
 * module whose init fails would run its init twice.  The harness needs the
 * first and only result.
 *
 *   modctl load FILE [PARAM=VALUE ...]   finit_module(FILE, "PARAMS", 0)
 *   modctl force-load FILE [PARAM=VALUE ...]
 *                                        the same with the flags modprobe
 *                                        -f passes: ignore vermagic and
 *                                        symbol versions (the kernel needs
 *                                        CONFIG_MODULE_FORCE_LOAD)
 *   modctl unload NAME [force] [wait]    delete_module(NAME, O_NONBLOCK
 *                                        [| O_TRUNC]); wait drops
 *                                        O_NONBLOCK (rmmod --wait)
 *   modctl write FILE VALUE              open(FILE, O_WRONLY), then one
 *                                        write() of VALUE (a sysfs
 *                                        parameter): the first failure
 *                                        of the two
 *   modctl drain TTY                     tcdrain(): wait until what was
 *                                        written to TTY has left the UART
 *
 *   modctl depends FILE                  the modules FILE depends on (its
 *                                        .modinfo's depends=), one a line
 *
 * Exit status: 0 when the call succeeded, 1 when it failed, 2 on bad usage.
 *
 * A load first loads what FILE depends on that is not loaded yet and is
 * one of the kernel's own modules in DEPENDENCIES (NAME.ko, or with '-'
 * for '_'), theirs first, as modprobe does: a distribution's kernel has
 * the SCSI midlayer as a module, which raceblk needs.  Nothing else is
 * loaded for it (raceblk_user's raceblk is the cases' to load, or not).
 * The one call reported is FILE's; a dependency that does not load is
 * named on stderr, and reported instead.
 *
 * A load's environment may ask for the kernel's fault injection: with
 * MODCTL_FAIL_NTH=N the Nth fault-injection site the loading task reaches
 * from finit_module() on fails (its /proc/thread-self/fail-nth; failslab
 * needs ignore-gfp-wait off in debugfs to fail the allocations that may
 * sleep), and a second line says whether it did: "fault fired" or "fault
 * not reached" (then disarmed); MODCTL_PIDFILE=FILE gets the task's pid
 * first, for a holder that reads how far that count went (blkhold
 * catch), and the task runs on CPU 0 from then on (the holder on CPU 1).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <linux/module.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

static int report(long ret)
{
	if (ret == 0) {
		puts("OK");
		return 0;
	}
	puts(strerrorname_np(errno) ? strerrorname_np(errno) : "EUNKNOWN");
	return 1;
}

static int usage(void)
{
	fputs("usage: modctl load|force-load FILE [PARAM=VALUE ...]\n"
	      "       modctl unload NAME [force] [wait]\n"
	      "       modctl write FILE VALUE\n"
	      "       modctl drain TTY\n"
	      "       modctl depends FILE\n", stderr);
	return 2;
}

/* finit_module() takes the parameters as one space-separated string. */
static char *join_params(int argc, char **argv)
{
	size_t len = 1;
	char *params;
	int i;

	for (i = 0; i < argc; i++)
		len += strlen(argv[i]) + 1;
	params = calloc(1, len);
	if (!params)
		return NULL;
	for (i = 0; i < argc; i++) {
		if (i)
			strcat(params, " ");
		strcat(params, argv[i]);
	}
	return params;
}

/* Write @value to the file @path (its first failure's errno, or 0). */
static int write_value(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int err = 0;

	if (fd < 0)
		return errno;
	if (write(fd, value, strlen(value)) < 0)
		err = errno;
	close(fd);
	return err;
}

/*
 * MODCTL_PIDFILE and MODCTL_FAIL_NTH (see the top): the pid written, and
 * the count armed last, so that nothing but finit_module() counts down.
 * Returns the armed fail-nth file, to read and disarm after the call, or
 * -1.
 */
static int arm_fault_injection(void)
{
	const char *pidfile = getenv("MODCTL_PIDFILE");
	const char *nth = getenv("MODCTL_FAIL_NTH");
	cpu_set_t cpu0;
	char pid[32];
	int fd, err;

	if (pidfile) {
		/* CPU 0, the holder CPU 1: they run at once (two vCPUs). */
		CPU_ZERO(&cpu0);
		CPU_SET(0, &cpu0);
		sched_setaffinity(0, sizeof(cpu0), &cpu0);
		snprintf(pid, sizeof(pid), "%d\n", getpid());
		err = write_value(pidfile, pid);
		if (err)
			fprintf(stderr, "modctl: %s: %s\n", pidfile, strerror(err));
	}
	if (!nth)
		return -1;
	fd = open("/proc/thread-self/fail-nth", O_RDWR | O_CLOEXEC);
	if (fd < 0 || write(fd, nth, strlen(nth)) < 0) {
		fprintf(stderr, "modctl: /proc/thread-self/fail-nth: %s (CONFIG_FAULT_INJECTION)\n",
			strerror(errno));
		exit(2);
	}
	return fd;
}

/*
 * Whether the fault armed on @fd fired: its count reads 0 only then.  A
 * count left is disarmed (0 written), or the fault would hit this
 * program's own calls.  Neither a read nor a write of it is a
 * fault-injection site.
 */
static bool fault_fired(int fd)
{
	char count[16] = "";

	if (pread(fd, count, sizeof(count) - 1, 0) <= 0)
		return false;
	if (!strcmp(count, "0\n"))
		return true;
	if (pwrite(fd, "0", 1, 0) < 0)
		fprintf(stderr, "modctl: cannot disarm fail-nth: %s\n", strerror(errno));
	return false;
}

/*
 * The value of FILE's .modinfo string "depends=" (NUL-terminated strings
 * in the ELF file: found by their text, as modinfo -F would), or NULL.
 */
static char *depends_of(const char *file)
{
	static const char key[] = "\0depends=";
	char *data = NULL, *found, *value = NULL;
	size_t size = 0, got;
	FILE *f = fopen(file, "re");

	if (!f)
		return NULL;
	while (!feof(f)) {
		char *more = realloc(data, size + 65536);

		if (!more)
			break;
		data = more;
		got = fread(data + size, 1, 65536, f);
		size += got;
		if (!got)
			break;
	}
	fclose(f);
	found = data ? memmem(data, size, key, sizeof(key) - 1) : NULL;
	if (found && memchr(found + 1, 0, data + size - found - 1))
		value = strdup(found + sizeof(key) - 1);
	free(data);
	return value;
}

/* sysfs names a module with '_' where its file may have '-'. */
static bool loaded(const char *name)
{
	char path[256], *c;

	snprintf(path, sizeof(path), "/sys/module/%s", name);
	for (c = path; *c; c++)
		if (*c == '-')
			*c = '_';
	return access(path, F_OK) == 0;
}

static int load_file(const char *file, const char *params, int flags);

/* The kernel's own modules a load may need (a distribution kernel's). */
#define DEPENDENCIES "/lib/modules/kernel"

/* Load what FILE depends on, theirs first; 0, or the failed call's -errno. */
static int load_dependencies(const char *file, int depth)
{
	char *deps, *name, *save = NULL;
	char path[256];
	int ret = 0;

	/* The project's own kernels have none: no read of FILE per load. */
	if (access(DEPENDENCIES, F_OK))
		return 0;
	deps = depends_of(file);
	for (name = deps ? strtok_r(deps, ",", &save) : NULL; name && !ret; name = strtok_r(NULL, ",", &save)) {
		char *c;

		if (loaded(name))
			continue;
		snprintf(path, sizeof(path), "%s/%s.ko", DEPENDENCIES, name);
		for (c = path + strlen(DEPENDENCIES); access(path, F_OK) && *c; c++)
			if (*c == '_')
				*c = '-';
		if (access(path, F_OK))
			continue;	/* not the kernel's: finit_module() says */
		ret = depth > 8 ? -ELOOP : load_dependencies(path, depth + 1);
		if (ret)
			break;
		ret = load_file(path, "", 0);
		if (ret == -EEXIST)	/* loaded meanwhile */
			ret = 0;
		if (ret)
			fprintf(stderr, "modctl: %s needs %s: %s\n", file, path, strerror(-ret));
	}
	free(deps);
	return ret;
}

static int load_file(const char *file, const char *params, int flags)
{
	int fd = open(file, O_RDONLY | O_CLOEXEC), ret;

	if (fd < 0)
		return -errno;
	ret = syscall(SYS_finit_module, fd, params, flags) ? -errno : 0;
	close(fd);
	return ret;
}

static int depends(int argc, char **argv)
{
	char *deps, *name, *save = NULL;

	if (argc != 1)
		return usage();
	if (access(argv[0], R_OK)) {
		fprintf(stderr, "modctl: %s: %s\n", argv[0], strerror(errno));
		return 2;
	}
	deps = depends_of(argv[0]);
	for (name = deps ? strtok_r(deps, ",", &save) : NULL; name; name = strtok_r(NULL, ",", &save))
		puts(name);
	free(deps);
	return 0;
}

static int load(int argc, char **argv, int flags)
{
	int fd, armed, ret, err;
	bool fired = false;
	char *params;

	if (argc < 1)
		return usage();
	ret = load_dependencies(argv[0], 0);
	if (ret) {
		errno = -ret;
		return report(-1);
	}
	fd = open(argv[0], O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "modctl: %s: %s\n", argv[0], strerror(errno));
		return 2;
	}
	params = join_params(argc - 1, argv + 1);
	if (!params)
		return 2;
	armed = arm_fault_injection();
	ret = syscall(SYS_finit_module, fd, params, flags);
	err = errno;
	if (armed >= 0)
		fired = fault_fired(armed);
	errno = err;
	ret = report(ret);
	if (armed >= 0) {
		puts(fired ? "fault fired" : "fault not reached");
		close(armed);
	}
	return ret;
}

static int unload(int argc, char **argv)
{
	int flags = O_NONBLOCK;
	int i;

	if (argc < 1)
		return usage();
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "force"))
			flags |= O_TRUNC;
		else if (!strcmp(argv[i], "wait"))
			flags &= ~O_NONBLOCK;
		else
			return usage();
	}
	return report(syscall(SYS_delete_module, argv[0], flags));
}

/* sysfs takes a store in one write(); the shell's echo hides its errno. */
static int write_file(int argc, char **argv)
{
	ssize_t done;
	int fd;

	if (argc != 2)
		return usage();
	fd = open(argv[0], O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return report(fd);
	done = write(fd, argv[1], strlen(argv[1]));
	close(fd);
	return report(done < 0 ? done : 0);
}

/*
 * The last close of a serial port waits for its output to drain, but a
 * port still open elsewhere (a helper that inherited it) closes at once:
 * init asks for the drain itself before the guest reboots.
 */
static int drain(int argc, char **argv)
{
	int fd, ret;

	if (argc != 1)
		return usage();
	fd = open(argv[0], O_WRONLY | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return report(fd);
	ret = tcdrain(fd);
	close(fd);
	return report(ret);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	if (!strcmp(argv[1], "load"))
		return load(argc - 2, argv + 2, 0);
	if (!strcmp(argv[1], "force-load"))
		return load(argc - 2, argv + 2,
			    MODULE_INIT_IGNORE_MODVERSIONS | MODULE_INIT_IGNORE_VERMAGIC);
	if (!strcmp(argv[1], "unload"))
		return unload(argc - 2, argv + 2);
	if (!strcmp(argv[1], "write"))
		return write_file(argc - 2, argv + 2);
	if (!strcmp(argv[1], "drain"))
		return drain(argc - 2, argv + 2);
	if (!strcmp(argv[1], "depends"))
		return depends(argc - 2, argv + 2);
	return usage();
}
