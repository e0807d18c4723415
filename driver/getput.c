// SPDX-License-Identifier: GPL-2.0
/*
 * getput: what a try_module_get()/module_put() pair costs on a live module,
 * the path every open and close of a device pays.  A fix for a rare failed
 * init must not make it dearer.
 *
 * Writing a count to /sys/module/getput/parameters/run runs that many pairs
 * on this module (live by then) in each of g_threads kthreads at once, one
 * per CPU, then the same loop calling two empty functions instead, and
 * logs one line:
 *
 *   getput: 1 thread(s) x 2000000 pairs: 31.52 ns, 63.04 cycles per pair
 *
 * Each figure is the pair's own cost, the empty loop's taken away, on
 * local_clock() and on the TSC (get_cycles()).  Under QEMU's -icount
 * shift=0 the TSC counts one cycle per instruction, so there "cycles per
 * pair" is the pair's instruction count.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/completion.h>
#include <linux/cpumask.h>
#include <linux/err.h>
#include <linux/kthread.h>
#include <linux/math64.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/sched/clock.h>
#include <linux/timex.h>

static unsigned int g_threads = 1;
module_param_named(threads, g_threads, uint, 0444);
MODULE_PARM_DESC(threads, "Threads running the pairs at once, one per CPU (1 to the CPUs online). Default: 1");

#define GETPUT_MAX_THREADS	8

/* What one thread measured: the loop of pairs, then the empty loop. */
struct getput_cost {
	u64 ns, cycles;
};

struct getput_thread {
	struct task_struct *task;
	struct completion done;
	unsigned long pairs;
	struct getput_cost pair, empty;
	bool failed;
};

static DECLARE_COMPLETION(getput_go);

/* Called where the loop calls try_module_get() and module_put(). */
static noinline bool getput_get_nothing(struct module *mod)
{
	barrier();
	return mod;
}

static noinline void getput_put_nothing(struct module *mod)
{
	barrier();
}

static bool getput_pairs(unsigned long pairs)
{
	unsigned long i;

	for (i = 0; i < pairs; i++) {
		if (!try_module_get(THIS_MODULE))
			return false;
		module_put(THIS_MODULE);
	}
	return true;
}

static void getput_empty(unsigned long pairs)
{
	unsigned long i;

	for (i = 0; i < pairs; i++) {
		if (!getput_get_nothing(THIS_MODULE))
			return;
		getput_put_nothing(THIS_MODULE);
	}
}

static void getput_start(struct getput_cost *cost)
{
	cost->ns = local_clock();
	cost->cycles = get_cycles();
}

static void getput_stop(struct getput_cost *cost)
{
	cost->cycles = get_cycles() - cost->cycles;
	cost->ns = local_clock() - cost->ns;
}

/*
 * Runs on its own CPU (local_clock() and the TSC are read there), then
 * waits for kthread_stop(): a thread stopped before it ever ran would not
 * run at all.
 */
static int getput_thread_fn(void *data)
{
	struct getput_thread *t = data;

	wait_for_completion(&getput_go);
	getput_start(&t->pair);
	t->failed = !getput_pairs(t->pairs);
	getput_stop(&t->pair);
	getput_start(&t->empty);
	getput_empty(t->pairs);
	getput_stop(&t->empty);
	complete(&t->done);
	while (!kthread_should_stop())
		schedule_timeout_interruptible(1);
	return 0;
}

/* Hundredths of a unit per pair, the empty loop's taken away. */
static u64 getput_per_pair(u64 pair, u64 empty, unsigned long pairs)
{
	return div64_u64((pair > empty ? pair - empty : 0) * 100, pairs);
}

/* Run PAIRS pairs in each of THREADS threads at once; log their mean cost. */
static int getput_run(unsigned long pairs, unsigned int threads)
{
	struct getput_thread t[GETPUT_MAX_THREADS] = {};
	struct getput_cost pair = {}, empty = {};
	u64 ns, cycles;
	bool failed = false;
	unsigned int i;
	int err = 0;

	reinit_completion(&getput_go);
	for (i = 0; i < threads; i++) {
		t[i].pairs = pairs;
		init_completion(&t[i].done);
		t[i].task = kthread_create_on_cpu(getput_thread_fn, &t[i], i, "getput/%u");
		if (IS_ERR(t[i].task)) {
			/* Those started run, and are waited for. */
			err = PTR_ERR(t[i].task);
			threads = i;
			break;
		}
		wake_up_process(t[i].task);
	}
	complete_all(&getput_go);
	for (i = 0; i < threads; i++) {
		wait_for_completion(&t[i].done);
		kthread_stop(t[i].task);
		pair.ns += t[i].pair.ns;
		pair.cycles += t[i].pair.cycles;
		empty.ns += t[i].empty.ns;
		empty.cycles += t[i].empty.cycles;
		failed |= t[i].failed;
	}
	if (err)
		return err;
	if (failed) {
		pr_err("try_module_get() failed on a live module\n");
		return -EIO;
	}
	/* The sums over the threads, each of which ran PAIRS pairs. */
	ns = getput_per_pair(pair.ns, empty.ns, pairs * threads);
	cycles = getput_per_pair(pair.cycles, empty.cycles, pairs * threads);
	pr_info("%u thread(s) x %lu pairs: %llu.%02llu ns, %llu.%02llu cycles per pair\n",
		threads, pairs, div_u64(ns, 100), ns % 100, div_u64(cycles, 100), cycles % 100);
	return 0;
}

static int getput_set_run(const char *val, const struct kernel_param *kp)
{
	unsigned long pairs;
	int err;

	err = kstrtoul(val, 0, &pairs);
	if (err || !pairs || pairs > ULONG_MAX / 100) {
		pr_err("run=%s: a count of pairs from 1 to %lu\n", val, ULONG_MAX / 100);
		return -EINVAL;
	}
	return getput_run(pairs, g_threads);
}

static const struct kernel_param_ops getput_run_ops = {
	.set	= getput_set_run,
};
module_param_cb(run, &getput_run_ops, NULL, 0200);
MODULE_PARM_DESC(run, "Write N: run N pairs in each thread and log what one costs");

static int __init getput_init(void)
{
	unsigned int cpus = min(num_online_cpus(), GETPUT_MAX_THREADS);

	if (!g_threads || g_threads > cpus) {
		pr_err("threads=%u: from 1 to %u (the CPUs online)\n", g_threads, cpus);
		return -EINVAL;
	}
	return 0;
}

static void __exit getput_exit(void)
{
}

module_init(getput_init);
module_exit(getput_exit);

MODULE_DESCRIPTION("Measures a try_module_get()/module_put() pair on a live module");
MODULE_LICENSE("GPL");
