# make soak's checks after each cycle and at its end: kernel reports and
# leaks.

# soak_reports [final]: append to /tmp/soak.reports the report lines
# logged since the last call (the log is drained: 1000 cycles would wrap
# it), and kmemleak's; succeeds when there was one (fails when there was
# none).  A report line is one whose message starts with a crash title
# (crash-titles: the host's list), unless it is a known report
# (known-reports: the host's list too).  A known report's title whose
# trace is not all logged yet waits for the next call (/tmp/soak.pending),
# but for the final one.
soak_reports() {
	touch /tmp/soak.pending
	{ cat /tmp/soak.pending; dmesg -c; } > /tmp/soak.klog
	[ "${SOAK_UNWIND:-}" = "" ] || soak_unwind_time >> /tmp/soak.unwind
	[ -s /tmp/soak.titles ] || soak_titles > /tmp/soak.titles
	soak_unknown_reports /tmp/soak.titles /tmp/soak.pending "${1:-}" < /tmp/soak.klog > /tmp/soak.new
	cat /tmp/soak.new >> /tmp/soak.reports
	[ -s /tmp/soak.new ]
}

# soak_titles: an extended regex a line, for a dmesg line that starts a
# report: each crash title after the timestamp, and kmemleak's.
soak_titles() {
	grep -v -e '^#' -e '^$' "${GUEST_LIB:-/lib/raceblk}/crash-titles" | sed 's/^/^\\[[ 0-9.]*\\] (/; s/$/)/'
	echo '^\[[ 0-9.]*\] kmemleak:.*new suspected'
}

# soak_unknown_reports TITLES PENDING [final]: the lines of stdin (a dmesg)
# that match one of the extended regexes in the file TITLES, but for a
# known report's title: one of known-reports whose function the report's
# trace names before its closing line of "=" (as the host's verdict.py
# reads them).  A known report's title whose closing line is not there yet
# goes to the file PENDING, with all after it, unless final.
soak_unknown_reports() {
	awk -v titles="$1" -v pending="$2" -v final="$3" -v known="${GUEST_LIB:-/lib/raceblk}/known-reports" '
		# 1: known; 0: not; 2: a known title whose trace goes on.
		function is_known(i, message,   k, m) {
			for (k = 1; k <= nk; k++) {
				if (index(message, kt[k]) != 1)
					continue
				for (m = i + 1; m <= n && line[m] !~ /\] =+$/; m++)
					if (index(line[m], kf[k]))
						return 1
				if (m > n && final == "")
					return 2
			}
			return 0
		}
		BEGIN {
			while ((getline p < titles) > 0)
				pat[++np] = p
			while ((getline p < known) > 0) {
				if (p ~ /^#/ || index(p, "|") == 0)
					continue
				kt[++nk] = substr(p, 1, index(p, "|") - 1)
				kf[nk] = substr(p, index(p, "|") + 1)
				sub(/[ \t]+$/, "", kt[nk])
				sub(/^[ \t]+/, "", kf[nk])
			}
		}
		{ line[++n] = $0 }
		END {
			printf "" > pending
			for (i = 1; i <= n; i++)
				for (j = 1; j <= np; j++)
					if (line[i] ~ pat[j]) {
						message = line[i]
						sub(/^\[[ 0-9.]*\] /, "", message)
						seen = is_known(i, message)
						if (seen == 2) {
							for (; i <= n; i++)
								print line[i] > pending
							break
						}
						if (!seen)
							print line[i]
						break
					}
		}'
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
