# Steps a scenario row can name.  step_NAME [ARG] prints what it saw (each
# line becomes a KTAP diagnostic) and returns 0 when the check holds.
# Globals: PARAMS (module parameters), IMAGE (image name).

KO=/lib/modules/raceblk.ko
DISK=raceblk0
GOLDEN=/lib/raceblk/images

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

# killed_by_oops COMM: the kernel oopsed in a task named COMM.  Such a task
# may then hang in its exit forever, so its exit cannot be waited for.
killed_by_oops() {
	dmesg | grep -q "Comm: $1 "
}

# modctl_expect EXPECTED ARGS...: run modctl ARGS, say what it gave.
modctl_expect() {
	local expected=$1 got

	shift
	got=$(modctl "$@")
	echo "modctl $*: $got, expected $expected"
	[ "$got" = "$expected" ]
}

# load=ERRNO: finit_module() once with the row's parameters gives ERRNO.
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
	local part

	for part in "/sys/block/$DISK/${DISK}p"*; do
		[ -e "$part" ] || continue
		echo "${part##*p} $(cat "$part/start") $(cat "$part/size")"
	done | sort -n
}

golden_partitions() {
	grep -v '^#' "$GOLDEN/$IMAGE.expected"
}

# partitions: sysfs and /proc/partitions show exactly the golden table.
step_partitions() {
	local expected found nr size blocks status=0

	expected=$(golden_partitions)
	found=$(found_partitions)
	if [ "$expected" != "$found" ]; then
		echo "partition table differs from images/$IMAGE.expected"
		echo "expected (nr start size):"
		echo "$expected" | sed 's/^/  /'
		echo "found in /sys/block/$DISK:"
		echo "${found:-  (no partitions)}" | sed 's/^/  /'
		status=1
	fi
	while read -r nr _ size; do
		blocks=$(awk -v p="${DISK}p$nr" '$4 == p { print $3 }' /proc/partitions)
		if [ "$blocks" != $((size / 2)) ]; then
			echo "/proc/partitions ${DISK}p$nr: ${blocks:-missing} KiB, expected $((size / 2))"
			status=1
		fi
	done <<-EOT
	$expected
	EOT
	[ $status -eq 0 ] && echo "$(echo "$found" | wc -l) partitions as golden: $(echo "$found" | tr '\n' ';')"
	return $status
}

# data: the disk and every partition read back the bytes of the image.
step_data() {
	local nr sum dev got status=0

	while read -r nr sum; do
		dev=$DISK
		[ "$nr" = 0 ] || dev=${DISK}p$nr
		got=$(md5sum < "/dev/$dev" | cut -d' ' -f1)
		if [ "$got" != "$sum" ]; then
			echo "$dev: md5 $got, expected $sum"
			status=1
		fi
	done < "$GOLDEN/$IMAGE.sums"
	[ $status -eq 0 ] && echo "$DISK and its partitions read back as in the image"
	return $status
}

# no_partitions: the disk is there, without partitions.
step_no_partitions() {
	local found

	found=$(found_partitions)
	grep " $DISK" /proc/partitions
	[ -e /sys/block/$DISK ] || { echo "no $DISK"; return 1; }
	if [ -n "$found" ]; then
		echo "partitions found:"
		echo "$found"
		return 1
	fi
	echo "$DISK has no partitions"
}

# open_disk: open the whole disk and read its first sector.
step_open_disk() {
	dd if=/dev/$DISK of=/dev/null bs=512 count=1 2>&1 | head -n 1
}

# rereadpt: ask the kernel to scan the partition table again (BLKRRPART).
step_rereadpt() {
	blockdev --rereadpt /dev/$DISK && echo "BLKRRPART on $DISK: OK"
}

# no_disk: the disk and its partitions are gone.
step_no_disk() {
	if [ -e /sys/block/$DISK ] || grep -q " $DISK" /proc/partitions; then
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

# scanned_in_init: the kernel listed the golden partitions while scanning
# the disk, before init failed.
step_scanned_in_init() {
	local parts scan fail

	parts=$(golden_partitions | awk '{ printf " p%s", $1 }')
	scan=$(dmesg | grep -n " $DISK:$parts\$" | head -n 1)
	fail=$(dmesg | grep -n "raceblk: failing init at" | head -n 1)
	echo "scan: ${scan#*:}"
	echo "fail: ${fail#*:}"
	[ -n "$scan" ] && [ -n "$fail" ] && [ "${scan%%:*}" -lt "${fail%%:*}" ]
}

# not_scanned: the kernel never listed partitions of the disk.
step_not_scanned() {
	if dmesg | grep " $DISK: p"; then
		echo "partitions of $DISK were scanned"
		return 1
	fi
	echo "no partition scan of $DISK in the kernel log"
}

# refused=MODULE: try_module_get() refused MODULE during its init, with
# the warning that names it and the caller.
step_refused() {
	local line

	line=$(dmesg | grep -F "$1: try_module_get() from" | head -n 1)
	echo "warning: ${line:-no try_module_get() warning naming $1}"
	[ -n "$line" ]
}

# stuck: raceblk's init failed after it was made live, so it is kept:
# logged as unsafe and stuck, live in /proc/modules with the "!" flag,
# unsafe in sysfs.
step_stuck() {
	local unsafe stuck proc initstate flag status=0

	unsafe=$(dmesg | grep -F "raceblk: cannot be unloaded due to unsafe usage" | head -n 1)
	stuck=$(dmesg | grep -F "raceblk: module is now stuck" | head -n 1)
	proc=$(grep '^raceblk ' /proc/modules)
	initstate=$(cat /sys/module/raceblk/initstate 2>&1)
	flag=$(cat /sys/module/raceblk/unsafe 2>&1)
	echo "log: ${unsafe:-no unsafe line}"
	echo "log: ${stuck:-no stuck line}"
	echo "/proc/modules: ${proc:-no raceblk}"
	echo "/sys/module/raceblk: initstate $initstate, unsafe $flag"
	[ -n "$unsafe" ] && [ -n "$stuck" ] || status=1
	case $proc in *" Live "*"!)") ;; *) status=1 ;; esac
	[ "$initstate" = live ] || status=1
	[ "$flag" = 1 ] || status=1
	return $status
}

# pr_err=TEXT: the driver logged "raceblk: TEXT..." at KERN_ERR.
step_pr_err() {
	local line

	line=$(dmesg -r | grep '^<3>' | grep -F "raceblk: $1" | head -n 1)
	echo "pr_err: ${line:-none starting with \"raceblk: $1\"}"
	[ -n "$line" ]
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

# load_done=ERRNO: the background load finished with ERRNO.
step_load_done() {
	local got

	wait "$(cat /tmp/load.pid)"
	got=$(cat /tmp/load.out)
	echo "background finit_module() = $got, expected $1"
	[ "$got" = "$1" ]
}

stage_is() {
	[ "$(cat "$STAGE" 2>/dev/null)" = "$1" ]
}

# held=POINT: init is waiting at POINT (up to 20 s for it to get there).
step_held() {
	if ! poll 20 stage_is "held at $1"; then
		echo "stage: $(cat "$STAGE" 2>&1), expected \"held at $1\""
		return 1
	fi
	echo "stage: held at $1; module: $(grep '^raceblk ' /proc/modules)"
}

# release: let init go on from hold.
step_release() {
	echo 1 > /sys/module/raceblk/parameters/release && echo "release written"
}

# holder_ask COMMAND: send COMMAND to blkhold, print its answer, or "died"
# when it is gone: an oops killed it (it may then hang in its exit, keeping
# the answer pipe open, so the kernel log tells), or it was silent for 20 s.
holder_ask() {
	local answer tries=0

	echo "$*" >&5 2>/dev/null || { echo died; return; }
	# shellcheck disable=SC3045 # busybox ash has read -t
	until read -t 1 -r answer <&6; do
		tries=$((tries + 1))
		if [ $tries -ge 20 ] || killed_by_oops blkhold; then
			answer=died
			break
		fi
	done
	echo "$answer"
}

# expect_answer STEP EXPECTED ANSWER: compare blkhold's answer.
expect_answer() {
	echo "blkhold $1: $3, expected $1 $2"
	[ "$3" = "$1 $2" ] || { [ "$2" = died ] && [ "$3" = died ]; }
}

# holder_open=DEV[:ERRNO]: blkhold opens /dev/DEV, with ERRNO (default OK).
step_holder_open() {
	local dev=${1%%:*} expected=OK

	[ "$dev" = "$1" ] || expected=${1#*:}
	rm -f /tmp/hold.cmd /tmp/hold.ans
	mkfifo /tmp/hold.cmd /tmp/hold.ans
	blkhold < /tmp/hold.cmd > /tmp/hold.ans &
	exec 5> /tmp/hold.cmd 6< /tmp/hold.ans
	HELD_DEV=$dev
	# Partition number for the checksum table: 0 is the whole disk.
	HELD_NR=0
	case $dev in *p[0-9]*) HELD_NR=${dev##*p} ;; esac
	HELD_BYTES=$(blockdev --getsize64 "/dev/$dev" 2>/dev/null || echo 0)
	expect_answer open "$expected" "$(holder_ask open "/dev/$dev")"
}

# holder_read=ERRNO|died: read all of the held device; when that works,
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

# holder_close=ERRNO|died: blkhold closes the held device.
step_holder_close() {
	expect_answer close "$1" "$(holder_ask close)"
}

# refcnt=N: raceblk's reference count.
step_refcnt() {
	local got

	got=$(cat /sys/module/raceblk/refcnt 2>&1)
	echo "/sys/module/raceblk/refcnt: $got, expected $1"
	[ "$got" = "$1" ]
}

# --- I/O in flight ------------------------------------------------------------

# read_bg: an O_DIRECT read of the disk's first 4 KiB, in the background.
step_read_bg() {
	dd if=/dev/$DISK of=/tmp/bg.data bs=4096 count=1 iflag=direct 2> /tmp/bg.err &
	echo $! > /tmp/bg.pid
	echo "O_DIRECT read of $DISK started in the background"
}

requests_in_flight() {
	awk '$1 + $2 > 0 { found = 1 } END { exit !found }' /sys/block/$DISK/inflight 2>/dev/null
}

# inflight: a request of the disk is in flight (up to 10 s for it).
step_inflight() {
	local status=0

	poll 10 requests_in_flight || status=1
	echo "/sys/block/$DISK/inflight (reads writes): $(cat /sys/block/$DISK/inflight 2>&1)"
	return $status
}

# read_done: the background read completed with the MBR's first 4 KiB.
step_read_done() {
	local signature

	wait "$(cat /tmp/bg.pid)" || { cat /tmp/bg.err; return 1; }
	signature=$(od -A n -t x1 -j 510 -N 2 /tmp/bg.data | tr -d ' ')
	echo "read done: $(wc -c < /tmp/bg.data) bytes, MBR signature $signature"
	[ "$signature" = 55aa ]
}

# --- a reader stopped between two reads ------------------------------------

# reader_start=DEV: dd reads DEV with O_DIRECT, 4 KiB at a time, in the
# background.
step_reader_start() {
	dd if="/dev/$1" of=/tmp/reader.data bs=4096 count=8 iflag=direct 2> /tmp/reader.err &
	echo $! > /tmp/reader.pid
	echo "dd reading /dev/$1 in the background (pid $(cat /tmp/reader.pid))"
}

# reader_stop: stop the reader (SIGSTOP) once its current read is done.
step_reader_stop() {
	kill -STOP "$(cat /tmp/reader.pid)" && echo "reader stopped"
}

# reader_done=OK|ERRNO|died: let the reader go on (SIGCONT) and see how it
# ends: OK, failing with an errno from a read, or killed by an oops (it may
# then hang in its exit, so the kernel log tells).
reader_settled() {
	! kill -0 "$(cat /tmp/reader.pid)" 2>/dev/null || killed_by_oops dd
}

step_reader_done() {
	local pid got status

	pid=$(cat /tmp/reader.pid)
	kill -CONT "$pid"
	poll 20 reader_settled
	if killed_by_oops dd || kill -0 "$pid" 2>/dev/null; then
		got=died
	else
		wait "$pid" && status=0 || status=$?
		got=OK
		if [ "$status" -ne 0 ]; then
			got=
			grep -q 'Input/output error' /tmp/reader.err && got=EIO
		fi
	fi
	echo "reader: ${got:-exit $status: $(cat /tmp/reader.err)}, expected $1"
	[ "$got" = "$1" ]
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
