# make soak's checks after each cycle and at its end: kernel reports and
# leaks.

# soak_reports: append to /tmp/soak.reports the report lines logged since
# the last call (the log is drained: 1000 cycles would wrap it), and
# kmemleak's; succeeds when there was one (fails when there was none).  A report line is one whose
# message starts with a crash title (crash-titles: the host's list).
soak_reports() {
	dmesg -c > /tmp/soak.klog
	[ "${SOAK_UNWIND:-}" = "" ] || soak_unwind_time >> /tmp/soak.unwind
	if [ ! -s /tmp/soak.titles ]; then
		grep -v -e '^#' -e '^$' /lib/raceblk/crash-titles | sed 's/^/^\\[[ 0-9.]*\\] (/; s/$/)/' > /tmp/soak.titles
		echo '^\[[ 0-9.]*\] kmemleak:.*new suspected' >> /tmp/soak.titles
	fi
	grep -E -f /tmp/soak.titles /tmp/soak.klog >> /tmp/soak.reports || return 1
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
