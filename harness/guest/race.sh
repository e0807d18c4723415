# churn_start:DEV[+DEV...][:HOLD_MS]: one process per DEV (see device_of)
# opens it, reads its start and closes it in a loop, racing whatever init
# does meanwhile; each open is kept 0 to HOLD_MS ms (drawn, default 0),
# read again and again meanwhile, as a prober reads the disk it opened.
# A churner stops when its device went away after it had opened it, after
# CHURN_MS (10 s), or at churners_stop.
act_churn_start() {
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

# churners_collect: wait for every churner's line (blkhold writes it
# whole, newline last) or its fate, print them, and set CHURNED (how often
# they opened in all) and CHURN_PROBLEM (the first churner that did not
# answer "churn OK", or ok).  Their lines are waited for, not their exits:
# once, in 1 run of 50, the second churner's file was still empty when
# "wait" had returned.
churners_collect() {
	local n pid got

	CHURNED=0 CHURN_PROBLEM=ok
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
		*) [ "$CHURN_PROBLEM" != ok ] || CHURN_PROBLEM="churner $n: $got" ;;
		esac
	done
}

# churn_done: whether every churner ran to the end (churners: ok, or the
# first that did not), and how often they opened their devices (opened:
# none means they raced nothing).
# expects: churners=ok opened=>0
act_churn_done() {
	churners_collect
	obs churners "$CHURN_PROBLEM"
	obs opened "$CHURNED"
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

# prober_start[:HOLD_MS]: the prober on (see prober_on).
act_prober_start() {
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

# prober_done: the prober off; whether every prober it ran finished
# (probers: ok, or the first that did not and its fate), and whether one
# opened the disk or a partition (opened: yes or no; else they raced
# nothing).  What each opened is printed.
# expects: probers=ok opened=yes
act_prober_done() {
	local pid problem=ok

	prober_off
	# A prober the kernel has forked may not have logged its begin yet.
	poll 20 no_blkhold_left || true
	poll 1 probers_settled || true
	awk '$1 == "end" { print "prober: " $3 " open " $5 " read " $7 }' /tmp/prober.log | sort | uniq -c
	for pid in $(probers_unfinished); do
		[ "$problem" != ok ] ||
			problem="prober $pid ($(awk -v p="$pid" '$2 == p { print $3 }' /tmp/prober.log)): $(fate "$pid" blkhold)"
	done
	obs probers "$problem"
	# A partition's open takes the module reference as the disk's does.
	obs opened "$(grep -qE "^end [0-9]+ ${DISK}(${PART}[0-9]+)? open OK " /tmp/prober.log && echo yes || echo no)"
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

# rmmod_loop_stop: stop the loop; RMMOD_LOOP_ANSWERS is what its rmmods
# gave (sorted, without repeats: OK, ENOENT, EBUSY, EAGAIN...), or its fate
# when it is stuck.
rmmod_loop_stop() {
	touch /tmp/rmmod.stop
	settle "$RMMOD_LOOP" init || true
	echo "rmmod loop: $(tally /tmp/rmmod.out)"
	RMMOD_LOOP_ANSWERS=$(sort -u /tmp/rmmod.out | paste -s -d ,)
	[ -z "$SETTLED" ] || RMMOD_LOOP_ANSWERS="rmmod loop $SETTLED"
}

# reload_race:ROUNDS: ROUNDS failing loads that raced, each raced by two
# churners (the disk and its first partition, opens kept 0-200 ms, until
# the load returned) and all of them by an rmmod loop.  A round whose
# churners never opened the disk (the disk lives ~0.1 s; a busy host may
# not run a churner in it) raced nothing and does not count; at most
# 2 * ROUNDS loads.  A round starts once the last one's module is gone:
# freed at its failure, or kept while a churner held it and then freed by
# the loop.  It reports how many raced (raced), what the loads gave
# (loads: their answers, sorted, without repeats), the churners' first
# problem (churners), what the rmmod loop's rmmods gave (rmmod_loop) and
# whether raceblk was gone at each round's start and at the end (gone).
# expects: loads=EIO churners=ok gone=yes rmmod_answers=expected
act_reload_race() {
	local round=0 raced=0 got start gone loaded problem=ok left=yes

	rmmod_loop_start raceblk
	: > /tmp/reload.loads
	while [ "$raced" -lt "$1" ] && [ "$round" -lt $(($1 * 2)) ]; do
		round=$((round + 1))
		uptime_cs; start=$UPTIME_CS
		poll 10 module_gone raceblk || { echo "round $round: raceblk still loaded"; left=no; break; }
		uptime_cs; gone=$UPTIME_CS
		CHURN_MS=30000 act_churn_start "disk+part:200" > /dev/null
		# shellcheck disable=SC2086 # PARAMS is a word list
		got=$(or_died modctl "$(modctl load "$KO" $PARAMS)")
		echo "$got" >> /tmp/reload.loads
		uptime_cs; loaded=$UPTIME_CS
		churners_stop
		churners_collect > /tmp/churn.out
		[ "$CHURN_PROBLEM" = ok ] || { cat /tmp/churn.out; [ "$problem" != ok ] || problem=$CHURN_PROBLEM; }
		uptime_cs
		echo "round $round: load $got, churners opened $CHURNED times" \
			"(cs: gone $((gone - start)) load $((loaded - gone)) churners $((UPTIME_CS - loaded)))"
		if [ "$CHURNED" -gt 0 ]; then
			raced=$((raced + 1))
		else
			echo "round $round: no churner opened the disk: it raced nothing, not counted"
		fi
	done
	poll 10 module_gone raceblk || { echo "raceblk still loaded after the last round"; left=no; }
	rmmod_loop_stop
	obs raced "$raced"
	obs loads "$(sort -u /tmp/reload.loads | paste -s -d ,)"
	obs churners "$problem"
	obs rmmod_loop "$RMMOD_LOOP_ANSWERS"
	obs gone "$left"
}
