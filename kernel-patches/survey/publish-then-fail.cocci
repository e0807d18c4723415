// SPDX-License-Identifier: GPL-2.0
/// Module init functions that publish something others can open, and so
/// take a reference on the module through (a disk, a misc or character
/// device, a tty driver, a net device, a SCSI host's scan, a filesystem),
/// and can fail afterwards: if the holder's reference outlives the failed
/// init, the module is freed under it.
///
/// An init function is module_init()'s, or an *_initcall()'s in a file
/// with a module_exit() (a module's, once built as one).
///
/// A publication is a call of one of PUBLISHERS, or of a function of the
/// same file that makes one (at any depth).  "Can fail afterwards": a path
/// from the publication passes a later call whose result the code uses
/// (assigned, tested or returned) and reaches a return of something other
/// than 0.  A heuristic: it does not know that a variable returned is 0,
/// and a failure of the publication itself counts when a loop published
/// before it (a driver's devices added one by one).
//
// Confidence: Moderate
// Options: --macro-file macros.h

virtual report

@initialize:python@
@@
import linecache
import re

PUBLISHERS = {"add_disk", "device_add_disk", "misc_register", "cdev_add",
	      "cdev_device_add", "register_netdev", "register_netdevice",
	      "scsi_scan_host", "scsi_add_device", "__register_chrdev",
	      "register_chrdev", "tty_register_driver", "register_filesystem",
	      "input_register_device"}
# (file, function) -> the names it calls.
calls = {}
# (file, init function) -> (publication line, publisher, later call line,
# later call, return line, value returned): the first publication's.
found = {}

def publishes(file, name):
	"""Whether NAME, in FILE, calls a publisher at any depth: a walk of
	the calls, each function once."""
	todo, seen = [name], set()
	while todo:
		caller = todo.pop()
		if caller in PUBLISHERS:
			return True
		if caller not in seen:
			seen.add(caller)
			todo.extend(calls.get((file, caller), ()))
	return False

def publishes_anywhere(name):
	"""A cheap first test: spatch may read several files at once."""
	return name in PUBLISHERS or any(publishes(file, name) for file, caller in calls
					   if caller == name)

def result_used(pos, name):
	line = linecache.getline(pos.file, int(pos.line))
	return re.search(r"(=|\bif\s*\(|\bwhile\s*\(|\breturn\b|!|&&|\|\|).*\b%s\s*\("
			 % re.escape(name), line)

// In a module every *_initcall() is module_init(): run/ reads a file that
// declares its init so only when it also has a module_exit().
@initfn@
identifier fn;
declarer name module_init, device_initcall, late_initcall, subsys_initcall,
	      fs_initcall;
@@
(
module_init(fn);
|
device_initcall(fn);
|
late_initcall(fn);
|
subsys_initcall(fn);
|
fs_initcall(fn);
)

@call@
identifier X;
position px;
@@
X@px(...)

@script:python@
X << call.X;
px << call.px;
@@
calls.setdefault((px[0].file, px[0].current_element), set()).add(X)

@fails exists@
identifier initfn.fn;
identifier X : script:python () { publishes_anywhere(X) };
identifier Y;
expression E;
position p1, p2, p3;
@@
fn(...) { ... when any
X@p1(...)
... when any
Y@p3(...)
... when any
return@p2 E;
}

@script:python depends on report@
p1 << fails.p1;
p2 << fails.p2;
p3 << fails.p3;
fn << initfn.fn;
X << fails.X;
Y << fails.Y;
E << fails.E;
@@
if E.strip() != "0" and publishes(p1[0].file, X) and result_used(p3[0], Y):
	here = (int(p1[0].line), X, int(p3[0].line), Y, int(p2[0].line), E)
	key = (p1[0].file, fn)
	# The first publication; after it, the first later call.
	order = lambda f: (f[0], f[2] < f[0], f[2], f[4])
	if key not in found or order(here) < order(found[key]):
		found[key] = here

@finalize:python depends on report@
@@
for (file, fn), (line, X, yline, Y, rline, E) in sorted(found.items()):
	print("%s:%d: %s(): %s() publishes; %s() at line %d can fail after it (returns %s, line %d)"
	      % (file, line, fn, X, Y, yline, E, rline))
