// SPDX-License-Identifier: GPL-2.0
/*
 * raceblk: a blk-mq ram disk whose module init fails on purpose.
 *
 * add_disk() makes a disk visible and scans its partitions, so the block
 * layer calls into this module while its init is still running.  If init
 * then fails, the module is freed while the disk may still be in use.
 * raceblk fails its init at a point chosen with fail_at=, and can wait at a
 * point chosen with hold= until the harness writes the release parameter,
 * so a test can open the disk at exactly that moment.
 *
 * The disk's contents come from an image file read from /lib/firmware/IMAGE
 * (image=, size-checked before it is read) and live in memory.  io_delay_ms=
 * completes each request that long after it was queued, so that I/O can be
 * outstanding on purpose.
 *
 * This file is the core: the parameters, the points, the image.  The disk
 * is a backend's (RACEBLK_BACKENDS in internal.h, a file each):
 * backend=blk (the default) a blk-mq disk of its own (raceblk0,
 * backend_blk.c), backend=scsi a SCSI low-level driver whose disk belongs
 * to sd (backend_scsi.c).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/blkdev.h>
#include <linux/completion.h>
#include <linux/kernel_read_file.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>

#include "raceblk.h"
#include "internal.h"

#define RACEBLK_POINT_NAME(id, name)	[RACEBLK_##id] = #name,
static const char * const raceblk_point_names[RACEBLK_NR_POINTS] = {
	RACEBLK_POINTS(RACEBLK_POINT_NAME)
};

#undef RACEBLK_POINT_NAME

/*
 * The backends (RACEBLK_BACKENDS): each one's name, operations and the
 * points it reaches, as " none alloc ... " (a word is found with its
 * spaces around it).
 */
#define RACEBLK_BACKEND_NAME(name, what, points)	#name,
static const char * const raceblk_backend_names[] = {
	RACEBLK_BACKENDS(RACEBLK_BACKEND_NAME)
};

#undef RACEBLK_BACKEND_NAME

#define RACEBLK_BACKEND_ENTRY(name, what, points)			\
	{ &raceblk_##name##_backend, " " #points " " },
static const struct {
	const struct raceblk_backend *ops;
	const char *points;
} raceblk_backends[] = {
	RACEBLK_BACKENDS(RACEBLK_BACKEND_ENTRY)
};

#undef RACEBLK_BACKEND_ENTRY

/*
 * "; backend=blk: none alloc ...; backend=scsi: ...": the points of each
 * backend, for the descriptions of fail_at= and hold= (modinfo), and what
 * each backend makes, for backend=.
 */
#define RACEBLK_BACKEND_POINTS(name, what, points)	"; backend=" #name ": " #points
#define RACEBLK_POINT_LISTS	RACEBLK_BACKENDS(RACEBLK_BACKEND_POINTS)
#define RACEBLK_BACKEND_WHAT(name, what, points)	"; " #name ": " what

/* What init does on failure once the disk was added. */
enum raceblk_unwind {
	RACEBLK_UNWIND_CLEAN,	/* del_gendisk(), put_disk(), free the tag set */
	RACEBLK_UNWIND_LEAK,	/* a buggy driver: return, leave the disk */
};

static const char * const raceblk_unwind_names[] = {
	[RACEBLK_UNWIND_CLEAN]	= "clean",
	[RACEBLK_UNWIND_LEAK]	= "leak",
};

#define RACEBLK_MAX_DELAY_MS	10000
#define RACEBLK_MAX_HOLD_MS	600000
/* The disk lives in vmalloc'd memory; the harness's guests have 256 MiB. */
#define RACEBLK_MAX_IMAGE_MIB	32

static char *g_fail_at = "none";
module_param_named(fail_at, g_fail_at, charp, 0444);
MODULE_PARM_DESC(fail_at,
		 "Point where init fails" RACEBLK_POINT_LISTS ". Default: none");

/*
 * Integer parameters, as null_blk takes them: base 10 only ("010" is ten,
 * "0x10" is refused), within bounds, or the load fails with EINVAL and a
 * pr_err naming the parameter.
 */
struct raceblk_int_param {
	int *value;
	int min, max;
};

static int raceblk_int_set(const char *val, const struct kernel_param *kp)
{
	const struct raceblk_int_param *p = kp->arg;
	int v;

	if (kstrtoint(val, 10, &v) || v < p->min || v > p->max) {
		pr_err("%s=%s: must be %d..%d, in base 10\n", kp->name, val, p->min, p->max);
		return -EINVAL;
	}
	*p->value = v;
	return 0;
}

static int raceblk_int_get(char *buffer, const struct kernel_param *kp)
{
	const struct raceblk_int_param *p = kp->arg;

	return sysfs_emit(buffer, "%d\n", *p->value);
}

static const struct kernel_param_ops raceblk_int_ops = {
	.set = raceblk_int_set,
	.get = raceblk_int_get,
};

#define raceblk_int_param(name, var, min, max)					\
	static struct raceblk_int_param raceblk_##name##_param = {		\
		&(var), (min), (max)						\
	};									\
	module_param_cb(name, &raceblk_int_ops, &raceblk_##name##_param, 0444)

static int g_fail_errno = EIO;
/* Errnos userspace can see: the kernel's own (ERESTARTSYS...) are 512 up. */
raceblk_int_param(fail_errno, g_fail_errno, 1, EHWPOISON);
MODULE_PARM_DESC(fail_errno, "Positive errno init fails with at fail_at, 1..133 (EHWPOISON). Default: 5 (EIO)");

static char *g_hold = "none";
module_param_named(hold, g_hold, charp, 0444);
MODULE_PARM_DESC(hold,
		 "Point where init waits for the release parameter" RACEBLK_POINT_LISTS
		 ". Default: none");

static int g_hold_timeout_ms = 30000;
raceblk_int_param(hold_timeout_ms, g_hold_timeout_ms, 1, RACEBLK_MAX_HOLD_MS);
MODULE_PARM_DESC(hold_timeout_ms, "How long init waits at hold before going on, 1..600000. Default: 30000");

int g_io_delay_ms;
raceblk_int_param(io_delay_ms, g_io_delay_ms, 0, RACEBLK_MAX_DELAY_MS);
MODULE_PARM_DESC(io_delay_ms, "Complete each request this long after it is queued, 0..10000. Default: 0");

static char *g_unwind = "clean";
module_param_named(unwind, g_unwind, charp, 0444);
MODULE_PARM_DESC(unwind, "Error path once the disk was added: clean (del_gendisk) or leak (leave the disk). Default: clean");

static char *g_backend = "blk";
module_param_named(backend, g_backend, charp, 0444);
MODULE_PARM_DESC(backend, "What init makes" RACEBLK_BACKENDS(RACEBLK_BACKEND_WHAT) ". Default: blk");

bool g_free_disk;

/*
 * A bool, 0 or 1 and nothing else (kstrtobool() would take "010" for 0 and
 * "yes" for 1), or EINVAL naming the parameter.
 */
static int raceblk_bool_set(const char *val, const struct kernel_param *kp)
{
	if (strcmp(val, "0") && strcmp(val, "1")) {
		pr_err("%s=%s: must be 0 or 1\n", kp->name, val);
		return -EINVAL;
	}
	*(bool *)kp->arg = val[0] == '1';
	return 0;
}

static const struct kernel_param_ops raceblk_bool_ops = {
	.set = raceblk_bool_set,
	.get = param_get_bool,
};

module_param_cb(free_disk, &raceblk_bool_ops, &g_free_disk, 0444);
MODULE_PARM_DESC(free_disk, "backend=blk: the disk's last put frees the driver's data through ->free_disk, as sd and loop do. Default: 0");

static char *g_image = "raceblk/mbr-primary.img";
module_param_named(image, g_image, charp, 0444);
MODULE_PARM_DESC(image, "Disk image, a firmware path under /lib/firmware, at most 32 MiB. Default: raceblk/mbr-primary.img");

static enum raceblk_point g_fail_point;
static enum raceblk_point g_hold_point;
static enum raceblk_unwind g_unwind_mode;
static int g_backend_index;
static DECLARE_COMPLETION(raceblk_released);

/* Where init is, for the read-only stage parameter. */
enum raceblk_stage {
	RACEBLK_STAGE_LOADING,	/* before the first point */
	RACEBLK_STAGE_AT,	/* passed g_stage_point */
	RACEBLK_STAGE_HELD,	/* waiting at g_stage_point for release */
	RACEBLK_STAGE_FAILED,	/* init failed at g_stage_point */
	RACEBLK_STAGE_LIVE,	/* init succeeded */
};

static enum raceblk_stage g_stage;
static enum raceblk_point g_stage_point;

static void raceblk_set_stage(enum raceblk_stage stage, enum raceblk_point point)
{
	WRITE_ONCE(g_stage_point, point);
	WRITE_ONCE(g_stage, stage);
}

static int raceblk_stage_get(char *buffer, const struct kernel_param *kp)
{
	const char *point = raceblk_point_names[READ_ONCE(g_stage_point)];

	switch (READ_ONCE(g_stage)) {
	case RACEBLK_STAGE_LOADING:
		return sysfs_emit(buffer, "loading\n");
	case RACEBLK_STAGE_AT:
		return sysfs_emit(buffer, "%s\n", point);
	case RACEBLK_STAGE_HELD:
		return sysfs_emit(buffer, "held at %s\n", point);
	case RACEBLK_STAGE_FAILED:
		return sysfs_emit(buffer, "failed at %s\n", point);
	case RACEBLK_STAGE_LIVE:
		return sysfs_emit(buffer, "live\n");
	}
	return -EINVAL;
}

/*
 * Read-only, yet it needs a set: parse_args() calls ->set of any parameter
 * named at load time without looking, so "stage=x" without one is a call
 * through NULL (6.1, every kernel here: fuzz_stage).
 */
static int raceblk_stage_set(const char *val, const struct kernel_param *kp)
{
	pr_err("stage=%s: read-only, init sets it\n", val);
	return -EINVAL;
}

static const struct kernel_param_ops raceblk_stage_ops = {
	.set = raceblk_stage_set,
	.get = raceblk_stage_get,
};
module_param_cb(stage, &raceblk_stage_ops, NULL, 0444);
MODULE_PARM_DESC(stage, "Read-only: loading, a point name, \"held at <point>\", \"failed at <point>\" or live");

/*
 * Where init is, for raceblk_user: a module that uses a symbol of this one
 * shows what each kernel does with a dependant loaded during our init.
 */
const char *raceblk_stage_point(void)
{
	return raceblk_point_names[READ_ONCE(g_stage_point)];
}
#ifndef RACEBLK_INSTANCE
EXPORT_SYMBOL_GPL(raceblk_stage_point);
#endif

static int raceblk_release_set(const char *val, const struct kernel_param *kp)
{
	complete_all(&raceblk_released);
	return 0;
}

static const struct kernel_param_ops raceblk_release_ops = {
	.set = raceblk_release_set,
};
module_param_cb(release, &raceblk_release_ops, NULL, 0200);
MODULE_PARM_DESC(release, "Write anything to let init go on from hold");


static struct raceblk_dev *g_dev;

/* Whether the chosen backend's init reaches @point. */
static bool raceblk_backend_reaches(enum raceblk_point point)
{
	char word[32];

	snprintf(word, sizeof(word), " %s ", raceblk_point_names[point]);
	return strstr(raceblk_backends[g_backend_index].points, word);
}

/*
 * Wait at @point until release is written (at once if it was written
 * before init got here: a completion remembers), for hold_timeout_ms at
 * most.  The loading process can be killed meanwhile: init then fails
 * there with -EINTR (a fatal signal: nobody sees the restart errno).
 */
static int raceblk_hold(enum raceblk_point point)
{
	long left;

	raceblk_set_stage(RACEBLK_STAGE_HELD, point);
	pr_info("init held at %s until release is written\n",
		raceblk_point_names[point]);
	left = wait_for_completion_killable_timeout(&raceblk_released,
						    msecs_to_jiffies(g_hold_timeout_ms));
	raceblk_set_stage(RACEBLK_STAGE_AT, point);
	if (left < 0) {
		pr_info("hold at %s interrupted by a fatal signal: failing init\n",
			raceblk_point_names[point]);
		return -EINTR;
	}
	if (left)
		pr_info("init released at %s\n", raceblk_point_names[point]);
	else
		pr_warn("hold at %s timed out after %d ms, going on\n",
			raceblk_point_names[point], g_hold_timeout_ms);
	return 0;
}

/*
 * Record that init reached @point, wait there if hold= names it, and return
 * the error to fail with there, or 0 to go on.
 */
int raceblk_reach(enum raceblk_point point)
{
	int err;

	/* A backend reaches the points its line of RACEBLK_BACKENDS lists. */
	WARN_ON_ONCE(!raceblk_backend_reaches(point));
	raceblk_set_stage(RACEBLK_STAGE_AT, point);
	if (point == g_hold_point) {
		err = raceblk_hold(point);
		if (err) {
			raceblk_set_stage(RACEBLK_STAGE_FAILED, point);
			return err;
		}
	}
	if (point != g_fail_point)
		return 0;
	raceblk_set_stage(RACEBLK_STAGE_FAILED, point);
	pr_info("failing init at %s with %pe\n", raceblk_point_names[point],
		ERR_PTR(-g_fail_errno));
	return -g_fail_errno;
}

/* Whether fail_at= or hold= names @point: init has work to do there. */
bool raceblk_point_chosen(enum raceblk_point point)
{
	return point == g_fail_point || point == g_hold_point;
}

/*
 * The raceblk_dev is no longer init's to free on failure: something in
 * use points at it (unwind=leak), or the disk frees it (free_disk=1).
 * Not a field of it: it may be gone by the time init looks.
 */
static bool g_dev_given_away;

void raceblk_give_away_dev(void)
{
	g_dev_given_away = true;
}

/*
 * A backend's init failed with @err once @what was visible: whether
 * unwind=leak says to return now, leaving it behind in use, as a buggy
 * driver does (its memory stays: it still points at the image).
 */
bool raceblk_unwind_leaks(int err, const char *what)
{
	if (g_unwind_mode != RACEBLK_UNWIND_LEAK)
		return false;
	pr_warn("unwind=leak: returning %pe, leaving %s behind\n", ERR_PTR(err), what);
	raceblk_give_away_dev();
	return true;
}

/* The index of @value in @names, or -EINVAL with a pr_err naming @param. */
static int raceblk_parse_name(const char *param, const char *value,
			      const char * const *names, size_t nr_names)
{
	int i = match_string(names, nr_names, value);

	if (i < 0)
		pr_err("%s=%s: unknown value\n", param, value);
	return i;
}

static int raceblk_check_point(const char *param, enum raceblk_point point)
{
	if (raceblk_backend_reaches(point))
		return 0;
	pr_err("%s=%s: not a point of backend=%s\n", param,
	       raceblk_point_names[point], raceblk_backend_names[g_backend_index]);
	return -EINVAL;
}

static int raceblk_parse_params(void)
{
	int i;

	i = raceblk_parse_name("fail_at", g_fail_at, raceblk_point_names,
			       RACEBLK_NR_POINTS);
	if (i < 0)
		return -EINVAL;
	g_fail_point = i;

	i = raceblk_parse_name("hold", g_hold, raceblk_point_names,
			       RACEBLK_NR_POINTS);
	if (i < 0)
		return -EINVAL;
	g_hold_point = i;

	i = raceblk_parse_name("unwind", g_unwind, raceblk_unwind_names,
			       ARRAY_SIZE(raceblk_unwind_names));
	if (i < 0)
		return -EINVAL;
	g_unwind_mode = i;

	i = raceblk_parse_name("backend", g_backend, raceblk_backend_names,
			       ARRAY_SIZE(raceblk_backend_names));
	if (i < 0)
		return -EINVAL;
	g_backend_index = i;
	if (raceblk_check_point("fail_at", g_fail_point) ||
	    raceblk_check_point("hold", g_hold_point))
		return -EINVAL;
	if (g_free_disk && !raceblk_backends[i].ops->has_free_disk) {
		pr_err("free_disk=1: not with backend=%s (the disk frees itself)\n", g_backend);
		return -EINVAL;
	}
	return 0;
}

/*
 * A request for sectors the disk does not have is refused, and said, never
 * served: the block layer checks a request against its partition, and a
 * partition the kernel made past the end of the disk lets one through
 * (gpt-end-before-start).  Written so that no sum can wrap.
 */
bool raceblk_past_end(const struct raceblk_dev *dev, const char *name,
		      const char *op, u64 sector, u64 sectors)
{
	if (sector <= dev->capacity && sectors <= dev->capacity - sector)
		return false;
	pr_warn_ratelimited("%s: refused %s of %llu sectors at sector %llu: past the end (%llu sectors)\n",
			    name, op, sectors, sector, (u64)dev->capacity);
	return true;
}


/*
 * Read the image into memory the disk can write to.  Not request_firmware():
 * it reads a file of any size before anyone can look at that size, so an
 * image larger than the guest's memory ends in the OOM killer.
 * kernel_read_file() checks the size first (EFBIG over the limit, EINVAL
 * for an empty file) and allocates exactly that much.
 */
static int raceblk_load_image(struct raceblk_dev *dev)
{
	const size_t limit = (size_t)RACEBLK_MAX_IMAGE_MIB << 20;
	void *data = NULL;
	ssize_t size;
	char *path;

	path = kasprintf(GFP_KERNEL, "/lib/firmware/%s", g_image);
	if (!path)
		return -ENOMEM;
	size = kernel_read_file_from_path_initns(path, 0, &data, limit, NULL,
						 READING_FIRMWARE);
	kfree(path);
	if (size == -EFBIG) {
		pr_err("image=%s: more than the %d MiB the ram backend holds\n",
		       g_image, RACEBLK_MAX_IMAGE_MIB);
		return size;
	}
	if (size < 0) {
		pr_err("image=%s: cannot load: %pe\n", g_image, ERR_PTR(size));
		return size;
	}
	if (size % SECTOR_SIZE) {
		pr_err("image=%s: size %zd is not a whole number of sectors\n",
		       g_image, size);
		vfree(data);
		return -EINVAL;
	}
	dev->data = data;
	dev->capacity = size >> SECTOR_SHIFT;
	return 0;
}


static int __init raceblk_init(void)
{
	struct raceblk_dev *dev;
	int err;

	err = raceblk_parse_params();
	if (err)
		return err;

	dev = kzalloc(sizeof(*dev), GFP_KERNEL);
	if (!dev)
		return -ENOMEM;
	dev->image = g_image;
	err = raceblk_load_image(dev);
	if (err)
		goto out_free_dev;
	err = raceblk_reach(RACEBLK_ALLOC);
	if (err)
		goto out_free_data;

	err = raceblk_backends[g_backend_index].ops->init(dev);
	if (err) {
		/*
		 * unwind=leak left the disk or host, and its memory, in use;
		 * with free_disk=1 the disk's last put frees them.
		 */
		if (g_dev_given_away)
			return err;
		goto out_free_data;
	}

	g_dev = dev;
	raceblk_set_stage(RACEBLK_STAGE_LIVE, RACEBLK_NONE);
	return 0;

out_free_data:
	vfree(dev->data);
out_free_dev:
	kfree(dev);
	return err;
}

static void __exit raceblk_exit(void)
{
	if (raceblk_backends[g_backend_index].ops->exit(g_dev))
		return;
	vfree(g_dev->data);
	kfree(g_dev);
}

module_init(raceblk_init);
module_exit(raceblk_exit);

MODULE_DESCRIPTION("blk-mq ram disk whose init fails on purpose, for module init race tests");
MODULE_LICENSE("GPL");
