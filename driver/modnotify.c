// SPDX-License-Identifier: GPL-2.0
/*
 * modnotify: log every module notifier event, so a test can check the exact
 * sequence a module goes through (COMING, LIVE, GOING) when its init
 * succeeds, fails, or fails after the module was made live.
 *
 * Each event is one line: "modnotify: <module> <STATE>".
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/notifier.h>

static const char * const modnotify_state_names[] = {
	[MODULE_STATE_LIVE]	= "LIVE",
	[MODULE_STATE_COMING]	= "COMING",
	[MODULE_STATE_GOING]	= "GOING",
	[MODULE_STATE_UNFORMED]	= "UNFORMED",
};

static int modnotify_event(struct notifier_block *nb, unsigned long state,
			   void *data)
{
	struct module *mod = data;

	if (state < ARRAY_SIZE(modnotify_state_names))
		pr_info("%s %s\n", mod->name, modnotify_state_names[state]);
	else
		pr_info("%s state %lu\n", mod->name, state);
	return NOTIFY_DONE;
}

static struct notifier_block modnotify_nb = {
	.notifier_call = modnotify_event,
};

static int __init modnotify_init(void)
{
	return register_module_notifier(&modnotify_nb);
}

static void __exit modnotify_exit(void)
{
	unregister_module_notifier(&modnotify_nb);
}

module_init(modnotify_init);
module_exit(modnotify_exit);

MODULE_DESCRIPTION("Log module notifier events for the raceblk harness");
MODULE_LICENSE("GPL");
