# Steps a scenario row can name.  step_NAME [ARG] prints what it saw (each
# line becomes a KTAP diagnostic) and returns 0 when the check holds.
# Globals: PARAMS (module parameters), IMAGE (image name).

KO=/lib/modules/raceblk.ko
GOLDEN=/lib/raceblk/images

# select_disk: DISK, the disk raceblk makes (raceblk0), or with
# backend=scsi the disk sd makes of its LUN (sda: no other SCSI disk);
# PART, what comes between its name and a partition number (raceblk0p1,
# sda1); SCAN, how the kernel's scan line names a partition ("raceblk0: p1"
# but "sda: sda1").
select_disk() {
	case " $PARAMS " in
	*" backend=scsi "*) DISK=sda PART="" SCAN=sda ;;
	*) DISK=raceblk0 PART=p SCAN=p ;;
	esac
}

# poll SECONDS COMMAND...: run COMMAND every 20 ms until it succeeds, for
# up to SECONDS; fails if it never does.
poll() {
	local deadline=$(($(date +%s) + $1))

	shift
	until "$@"; do
		[ "$(date +%s)" -lt "$deadline" ] || return 1
		sleep 0.02
	done
}

# oopsed_tasks: the "CPU: 0 PID: N Comm: COMM" line of each oops, the
# first such line within three after its header ("Oops: 0000 [#1]"): a
# line another CPU logged meanwhile may come between (6.12's failed
# dependant load, "Unknown symbol", did).  A WARNING or a KASAN report
# prints the same line but lets the task go on.
oopsed_tasks() {
	dmesg | awk '/\[#[0-9]+\]/ { n = 4; next }
		     n > 0 && /Comm: / { print; n = 0; next }
		     { if (n > 0) n-- }'
}

# killed_by_oops COMM [PID]: the kernel oopsed in a task named COMM (with
# that PID).  A task an oops killed may hang in its exit forever, so its
# exit cannot be waited for.
killed_by_oops() {
	oopsed_tasks | grep -q "${2:+PID: $2 }Comm: $1 "
}

# task_state PID: PID's state letter from /proc/PID/stat (R, S, D, Z...),
# nothing when there is no such task.
task_state() {
	local state=""

	{ read -r _ _ state _ < "/proc/$1/stat"; } 2>/dev/null
	echo "$state"
}

# fate PID COMM: what became of PID, a task named COMM that did not answer
# in time: "died" when an oops killed it (it may then hang in its exit)
# or PID is gone; "hung in FUNCTION" when it sleeps and
# cannot be woken (state D; FUNCTION is its wchan: on 6.12 a holder's
# close waits there for the disk's open_mutex, which the loader held when
# it oopsed); else "silent (STATE)", which no row expects.
fate() {
	local state

	if killed_by_oops "$2" "$1"; then
		echo died
		return
	fi
	state=$(task_state "$1")
	case $state in
	"" | Z | X) echo died ;;
	D) echo "hung in $(cat "/proc/$1/wchan" 2>/dev/null)" ;;
	*) echo "silent ($state)" ;;
	esac
}

# fate_is EXPECTED GOT: EXPECTED is died or hung, and GOT is that fate.
fate_is() {
	case $1 in
	died | hung) [ "${2%% *}" = "$1" ] ;;
	*) false ;;
	esac
}

# process_settled PID COMM: PID has exited, or an oops killed it.
process_settled() {
	! kill -0 "$1" 2>/dev/null || killed_by_oops "$2" "$1"
}

# settle PID COMM: wait up to SETTLE_SECONDS (20) for PID, a background
# task named COMM, to exit, and reap it: returns its exit status.  When
# it has not exited, or an oops killed it, SETTLED is its fate (see fate)
# and settle returns 255.  Never a plain "wait": a task an oops killed may
# hang in its exit for good, and the step would then wait for the guest's
# timeout.  Not for $(...): a subshell cannot reap its parent's child.
settle() {
	SETTLED=
	poll "${SETTLE_SECONDS:-20}" process_settled "$1" "$2" || true
	if kill -0 "$1" 2>/dev/null || killed_by_oops "$2" "$1"; then
		SETTLED=$(fate "$1" "$2")
		return 255
	fi
	wait "$1"
}

# modctl_answer PID FILE: settle the background modctl PID; ANSWER is what
# it wrote to FILE, or its fate when it wrote nothing.
modctl_answer() {
	settle "$1" modctl || true
	ANSWER=$(cat "$2")
	[ -n "$ANSWER" ] || ANSWER=$SETTLED
}

# or_died COMM ANSWER: ANSWER, or "died" when there is none and an oops
# killed a task named COMM.
or_died() {
	if [ -z "$2" ] && killed_by_oops "$1"; then
		echo died
	else
		echo "$2"
	fi
}

# modctl_expect EXPECTED ARGS...: run modctl ARGS, say what it gave
# ("died": an oops killed it).
modctl_expect() {
	local expected=$1 got

	shift
	got=$(or_died modctl "$(modctl "$@")")
	echo "modctl $*: $got, expected $expected"
	[ "$got" = "$expected" ]
}

# load=ERRNO|died: finit_module() once with the row's parameters gives
# ERRNO, or an oops kills the loader (6.12: the partition scan's deferred
# close, after a failed init freed the module).
step_load() {
	# shellcheck disable=SC2086 # PARAMS is a word list
	modctl_expect "$1" load "$KO" $PARAMS
}

# unload=ERRNO: delete_module(raceblk, O_NONBLOCK) gives ERRNO.
step_unload() {
	modctl_expect "$1" unload raceblk
}

# force_unload=ERRNO: delete_module(raceblk, O_NONBLOCK | O_TRUNC), which
# is rmmod -f, gives ERRNO.
step_force_unload() {
	modctl_expect "$1" unload raceblk force
}

# wait_unload=ERRNO: delete_module(raceblk) without O_NONBLOCK, which is
# rmmod --wait, gives ERRNO (6.1 never waits).
step_wait_unload() {
	modctl_expect "$1" unload raceblk wait
}

# unload_twice: two delete_module(raceblk) at once: exactly one frees it,
# the other finds it being freed (EBUSY) or gone (ENOENT), no crash.
step_unload_twice() {
	local a b pid1

	modctl unload raceblk > /tmp/unload.1 &
	pid1=$!
	modctl unload raceblk > /tmp/unload.2
	modctl_answer "$pid1" /tmp/unload.1
	a=$ANSWER b=$(cat /tmp/unload.2)
	echo "two rmmods at once: $a and $b"
	case "$a $b" in
	"OK EBUSY" | "EBUSY OK" | "OK ENOENT" | "ENOENT OK") ;;
	*) return 1 ;;
	esac
}

# notifier: load modnotify, which logs every module notifier event.
step_notifier() {
	modctl_expect OK load /lib/modules/modnotify.ko
}

# notify=EVENT,EVENT...: the notifier events raceblk got, in order.
step_notify() {
	local got

	got=$(dmesg | sed -n 's/.*modnotify: raceblk \([A-Z]*\)$/\1/p' | tr '\n' , | sed 's/,$//')
	echo "notifier events for raceblk: ${got:-none}, expected $1"
	[ "$got" = "$1" ]
}

# found_partitions: "number start size" of each partition sysfs shows.
found_partitions() {
	local part start size

	for part in "/sys/block/$DISK/$DISK$PART"[0-9]*; do
		[ -e "$part" ] || continue
		read -r start < "$part/start"
		read -r size < "$part/size"
		echo "${part#"/sys/block/$DISK/$DISK$PART"} $start $size"
	done | sort -n
}

# golden_table: the image's golden table for this kernel's series
# (IMAGE.SERIES.expected), or for 6.1 (IMAGE.expected).
golden_table() {
	local series_table=$GOLDEN/$IMAGE.${VARIANT%%-*}.expected

	if [ -f "$series_table" ]; then
		echo "$series_table"
	else
		echo "$GOLDEN/$IMAGE.expected"
	fi
}

# golden_partitions: "number start size" of each partition the image's
# golden table lists (comments and blank lines dropped).
golden_partitions() {
	awk '{ sub(/#.*/, "") } NF { print $1, $2, $3 }' "$(golden_table)"
}

# device_of NAME: "disk" is the whole disk; "part" its first partition in
# the golden table, or the whole disk when there is none; anything else
# a device name as it is.
device_of() {
	local nr

	case $1 in
	disk) echo "$DISK" ;;
	part)
		nr=$(golden_partitions | awk 'NR == 1 { print $1 }')
		echo "$DISK${nr:+$PART$nr}"
		;;
	*) echo "$1" ;;
	esac
}

# table_differences EXPECTED FOUND KIB: one line per partition where the
# tables (files of "number start size") differ, in partition order, and
# where /proc/partitions (KIB: "number KiB") disagrees with sysfs (awk
# counts in doubles: not for sizes of 16 digits and more, as a partition
# past the end can have).
table_differences() {
	awk '
		FILENAME == ARGV[1] { want[$1] = $2 "+" $3; nr[$1] = 1; next }
		FILENAME == ARGV[2] { got[$1] = $2 "+" $3; size[$1] = $3; nr[$1] = 1; next }
		{ kib[$1] = $2 }
		END {
			for (n in nr) {
				if (want[n] != got[n])
					printf "%d p%s: expected %s, found %s\n", n, n,
						want[n] == "" ? "none" : want[n], got[n] == "" ? "none" : got[n]
				else if (length(size[n]) < 16 && kib[n] != int(size[n] / 2))
					printf "%d p%s: /proc/partitions says %s KiB, sysfs %s sectors\n", n, n,
						kib[n] == "" ? "nothing" : kib[n], size[n]
			}
		}
	' "$1" "$2" "$3" | sort -n | cut -d' ' -f2-
}

# partitions: sysfs and /proc/partitions show exactly the golden table;
# otherwise the differences are printed row by row (start+size, sectors).
step_partitions() {
	local differences

	golden_partitions > /tmp/expected.table
	found_partitions > /tmp/found.table
	awk -v p="$DISK$PART" 'index($4, p) == 1 && length($4) > length(p) { print substr($4, length(p) + 1), $3 }' \
		/proc/partitions > /tmp/found.kib
	differences=$(table_differences /tmp/expected.table /tmp/found.table /tmp/found.kib)
	if [ -n "$differences" ]; then
		echo "partition table differs from the golden one ($(basename "$(golden_table)")):"
		echo "$differences" | sed 's/^/  /'
		return 1
	fi
	echo "$(wc -l < /tmp/found.table) partitions as golden:" \
		"$(head -n 8 /tmp/found.table | tr '\n' ';')$([ "$(wc -l < /tmp/found.table)" -le 8 ] || echo ...)"
}

# data: the disk and every partition read back the bytes of the image
# (their md5 in the image's .sums), and a stamped partition starts with its
# own stamp ("raceblk IMAGE pN sector START").  One md5sum and one head for
# them all: a process costs milliseconds under TCG.
step_data() {
	local devices stamped problems

	# The disk and the partitions this kernel's golden table has (fixed
	# makes fewer of a looping EBR chain than the image's sums list).
	golden_partitions | cut -d' ' -f1 > /tmp/want.parts
	awk 'FILENAME == ARGV[1] { keep[$1] = 1; next } $1 == 0 || keep[$1]' \
		/tmp/want.parts "$GOLDEN/$IMAGE.sums" > /tmp/want.sums
	awk -v d="/dev/$DISK" -v p="$PART" '{ print ($1 ? d p $1 : d), $2 }' \
		/tmp/want.sums > /tmp/want.md5
	awk -v d="/dev/$DISK" -v p="$PART" 'NF > 2 { dev = $1 ? d p $1 : d; $1 = $2 = ""; sub(/^ +/, ""); print dev, $0 }' \
		/tmp/want.sums > /tmp/want.stamp
	devices=$(cut -d' ' -f1 /tmp/want.md5)
	stamped=$(cut -d' ' -f1 /tmp/want.stamp)
	# shellcheck disable=SC2086 # device lists
	md5sum $devices | awk '{ print $2, $1 }' > /tmp/got.md5
	: > /tmp/got.stamp
	# shellcheck disable=SC2086
	[ -z "$stamped" ] || head -v -n 1 $stamped |
		awk '/^==> .* <==$/ { dev = $2; first = 1; next } first { print dev, $0; first = 0 }' | tr -d '\0' > /tmp/got.stamp
	problems=$(awk '
		FILENAME == ARGV[1] { md5[$1] = $2; next }
		FILENAME == ARGV[2] { dev = $1; sub(/^[^ ]+ /, ""); stamp[dev] = $0; next }
		FILENAME == ARGV[3] { if (md5[$1] != $2) print $1 ": md5 " md5[$1] ", expected " $2; next }
		{ dev = $1; sub(/^[^ ]+ /, "")
		  if (stamp[dev] != $0) print dev ": first sector says \"" stamp[dev] "\", expected \"" $0 "\"" }
	' /tmp/got.md5 /tmp/got.stamp /tmp/want.md5 /tmp/want.stamp 2>&1)
	if [ -n "$problems" ]; then
		echo "$problems"
		return 1
	fi
	echo "$DISK and $(($(wc -l < /tmp/want.md5) - 1)) partitions read back as in the image," \
		"$(wc -l < /tmp/want.stamp) with their own stamp"
}

# sparse_image=NAME:MIB: a sparse image of MIB MiB of zeros under
# /lib/firmware/raceblk/NAME.img.  The root is ramfs: a hole costs nothing
# until something reads it, and then each page read stays in memory, so
# only stat looks at it here.
step_sparse_image() {
	local file=/lib/firmware/raceblk/${1%%:*}.img

	truncate -s "${1#*:}M" "$file" && echo "$file: $(stat -c %s "$file") bytes, sparse"
}

# no_partitions: the disk is there, without partitions.
step_no_partitions() {
	local found

	found=$(found_partitions)
	grep " $DISK" /proc/partitions
	[ -e /sys/block/"$DISK" ] || { echo "no $DISK"; return 1; }
	if [ -n "$found" ]; then
		echo "partitions found:"
		echo "$found"
		return 1
	fi
	echo "$DISK has no partitions"
}

# open_disk: open the whole disk and read its first sector.
step_open_disk() {
	dd if=/dev/"$DISK" of=/dev/null bs=512 count=1 2>&1 | head -n 1
}

# rereadpt: ask the kernel to scan the partition table again (BLKRRPART).
step_rereadpt() {
	blockdev --rereadpt /dev/"$DISK" && echo "BLKRRPART on $DISK: OK"
}

# no_disk: the disk and its partitions are gone.
step_no_disk() {
	if [ -e /sys/block/"$DISK" ] || grep -q " $DISK" /proc/partitions; then
		echo "$DISK still present:"
		grep " $DISK" /proc/partitions
		return 1
	fi
	echo "no $DISK in /sys/block nor /proc/partitions"
}

# no_module: raceblk is not loaded (freed, not left behind).
step_no_module() {
	if grep '^raceblk ' /proc/modules; then
		echo "raceblk is still in /proc/modules"
		return 1
	fi
	echo "raceblk not in /proc/modules"
}

# scan_line: the kernel's partition scan report for the disk, with its
# dmesg line number: "N:[time]  raceblk0: p1 p2 < p5 p6 >".
scan_line() {
	dmesg | grep -n "^\[[ 0-9.]*\]  $DISK:" | head -n 1
}

# scanned_in_init: the kernel listed the golden partitions while scanning
# the disk, before init failed.  (A disk without partitions gives no scan
# line; then no scan line may name one.)
step_scanned_in_init() {
	local expected scan found fail

	expected=$(golden_partitions | awk -v s="$SCAN" '{ printf " %s%s", s, $1 }')
	scan=$(scan_line)
	found=$(echo "${scan#*:}" | sed 's/^\[[ 0-9.]*\]  [^:]*://' | grep -o "${SCAN}[0-9]*" |
		awk '{ printf " %s", $1 }')
	fail=$(dmesg | grep -n "raceblk: failing init at" | head -n 1)
	echo "scan: ${scan#*:}"
	echo "fail: ${fail#*:}"
	echo "partitions scanned:${found:- none}, golden:${expected:- none}"
	[ "$found" = "$expected" ] && [ -n "$fail" ] || return 1
	[ -z "$expected" ] || [ "${scan%%:*}" -lt "${fail%%:*}" ]
}

# not_scanned: the kernel never listed partitions of the disk.
step_not_scanned() {
	if dmesg | grep " $DISK: $SCAN"; then
		echo "partitions of $DISK were scanned"
		return 1
	fi
	echo "no partition scan of $DISK in the kernel log"
}

# scsi_scan=sync|async: the SCSI midlayer's scan order for the hosts added
# from now on (scsi_mod.scan, writable at run time).
step_scsi_scan() {
	echo "$1" > /sys/module/scsi_mod/parameters/scan || return 1
	echo "scsi_mod.scan: $(cat /sys/module/scsi_mod/parameters/scan)"
}

# scsi_debug=ERRNO: load the in-tree scsi_debug, one 4 MiB disk with 4
# partitions (it writes their MBR itself): finit_module() gives ERRNO.  The
# disk is sda.  The loader runs async_synchronize_full() before it returns
# (scsi_debug does not ask for async probing), so sd's probe is over then.
step_scsi_debug() {
	DISK=sda PART="" SCAN=sda
	modctl_expect "$1" load /lib/modules/scsi_debug.ko num_parts=4 dev_size_mb=4
}

# ata_piix=ERRNO: load libata's PIIX driver (QEMU's pc machine has the
# scenario's image as its IDE disk, machine=pc-ide): finit_module() gives
# ERRNO.  The disk is sda.  libata probes its ports asynchronously; the
# loader waits for that before it returns.
step_ata_piix() {
	DISK=sda PART="" SCAN=sda
	modctl_expect "$1" load /lib/modules/ata_piix.ko
}

# sd_partitions=N: sd shows N partitions of sda.
step_sd_partitions() {
	local n

	n=$(found_partitions | wc -l)
	grep ' sda' /proc/partitions
	echo "sda has $n partitions, expected $1"
	[ "$n" = "$1" ]
}

# sd_scan=MODULE:WHEN: when sd's partition scan of sda read the table,
# against MODULE's notifier events (the notifier step logs them): WHEN is
# in_init (before MODULE went LIVE), after_init, none (no scan read it:
# the open was refused), or a,b for either.
step_sd_scan() {
	local module=${1%%:*} want=${1#*:} scan live when

	scan=$(dmesg | grep -n '^\[[ 0-9.]*\]  sda: sda1' | head -n 1)
	live=$(dmesg | grep -n "modnotify: $module LIVE" | head -n 1)
	echo "scan: ${scan:-none}"
	echo "live: ${live:-none}"
	[ -n "$live" ] || return 1
	when=none
	[ -z "$scan" ] || when=after_init
	[ -z "$scan" ] || [ "${scan%%:*}" -gt "${live%%:*}" ] || when=in_init
	echo "sd read the partitions: $when (expected $want)"
	case ",$want," in
	*",$when,"*) ;;
	*) return 1 ;;
	esac
}

# unload_mod=MODULE:ERRNO: delete_module(MODULE, O_NONBLOCK) gives ERRNO.
step_unload_mod() {
	modctl_expect "${1#*:}" unload "${1%%:*}"
}

# force_unload_mod=MODULE:ERRNO: delete_module(MODULE, O_NONBLOCK|O_TRUNC)
# (rmmod --force) gives ERRNO.
step_force_unload_mod() {
	modctl_expect "${1#*:}" unload "${1%%:*}" force
}

# sd_attached: raceblk backend=scsi scanned its host during init and sd
# bound to its LUN before init went on (raceblk logs which).
step_sd_attached() {
	local line

	line=$(dmesg | grep -E 'raceblk: host[0-9]+: scanned, sd ' | head -n 1)
	echo "${line:-no scan line from raceblk}"
	case $line in
	*"sd attached") ;;
	*) return 1 ;;
	esac
}

# refused=MODULE: try_module_get() refused MODULE during its init, with
# the warning that names it and the caller.
step_refused() {
	local line

	line=$(dmesg | grep -F "$1: try_module_get() from" | head -n 1)
	echo "warning: ${line:-no try_module_get() warning naming $1}"
	[ -n "$line" ]
}

# module_marked MODULE STATE FLAGS INITSTATE ATTR TEXT...: MODULE is listed
# as STATE with FLAGS (its /proc/modules flags end so), its initstate is
# INITSTATE, /sys/module/MODULE/ATTR reads 1, and for each TEXT the log has
# a line of MODULE's ("MODULE: ...") with TEXT in it.
module_marked() {
	local module=$1 state=$2 flags=$3 initstate_wanted=$4 attr=$5 line found proc initstate flag status=0

	shift 5
	for line in "$@"; do
		found=$(dmesg | grep -F "] $module: " | grep -F "$line" | head -n 1)
		echo "log: ${found:-no line \"$module: ...$line...\"}"
		[ -n "$found" ] || status=1
	done
	proc=$(grep "^$module " /proc/modules)
	initstate=$(cat "/sys/module/$module/initstate" 2>&1)
	flag=$(cat "/sys/module/$module/$attr" 2>&1)
	echo "/proc/modules: ${proc:-no $module}"
	echo "/sys/module/$module: initstate $initstate, $attr $flag"
	case $proc in *" $state "*"$flags)") ;; *) status=1 ;; esac
	[ "$initstate" = "$initstate_wanted" ] || status=1
	[ "$flag" = 1 ] || status=1
	return $status
}

# stuck: raceblk's init failed after it was made live (rusty), so it is
# kept for good: logged as unsafe and stuck, Live with the "!" flag.
step_stuck() {
	module_marked raceblk Live '!' live unsafe \
		"cannot be unloaded due to unsafe usage" "module is now stuck"
}

# mod_kept=MODULE: MODULE's init failed while something held it (fixed),
# so it is kept until the last holder lets go: logged, Unloading with the
# "!" flag, /sys/module/MODULE/kept 1.
step_mod_kept() {
	module_marked "$1" Unloading '!-' going kept "init failed with" \
		"reference(s) held it: kept until the last one is dropped"
}

# kept: mod_kept=raceblk.
step_kept() {
	step_mod_kept raceblk
}

# mod_reaped=MODULE: MODULE, kept after its failed init, leaves
# /proc/modules by itself (no rmmod) within 10 s of this step, as the log
# says it does once its last holder lets go.
step_mod_reaped() {
	local waited=0 line

	while grep -q "^$1 " /proc/modules; do
		if [ "$waited" -ge 10000 ]; then
			echo "$1 still in /proc/modules after 10 s"
			grep "^$1 " /proc/modules
			return 1
		fi
		sleep 0.05
		waited=$((waited + 50))
	done
	line=$(dmesg | grep -F "$1: its last holder let go: freeing it" | tail -n 1)
	echo "$1 left /proc/modules without rmmod, within ${waited} ms"
	echo "log: ${line:-no line \"$1: its last holder let go: freeing it\"}"
	[ -n "$line" ]
}

# reaped: mod_reaped=raceblk.
step_reaped() {
	step_mod_reaped raceblk
}

# released: raceblk was freed when its init failed (nobody held it then),
# or it was kept (someone did) and went by itself once they let go.
step_released() {
	if dmesg | grep -F "raceblk: init failed with" |
		grep -qF "reference(s) held it: kept until the last one is dropped"; then
		echo "raceblk was kept: something held it when its init failed"
		step_reaped
		return
	fi
	if grep '^raceblk ' /proc/modules; then
		echo "raceblk is still loaded, and was never said kept"
		return 1
	fi
	echo "raceblk was freed when its init failed: nobody held it"
}

# free_disk_called: raceblk's ->free_disk (free_disk=1) freed the driver's
# data, as the disk's last put calls it.
step_free_disk_called() {
	local want="$DISK: ->free_disk: freeing the driver's data" line

	line=$(dmesg | grep -F "$want" | tail -n 1)
	echo "log: ${line:-no line \"$want\"}"
	[ -n "$line" ]
}

# reload=ERRNO: raceblk loads again with nothing but the row's image
# (no failure point, no hold) with ERRNO, and when loaded unloads again.
step_reload() {
	modctl_expect "$1" load "$KO" "image=raceblk/$IMAGE.img" || return 1
	[ "$1" != OK ] || modctl_expect OK unload raceblk
}

# initref_fail=REF:ERRNO: initref.ko with ref=REF and fail=1 takes a
# reference on itself through REF (see driver/initref.c), then fails its
# init: the load gives ERRNO.
step_initref_fail() {
	modctl_expect "${1#*:}" load /lib/modules/initref.ko "ref=${1%%:*}" fail=1
}

# oops_in COMM: an oops killed a task whose name starts with COMM.
oops_in() {
	oopsed_tasks | grep "Comm: $1" | head -n 1
}

# oops_seen: oops_in OOPS_COMM found one.
oops_seen() {
	[ -n "$(oops_in "$OOPS_COMM")" ]
}

# oopsed=COMM:SECONDS: within SECONDS, an oops kills a task whose name
# starts with COMM (a kworker running a freed module's work function).
step_oopsed() {
	local line

	OOPS_COMM=${1%%:*}
	poll "${1#*:}" oops_seen || true
	line=$(oops_in "$OOPS_COMM")
	echo "oops: ${line:-none in a task named $OOPS_COMM* within ${1#*:} s}"
	[ -n "$line" ]
}

# initref=REF:ERRNO: initref.ko, whose init takes a reference on itself
# through REF (self, firmware_nowait, misc_open), loads with ERRNO; once
# loaded, it unloads again.
step_initref() {
	local ref=${1%%:*} expected=${1#*:}

	modctl_expect "$expected" load /lib/modules/initref.ko "ref=$ref" || return 1
	dmesg | grep -F "initref: ref=$ref during init" | tail -n 1
	[ "$expected" != OK ] || modctl_expect OK unload initref
}

# --- null_blk: the race with an upstream driver --------------------------

NULLB_KO=/lib/modules/null_blk.ko
# Two devices, a queue each, whose I/O a timer completes 0.2 s after it
# was queued: the partition scan in add_disk() keeps nullb0 busy long
# enough for a holder to open it before the second device fails.
NULLB_PARAMS="nr_devices=2 submit_queues=1 poll_queues=0 irqmode=2 completion_nsec=200000000"
NULLB_TRIES=40

# nullb_catch FAULT: one load of null_blk (NULLB_PARAMS, init_hctx=FAULT)
# while a new blkhold opens nullb0 the moment it appears: LOAD is the
# load's answer, HELD blkhold's ("await OK": it holds nullb0).
nullb_catch() {
	rm -f /tmp/nullb.loaded
	holder_start
	holder_send await /dev/nullb0 30000 /tmp/nullb.loaded
	# shellcheck disable=SC2086 # NULLB_PARAMS is a word list
	LOAD=$(or_died modctl "$(modctl load "$NULLB_KO" $NULLB_PARAMS "init_hctx=$1")")
	: > /tmp/nullb.loaded
	HELD=$(holder_answer)
}

# nullb_held=FAULT:ERRNO:CLOSE: load the in-tree null_blk with two devices
# and its init_hctx= fault injection set to FAULT (null_blk's commas) while
# a holder opens nullb0 the moment it appears and keeps it open: the second
# device fails, and null_init() fails with ERRNO and tears nullb0 down under
# the holder.  A load the holder did not catch so (the fault hit nullb0, the
# teardown came first, both devices came up) is tried again, up to
# NULLB_TRIES loads: 6.12 draws the failing device at random (a load fails
# on nullb1 alone one time in four).  Then the holder closes nullb0: CLOSE
# is OK, died (the close ran into the freed module) or hung.
step_nullb_held() {
	local fault=${1%%:*} errno=${1#*:} close n=0

	close=${errno#*:} errno=${errno%%:*}
	# null_blk needs configfs: built in (6.12: FAULT_INJECTION_CONFIGFS
	# selects it) or a module.
	grep -qw configfs /proc/filesystems ||
		modctl_expect OK load /lib/modules/configfs.ko || return 1
	while [ "$n" -lt "$NULLB_TRIES" ]; do
		n=$((n + 1))
		nullb_catch "$fault"
		echo "load $n: $LOAD; blkhold: $HELD"
		# 6.12's vanilla loader oopses at its return (the scan's late
		# release), held or not; a holder that died or hung is done.
		[ "$LOAD" != died ] || break
		case $HELD in died | hung*) break ;; esac
		[ "$LOAD" != OK ] || { holder_stop && modctl_expect OK unload null_blk; } || return 1
		[ "$LOAD" = OK ] || [ "$HELD" != "await OK" ] || break
	done
	echo "load $n of at most $NULLB_TRIES: $LOAD, expected $errno"
	[ "$LOAD" = "$errno" ] || return 1
	if [ "$HELD" != "await OK" ]; then
		# The teardown took nullb0's open_mutex before the holder: only
		# a loader that died (6.12's vanilla, whether or not nullb0
		# was held) ends the tries so.
		echo "nullb0 not held: the loader died, nothing to close"
		[ "$LOAD" = died ]
		return
	fi
	expect_answer close "$close" "$(holder_ask close)"
}

# --- the module selftest of the reproducer posting -------------------------

# kselftest=TEST:RESULTS: run /lib/kselftest/TEST (a selftest of the
# reproducer posting, kernel-patches/TREE/repro/) with its test module from
# /lib/modules: RESULTS are its TAP results in order, "ok" or "not_ok",
# joined by commas.  A test an oops killed ends its results there.
step_kselftest() {
	local test=${1%%:*} expected=${1#*:} pid got

	TEST_MODULE_INIT_HELD_KO=/lib/modules/test_module_init_held.ko \
		sh "/lib/kselftest/$test" > /tmp/kselftest.out 2>&1 &
	pid=$!
	SETTLE_SECONDS=90 settle "$pid" sh || true
	# Still running: its holder would hold the test module for the steps
	# after.
	# shellcheck disable=SC2046 # pgrep's list of PIDs
	[ -z "$SETTLED" ] || kill $(pgrep -P "$pid") "$pid" 2>/dev/null
	sed 's/^/kselftest: /' /tmp/kselftest.out
	got=$(sed -n 's/^\(not ok\|ok\) [0-9].*/\1/p' /tmp/kselftest.out | tr ' ' _ | paste -s -d ,)
	echo "$test: ${got:-no results}${SETTLED:+ ($SETTLED)}, expected $expected"
	[ "$got" = "$expected" ]
}

# --- other loads while raceblk's init runs -----------------------------------

# bg_command TAG: what background load TAG runs (modctl's arguments).
bg_command() {
	case $1 in
	dep) echo "load /lib/modules/raceblk_user.ko" ;;
	reload) echo "load $KO image=raceblk/$IMAGE.img" ;;
	*) return 1 ;;
	esac
}

# bg=TAG: start background load TAG: dep, a module using a symbol of
# raceblk; reload, raceblk again, without failure points.
step_bg() {
	local args

	args=$(bg_command "$1") || { echo "no background load named '$1'"; return 1; }
	# shellcheck disable=SC2086 # modctl's arguments
	modctl $args > "/tmp/bg.$1.out" 2>&1 &
	echo $! > "/tmp/bg.$1.pid"
	echo "modctl $args: started in the background"
}

# bg_waiting=TAG: background load TAG is still blocked a second later.
step_bg_waiting() {
	sleep 1
	if kill -0 "$(cat "/tmp/bg.$1.pid")" 2>/dev/null; then
		echo "$1: still waiting in the kernel after 1 s"
		return 0
	fi
	echo "$1: finished already: $(cat "/tmp/bg.$1.out")"
	return 1
}

# bg_done=TAG:ERRNO: background load TAG finished with ERRNO.
step_bg_done() {
	local tag=${1%%:*} expected=${1#*:}

	modctl_answer "$(cat "/tmp/bg.$tag.pid")" "/tmp/bg.$tag.out"
	echo "$tag: $ANSWER, expected $expected"
	[ "$ANSWER" = "$expected" ]
}

# pr_err=TEXT: the driver logged "raceblk: TEXT..." at KERN_ERR.
step_pr_err() {
	local line

	line=$(dmesg -r | grep '^<3>' | grep -F "raceblk: $1" | head -n 1)
	echo "pr_err: ${line:-none starting with \"raceblk: $1\"}"
	[ -n "$line" ]
}

# --- a partition past the end of the disk ----------------------------------

# probe=N:OFFSET:KEY=VALUE,...: blkprobe on partition N (0: the disk) at
# byte OFFSET; each KEY (size64, lseek, read, direct, mmap) printed VALUE.
step_probe() {
	local dev=/dev/$DISK nr=${1%%:*} offset=${1#*:} want=${1##*:} out pair problems=""

	offset=${offset%%:*}
	[ "$nr" = 0 ] || dev=$dev$PART$nr
	out=$(blkprobe "$dev" "$offset" 2>&1)
	echo "blkprobe $dev $offset: $(echo "$out" | tr '\n' ' ')"
	for pair in $(echo "$want" | tr , ' '); do
		echo "$out" | grep -qx "${pair%%=*} ${pair#*=}" || problems="$problems ${pair%%=*}"
	done
	[ -z "$problems" ] || { echo "expected $want; differs:$problems"; return 1; }
}

# ignored=N: the kernel said it ignored partition N of the disk (the gpt
# series: "DISK: GPT partition N ends at LBA ..., ignored", or the core's
# "DISK: pN start ... size ... overflows, ignored").
step_ignored() {
	loader_line "\] $DISK: (GPT partition $1 |p$1 ).*, ignored\$"
}

# past_end_refused=yes|no: the driver did (or did not) log that it refused
# a request past the end of its disk.
step_past_end_refused() {
	local line

	line=$(dmesg | grep -F ": refused " | grep -F "past the end" | head -n 1)
	echo "driver: ${line:-refused nothing past the end}"
	case $1 in
	yes) [ -n "$line" ] ;;
	*) [ -z "$line" ] ;;
	esac
}

# --- modules built for another kernel ---------------------------------------
# /lib/modules/foreign/NAME.ko (the Makefile's "modules built for another
# kernel"): raceblk-vermagic (the other preemption model), raceblk-release
# (another release), raceblk-fixed (built for fixed), raceblk-proto (a tree
# where blk_mq_end_request() changed).

FOREIGN=/lib/modules/foreign

# vermagic_of FILE: the vermagic string a module carries.
vermagic_of() {
	tr '\0' '\n' < "$1" | sed -n 's/^vermagic=//p'
}

# vermagic=NAME: print the kernel's vermagic and NAME's side by side (the
# kernel's is that of raceblk.ko built for it, which it accepts); they
# must differ.
step_vermagic() {
	local kernel module

	kernel=$(vermagic_of "$KO")
	module=$(vermagic_of "$FOREIGN/$1.ko")
	echo "vermagic: kernel '$kernel' | $1.ko '$module'"
	[ -n "$module" ] && [ "$kernel" != "$module" ]
}

# load_foreign=NAME:ERRNO: finit_module(NAME.ko) with the row's parameters.
step_load_foreign() {
	# shellcheck disable=SC2086 # PARAMS is a word list
	modctl_expect "${1#*:}" load "$FOREIGN/${1%%:*}.ko" $PARAMS
}

# force_load=NAME:ERRNO: the same, forced as modprobe -f forces it
# (vermagic and symbol versions ignored).
step_force_load() {
	# shellcheck disable=SC2086 # PARAMS is a word list
	modctl_expect "${1#*:}" force-load "$FOREIGN/${1%%:*}.ko" $PARAMS
}

# loader_line PATTERN: the first kernel line matching the extended regex
# (the loader's, or any other the kernel logged).
loader_line() {
	local line

	line=$(dmesg | grep -E -e "$1" | head -n 1)
	echo "kernel: ${line:-no line matching /$1/}"
	[ -n "$line" ]
}

# version_magic: the loader refused raceblk's vermagic, saying what it
# should be.
step_version_magic() {
	loader_line "raceblk: version magic '[^']*' should be '[^']*'"
}

# disagrees=SYMBOL: the loader refused raceblk's CRC for SYMBOL.
step_disagrees() {
	loader_line "raceblk: disagrees about version of symbol $1\$"
}

# klog=WORDS: a kernel line contains WORDS (+ for a space).
step_klog() {
	loader_line "$(echo "$1" | tr + ' ')"
}

# kernel_tainted=FLAG: the kernel's taint mask has FLAG (F: a forced load,
# bit 1; O: an out-of-tree module, bit 12).
step_kernel_tainted() {
	local mask bit

	mask=$(cat /proc/sys/kernel/tainted)
	case $1 in
	F) bit=2 ;;
	R) bit=8 ;;
	O) bit=4096 ;;
	*) echo "unknown taint $1"; return 1 ;;
	esac
	echo "/proc/sys/kernel/tainted: $mask (bit $1: $bit)"
	[ $((mask & bit)) -ne 0 ]
}

# tainted=FLAG: raceblk carries taint FLAG in /proc/modules, and so does
# the kernel.
step_tainted() {
	local line

	line=$(grep '^raceblk ' /proc/modules)
	echo "/proc/modules: ${line:-no raceblk}"
	echo "$line" | grep -q "([A-Z]*$1[A-Z]*)" && step_kernel_tainted "$1"
}

# --- make soak ----------------------------------------------------------------

# soak=CYCLES:SEED[:MODE]: harness/guest/soak.sh's cycles of load, hold,
# fail and unload on raceblk's instances, racing openers (make soak).
step_soak() {
	local cycles=${1%%:*} rest=${1#*:}

	# shellcheck source=harness/guest/soak.sh
	. /lib/raceblk/soak.sh
	case $rest in
	*:*) soak_run "$cycles" "${rest%%:*}" "${rest#*:}" ;;
	*) soak_run "$cycles" "$rest" "" ;;
	esac
}

# --- parameter fuzz ----------------------------------------------------------
# One load per hostile value, each with that parameter alone.

FUZZ_SEQ=0

# fuzz_value NAME VALUE: the word finit_module() gets.  VALUE is taken as
# written, except: empty (NAME=), noval (NAME, no "=") and long (4096
# nines: over charp's 1024 bytes, and over any integer).
fuzz_value() {
	case $2 in
	empty) echo "$1=" ;;
	noval) echo "$1" ;;
	long) echo "$1=$(printf '%4096s' '' | tr ' ' 9)" ;;
	*) echo "$1=$2" ;;
	esac
}

# log_since MARK: the kernel's lines (with their <level>) after the line
# MARK that this step wrote to /dev/kmsg.
log_since() {
	dmesg -r | sed -n "/harness: $1\$/,\$p" | sed 1d
}

# fuzz=NAME:VALUE:EXPECT: finit_module(raceblk, "NAME=VALUE") gives EXPECT.
# An errno name: the load fails with it, and the driver logged an error
# (<3>) "raceblk: NAME=VALUE: ..." meanwhile (for a missing value the
# kernel's "invalid for parameter `NAME'", for an overlong string its
# "NAME: string parameter too long").  OK: it loads (NAME unknown to raceblk: the
# kernel warned that it ignored it); a number: it loads and NAME reads
# back that number.  A load that succeeds is unloaded again.
step_fuzz() {
	local name=${1%%:*} value=${1#*:} expect=${1##*:} word got errors

	value=${value%:*}
	word=$(fuzz_value "$name" "$value")
	FUZZ_SEQ=$((FUZZ_SEQ + 1))
	echo "harness: fuzz $FUZZ_SEQ" > /dev/kmsg
	got=$(modctl load "$KO" "$word")
	printf 'finit_module(raceblk, "%.60s%s"): %s\n' "$word" \
		"$([ ${#word} -gt 60 ] && echo "... (${#word} bytes)")" "$got"
	case $expect in
	OK | [0-9]*)
		[ "$got" = OK ] || { echo "expected OK"; return 1; }
		if [ ! -e "/sys/module/raceblk/parameters/$name" ]; then
			log_since "fuzz $FUZZ_SEQ" | grep -F "unknown parameter '$name' ignored" ||
				{ echo "no parameter $name, and no warning"; return 1; }
		fi
		if [ "$expect" != OK ]; then
			sysfs_expect "/sys/module/raceblk/parameters/$name" "$expect" || return 1
		fi
		modctl_expect OK unload raceblk
		;;
	*)
		[ "$got" = "$expect" ] || { echo "expected $expect"; return 1; }
		errors=$(log_since "fuzz $FUZZ_SEQ" | grep '^<3>' | cut -c 1-160)
		echo "${errors:-no error line}"
		# The driver's own pr_err, "raceblk: NAME=VALUE: why"; the kernel
		# alone answers a missing value and an overlong string.
		case $value:$expect in
		noval:*) echo "$errors" | grep -q -F "invalid for parameter \`$name'" ;;
		*:ENOSPC) echo "$errors" | grep -q -F "$name: string parameter too long" ;;
		*) echo "$errors" | grep -q -F "raceblk: $name=" ;;
		esac
		;;
	esac
}

# param_write=NAME:VALUE:EXPECT: one write() of VALUE (as fuzz= spells it,
# without the name) to /sys/module/raceblk/parameters/NAME gives EXPECT
# (OK or an errno name).
step_param_write() {
	local name=${1%%:*} value=${1#*:} expect=${1##*:}

	value=${value%:*}
	value=$(fuzz_value "$name" "$value")
	value=${value#"$name"}
	value=${value#=}
	got=$(modctl write "/sys/module/raceblk/parameters/$name" "$value")
	printf 'write(parameters/%s, "%.60s%s"): %s, expected %s\n' "$name" "$value" \
		"$([ ${#value} -gt 60 ] && echo "... (${#value} bytes)")" "$got" "$expect"
	[ "$got" = "$expect" ]
}

# --- init held at a point, the disk opened meanwhile -----------------------
# A load runs in the background while init waits at hold=; blkhold, a
# process of its own, holds the disk open through fds 5 (commands) and 6
# (answers), so a crash on the held file kills it and not this init.

STAGE=/sys/module/raceblk/parameters/stage

# load_bg: start finit_module() in the background; load_done collects it.
step_load_bg() {
	# shellcheck disable=SC2086 # PARAMS is a word list
	modctl load "$KO" $PARAMS > /tmp/load.out 2>&1 &
	echo $! > /tmp/load.pid
	echo "finit_module(raceblk.ko, \"$PARAMS\") started in the background"
}

# sysfs_expect FILE EXPECTED: FILE reads EXPECTED; say what it read.
sysfs_expect() {
	local got

	got=$(cat "$1" 2>&1)
	echo "$1: $got, expected $2"
	[ "$got" = "$2" ]
}

# param=NAME:VALUE: raceblk's parameter NAME reads VALUE in sysfs.
step_param() {
	sysfs_expect "/sys/module/raceblk/parameters/${1%%:*}" "${1#*:}"
}

# stage=NAME: init has passed the point NAME and is not held there (up
# to 20 s for it to get there).
step_stage() {
	if ! poll 20 stage_is "$1"; then
		echo "stage: $(cat "$STAGE" 2>&1), expected \"$1\""
		return 1
	fi
	echo "stage: $1"
}

# kill_load: SIGKILL the process in finit_module() while init is held:
# init fails there (the hold wait is killable) and the process is gone.
step_kill_load() {
	local pid line

	pid=$(cat /tmp/load.pid)
	kill -9 "$pid"
	# An oops on the way out (vanilla@6.12) is the row's to expect; a
	# loader still there 20 s after SIGKILL is this step's failure.
	settle "$pid" modctl || true
	case $SETTLED in
	"" | died) ;;
	*)
		echo "loader $SETTLED after SIGKILL"
		return 1
		;;
	esac
	line=$(dmesg | grep -m 1 'raceblk: hold at .* interrupted by a fatal signal')
	echo "loader killed; ${line:-no \"interrupted by a fatal signal\" line from raceblk}"
	[ -n "$line" ]
}

# released_at=POINT: init went on from its hold at POINT because release
# was written (not at the hold's timeout), as the log says.
step_released_at() {
	local line

	line=$(dmesg | grep -m 1 -E "raceblk: (init released|hold) at $1")
	echo "${line:-no release line for $1}"
	case $line in
	*"init released at $1") ;;
	*) return 1 ;;
	esac
}

# load_done=ERRNO|died: the background load finished with ERRNO, or an
# oops killed it.
step_load_done() {
	modctl_answer "$(cat /tmp/load.pid)" /tmp/load.out
	echo "background finit_module() = $ANSWER, expected $1"
	[ "$ANSWER" = "$1" ]
}

stage_is() {
	[ "$(cat "$STAGE" 2>/dev/null)" = "$1" ]
}

# held=POINT: init is waiting at POINT (up to 20 s for it to get there).
step_held() {
	step_stage "held at $1" || return 1
	echo "module: $(grep '^raceblk ' /proc/modules)"
}

# release: let init go on from hold.
step_release() {
	echo 1 > /sys/module/raceblk/parameters/release && echo "release written"
}

# holder_settled PID: blkhold's answer came, or blkhold (PID) exited or an
# oops killed it.
holder_settled() {
	[ -e /tmp/hold.answered ] || process_settled "$1" blkhold
}

# holder_watch PID: wait until holder_settled, for up to 20 s; then, unless
# the answer came, answer blkhold's fate in its place.  blkhold answers
# each command with one write of a whole line, and so does this, so a
# reader never sees half a line.
holder_watch() {
	local why

	poll 20 holder_settled "$1" || true
	[ ! -e /tmp/hold.answered ] || return 0
	why=$(fate "$1" blkhold)
	[ -e /tmp/hold.answered ] || echo "$why" > /tmp/hold.ans
}

# holder_start: a blkhold of its own (HELD_PID), commanded on fd 5 and
# answering on fd 6; one started before is told to end (holder_stop).
holder_start() {
	[ -z "${HELD_PID:-}" ] || holder_stop || true
	rm -f /tmp/hold.cmd /tmp/hold.ans
	mkfifo /tmp/hold.cmd /tmp/hold.ans
	blkhold < /tmp/hold.cmd > /tmp/hold.ans &
	HELD_PID=$!
	exec 5> /tmp/hold.cmd 6< /tmp/hold.ans
}

# holder_stop: the blkhold of holder_start ends (end of its input) and
# closes what it held.
holder_stop() {
	exec 5>&- 6<&-
	settle "$HELD_PID" blkhold
	HELD_PID=
}

# holder_send COMMAND: send COMMAND to blkhold, whose answer holder_answer
# reads.
holder_send() {
	echo "$*" >&5 2>/dev/null
}

# holder_answer: blkhold's answer, or its fate (see fate) when it has none
# in 20 s: "died" when it is gone or an oops killed it (it may then hang in
# its exit, keeping the answer pipe open, so the kernel log tells), "hung
# in FUNCTION" when it waits there for good.  One blocking read per
# answer, never a timed one: busybox's read -t can give up after consuming
# part of a line, and that part is lost.
holder_answer() {
	local answer watcher

	rm -f /tmp/hold.answered
	holder_watch "$HELD_PID" &
	watcher=$!
	read -r answer <&6 || answer=died
	: > /tmp/hold.answered
	wait "$watcher" 2>/dev/null
	echo "$answer"
}

# holder_ask COMMAND: send COMMAND to blkhold and print its answer (see
# holder_answer).
holder_ask() {
	holder_send "$@" || { echo died; return; }
	holder_answer
}

# expect_answer STEP EXPECTED ANSWER: compare blkhold's answer (or fate).
expect_answer() {
	echo "blkhold $1: $3, expected $1 $2"
	[ "$3" = "$1 $2" ] || fate_is "$2" "$3"
}

# holder_open=DEV[:ERRNO]: blkhold opens /dev/DEV (see device_of: disk,
# part or a name), with ERRNO (default OK).
step_holder_open() {
	local dev expected=OK

	dev=$(device_of "${1%%:*}")
	[ "${1%%:*}" = "$1" ] || expected=${1#*:}
	holder_start
	HELD_DEV=$dev
	# Partition number for the checksum table: 0 is the whole disk.
	HELD_NR=0
	case $dev in "$DISK$PART"[0-9]*) HELD_NR=${dev#"$DISK$PART"} ;; esac
	HELD_BYTES=$(blockdev --getsize64 "/dev/$dev" 2>/dev/null || echo 0)
	expect_answer open "$expected" "$(holder_ask open "/dev/$dev")"
}

# holder_read=ERRNO|died|hung: read all of the held device; when that works,
# the bytes must be the image's.
step_holder_read() {
	local answer sum got

	answer=$(holder_ask read 0 "$HELD_BYTES" /tmp/held.data)
	expect_answer read "$1" "$answer" || return 1
	[ "$answer" = "read OK" ] || return 0
	sum=$(awk -v nr="$HELD_NR" '$1 == nr { print $2 }' "$GOLDEN/$IMAGE.sums")
	got=$(md5sum < /tmp/held.data | cut -d' ' -f1)
	echo "$HELD_DEV: md5 $got, expected $sum"
	[ "$got" = "$sum" ]
}

# holder_close=ERRNO|died|hung: blkhold closes the held device.
step_holder_close() {
	expect_answer close "$1" "$(holder_ask close)"
}

# refcnt=N: raceblk's reference count.
step_refcnt() {
	step_mod_refcnt "raceblk:$1"
}

# mod_refcnt=MODULE:N: MODULE's reference count is N.
step_mod_refcnt() {
	sysfs_expect "/sys/module/${1%%:*}/refcnt" "${1#*:}"
}

# open=DEV[:ERRNO|died|hung]: a process of its own opens /dev/DEV (see
# device_of) and exits: ERRNO (default OK), or its fate (see fate) when it
# gave no answer in 20 s or an oops killed it.
step_open() {
	local dev expected=OK pid got

	dev=$(device_of "${1%%:*}")
	[ "${1%%:*}" = "$1" ] || expected=${1#*:}
	echo "open /dev/$dev" | blkhold > /tmp/open.ans 2>&1 &
	pid=$!
	poll 20 process_settled "$pid" blkhold || true
	got=$(cat /tmp/open.ans)
	if killed_by_oops blkhold "$pid" || [ -z "$got" ]; then
		got=$(fate "$pid" blkhold)
	fi
	echo "open /dev/$dev: $got, expected $expected"
	[ "$got" = "open $expected" ] || fate_is "$expected" "$got"
}

# churn_start=DEV[+DEV...][:HOLD_MS]: one process per DEV (see device_of)
# opens it, reads its start and closes it in a loop, racing whatever init
# does meanwhile; each open is kept 0 to HOLD_MS ms (drawn, default 0),
# read again and again meanwhile, as a prober reads the disk it opened.
# A churner stops when its device went away after it had opened it, after
# CHURN_MS (10 s), or at churners_stop.
step_churn_start() {
	local devs=${1%%:*} hold=0 dev n=0 list=""

	case $1 in *:*) hold=${1#*:} ;; esac
	rm -f /tmp/churn.stop
	# shellcheck disable=SC2086 # devs is a +-separated word list
	for dev in $(echo "$devs" | tr + ' '); do
		n=$((n + 1))
		dev=$(device_of "$dev")
		rm -f "/tmp/churn.$n" "/tmp/churn.$n.pid"
		churner_spawn "/dev/$dev" "${CHURN_MS:-10000}" "$hold" /tmp/churn.stop \
			"/tmp/churn.$n" "/tmp/churn.$n.pid"
		list="$list /dev/$dev"
	done
	echo "$n" > /tmp/churners
	sleep 0.5
	echo "$n processes opening, reading and closing$list, each open kept 0-$hold ms"
}

# churner_spawn PATH MS HOLD_MS STOP OUT PIDS: a blkhold churner of PATH in
# the background, each open kept 0 to HOLD_MS ms (see blkhold.c); it
# appends its line to OUT and its pid to PIDS, and stops after MS ms or
# once the file STOP exists (its current open kept to its end).
churner_spawn() {
	echo "churn $1 $2 $3 $4" | blkhold >> "$5" 2>&1 &
	echo $! >> "$6"
}

# churners_stop: each churner ends after its current open.
churners_stop() {
	: > /tmp/churn.stop
}

# churner_settled N: churner N wrote its line (blkhold writes it whole,
# newline last), or it is gone, or an oops killed it.
churner_settled() {
	[ "$(wc -l < "/tmp/churn.$1")" -gt 0 ] ||
		process_settled "$(cat "/tmp/churn.$1.pid")" blkhold
}

# churners_collect: every churner ran to the end; prints each one's line
# and sets CHURNED, how often they opened in all.  Their lines are waited
# for, not their exits: once, in 1 run of 50, the second churner's file
# was still empty when "wait" had returned.
churners_collect() {
	local n pid got status=0

	CHURNED=0
	for n in $(seq "$(cat /tmp/churners)"); do
		pid=$(cat "/tmp/churn.$n.pid")
		poll 20 churner_settled "$n" || true
		got=$(cat "/tmp/churn.$n")
		[ -n "$got" ] || got=$(fate "$pid" blkhold)
		echo "churner $n: $got"
		case $got in
		"churn OK opened "*)
			wait "$pid" 2>/dev/null || true
			got=${got#churn OK opened }
			CHURNED=$((CHURNED + ${got%% *}))
			;;
		*) status=1 ;;
		esac
	done
	return $status
}

# churn_done: every churner ran to the end, and they opened the disk at
# least once: else they raced nothing.
step_churn_done() {
	churners_collect || return 1
	[ "$CHURNED" -gt 0 ] || { echo "no churner ever opened its device"; return 1; }
}

# prober_on HOLD_MS: a udev-like prober: blkhold as the kernel's uevent
# helper opens every block device the kernel announces, in a process per
# event, as soon as it is announced (the end of add_disk()), and keeps it
# open 0 to HOLD_MS ms (drawn).  Fails when the helper cannot be set.
prober_on() {
	echo "$1" > /tmp/prober.hold
	: > /tmp/prober.log
	echo /bin/blkhold > /sys/kernel/uevent_helper
}

# prober_off: no more probers; those running go on.
prober_off() {
	echo > /sys/kernel/uevent_helper
	rm -f /tmp/prober.hold
}

# prober_start[=HOLD_MS]: the prober on (see prober_on).
step_prober_start() {
	prober_on "${1:-0}" || return 1
	echo "the uevent helper opens every new block device, each kept 0-${1:-0} ms"
}

# probers_unfinished: the PIDs of probers that began and have not ended.
probers_unfinished() {
	awk '$1 == "begin" { begun[$2] = 1 } $1 == "end" { delete begun[$2] }
		END { for (pid in begun) print pid }' /tmp/prober.log
}

# probers_settled: every prober that began has ended, or is gone, or an
# oops killed it.
probers_settled() {
	local pid

	for pid in $(probers_unfinished); do
		process_settled "$pid" blkhold || return 1
	done
}

# no_blkhold_left: no blkhold process is left (a prober row has no other).
no_blkhold_left() {
	! pidof blkhold > /dev/null
}

# prober_done: the prober off, and every prober it ran finished; prints
# what each opened.  It must have opened the disk or a partition: else it
# raced nothing.
step_prober_done() {
	local pid status=0

	prober_off
	# A prober the kernel has forked may not have logged its begin yet.
	poll 20 no_blkhold_left || true
	poll 1 probers_settled || true
	awk '$1 == "end" { print "prober: " $3 " open " $5 " read " $7 }' /tmp/prober.log | sort | uniq -c
	for pid in $(probers_unfinished); do
		echo "prober $pid ($(awk -v p="$pid" '$2 == p { print $3 }' /tmp/prober.log)): $(fate "$pid" blkhold)"
		status=1
	done
	# A partition's open takes the module reference as the disk's does.
	if ! grep -qE "^end [0-9]+ ${DISK}(${PART}[0-9]+)? open OK " /tmp/prober.log; then
		echo "no prober opened $DISK or a partition of it"
		status=1
	fi
	return $status
}

# rmmod_loop_start NAME...: delete_module(NAME, O_NONBLOCK) of each NAME
# in a loop (a round every 20 ms plus modctl's own time, tens of ms under
# TCG), in the background until rmmod_loop_stop: it races every load, and
# frees a module fixed kept once its last holder is gone.
rmmod_loop_start() {
	rm -f /tmp/rmmod.stop
	: > /tmp/rmmod.out
	while [ ! -e /tmp/rmmod.stop ]; do
		for name; do
			modctl unload "$name" >> /tmp/rmmod.out
		done
		# A breath between rounds: a loop of nothing but process
		# spawns would take a vCPU from the race it is part of.
		sleep 0.02
	done &
	RMMOD_LOOP=$!
}

# rmmod_loop_stop: stop the loop; fails when it is stuck, or when an rmmod
# gave anything but OK, ENOENT (none loaded), EBUSY (one coming) or
# EAGAIN (kept while held).
rmmod_loop_stop() {
	touch /tmp/rmmod.stop
	# Its status is its last rmmod's: SETTLED says whether it ended.
	settle "$RMMOD_LOOP" init || true
	[ -z "$SETTLED" ] || { echo "rmmod loop: $SETTLED"; return 1; }
	echo "rmmod loop: $(tally /tmp/rmmod.out)"
	! grep -qvxE 'OK|ENOENT|EBUSY|EAGAIN' /tmp/rmmod.out
}

# tally FILE: its lines counted, on one line ("3 EIO 1 OK").
tally() {
	sort "$1" | uniq -c | tr -s ' \n' ' '
}

# reload_race=ROUNDS: ROUNDS failing loads that raced, each raced by two
# churners (the disk and its first partition, opens kept 0-200 ms, until
# the load returned) and all of them by an rmmod loop.  A round whose
# churners never opened the disk (the disk lives ~0.1 s; a busy host may
# not run a churner in it) raced nothing and does not count; fewer than
# ROUNDS that raced in 2 * ROUNDS loads fails.  A round starts once the
# last one's module is gone: freed at its failure, or kept while a churner
# held it and then freed by the loop.  Each load gives the row's load
# errno (EIO).
step_reload_race() {
	local round=0 raced=0 got status=0 start gone loaded

	rmmod_loop_start raceblk
	while [ "$raced" -lt "$1" ] && [ "$round" -lt $(($1 * 2)) ] && [ "$status" = 0 ]; do
		round=$((round + 1))
		uptime_cs; start=$UPTIME_CS
		poll 10 module_gone raceblk || { echo "round $round: raceblk still loaded"; status=1; break; }
		uptime_cs; gone=$UPTIME_CS
		CHURN_MS=30000 step_churn_start "disk+part:200" > /dev/null
		# shellcheck disable=SC2086 # PARAMS is a word list
		got=$(or_died modctl "$(modctl load "$KO" $PARAMS)")
		uptime_cs; loaded=$UPTIME_CS
		churners_stop
		churners_collect > /tmp/churn.out || { cat /tmp/churn.out; status=1; }
		uptime_cs
		echo "round $round: load $got, churners opened $CHURNED times" \
			"(cs: gone $((gone - start)) load $((loaded - gone)) churners $((UPTIME_CS - loaded)))"
		[ "$got" = EIO ] || status=1
		if [ "$CHURNED" -gt 0 ]; then
			raced=$((raced + 1))
		else
			echo "round $round: no churner opened the disk: it raced nothing, not counted"
		fi
	done
	echo "$raced of $round loads raced, $1 wanted"
	[ "$raced" -ge "$1" ] || status=1
	poll 10 module_gone raceblk || { echo "raceblk still loaded after the last round"; status=1; }
	rmmod_loop_stop || status=1
	return $status
}

# module_gone NAME: NAME is not in /proc/modules.
module_gone() {
	! grep -q "^$1 " /proc/modules
}

# --- I/O in flight ------------------------------------------------------------

# read_bg: an O_DIRECT read of the disk's first 4 KiB, in the background.
step_read_bg() {
	dd if=/dev/"$DISK" of=/tmp/bg.data bs=4096 count=1 iflag=direct 2> /tmp/bg.err &
	echo $! > /tmp/bg.pid
	echo "O_DIRECT read of $DISK started in the background"
}

requests_in_flight() {
	awk '$1 + $2 > 0 { found = 1 } END { exit !found }' /sys/block/"$DISK"/inflight 2>/dev/null
}

# inflight: a request of the disk is in flight (up to 10 s for it).
step_inflight() {
	local status=0

	poll 10 requests_in_flight || status=1
	echo "/sys/block/$DISK/inflight (reads writes): $(cat /sys/block/"$DISK"/inflight 2>&1)"
	return $status
}

# read_done: the background read completed with the image's first 4 KiB.
step_read_done() {
	if ! settle "$(cat /tmp/bg.pid)" dd; then
		echo "read: ${SETTLED:-$(cat /tmp/bg.err)}"
		return 1
	fi
	echo "read done: $(wc -c < /tmp/bg.data) bytes"
	head -c 4096 "/lib/firmware/raceblk/$IMAGE.img" | cmp - /tmp/bg.data &&
		echo "the image's first 4 KiB"
}

# --- a reader stopped between two reads ------------------------------------

# reader_start=DEV: dd reads DEV (see device_of) with O_DIRECT, one
# 4 KiB at a time, in the background.
step_reader_start() {
	local dev

	dev=$(device_of "$1")
	dd if="/dev/$dev" of=/tmp/reader.data bs=4096 count=8 iflag=direct 2> /tmp/reader.err &
	echo $! > /tmp/reader.pid
	echo "dd reading /dev/$dev in the background (pid $(cat /tmp/reader.pid))"
}

# reader_stop: stop the reader (SIGSTOP) once its current read is done.
step_reader_stop() {
	kill -STOP "$(cat /tmp/reader.pid)" && echo "reader stopped"
}

# reader_done=OK|ERRNO|died|hung: let the reader go on (SIGCONT) and see
# how it ends: OK, failing with an errno from a read, or its fate (see
# fate) when it has not ended in 20 s or an oops killed it.
step_reader_done() {
	local pid got status

	pid=$(cat /tmp/reader.pid)
	kill -CONT "$pid"
	settle "$pid" dd && status=0 || status=$?
	if [ -n "$SETTLED" ]; then
		got=$SETTLED
	elif [ "$status" -eq 0 ]; then
		got=OK
	else
		got=
		grep -q 'Input/output error' /tmp/reader.err && got=EIO
	fi
	echo "reader: ${got:-exit $status: $(cat /tmp/reader.err)}, expected $1"
	[ "$got" = "$1" ] || fate_is "$1" "$got"
}

# --- debug kernels ------------------------------------------------------------

# kmemleak: a kmemleak scan now reports no leaked object.
step_kmemleak() {
	local report

	if [ ! -e /sys/kernel/debug/kmemleak ]; then
		echo "no /sys/kernel/debug/kmemleak: not a debug kernel"
		return 1
	fi
	echo scan > /sys/kernel/debug/kmemleak
	report=$(cat /sys/kernel/debug/kmemleak)
	if [ -n "$report" ]; then
		echo "$report" | head -n 30
		return 1
	fi
	echo "kmemleak scan: no leaked objects"
}

