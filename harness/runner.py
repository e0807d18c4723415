# SPDX-License-Identifier: GPL-2.0
"""harness/run: boot one QEMU guest per scenario and turn what it reports
into verdicts.  `make test` builds the kernels and initramfs, then calls it.

Scenarios are the cases of harness/cases, compiled once into a validated
plan (harness/plan.py) over the kernel variants in $VARIANTS (default:
kernel-patches/variants) and named VARIANT/ID/IMAGE.  Each runs in its own
VM (a crash must not poison the next one), restored from a snapshot of its
variant's guest taken where /init waits for work (build/KERNEL/snapshots/, saved
again when the kernel, the archive or QEMU change) when the variant has 3
boots or more in the run (scenarios times --repeat), else booted cold.  --snapshot and --cold
force either way.  A new snapshot is restored once before use; one
that cannot be saved, or crashes at that restore three times, falls back to
cold boots.  The host sends each guest its resolved row (params and steps); the
guest answers in KTAP on its second serial port, its console goes to a log.
A guest still running at --timeout is killed with its process group.

Results: build/KERNEL/results/results.json (a record per scenario and step), and
from it results.ktap, junit.xml and matrix.json; each scenario's logs in
build/KERNEL/results/VARIANT/ID/IMAGE/.  Last line: "N passed, N failed, N
skipped" (an ERROR, a fault of the harness rather than the kernel, counts
as failed).  Exit status: 0 all passed, 1 something failed, 2 bad input
or setup, 130/143 interrupted by SIGINT/SIGTERM.

The parts: cli.py (the command line), session.py (the tree and where its
builds are), own.py (a disk image or a driver of the user's), boots.py
(accelerator, snapshots, a guest's machine), records.py (runs made into
records, the reports), control.py (the lock, the signals), byhand.py
(--shell and --gdb).
"""

import argparse
import concurrent.futures
import contextlib
import fnmatch
import json
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from typing import Dict, List, Optional, Tuple

import boots
import builds
import byhand
import bzimage
import distro
import guestvm
import plan
import reports
import results
import verdict
from cli import parse_args
from control import Lock, Signals
from own import prepare_own_image, prepare_own_module, sha256_of
from plan import Scenario
from records import (FOREIGN_REASON, MATRIX_FILE, RACE_DEMO_FILE, REPORT_FILES, aggregate, not_run_record, report_failure, run_of, symbolise,
		     write_reports)
from results import Record, Report, Run, Verdict
from session import Refusal, Session

HARNESS = plan.HARNESS
TOP = plan.TOP


# --- the plan -----------------------------------------------------------------

def compile_plan(opts: argparse.Namespace, session: Session) -> List[Scenario]:
	"""The validated table, expanded, filtered and sharded."""
	table = pathlib.Path(opts.cases)
	if not table.is_file():
		raise Refusal(f'no cases at {table}')
	known = plan.known_names()
	errors = plan.check(table, known) + plan.variant_errors(opts.variants, known)
	if errors:
		raise Refusal('\n'.join(errors) + '\nthe cases or VARIANTS have errors (above)')
	globs = opts.filter.split()
	chosen = [s for s in plan.scenarios(table, opts.variants, opts.own_name, tree=session.tree)
		  if any(fnmatch.fnmatchcase(s.name, g) for g in globs)]
	index, count = opts.shard
	chosen = chosen[index - 1::count]
	# A kernel of the user's (--bzimage): no module built for another
	# kernel, and maybe not every option a case needs.
	opts.not_run = {}
	for scenario in chosen:
		needs = plan.lacked(scenario, session.lacks_of(scenario.variant))
		if needs:
			opts.not_run[scenario] = f'it needs what the kernel lacks: {"; ".join(needs)}'
		elif scenario.variant in session.foreign and plan.loads_foreign_modules(scenario):
			opts.not_run[scenario] = FOREIGN_REASON
	chosen = [s for s in chosen if s not in opts.not_run]
	if opts.own_module and any(s.image != plan.DEFAULT_IMAGE for s in chosen):
		# The guest unpacks one archive after a restore: the module's.
		raise Refusal(f'--module runs cases on the default image only, and {opts.cases} has others')
	if opts.interactive and not opts.list:
		chosen = [byhand.interactive_scenario(chosen, opts.shell)]
	return chosen


def check_built(session: Session, scenarios: List[Scenario], variants: List[str]) -> None:
	"""The kernels, archives and images the scenarios boot, with archives
	no older than the guest scripts they carry."""
	tree = '' if session.tree == plan.default_tree() else f' KERNEL={session.tree}'
	if os.environ.get('KERNEL_SRC'):
		tree = f' KERNEL_SRC={os.environ["KERNEL_SRC"]}'
	make = f'make initramfs{tree} VARIANTS="{" ".join(variants)}"'
	guest_files = list((HARNESS / 'guest').iterdir())
	for variant in sorted({s.variant for s in scenarios}):
		if not session.kernel_of(variant).is_file() or not session.initramfs_of(variant).is_file():
			raise Refusal(f"no kernel or initramfs for '{variant}' under {session.shown}/: run '{make}'")
		built = session.initramfs_of(variant).stat().st_mtime
		newer = [f for f in guest_files if f.stat().st_mtime > built]
		if newer:
			raise Refusal(f'{newer[0].relative_to(TOP)} is newer than the initramfs of '
				      f"'{variant}': run '{make}'")
	for variant in sorted({s.variant for s in scenarios if plan.loads_foreign_modules(s)}):
		if not session.foreign_archive(variant).is_file():
			raise Refusal(f"no archive of the modules built for another kernel for '{variant}' "
				      f"under {session.shown}/: run '{make}'")
	for image in sorted({s.image for s in scenarios}):
		if not session.image_archive(image).is_file():
			raise Refusal(f"no archive of image '{image}' under {session.shown}/: run 'make initramfs'")
	for image in sorted({s.image for s in scenarios if 'disk' in plan.machine_traits(s.machine)}):
		if not session.disk_of(image).is_file():
			raise Refusal(f"no disk image '{image}' under {session.shown}/: run 'make images'")
	if not shutil.which(guestvm.QEMU):
		raise Refusal(f'{guestvm.QEMU} not found: apt-get install qemu-system-x86')


class Runner(boots.Guests):
	"""One run: its guests, each booted and judged."""

	def __init__(self, opts: argparse.Namespace, session: Session, scenarios: List[Scenario], sockdir: str,
		     made: Optional[builds.Builds] = None):
		super().__init__(opts, session, scenarios, sockdir)
		self.print_lock = threading.Lock()
		self.done, self.total = 0, len(scenarios) * opts.repeat
		# --build: the kernels are made as the run goes, fewer guests at
		# once meanwhile; each step (goal, variant) is checked, and a
		# base's snapshots saved, once it is made ('' or why its guests
		# cannot boot, by step).
		self.made = made
		self.gate = builds.Gate(opts.jobs, made) if made else contextlib.nullcontext()
		self.prepared: Dict[builds.Step, str] = {}
		# One step is prepared at a time: a snapshot's save is a guest, and
		# while kernels build the gate allows fewer.
		self.prepare_lock = threading.Lock()

	@staticmethod
	def goal_of(scenario: Scenario) -> str:
		"""What make builds for SCENARIO's guest (--build)."""
		return builds.ALL if plan.loads_foreign_modules(scenario) else builds.BASE

	def prepare(self, step: builds.Step) -> str:
		"""With --build, once STEP (goal, variant) is made: check what it
		built and, for a base, save its snapshots.  '' when the guests it
		is for can boot, else why not.  ('' without --build: main checked
		every kernel before the run.)"""
		goal, variant = step
		if not self.made:
			return ''
		with self.prepare_lock:
			if step not in self.prepared:
				why = self.made.wait(variant, goal)
				if not why and not guestvm.stopping():
					try:
						check_built(self.session, [s for s in self.scenarios if s.variant == variant and
									   self.goal_of(s) == goal], [variant])
						if goal == builds.BASE:
							self.save_snapshots([k for k in self.wanted_snapshots() if k[0] == variant])
					except Refusal as refusal:
						why = str(refusal)
					except Exception:	# a bug of ours, or the host (a full disk): this step's ERRORs
						why = f'harness error preparing {variant}: {traceback.format_exc().strip().splitlines()[-1]}'
				self.prepared[step] = why
			return self.prepared[step]

	def run_made(self, scenario: Scenario, k: int) -> Run:
		"""Run K of SCENARIO once its kernel is there (--build: made)."""
		step = (self.goal_of(scenario), scenario.variant)
		if self.made:
			self.made.wait(scenario.variant, step[0])	# outside the gate: its slots are for guests
		with self.gate:
			why = self.prepare(step)
			if guestvm.stopping():
				return run_of(k, Verdict.cut_short())
			if not why:
				return self.run_once(scenario, k)
		run = run_of(k, Verdict(results.Status.ERROR, why))
		self.print_run(scenario, run)
		return run

	def run_dir(self, scenario: Scenario, k: int) -> pathlib.Path:
		base = self.session.results / scenario.name
		return base if self.opts.repeat == 1 else base / f'run-{k}'

	def boot(self, scenario: Scenario, workdir: pathlib.Path) -> guestvm.End:
		snapshot = self.snapshot_of(scenario)
		self.write_rerun(scenario, workdir, 'the run restored it from its variant\'s snapshot' if snapshot
				 else 'the run booted it cold')
		if snapshot is None:
			initrd = workdir / 'initrd'
			boots.write_initrd(boots.scenario_parts(self.session, scenario, bool(self.opts.own_module)), initrd)
			try:
				# A person at a shell or in gdb may leave a guest
				# silent after an oops for as long as they like.
				return guestvm.run_scenario(self.machine(scenario.variant, scenario=scenario),
							    workdir, self.sockdir,
							    initrd, self.message(scenario), self.timeout_of(scenario.variant),
							    reported=None if self.opts.interactive else verdict.reported)
			finally:
				initrd.unlink(missing_ok=True)
		# One archive at most: the guest's cpio stops at the first one's
		# end (--module runs on the default image only).
		archive = b'' if scenario.image == plan.DEFAULT_IMAGE else self.session.image_archive(scenario.image).read_bytes()
		if self.opts.own_module:
			archive = self.session.own_archive(scenario.variant).read_bytes()
		return guestvm.run_scenario(self.machine(scenario.variant, kind=scenario.machine), workdir, self.sockdir,
					    snapshot.with_suffix('.initrd'), self.message(scenario, archive),
					    self.timeout_of(scenario.variant), snapshot=snapshot,
					    reported=verdict.reported)

	def rerun(self, scenario: Scenario) -> Tuple[guestvm.Machine, List[pathlib.Path]]:
		"""The machine and the archives of SCENARIO's guest booted cold by
		hand (its qemu.cmd)."""
		machine = self.machine(scenario.variant, scenario=scenario)
		machine.interactive, machine.gdb_port = False, None
		return machine, boots.scenario_parts(self.session, scenario, bool(self.opts.own_module))

	def write_rerun(self, scenario: Scenario, workdir: pathlib.Path, how: str) -> None:
		machine, parts = self.rerun(scenario)
		guestvm.write_rerun(machine, workdir, parts, self.message(scenario), how)

	def run_once(self, scenario: Scenario, k: int) -> Run:
		"""Boot run K of SCENARIO and judge it: a run record."""
		workdir = self.run_dir(scenario, k)
		shutil.rmtree(workdir, ignore_errors=True)
		workdir.mkdir(parents=True)
		start = time.monotonic()
		# A harness fault: no guest ran, or its observations could not be judged.
		end, fault = None, ''
		try:
			end = self.boot(scenario, workdir)
		except guestvm.Fault as problem:
			fault = str(problem)
		except Exception:	# a bug of ours: an ERROR with its traceback, not a dead run
			(workdir / 'traceback').write_text(traceback.format_exc())
			fault = f'harness error: {traceback.format_exc().strip().splitlines()[-1]} (traceback in {workdir.name}/traceback)'
		seconds = time.monotonic() - start
		# The guest's tty turns every newline into CR LF.
		texts = {}
		for name in (guestvm.KTAP_LOG, guestvm.CONSOLE_LOG):
			path = workdir / name
			texts[name] = path.read_bytes().decode(errors='replace').replace('\r\n', '\n') if path.exists() else ''
			path.write_text(texts[name])
		console = verdict.unglued(texts[guestvm.CONSOLE_LOG], texts[guestvm.KTAP_LOG])
		ktap = verdict.parse_ktap(texts[guestvm.KTAP_LOG], list(scenario.guest_steps))
		try:
			verdict.compare_observations(scenario, ktap, self.session.build)
		except Exception:	# a bug of ours, or a golden table missing: this scenario's ERROR
			(workdir / 'traceback').write_text(traceback.format_exc())
			fault = (f'harness error judging the observations: '
				 f'{traceback.format_exc().strip().splitlines()[-1]} (traceback in {workdir.name}/traceback)')
		if guestvm.stopping():
			judged = Verdict.cut_short()
		else:
			judged = verdict.judge(scenario, ktap, console, end, self.timeout_of(scenario.variant), fault)
		run = run_of(k, judged, seconds, str(workdir.relative_to(TOP) if workdir.is_relative_to(TOP) else workdir),
			     ktap.steps, texts[guestvm.KTAP_LOG], console)
		self.print_run(scenario, run)
		return run

	def print_run(self, scenario: Scenario, run: Run) -> None:
		"""One line a run: PASS, or XFAIL when it passed by reproducing the
		crash its case expects (never mistaken for a clean pass), FAIL,
		SKIP or ERROR; [n/N] on a terminal."""
		name = scenario.name + ('' if self.opts.repeat == 1 else f' #{run.number}')
		word = 'XFAIL' if run.verdict.is_xfail else str(run.verdict.status)
		proof = f'  expected: {run.verdict.xfail}' if run.verdict.is_xfail else ''
		with self.print_lock:
			self.done += 1
			line = f'{word:<5} {name:<45} {run.seconds:5.1f}s{proof}'
			if sys.stdout.isatty():
				# One line a run on a terminal: the logs have the rest.
				line = f'[{self.done}/{self.total}] {line}'[:shutil.get_terminal_size().columns]
			print(line, flush=True)
			for title in run.known_reports:
				print(f'      known report, not the series\' (docs/reliability.md): {title}', flush=True)

# Each scenario's seconds in the runs before, by name: the longest start
# first, so that no long one is left to run alone at the end of a run.
# Kept beside the reports, which a run replaces, and merged by each run.
DURATIONS_FILE = 'durations.json'


def past_seconds(session: Session) -> Dict[str, float]:
	try:
		seconds = json.loads((session.results / DURATIONS_FILE).read_text())
	except (OSError, ValueError):
		return {}
	if not isinstance(seconds, dict):
		return {}
	return {k: float(v) for k, v in seconds.items() if isinstance(v, (int, float))}


def keep_seconds(session: Session, records: List[Record], repeat: int) -> None:
	seconds = past_seconds(session)
	seconds.update({r.name: round(r.seconds / repeat, 1) for r in records
			if r.status != results.Status.SKIP and r.seconds > 0})
	reports.write_file(session.results / DURATIONS_FILE, (json.dumps(seconds, indent=0, sort_keys=True) + '\n').encode())


def submission_order(runner: Runner) -> List[Tuple[int, Scenario]]:
	"""The scenarios (with their index in the plan): with --build, those of
	the step made first first; the longest the last runs took first."""
	seconds = past_seconds(runner.session)
	steps = runner.made.steps if runner.made else []

	def rank(pair: Tuple[int, Scenario]) -> Tuple[int, float]:
		scenario = pair[1]
		step = steps.index((runner.goal_of(scenario), scenario.variant)) if steps else 0
		return step, -seconds.get(scenario.name, 0.0)
	return sorted(enumerate(runner.scenarios), key=rank)


def run_all(runner: Runner, opts: argparse.Namespace, signals: Signals) -> List[Record]:
	"""Every scenario on a pool of -j threads, each driving its guest's
	QEMU; after a signal, the records of the scenarios that finished."""
	runs: Dict[int, List[Run]] = {}
	with concurrent.futures.ThreadPoolExecutor(opts.jobs) as pool:
		futures = {}
		for index, scenario in submission_order(runner):
			if opts.repeat > 1:
				shutil.rmtree(runner.session.results / scenario.name, ignore_errors=True)
			for k in range(1, opts.repeat + 1):
				futures[pool.submit(runner.run_made, scenario, k)] = index
		pending = set(futures)
		while pending:
			_, pending = concurrent.futures.wait(pending, timeout=0.5)
			if signals.caught:
				pool.shutdown(wait=True, cancel_futures=True)
				break
		for future, index in futures.items():
			if future.done() and not future.cancelled():
				runs.setdefault(index, []).append(future.result())
	records = []
	for index, scenario in enumerate(runner.scenarios):
		done = sorted(runs.get(index, []), key=lambda r: r.number)
		if len(done) == opts.repeat:
			records.append(aggregate(scenario, done, opts.repeat))
	return records


def dry_run(opts: argparse.Namespace, session: Session, scenarios: List[Scenario]) -> int:
	"""The plan, and for each scenario the qemu.cmd its run would write;
	nothing boots, nothing is written."""
	runner = Runner(opts, session, scenarios, '')
	runner.cached_accel()
	print(f'harness: {len(scenarios)} scenarios on {session.source}, variants: {" ".join(opts.variants)}, '
	      f'{runner.accel}, {opts.vcpus} vCPUs; dry run: each scenario\'s guest as its {guestvm.RERUN_CMD} '
	      f'boots it by hand (a run writes it in the scenario\'s directory, beside {guestvm.RERUN_SCENARIO}; '
	      'a run restores most guests from a snapshot and sends the scenario on the KTAP port)')
	for scenario in scenarios:
		machine, parts = runner.rerun(scenario)
		print(f'--- {scenario.name}')
		print(guestvm.rerun_script(machine, parts, 'harness/run --dry-run'), end='')
	return 0


def run_session(opts: argparse.Namespace) -> Session:
	"""make's session, or that of a kernel not built here (--bzimage,
	--debian), built for unless the run boots nothing."""
	build = not (opts.list or opts.matrix or opts.dry_run)
	try:
		if opts.bzimage:
			return bzimage.prepare(opts.bzimage, opts.as_variant, build=build)
		if opts.debian:
			return distro.prepare(opts.debian, opts.variants, build=build)
	except (bzimage.Problem, distro.Problem) as problem:
		raise Refusal(str(problem))
	return Session.from_environment()


def main(argv: List[str]) -> int:
	opts = parse_args(argv)
	session = run_session(opts)
	scenarios = compile_plan(opts, session)
	names = [s.name for s in scenarios]
	if opts.matrix:
		text = json.dumps(reports.matrix(names, opts.matrix, opts.variants, opts.filter.split(), session.tree))
		session.results.mkdir(parents=True, exist_ok=True)
		(session.results / MATRIX_FILE).write_text(text + '\n')
		print(text)
		return 0
	if opts.list:
		print('\n'.join(names))
		return 0
	if not scenarios:
		raise Refusal(f"no scenario matches '{opts.filter}' for variants: {' '.join(opts.variants)}")
	if opts.dry_run:
		return dry_run(opts, session, scenarios)
	lock = Lock(session)
	digest = prepare_own_image(opts, session) if opts.image else None
	made = None
	if opts.build:
		if not shutil.which(guestvm.QEMU):
			raise Refusal(f'{guestvm.QEMU} not found: apt-get install qemu-system-x86')
		made = builds.Builds(plan.booted_variants(opts.variants, scenarios),
				     {s.variant for s in scenarios if plan.loads_foreign_modules(s)}, opts.jobs)
	else:
		check_built(session, scenarios, opts.variants)
	if opts.own_module:
		prepare_own_module(opts, session, sorted({s.variant for s in scenarios}))
	# The last run's reports go: a run that ends early must not leave them
	# looking like its own.
	for name in (*REPORT_FILES, RACE_DEMO_FILE):
		(session.results / name).unlink(missing_ok=True)
	session.results.mkdir(parents=True, exist_ok=True)
	started = time.time()
	signals = Signals()
	records: List[Record] = []
	boot_kind = 'no boots'
	try:
		# Sockets under /tmp: a unix socket's path has at most 107 bytes.
		with tempfile.TemporaryDirectory(prefix='raceblk-', dir='/tmp') as sockdir:
			runner = Runner(opts, session, scenarios, sockdir, made)
			if made:
				# The probe for KVM boots the first kernel made.
				made.start()
				if made.wait(made.order[0]):
					runner.cached_accel()
				else:
					runner.choose_accel()
				wanted = set(runner.wanted_snapshots())
				boot_kind = runner.boot_kind(lambda s: (s.variant, s.machine) in wanted) + ' as each kernel is made'
			else:
				runner.choose_accel()
			if not signals.caught and not made:
				boot_kind = runner.choose_boots()
			runs = '' if opts.repeat == 1 else f' x {opts.repeat} runs'
			print(f'harness: {len(scenarios)} scenarios{runs} on {session.source}, '
			      f'variants: {" ".join(opts.variants)}, '
			      f'{runner.accel}, {opts.vcpus} vCPUs, {boot_kind}, -j {opts.jobs}', flush=True)
			byhand.say_interactive(opts, session, scenarios[0])
			if not signals.caught:
				records = run_all(runner, opts, signals)
	finally:
		signals.restore()
	if made and records:
		# What the guests booted, now that each variant's snapshot was saved or not.
		boot_kind = runner.boot_kind(lambda s: runner.snapshot_of(s) is not None)
	records += [not_run_record(s, reason) for s, reason in opts.not_run.items()]
	signum = signals.first
	if not signum:
		for record in records:
			if record.status.failed:
				symbolise(record, session)
	run = Report(started, round(time.time() - started, 3), session.tree, opts.variants, runner.accel,
		     opts.vcpus, boot_kind, opts.jobs, opts.timeout, opts.repeat, opts.filter,
		     signal.Signals(signum).name if signum else None, len(scenarios) + len(opts.not_run), records)
	write_reports(run, session)
	if not signum:
		keep_seconds(session, records, opts.repeat)
	reports.write_file(session.results / MATRIX_FILE, (json.dumps(
		reports.matrix(names, 4, opts.variants, opts.filter.split(), session.tree)) + '\n').encode())
	for record in records:
		if record.status.failed:
			report_failure(record, bool(opts.image), bool(opts.expected))
	print(f'results: {session.shown}/results/ ({", ".join(REPORT_FILES)}, {MATRIX_FILE}, '
	      f'per scenario {guestvm.CONSOLE_LOG} and {guestvm.KTAP_LOG})')
	count = results.totals(records)
	failed = count.failed + count.errors
	if digest is not None:
		if sha256_of(opts.image) == digest:
			print(f'harness: {opts.image} unchanged (sha256 {digest})')
		else:
			print(f'harness: {opts.image} CHANGED during the run', file=sys.stderr)
			failed += 1
	skipped = count.skipped
	for reason in dict.fromkeys(opts.not_run.values()):
		names = [s.name for s, why in opts.not_run.items() if why == reason]
		print(f'harness: {len(names)} scenarios skipped: {reason} '
		      f'({", ".join(names[:4])}' + (', ...)' if len(names) > 4 else ')'))
	if signum:
		finished = len(records) - len(opts.not_run)
		skipped += len(scenarios) - finished
		print(f'harness: interrupted by {signal.Signals(signum).name}: {finished} of '
		      f'{len(scenarios)} scenarios finished; the rest count as skipped')
	del lock
	xfail = sum(1 for r in records if r.verdict.is_xfail)
	if xfail:
		print(f'harness: {xfail} of the passes are XFAIL: the kernel crashed or warned as the case '
		      'expects (the bug it reproduces, or the warning of the design it shows)')
	print(f'{count.passed} passed, {failed} failed, {skipped} skipped', flush=True)
	if signum:
		return 128 + signum
	return 1 if failed else 0


def entry(argv: List[str]) -> int:
	try:
		return main(argv)
	except Refusal as refusal:
		print(f'harness: {refusal}', file=sys.stderr)
		return 2
	except BrokenPipeError:		# harness/run --list | head
		os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
		return 0
