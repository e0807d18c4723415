// SPDX-License-Identifier: GPL-2.0
/*
 * initref: a module whose init takes a reference on itself through one of
 * the interfaces that do so legitimately on 6.1.
 *
 * A kernel that refuses try_module_get() until a module's init has
 * succeeded (the 2003 isolated loader, and Rusty Russell's proposal, which
 * lets only add_disk() through) fails each of these inits; today's kernel
 * and one that keeps a failed module only while it is held load them all.
 * ref= picks the interface:
 *
 *   self              try_module_get(THIS_MODULE) from init, as
 *                     klp_enable_patch() does for a livepatch module and
 *                     sk_alloc() for a protocol module's kernel socket
 *   firmware_nowait   request_firmware_nowait(THIS_MODULE, ...) from init,
 *                     as some 50 drivers do from a probe run in their init
 *   misc_open         open the misc device init has just registered, as a
 *                     driver whose device node is opened during its init;
 *                     its close is deferred (fput()) to the loader's
 *                     return to user space
 *   work              hand a reference to a work item that drops it
 *                     hold_ms later, as a driver deferring part of its
 *                     setup does
 *   timer             the same with a timer
 *   leak              take a reference on itself and never drop it (a bug)
 *
 * fail=1 fails init with -EIO once the reference is taken: the reference
 * outlives the failed init (work, timer, misc_open), or is never dropped
 * (leak, self's put notwithstanding: self drops it before failing).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/completion.h>
#include <linux/firmware.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/slab.h>
#include <linux/timer.h>
#include <linux/workqueue.h>

#include "compat.h"

static char *g_ref = "self";
module_param_named(ref, g_ref, charp, 0444);
MODULE_PARM_DESC(ref, "How init takes a reference on its own module: self, firmware_nowait, misc_open. Default: self");

static char *g_firmware = "raceblk/mbr-primary.img";
module_param_named(firmware, g_firmware, charp, 0444);
MODULE_PARM_DESC(firmware, "File ref=firmware_nowait requests. Default: raceblk/mbr-primary.img");

static bool g_fail;
module_param_named(fail, g_fail, bool, 0444);
MODULE_PARM_DESC(fail, "Fail init with -EIO once the reference is taken. Default: 0");

static unsigned int g_hold_ms = 3000;
module_param_named(hold_ms, g_hold_ms, uint, 0444);
MODULE_PARM_DESC(hold_ms, "How long ref=work and ref=timer keep their reference, in ms. Default: 3000");

static const struct file_operations initref_fops = {
	.owner	= THIS_MODULE,
};

static struct miscdevice initref_misc = {
	.minor	= MISC_DYNAMIC_MINOR,
	.name	= "initref",
	.fops	= &initref_fops,
};

static DECLARE_COMPLETION(initref_firmware_done);

/* As klp_enable_patch() takes its patch module. */
static int initref_self(void)
{
	if (!try_module_get(THIS_MODULE))
		return -ENODEV;
	module_put(THIS_MODULE);
	return 0;
}

static void initref_firmware_loaded(const struct firmware *fw, void *context)
{
	pr_info("request_firmware_nowait(%s) callback: %s\n", g_firmware,
		fw ? "loaded" : "not found");
	release_firmware(fw);
	complete(&initref_firmware_done);
}

/* As a probe run from init does; wait for the callback before returning. */
static int initref_firmware_nowait(void)
{
	int err;

	err = request_firmware_nowait(THIS_MODULE, FW_ACTION_UEVENT, g_firmware,
				      initref_misc.this_device, GFP_KERNEL,
				      NULL, initref_firmware_loaded);
	if (err)
		return err;
	wait_for_completion(&initref_firmware_done);
	return 0;
}

static int initref_misc_open(void)
{
	struct file *file;

	file = filp_open("/dev/initref", O_RDONLY, 0);
	if (IS_ERR(file))
		return PTR_ERR(file);
	return filp_close(file, NULL);
}

/*
 * ref=work and ref=timer: the work item or timer is allocated, so that on a
 * kernel that frees the failed module only its code is gone (a fault in the
 * task that runs it, not in the timer interrupt walking a freed timer).
 * Its last instructions after module_put() still run in this module: the
 * put is the caller's last use of it, as in any driver doing the same
 * (kthreads have module_put_and_kthread_exit() for that window).
 */
struct initref_work {
	struct delayed_work dwork;
};

static void initref_work_done(struct work_struct *work)
{
	kfree(container_of(to_delayed_work(work), struct initref_work, dwork));
	pr_info("ref=work: the work item drops its reference\n");
	module_put(THIS_MODULE);
}

static int initref_work(void)
{
	struct initref_work *w = kzalloc(sizeof(*w), GFP_KERNEL);

	if (!w)
		return -ENOMEM;
	INIT_DELAYED_WORK(&w->dwork, initref_work_done);
	__module_get(THIS_MODULE);
	schedule_delayed_work(&w->dwork, msecs_to_jiffies(g_hold_ms));
	return 0;
}

struct initref_timer {
	struct timer_list timer;
};

static void initref_timer_done(struct timer_list *t)
{
	struct initref_timer *it = timer_container_of(it, t, timer);

	kfree(it);
	pr_info("ref=timer: the timer drops its reference\n");
	module_put(THIS_MODULE);
}

static int initref_timer(void)
{
	struct initref_timer *t = kzalloc(sizeof(*t), GFP_KERNEL);

	if (!t)
		return -ENOMEM;
	timer_setup(&t->timer, initref_timer_done, 0);
	__module_get(THIS_MODULE);
	mod_timer(&t->timer, jiffies + msecs_to_jiffies(g_hold_ms));
	return 0;
}

/* A bug: the reference is never dropped. */
static int initref_leak(void)
{
	__module_get(THIS_MODULE);
	return 0;
}

/* The cases, by the name ref= gives. */
static const struct {
	const char *name;
	int (*take)(void);
} initref_cases[] = {
	{ "self",		initref_self },
	{ "firmware_nowait",	initref_firmware_nowait },
	{ "misc_open",		initref_misc_open },
	{ "work",		initref_work },
	{ "timer",		initref_timer },
	{ "leak",		initref_leak },
};

static int __init initref_init(void)
{
	int i, err;

	for (i = 0; i < ARRAY_SIZE(initref_cases); i++)
		if (!strcmp(g_ref, initref_cases[i].name))
			break;
	if (i == ARRAY_SIZE(initref_cases)) {
		pr_err("ref=%s: unknown value\n", g_ref);
		return -EINVAL;
	}

	if (initref_cases[i].take == initref_leak && !g_fail) {
		pr_err("ref=leak: only with fail=1 (the module could never be unloaded)\n");
		return -EINVAL;
	}

	err = misc_register(&initref_misc);
	if (err)
		return err;
	err = initref_cases[i].take();
	if (err) {
		pr_err("ref=%s during init: %pe\n", g_ref, ERR_PTR(err));
		misc_deregister(&initref_misc);
		return err;
	}
	pr_info("ref=%s during init: OK\n", g_ref);
	if (!g_fail)
		return 0;
	pr_info("ref=%s: init fails with -EIO\n", g_ref);
	misc_deregister(&initref_misc);
	return -EIO;
}

static void __exit initref_exit(void)
{
	misc_deregister(&initref_misc);
}

module_init(initref_init);
module_exit(initref_exit);

MODULE_DESCRIPTION("Takes a reference on itself during init, as livepatch, firmware and misc users do");
MODULE_LICENSE("GPL");
