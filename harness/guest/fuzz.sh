# Hostile parameters (one load per value), and make soak's step.

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
			got=$(cat "/sys/module/raceblk/parameters/$name" 2>&1)
			echo "parameters/$name: $got, expected $expect"
			[ "$got" = "$expect" ] || return 1
		fi
		got=$(modctl unload raceblk)
		echo "unload: $got"
		[ "$got" = OK ]
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
