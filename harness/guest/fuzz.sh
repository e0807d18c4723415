# soak:CYCLES:SEED[:MODE]: harness/guest/soak.sh's cycles of load, hold,
# fail and unload on raceblk's instances, racing openers (make soak): how
# many cycles ran, the kernel reports and leaks it saw, and its problems
# (none, or what went wrong outside the kernel's reports).
# expects: reports=0 leaks=0 problems=none
act_soak() {
	local cycles=${1%%:*} rest=${1#*:} mode=""

	# shellcheck source=harness/guest/soak.sh
	. /lib/raceblk/soak.sh
	case $rest in *:*) mode=${rest#*:} rest=${rest%%:*} ;; esac
	soak_run "$cycles" "$rest" "$mode" || true
	obs cycles "$SOAK_CYCLES"
	obs reports "$SOAK_REPORTS"
	obs leaks "$SOAK_LEAKS"
	obs problems "${SOAK_PROBLEM:-none}"
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

# fuzz:NAME:VALUE: finit_module(raceblk, "NAME=VALUE"), VALUE as
# fuzz_value spells it: what the load gave (fuzz).  Loaded: what
# parameters/NAME reads (param: its value, unreadable, or absent), whether the kernel warned that
# it ignored an unknown NAME (warned), and what the unload gave (unload).
# Refused: which error lines were logged meanwhile, yes or no each:
# driver_error, the driver's own "raceblk: NAME=VALUE: why";
# kernel_invalid, the kernel's "invalid for parameter `NAME'";
# kernel_too_long, its "NAME: string parameter too long".
act_fuzz() {
	local name=${1%%:*} value=${1#*:} word got errors

	word=$(fuzz_value "$name" "$value")
	FUZZ_SEQ=$((FUZZ_SEQ + 1))
	echo "harness: fuzz $FUZZ_SEQ" > /dev/kmsg
	got=$(modctl load "$KO" "$word")
	printf 'finit_module(raceblk, "%.60s%s")\n' "$word" "$([ ${#word} -gt 60 ] && echo "... (${#word} bytes)")"
	obs fuzz "$got"
	if [ "$got" = OK ]; then
		if [ -e "/sys/module/raceblk/parameters/$name" ]; then
			obs param "$(cat "/sys/module/raceblk/parameters/$name" 2>/dev/null || echo unreadable)"
		else
			obs param absent
		fi
		obs warned "$(log_since "fuzz $FUZZ_SEQ" | grep -qF "unknown parameter '$name' ignored" && echo yes || echo no)"
		obs unload "$(modctl unload raceblk)"
		return
	fi
	errors=$(log_since "fuzz $FUZZ_SEQ" | grep '^<3>' | cut -c 1-160)
	echo "${errors:-no error line}"
	obs driver_error "$(echo "$errors" | grep -q -F "raceblk: $name=" && echo yes || echo no)"
	obs kernel_invalid "$(echo "$errors" | grep -q -F "invalid for parameter \`$name'" && echo yes || echo no)"
	obs kernel_too_long "$(echo "$errors" | grep -q -F "$name: string parameter too long" && echo yes || echo no)"
}

# param_write:NAME:VALUE: one write() of VALUE (as fuzz spells it, without
# the name) to /sys/module/raceblk/parameters/NAME: OK or an errno name.
act_param_write() {
	local name=${1%%:*} value=${1#*:}

	value=$(fuzz_value "$name" "$value")
	value=${value#"$name"}
	value=${value#=}
	printf 'write(parameters/%s, "%.60s%s")\n' "$name" "$value" "$([ ${#value} -gt 60 ] && echo "... (${#value} bytes)")"
	obs param_write "$(modctl write "/sys/module/raceblk/parameters/$name" "$value")"
}
