# make soak's checks after each cycle and at its end: kernel reports and
# leaks.

# soak_reports: append to /tmp/soak.reports the report lines logged since
# the last call (the log is drained: 1000 cycles would wrap it); fails
# when there was one.  The patterns are harness/verdict.py's, as globs.
soak_reports() {
	local line found=1

	dmesg -c > /tmp/soak.klog
	[ "${SOAK_UNWIND:-}" = "" ] || soak_unwind_time >> /tmp/soak.unwind
	while IFS= read -r line; do
		case $line in
		*BUG:* | *WARNING:* | *Oops* | *KASAN* | *UBSAN* | *"kernel BUG at"* | \
		*"general protection"* | *"list_add corruption"* | *"list_del corruption"* | \
		*refcount_t:* | *"possible circular"* | *"possible recursive"* | \
		*"inconsistent lock"* | *"INFO: task "*" blocked"* | *rcu_*stall* | \
		*kmemleak:*"new suspected"*)
			echo "$line" >> /tmp/soak.reports
			found=0
			;;
		esac
	done < /tmp/soak.klog
	return $found
}

# soak_stage WHAT: the end of the soak has come to WHAT (to the console).
soak_stage() {
	echo "soak: end: $1" > /dev/kmsg
}

# soak_kmemleak: "LEAKS KNOWN", the objects two scans call leaked
# (kmemleak reports an object once it stayed unreferenced over two scans),
# and how many of them are a leak known upstream: SLUB's sysfs_slab_add()
# leaks a kmem_cache's kobject name when kobject_init_and_add() fails
# (CVE-2024-25740, fixed by 2420baa8e046 "mm/slab: Allow cache creation to
# proceed even if sysfs registration fails", not in 6.1.192); failslab hits
# it through bioset_init() in __alloc_disk_node().  The first two other
# reports go to stderr (the step's diagnostics).
soak_kmemleak() {
	local f=/sys/kernel/debug/kmemleak

	[ -e $f ] || { echo "n/a 0"; return; }
	echo scan > $f
	sleep 1
	echo scan > $f
	awk '
		function done() { if (!n) return; if (known) k++; else if (++other <= 2) printf "%s", text > "/dev/stderr" }
		/^unreferenced object/ { done(); n++; known = 0; text = "" }
		/sysfs_slab_add/ { known = 1 }
		{ text = text $0 "\n" }
		END { done(); print n + 0 - k, k + 0 }
	' $f
}
