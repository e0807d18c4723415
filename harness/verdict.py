# SPDX-License-Identifier: GPL-2.0
"""What one guest's run means: its KTAP parsed, its console scanned for
crashes, and the two turned into a verdict.

A scenario passes when the guest planned its steps, reported each as ok,
and the kernel printed no crash line; or, for a row that expects a crash
(its console column), when the first crash line is the expected one.
"""

import dataclasses
import pathlib
import re
from typing import Dict, List, Optional, Tuple

import golden
import plan
from golden import HARNESS
from guestvm import QUIET_AFTER_REPORT_S, End
from plan import Scenario
from results import Status, Step, Verdict

# The crash titles (harness/guest/crash-titles, the guest's list too).
# Its last one is an x86 die() header ("Oops: 0000 [#1]"): it ends the
# report a "BUG:" (or "kernel BUG at") line opened, and counts as a crash
# only alone.
CRASH_TITLES = tuple(line for line in (HARNESS / 'guest/crash-titles').read_text().splitlines()
		     if line and not line.startswith('#'))
DIE_HEADER = CRASH_TITLES[-1]
CRASH_RE = re.compile('^(?:' + '|'.join(f'(?:{t})' for t in CRASH_TITLES) + ')')
# Known reports (harness/guest/known-reports, the guest's list too): a
# title and a function of its trace each.  A known report fails no row;
# the run lists it.
KNOWN_REPORTS = tuple(tuple(part.strip() for part in line.split('|', 1))
		      for line in (HARNESS / 'guest/known-reports').read_text().splitlines()
		      if line and not line.startswith('#'))
# A KCSAN or KASAN report's last line.
REPORT_END_RE = re.compile(r'^=+$')
OOPS_END_RE = re.compile(f'^{DIE_HEADER}')
KERNEL_LINE_RE = re.compile(r'^\[\s*\d+\.\d+\] (.*)$')
TIMESTAMP_RE = re.compile(r'\[\s*\d+\.\d+\] ')

VERSION_RE = re.compile(r'^KTAP version 1$')
PLAN_RE = re.compile(r'^1\.\.(\d+)$')
SKIP_ALL_RE = re.compile(r'^1\.\.0 # SKIP ?(.*)$')
RESULT_RE = re.compile(r'^(ok|not ok) (\d+) (\S+)( # .*)?$')
TIME_RE = re.compile(r'^# time: (\d+\.\d+)s$')


def unglued(console: str, ktap: str) -> str:
	"""CONSOLE with each kernel line that began in the middle of a line the
	guest was mirroring (its KTAP, KTAP) on a line of its own.  The kernel
	writes to the serial port between two characters of the guest's tty
	output, so "# obs load_done=EIO" and an oops's first line can share a
	line, which then is no kernel line.  A line the guest sent whole stays
	whole: the guest quotes kernel lines, timestamps and all."""
	sent = set(ktap.split('\n'))
	lines = []
	for line in console.split('\n'):
		if KERNEL_LINE_RE.match(line) or line in sent:
			lines.append(line)
			continue
		cuts = [m.start() for m in TIMESTAMP_RE.finditer(line) if m.start() > 0]
		cut = next((i for i in reversed(cuts) if any(s.startswith(line[:i]) for s in sent)), None)
		lines += [line] if cut is None else [line[:cut], line[cut:]]
	return '\n'.join(lines)


def kernel_lines(console: str) -> List[Tuple[int, str]]:
	"""The kernel's lines of a console log: each one's index among the
	console's lines, and its message without the timestamp."""
	# split('\n'), not splitlines(): a form feed in output is no new line.
	return [(i, match.group(1)) for i, line in enumerate(console.split('\n'))
		if (match := KERNEL_LINE_RE.match(line))]


def kernel_messages(console: str) -> List[str]:
	"""The kernel's lines of a console log, without their timestamps."""
	return [message for _, message in kernel_lines(console)]


def known_report_titles(messages: List[str]) -> Dict[int, str]:
	"""The known reports among MESSAGES: the index of each one's title."""
	known = {}
	for i, message in enumerate(messages):
		for title, frame in KNOWN_REPORTS:
			if not message.startswith(title):
				continue
			end = next((j for j in range(i + 1, len(messages)) if REPORT_END_RE.match(messages[j])),
				   len(messages))
			if any(frame in line for line in messages[i + 1:end]):
				known[i] = message
	return known


@dataclasses.dataclass
class Reports:
	"""What a console reports: its crash lines up to the first oops, each
	with its index among the console's lines, and the titles of its known
	reports (see KNOWN_REPORTS), which are no crash."""
	crashes: List[Tuple[int, str]]
	known: List[str]

	@property
	def crash_lines(self) -> List[str]:
		"""The crash lines alone, without their console index."""
		return [message for _, message in self.crashes]


def console_reports(console: str) -> Reports:
	"""Read a console's reports once.  What follows an oops is its
	aftermath (a task dying with a lock held warns again), not a crash."""
	numbered = kernel_lines(console)
	known = known_report_titles([message for _, message in numbered])
	crashes: List[Tuple[int, str]] = []
	for n, (i, message) in enumerate(numbered):
		if OOPS_END_RE.match(message):
			crashes = crashes or [(i, message)]
			break
		if CRASH_RE.search(message) and n not in known:
			crashes.append((i, message))
	return Reports(crashes, list(known.values()))


def reported(console: str) -> bool:
	"""Whether a console shows a kernel report (a known one is none)."""
	return bool(console_reports(console).crashes)


def crash_lines(console: str) -> List[str]:
	"""The crash lines up to the first oops, known reports left out."""
	return console_reports(console).crash_lines


def crash_excerpt(console: str, lines: int = 40) -> str:
	"""The console from the first crash line on (a known report is none):
	what a report shows."""
	crashes = console_reports(console).crashes
	if not crashes:
		return ''
	first = crashes[0][0]
	return '\n'.join(console.split('\n')[first:first + lines])


RIP_RE = re.compile(r'RIP: [0-9a-f]{4}:([A-Za-z0-9_.]+)\+0x')
COMM_RE = re.compile(r' Comm: (\S+) ')


def crash_title(line: str) -> str:
	"""A crash line without what changes from run to run: "BUG: unable to
	handle page fault", "WARNING", "invalid opcode", "kernel BUG at
	drivers/block/raceblk/main.c:640!"."""
	if line.startswith('WARNING:'):
		return 'WARNING'
	if re.match(DIE_HEADER, line):
		return line.split(':', 1)[0]
	return re.sub(r' for address: \S+$', '', line)


def crash_summary(console: str) -> str:
	"""The first crash of a console in a few words: its title, where it
	happened and in which task ("BUG: unable to handle page fault in
	blkdev_put_whole (blkhold)"); '' for none."""
	crashes = console_reports(console).crashes
	if not crashes:
		return ''
	first, line = crashes[0]
	title = crash_title(line)
	after = '\n'.join(console.split('\n')[first:first + 80])
	rip, comm = RIP_RE.search(after), COMM_RE.search(after)
	where = f' in {rip.group(1)}' if rip and ' in ' not in title else ''
	return f'{title}{where}' + (f' ({comm.group(1)})' if comm else '')


OBS_PREFIX = 'obs '
# What an rmmod may give while loads race it: OK, ENOENT (none loaded),
# EBUSY (one coming), EAGAIN (kept while held).
RMMOD_LOOP_ANSWERS = {'OK', 'ENOENT', 'EBUSY', 'EAGAIN'}


def args_of(word: str) -> List[str]:
	"""'reload_race:5=...' -> ['5']: an action's ARGS, split at ':'."""
	match = plan.ACTION_RE.match(word)
	return match.group(2).split(':') if match and match.group(2) else []


def fuzz_expected(args: List[str], expected: str) -> Dict[str, str]:
	"""fuzz:NAME:VALUE=EXPECTED: an errno: refused, with the error line of
	the one who refused it (the kernel for a missing value or an overlong
	string, else the driver); OK: loaded (an unknown NAME warned about) and
	unloaded; a number: loaded with NAME reading it."""
	if expected == 'OK' or expected.isdigit():
		wanted = {'fuzz': 'OK', 'unload': 'OK'}
		if expected.isdigit():
			wanted['param'] = expected
		return wanted
	error = ('kernel_invalid' if args[1:2] == ['noval'] else 'kernel_too_long' if expected == 'ENOSPC'
		 else 'driver_error')
	return {'fuzz': expected, error: 'yes'}


def derived_expected(name: str, args: List[str], observed: Dict[str, str]) -> Dict[str, str]:
	"""Expectations that read the action's arguments or compare two of its
	observations (what they derive is added to OBSERVED)."""
	if name == 'fuzz' and observed.get('fuzz') == 'OK' and observed.get('param') == 'absent':
		return {'warned': 'yes'}
	if name == 'vermagic':
		module = observed.get('module', '')
		observed['differs'] = 'yes' if module and module != observed.get('kernel') else 'no'
	if name == 'reload_race':
		answers = set(observed.get('rmmod_loop', '').split(','))
		observed['rmmod_answers'] = 'expected' if answers <= RMMOD_LOOP_ANSWERS else observed.get('rmmod_loop', '')
		return {'raced': f'>={args[0] if args else 1}'}
	if name == 'released' and observed.get('released') == 'after_holders':
		return {'said': 'yes'}
	if name == 'soak':
		return {'cycles': args[0] if args else '(no CYCLES)'}
	return {}


def default_expected(scenario: Scenario, name: str, observed: Dict[str, str],
		     image: Optional[golden.Image]) -> Dict[str, str]:
	"""What every case expects of action NAME (its contract: the "#
	expects:" line above its act_NAME), and what the image says it must
	read: its golden table (partitions, scanned_in_init) and its bytes
	(data, holder_read, read_done)."""
	contract = plan.action_contracts().get(name)
	wanted = contract.expects_on(plan.series_of(scenario.variant)) if contract else {}
	if image is None:
		return wanted
	series = plan.golden_series(scenario.variant)
	if name == 'partitions':
		wanted['partitions'] = golden.table_text(image.partitions(series))
		if 'proc_kib' in observed:
			observed['proc'] = golden.kib_problems(observed.get('partitions', ''), observed['proc_kib']) or 'agrees'
			wanted['proc'] = 'agrees'
	elif name == 'scanned_in_init':
		table = image.partitions(series)
		wanted['scan'] = golden.numbers_text(table)
		if table:
			wanted['scan_when'] = 'in_init'
	elif name == 'data':
		# The disk and the partitions of this series' table that the
		# image's sums list (a partition past the disk's end has none;
		# fixed makes fewer of a looping EBR chain than the sums list).
		sums = image.sums()
		for number in [0] + [n for n, _, _ in image.partitions(series) if n in sums]:
			sum_, stamp = sums.get(number, ('(no sum)', ''))
			wanted[f'sum.{number}'] = sum_
			if stamp:
				wanted[f'stamp.{number}'] = stamp
	elif name == 'holder_read' and 'sum' in observed:
		nr = observed.get('nr', '')
		wanted['sum'] = image.sums().get(int(nr) if nr.isdigit() else -1, ('(no sum)', ''))[0]
	elif name == 'read_done' and 'md5' in observed:
		wanted['md5'] = image.head_md5(4096)
	return wanted


def expected_values(name: str, text: str) -> Dict[str, str]:
	"""An action's expectation as KEY: VALUE: "EIO" is the action's own
	key ({name: 'EIO'}), "load=ENOMEM,close=OK" one value per key."""
	if '=' not in text:
		return {name: text}
	return dict(pair.split('=', 1) for pair in text.split(','))


def value_matches(expected: str, observed: Optional[str]) -> bool:
	"""EXPECTED may list alternatives ("hung|unheld"); a fate matches by its
	first word ("hung" is "hung in bdev_release"); ">N" and ">=N" compare
	numbers."""
	if observed is None:
		return False
	return any(observed == alt or (alt in ('died', 'hung') and observed.split(' ', 1)[0] == alt)
		   or number_matches(alt, observed) for alt in expected.split('|'))


def number_matches(expected: str, observed: str) -> bool:
	match = re.fullmatch(r'(>=?)(\d+)', expected)
	if not match or not observed.isdigit():
		return False
	return int(observed) >= int(match.group(2)) + (match.group(1) == '>')


def mismatch_of(name: str, expected: Optional[str], observed: Dict[str, str],
		defaults: Optional[Dict[str, str]] = None) -> str:
	"""How OBSERVED differs from what the case (and DEFAULTS) say of action
	NAME; '' when it does not."""
	wanted = {**(defaults or {}), **(expected_values(name, expected) if expected is not None else {})}
	problems = [problem_of(key, observed.get(key), value)
		    for key, value in wanted.items() if not value_matches(value, observed.get(key))]
	return '; '.join(problems)


def problem_of(key: str, observed: Optional[str], expected: str) -> str:
	"""What is wrong with KEY's value: both values, or for a partition
	table what differs (a looping EBR chain gives 255 partitions)."""
	difference = ''
	if key == 'partitions' and observed is not None and golden.is_table(observed) and golden.is_table(expected):
		difference = golden.table_difference(observed, expected)
	if difference:
		return f'partitions: {difference}'
	return f'{key}={"(not reported)" if observed is None else observed}, expected {expected}'


def compare_observations(scenario: Scenario, ktap: 'Ktap', build: Optional[pathlib.Path] = None) -> None:
	"""The host's judgement of each action the guest reported: a step the
	guest could act on (ok) fails when what it saw is not what the case
	expects.  Steps are named as the case writes them.  BUILD has the
	images (None: no image defaults)."""
	image = golden.Image(scenario.image, build) if build is not None else None
	for step, word, expected in zip(ktap.steps, scenario.steps, scenario.expectations):
		step.name, step.expected = word, expected
		if not step.ok:
			continue
		name = plan.step_name(word)
		defaults = default_expected(scenario, name, step.observed, image)
		defaults.update(derived_expected(name, args_of(word), step.observed))
		if name == 'fuzz':
			defaults.update(fuzz_expected(args_of(word), expected or ''))
			expected = None
		step.mismatch = mismatch_of(name, expected, step.observed, defaults)
		if step.mismatch:
			step.ok = False
			step.diagnostics.append(f'observed {step.mismatch}')


@dataclasses.dataclass
class Ktap:
	"""A guest's KTAP document, as far as it got."""
	plan: Optional[int] = None
	skip_reason: Optional[str] = None
	steps: List[Step] = dataclasses.field(default_factory=list)
	errors: List[str] = dataclasses.field(default_factory=list)


def observations(diagnostics: List[str]) -> Dict[str, str]:
	"""An action's "obs KEY=VALUE" lines; the first of a key counts."""
	found: Dict[str, str] = {}
	for line in diagnostics:
		if line.startswith(OBS_PREFIX) and '=' in line:
			key, value = line[len(OBS_PREFIX):].split('=', 1)
			found.setdefault(key, value)
	return found


def parse_ktap(text: str, sent_steps: List[str]) -> Ktap:
	"""The guest's document, checked against the steps the host sent: a
	plan line is "1..N" with N the number of steps, results come in order
	and name the step sent."""
	ktap = Ktap()
	pending: List[str] = []
	seconds = None
	for line in text.split('\n'):
		if VERSION_RE.match(line):
			continue
		if (SKIP_ALL_RE.match(line) or PLAN_RE.match(line)) and ktap.plan is not None:
			ktap.errors.append(f'a second plan line "{line}"')
			continue
		skip = SKIP_ALL_RE.match(line)
		plan = PLAN_RE.match(line)
		result = RESULT_RE.match(line)
		if skip:
			ktap.plan, ktap.skip_reason = 0, skip.group(1) or 'no reason given'
			if sent_steps:
				ktap.errors.append(f'skipped all ({ktap.skip_reason}) with {len(sent_steps)} steps sent')
		elif plan:
			ktap.plan = int(plan.group(1))
			if ktap.plan != len(sent_steps):
				ktap.errors.append(f'plan "{line}" for {len(sent_steps)} steps sent')
		elif line.startswith('1..'):
			ktap.errors.append(f'bad plan line "{line}"')
		elif result:
			number, name = int(result.group(2)), result.group(3)
			want = len(ktap.steps) + 1
			if number != want or want > len(sent_steps) or name != sent_steps[want - 1]:
				ktap.errors.append(f'result "{line}" out of order (expected {want} '
						   f'{sent_steps[want - 1] if want <= len(sent_steps) else "nothing"})')
			ktap.steps.append(Step(number, name, result.group(1) == 'ok', pending, seconds,
					       observations(pending)))
			pending, seconds = [], None
		elif TIME_RE.match(line):
			seconds = float(TIME_RE.match(line).group(1))
		elif line.startswith('# '):
			pending.append(line[2:])
	# Steps the guest never reported: what the host sent, unrun.
	for number in range(len(ktap.steps) + 1, len(sent_steps) + 1):
		ktap.steps.append(Step(number, sent_steps[number - 1], None, pending))
		pending = []
	return ktap


def console_problem(scenario: Scenario, console: str) -> str:
	"""The first crash line the row did not expect, or that the expected
	one is missing; '' when the console is as the row says."""
	crashes = crash_lines(console)
	if scenario.console == '-':
		return crashes[0] if crashes else ''
	expected = re.compile(scenario.console)
	unexpected = [c for c in crashes if not expected.search(c)]
	if unexpected:
		return unexpected[0]
	if not any(expected.search(m) for m in kernel_messages(console)):
		return f'no console line matches the expected /{scenario.console}/'
	return ''


def scenario_marker(scenario: Scenario) -> str:
	"""The kernel line the guest logs when it has its scenario: without it
	on the console, the crash scan would see nothing and pass."""
	return f'harness: scenario {scenario.name}'


def judge(scenario: Scenario, ktap: Ktap, console: str, end: Optional[End], timeout_s: int,
	  fault: str = '') -> Verdict:
	"""END is how the guest ended; FAULT, the harness's own problem (no
	guest ran, or its observations could not be judged): an ERROR."""
	if fault:
		return Verdict(Status.ERROR, fault, directive='ERROR')
	if ktap.plan is not None and scenario_marker(scenario) not in kernel_messages(console):
		return Verdict(Status.ERROR, f'no kernel line "{scenario_marker(scenario)}" on the console: '
			       'it was not captured, and a crash would go unseen', directive='ERROR')
	crash = console_problem(scenario, console)
	with_crash = f' (console: {crash})' if crash else ''
	if end == End.TIMEOUT:
		return Verdict(Status.FAIL, f'guest killed at the {timeout_s}s timeout{with_crash}',
			       directive='TIMEOUT')
	if end == End.HUNG:
		return Verdict(Status.FAIL, f'guest killed: silent for {QUIET_AFTER_REPORT_S}s after a kernel report'
			       f'{with_crash}', directive='TIMEOUT')
	if ktap.plan is None:
		reason = ktap.errors[0] if ktap.errors else 'no KTAP plan from the guest'
		return Verdict(Status.FAIL, reason + with_crash, directive='ERROR')
	if ktap.errors:
		return Verdict(Status.FAIL, f'bad KTAP from the guest: {ktap.errors[0]}{with_crash}', directive='ERROR')
	if ktap.skip_reason is not None:
		return Verdict(Status.SKIP, ktap.skip_reason)
	failed = [s for s in ktap.steps if s.ok is False]
	reported = sum(1 for s in ktap.steps if s.ok is not None)
	if failed:
		why = f': observed {failed[0].mismatch}' if failed[0].mismatch else ''
		return Verdict(Status.FAIL, f'not ok {failed[0].number} {failed[0].name}{why}')
	if reported != ktap.plan:
		return Verdict(Status.FAIL, f'guest reported {reported} of {ktap.plan} results{with_crash}',
			       directive='ERROR')
	if crash:
		return Verdict(Status.FAIL, f'console: {crash}')
	if scenario.console != '-':
		expected = re.compile(scenario.console)
		proof = next(m for m in kernel_messages(console) if expected.search(m))
		return Verdict(Status.PASS, proof=f'expected: {proof}', xfail=crash_summary(console) or proof)
	return Verdict(Status.PASS)
