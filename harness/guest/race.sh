# Races without a gate: churners opening the disk in a loop, a udev-like
# prober, an rmmod loop against failing loads.

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
