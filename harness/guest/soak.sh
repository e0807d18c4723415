# make soak's guest side: the action soak:CYCLES:SEED[:MODE] (fuzz.sh), MODE
# faults, ungated, ungated-openers, ungated-prober or ungated-reload.
#
# Each cycle loads one of raceblk's instances (raceblk_s0, raceblk_s1..., disk
# raceblk_sN0: see driver/Kbuild) with a failure point drawn at random,
# half the time held there and released, while 0-2 openers open, read and
# close its disk and first partition in a loop, racing the init until the
# load has returned, each open kept 0-1000 ms (0-3000 ms with all ungated
# races: soak_run) and read meanwhile, as a prober keeps it; and for the
# whole soak a udev-like prober (blkhold as the uevent helper) opens every
# block device the kernel announces, each kept as long.  Held
# after add_disk(), half the time a holder also opens the first partition
# and keeps it open until the load has returned, then reads and closes it:
# the 2003 race made certain (on vanilla the close runs into the freed
# module).  A cycle expects the load to give OK (fail_at=none) or EIO.  A module that fixed
# keeps because an opener held it when init failed may still be there when
# the next cycle starts; that cycle uses the next instance, so it does not
# wait.  When the ring of instances comes back to it, four cycles later,
# its openers are done (5 s at most is waited for each): a kept module
# must have gone by itself (5 s at most), a loaded one unload (OK), and
# its disk be gone.
#
# With faults, each cycle holds init at alloc or after add_disk(), aims
# failures at what follows and releases it: failslab on the loading task's
# slab allocations (every 7th to 37th, drawn), or fail_make_request on the
# new disk's I/O.  Init may then fail anywhere, with any errno, or the
# loader be killed: no oops, no report, no leak.
#
# Ungated: no gate, failure after add_disk() every cycle (after_add_disk,
# after_scan_io or late), init lingering there 1-100 ms (drawn) with
# nobody to release it: the race as it happens without the harness's
# gate, on two vCPUs.  ungated: two openers (the disk and its first
# partition), the prober and an rmmod loop (every instance, a
# round every 20 ms, for the whole soak); ungated-openers: the openers alone;
# ungated-prober: the prober alone; ungated-reload: the openers and the
# rmmod loop.  On vanilla the first opener that holds the disk when the
# module is freed ends the soak with a report.

# After every cycle the kernel log is drained (dmesg -c) and any report
# line ends the soak at that cycle.  At the end every instance is
# unloaded and kmemleak scans twice.  Last line:
#   soak: cycles=N reports=R leaks=L seconds=S

# shellcheck source=harness/guest/soakreport.sh
. /lib/raceblk/soakreport.sh

# raceblk's instances: as many as the initramfs holds (the Makefile's
# SOAK_INSTANCES; a soak without them says so in soak_run).
SOAK_INSTANCES=$(find /lib/modules -maxdepth 1 -name 'raceblk_s*.ko' | wc -l)
# The failure points of backend=blk, in the order init reaches them, as
# the module lists them (soak_points), and how many come before
# after_add_disk, the first with a disk to race for.
SOAK_POINTS=
SOAK_BEFORE_DISK=
# How long an opener or the prober keeps an open at most (ms; drawn).  An
# open is a use-after-free on vanilla only when it outlasts the unwind and
# free_module() (two RCU grace periods on SMP): hundreds of ms on a TCG
# debug guest: holds of 0-200 ms hit under 1% of vanilla-debug's loads,
# 0-1000 ms about half of them (docs/reliability.md).  All races at once:
# 0-3000 ms (soak_run).
SOAK_HOLD_MS=1000

# Random draws use $RANDOM in this shell, never inside $(...): a subshell
# would draw from a copy of the generator, and every cycle would be alike.

# A cycle costs about 0.8 s on a TCG debug guest, and every process it
# starts about 50 ms of that: the cycle starts only those it needs (modctl,
# blkhold, dmesg), and no subshell.

# soak_reclaim INSTANCE: its last cycle's openers are done, and so are the
# probers (5 s at most: one that an oops killed is the report check's to
# find); unload it if it is loaded.  Fails when it cannot be unloaded or
# its disk remains.
soak_reclaim() {
	local inst=$1 pid got

	: >> "/tmp/soak.$inst.pids"
	while read -r pid; do
		# Not a plain wait: an opener may hang for good after an oops
		# (the report check finds the oops).
		if poll 5 soak_gone "$pid"; then
			wait "$pid" 2>/dev/null || true
		fi
	done < "/tmp/soak.$inst.pids"
	: > "/tmp/soak.$inst.pids"
	poll 5 probers_settled || true
	# Kept after its init failed (fixed): now that its openers are done,
	# it goes by itself, without rmmod.
	if [ "$(cat "/sys/module/$inst/initstate" 2>/dev/null)" = going ] &&
		! poll 5 module_gone "$inst"; then
		echo "$inst: kept, and still there 5 s after its openers were done ($(grep "^$inst " /proc/modules))"
		return 1
	fi
	if [ -d "/sys/module/$inst" ]; then
		got=$(modctl unload "$inst")
		# The rmmod loop may have freed it, or be freeing it, meanwhile.
		[ "$got" = OK ] || poll 5 module_gone "$inst" ||
			{ echo "$inst: unload $got ($(grep "^$inst " /proc/modules))"; return 1; }
	fi
	[ ! -e "/sys/block/${inst}0" ] || { echo "$inst: disk ${inst}0 left behind"; return 1; }
}

# soak_openers INSTANCE COUNT: COUNT openers of its disk and partition 1,
# each until the disk goes away or the load has returned
# (soak_openers_stop), 10 s at most, and its last open's hold.
soak_openers() {
	local inst=$1 n dev

	rm -f "/tmp/soak.$inst.stop"
	n=0
	while [ "$n" -lt "$2" ]; do
		n=$((n + 1))
		dev=/dev/${inst}0
		[ "$n" = 2 ] && dev=${dev}p1
		churner_spawn "$dev" 10000 "$SOAK_HOLD_MS" "/tmp/soak.$inst.stop" \
			/tmp/soak.churns "/tmp/soak.$inst.pids"
	done
}

# soak_openers_stop INSTANCE: its openers end after their current open.
# Not a fixed budget: a debug guest's load can take longer than any.
soak_openers_stop() {
	: > "/tmp/soak.$1.stop"
}

# soak_instances: the names of raceblk's instances.
soak_instances() {
	seq 0 $((SOAK_INSTANCES - 1)) | sed 's/^/raceblk_s/'
}

# soak_holder_open DEV: a blkhold process opens DEV and waits on the fifo
# /tmp/soak.go before it reads and closes it; fails unless the open
# worked (answer in /tmp/soak.hold).
soak_holder_open() {
	local answer=""

	rm -f /tmp/soak.hold
	{
		echo "open $1"
		read -r _ < /tmp/soak.go
		echo "read 0 512 /dev/null"
		echo close
	} | blkhold > /tmp/soak.hold 2>&1 &
	SOAK_HOLDER=$!
	poll 5 soak_answered || true
	read -r answer < /tmp/soak.hold
	[ "$answer" = "open OK" ] || { echo "holder: $1: ${answer:-no answer}"; return 1; }
}

soak_answered() {
	[ -s /tmp/soak.hold ]
}

# soak_holder_close: let the holder read and close; give it 5 s (a task
# an oops killed may never exit: the report check finds the oops).
soak_holder_close() {
	echo go > /tmp/soak.go
	poll 5 soak_gone "$SOAK_HOLDER" || true
}

# soak_gone PID: PID has exited, a zombie counting as gone (soak.sh never
# waits for its holders, so unlike steps.sh's process_settled it cannot
# rely on kill -0; an oops is the report check's to find).
soak_gone() {
	case $(task_state "$1") in
	"" | Z) return 0 ;;
	esac
	return 1
}

# soak_faults_on PID HOLD: failslab for PID's slab allocations, every Nth.
soak_faults_on() {
	local f=/sys/kernel/debug/failslab

	# shellcheck disable=SC3028 # busybox ash: RANDOM, seeded by soak_run
	echo $((RANDOM % 31 + 7)) > $f/interval
	echo 100 > $f/probability
	echo -1 > $f/times
	echo 0 > $f/verbose
	echo Y > $f/task-filter
	echo N > $f/ignore-gfp-wait
	echo 1 > "/proc/$1/make-it-fail"
}

# soak_cycle N FAULTS: one cycle; prints what went wrong and fails.
soak_cycle() {
	local n=$1 faults=$2 inst point hold hold_at openers load_args got expect ko pid draw holder

	inst=raceblk_s$((n % SOAK_INSTANCES))
	ko=/lib/modules/$inst.ko
	# shellcheck disable=SC2086 # a word list
	set -- $SOAK_POINTS
	# shellcheck disable=SC3028 # busybox ash: RANDOM, seeded by soak_run
	draw=$((RANDOM % $#)) hold=$((RANDOM % 2)) openers=$((RANDOM % 3))
	case $faults in
	ungated*)
		# No hold: two openers (none with the prober alone) race a
		# plain init that fails once its disk is there.
		draw=$((SOAK_BEFORE_DISK + draw % ($# - SOAK_BEFORE_DISK))) hold=0 openers=2
		[ "$faults" != ungated-prober ] || openers=0
		;;
	esac
	shift "$draw"
	point=$1 hold_at=$1
	[ "$point" = none ] && hold_at=late
	if [ "$faults" = faults ]; then
		# Held where the faults aim, then released into them: slab
		# failures for the rest of the init, or I/O errors on the new
		# disk; it then fails at a later point, or not at all.
		hold=1 hold_at=alloc
		[ $((draw % 2)) = 0 ] || hold_at=after_add_disk
		set -- none after_scan_io late
		shift $((draw % 3))
		point=$1
	fi
	soak_reclaim "$inst" || return 1
	echo "soak: cycle $n: $inst fail_at=$point hold=$hold openers=$openers" > /dev/kmsg
	load_args="image=raceblk/$IMAGE.img fail_at=$point"
	case $hold:$faults in
	1:*) load_args="$load_args hold=$hold_at hold_timeout_ms=10000" ;;
	0:ungated*)
		# Nobody releases it: init lingers 1-100 ms at its failure
		# point before it fails, as a driver that adds more after
		# its disk does (null_blk's second device).
		# shellcheck disable=SC3028 # busybox ash: RANDOM
		load_args="$load_args hold=$point hold_timeout_ms=$((RANDOM % 100 + 1))"
		;;
	esac
	expect=EIO
	[ "$point" = none ] && expect=OK
	soak_openers "$inst" "$openers"
	# shellcheck disable=SC2086 # load_args is a word list
	modctl load "$ko" $load_args > /tmp/soak.load 2>&1 &
	pid=$!
	holder=0
	if [ "$hold" = 1 ]; then
		poll 10 soak_held "$inst" "$pid" || true
		if [ "$faults:$hold_at" = faults:alloc ]; then
			soak_faults_on "$pid"
		elif [ "$faults" = faults ] && [ -e "/sys/block/${inst}0/make-it-fail" ]; then
			echo 1 > "/sys/block/${inst}0/make-it-fail"
		fi
		# shellcheck disable=SC3028 # busybox ash: RANDOM
		case $faults:$point:$((RANDOM % 2)) in
		:after_add_disk:1 | :after_scan_io:1 | :late:1)
			holder=1
			echo "soak: cycle $n: holder opens /dev/${inst}0p1" > /dev/kmsg
			soak_holder_open "/dev/${inst}0p1" || return 1
			;;
		esac
		{ echo 1 > "/sys/module/$inst/parameters/release"; } 2> /dev/null || true
	fi
	wait "$pid"
	echo "soak: cycle $n: the load returned" > /dev/kmsg
	soak_openers_stop "$inst"
	[ "$holder" = 0 ] || soak_holder_close
	read -r got < /tmp/soak.load || got=""
	if [ "$faults" = faults ]; then
		# Any errno: init failed where an allocation or a read did.  The
		# loader may not even print it: its own allocations fail too, and
		# the kernel can kill it (counted as "killed").
		[ -n "$got" ] || got=killed
	elif [ "$got" != "$expect" ]; then
		echo "cycle $n: $inst $load_args: load $got, expected $expect"
		return 1
	fi
	echo "$got" >> /tmp/soak.outcomes
}

# soak_held INSTANCE PID: init waits at its hold, or is past it, or the
# load (PID) is over.
soak_held() {
	local stage=""

	# Builtins only: this runs every 20 ms, and a process costs more.
	{ read -r stage < "/sys/module/$1/parameters/stage"; } 2> /dev/null
	case $stage in
	"held at "* | "failed at "* | live) return 0 ;;
	esac
	soak_gone "$2"
}

# soak_unwind_time: how long the last cycle's failed init took from the
# driver's "failing init" to the loader's return (unwind, two RCU grace
# periods, free_module()): the time an open must outlast on vanilla to
# be a use-after-free.  Milliseconds, from the kernel's timestamps.
soak_unwind_time() {
	awk 'match($0, /^\[ *[0-9]+\.[0-9]+\]/) { t = substr($0, 2, RLENGTH - 2) + 0 }
		/failing init at/ { f = t }
		/the load returned/ && f { printf "%d\n", (t - f) * 1000 }' /tmp/soak.klog
}

# soak_points KO: SOAK_POINTS and SOAK_BEFORE_DISK from KO's modinfo,
# "parm=fail_at:...; backend=blk: none alloc ...; backend=scsi: ...", read
# from the file itself: busybox modinfo wants a modules.dep the guest has
# no use for.
soak_points() {
	local point

	SOAK_POINTS=$(tr '\0' '\n' < "$1" | sed -n 's/^parm=fail_at:.*backend=blk: *\([^;]*\);.*/\1/p')
	SOAK_BEFORE_DISK=0
	for point in $SOAK_POINTS; do
		[ "$point" != after_add_disk ] || return 0
		SOAK_BEFORE_DISK=$((SOAK_BEFORE_DISK + 1))
	done
	echo "soak: no after_add_disk among the failure points of $1: '$SOAK_POINTS'"
	return 1
}

# soak_run CYCLES SEED FAULTS
soak_run() {
	local cycles=$1 n=0 reports leaks known start problem="" inst

	# shellcheck disable=SC3028 # busybox ash reseeds RANDOM on assignment
	RANDOM=$2
	start=$(date +%s)
	if [ "$SOAK_INSTANCES" -eq 0 ]; then
		echo "soak: no raceblk_s*.ko in /lib/modules: a -debug or -kcsan variant's initramfs has them"
		return 1
	fi
	soak_points "/lib/modules/$(soak_instances | head -n 1).ko" || return 1
	: > /tmp/soak.outcomes
	: > /tmp/soak.reports
	: > /tmp/soak.churns
	: > /tmp/soak.unwind
	case $3 in ungated*) SOAK_UNWIND=1 ;; esac
	# With every race at once the unwind takes three times as long (the
	# prober's forks and the rmmod loop: a median 1.5 s, at most 2.6 s,
	# against 0.5 s): opens that race it must be able to last as long.
	[ "$3" != ungated ] || SOAK_HOLD_MS=3000
	rm -f /tmp/soak.go && mkfifo /tmp/soak.go
	: > /tmp/prober.log
	case $3 in
	"" | faults | ungated | ungated-prober) prober_on "$SOAK_HOLD_MS" || problem=prober ;;
	esac
	case $3 in
	ungated | ungated-reload)
		# shellcheck disable=SC2046 # the instances' names
		rmmod_loop_start $(soak_instances)
		;;
	esac
	dmesg -c > /dev/null
	# The console shows warnings and worse only: two lines per cycle, and any
	# report in full, at 115200 baud.
	dmesg -n 5
	if [ "$3" = faults ]; then
		# Every request to a disk whose make-it-fail is set fails.
		echo 100 > /sys/kernel/debug/fail_make_request/probability
		echo 1 > /sys/kernel/debug/fail_make_request/interval
		echo -1 > /sys/kernel/debug/fail_make_request/times
		echo 0 > /sys/kernel/debug/fail_make_request/verbose
	fi
	while [ "$n" -lt "$cycles" ]; do
		soak_cycle "$n" "$3" || { problem=cycle; break; }
		if soak_reports; then
			echo "cycle $n: a report:"
			head -n 3 /tmp/soak.reports
			break
		fi
		n=$((n + 1))
		[ $((n % 100)) -ne 0 ] || echo "soak: $n cycles, $(($(date +%s) - start)) s"
	done
	{ echo 0 > /sys/kernel/debug/failslab/times; } 2>/dev/null || true
	prober_off
	leaks="n/a 0"
	# After a report the kernel's state proves nothing more, and a task
	# the oops killed may hang whatever waits for it: no reclaim, no scan.
	# Each stage of the end goes to the console: a guest killed at its
	# timeout shows where it stopped.
	if [ ! -s /tmp/soak.reports ]; then
		soak_stage "stopping the rmmod loop"
		if [ -n "${RMMOD_LOOP:-}" ]; then
			rmmod_loop_stop
			# Anything but OK, ENOENT (none loaded), EBUSY (one
			# coming) or EAGAIN (kept while held), or a stuck loop.
			echo "$RMMOD_LOOP_ANSWERS" | tr , '\n' | grep -qvxE 'OK|ENOENT|EBUSY|EAGAIN' &&
				problem="$problem rmmod-loop"
		fi
		for inst in $(soak_instances); do
			soak_stage "reclaiming $inst"
			soak_reclaim "$inst" || problem="$problem reclaim"
		done
		soak_reports final || true
		soak_stage "kmemleak scans"
		leaks=$(soak_kmemleak)
	fi
	soak_stage "done"
	reports=$(grep -c . /tmp/soak.reports)
	known=${leaks#* } leaks=${leaks% *}
	echo "outcomes: $(tally /tmp/soak.outcomes)"
	awk '$1 == "end" { print $5 }' /tmp/prober.log > /tmp/soak.probes
	echo "probers' opens: $(tally /tmp/soak.probes)"
	awk '$4 == 0 { none++ } END { print "openers: " NR ", " none + 0 " never opened their device" }' /tmp/soak.churns
	[ ! -s /tmp/soak.unwind ] || sort -n /tmp/soak.unwind | awk '{ t[NR] = $1 }
		END { print "unwind to return (ms): median " t[int((NR + 1) / 2)] ", max " t[NR] " of " NR }'
	[ "$known" = 0 ] || echo "kmemleak: $known object(s) of SLUB's known sysfs_slab_add() leak (CVE-2024-25740, not in 6.1.192), not counted"
	echo "soak: cycles=$n reports=$reports leaks=$leaks seconds=$(($(date +%s) - start))"
	# shellcheck disable=SC2034 # act_soak's (fuzz.sh) report of it
	SOAK_CYCLES=$n SOAK_REPORTS=$reports SOAK_LEAKS=$leaks SOAK_PROBLEM=${problem# }
}
