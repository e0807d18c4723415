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
"""

import argparse
import concurrent.futures
import dataclasses
import fcntl
import fnmatch
import hashlib
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Dict, List, Optional, Sequence, Tuple

import bzimage
import guestvm
import ownmod
import plan
import reports
import results
import verdict
from plan import Scenario
from results import Record, Report, Run, RunSummary, Status, Step, Verdict

HARNESS = pathlib.Path(__file__).resolve().parent
TOP = HARNESS.parent
# The tree's builds and results: build/KERNEL (make exports RACEBLK_BUILD).
BUILD = pathlib.Path(os.environ.get('RACEBLK_BUILD') or TOP / 'build' / plan.current_tree())
SHOWN = os.path.relpath(BUILD, TOP) if BUILD.is_relative_to(TOP) else str(BUILD)
RESULTS = BUILD / 'results'
TABLE = plan.TABLE
SNAPSHOT_MIN = 3	# a snapshot costs about two boots
# A debug or KCSAN kernel runs a scenario 3 to 6 times slower under TCG
# than a plain one (fixed-debug's reload_ungated: 40-55 s beside another
# guest): its guests get this many times --timeout.
SLOW_VARIANT_TIMEOUT = 2
SAVE_TRIES = 3

USAGE = ('harness/run [-j N] [--cold|--snapshot] [--list] [--matrix N] [--filter GLOBS] '
	 '[--shard I/N] [--timeout SECONDS] [--cases FILE] [--repeat N] [--image PATH [--expected FILE]] '
	 '[--shell] [--gdb [PORT]] [--module FILE --module-disk NAME --module-fail PARAMS '
	 '[--module-params PARAMS]] [--bzimage FILE [--as VARIANT]]')
# --shell and --gdb: the guest waits for a person, not for a deadline.
INTERACTIVE_TIMEOUT_S = 24 * 3600
# The steps after which --shell stops a case: raceblk's init held, or the
# user's module (--module) failed with its disk held.
HOLD_POINTS = ('held', 'own_held')


class Refusal(Exception):
	"""Bad input or setup: a clear message, exit 2, nothing lost."""


def bounded(low: int, high: int):
	def parse(text: str) -> int:
		if not re.fullmatch(r'[0-9]+', text) or not low <= int(text) <= high:
			raise argparse.ArgumentTypeError(f'wants a whole number from {low} to {high}, got {text!r}')
		return int(text)
	return parse


def shard(text: str) -> Tuple[int, int]:
	match = re.fullmatch(r'([0-9]{1,4})/([0-9]{1,4})', text)
	if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
		raise argparse.ArgumentTypeError(f'wants I/N with 1 <= I <= N <= 9999, got {text!r}')
	return int(match.group(1)), int(match.group(2))


def parse_args(argv: List[str]) -> argparse.Namespace:
	# No abbreviations: --bzimage's restart strips the options by name.
	parser = argparse.ArgumentParser(prog='harness/run', usage=USAGE, allow_abbrev=False,
					 description='Boot one QEMU guest per scenario of harness/cases.')
	parser.add_argument('-j', dest='jobs', type=bounded(1, 64), default=os.cpu_count() or 1,
			    help='guests at once (default: the number of CPUs)')
	boots = parser.add_mutually_exclusive_group()
	boots.add_argument('--cold', dest='boot', action='store_const', const='cold', default='auto',
			   help='boot every guest from scratch')
	boots.add_argument('--snapshot', dest='boot', action='store_const', const='snapshot',
			   help='restore every guest from its variant\'s snapshot')
	parser.add_argument('--list', action='store_true', help='list the scenarios, run none')
	parser.add_argument('--matrix', type=bounded(1, 256), metavar='N',
			    help='print a GitHub Actions strategy.matrix of N shards')
	parser.add_argument('--filter', default='*', metavar='GLOBS',
			    help='run the scenarios matching one of these space-separated globs')
	parser.add_argument('--shard', type=shard, default=(1, 1), metavar='I/N',
			    help='every Nth scenario from the Ith')
	parser.add_argument('--timeout', type=bounded(1, 86400), default=60, metavar='SECONDS')
	parser.add_argument('--cases', metavar='FILE',
			    help='the cases (default: harness/cases, or harness/module-cases with --module; '
			    'make soak writes its own)')
	parser.add_argument('--vcpus', type=bounded(1, 4), default=guestvm.VCPUS, metavar='N',
			    help=f'each guest\'s vCPUs (default {guestvm.VCPUS})')
	parser.add_argument('--repeat', type=bounded(1, 1000), default=1, metavar='N',
			    help='boot every scenario N times; runs that disagree are FLAKY')
	parser.add_argument('--image', type=pathlib.Path, metavar='PATH',
			    help='run the "all" and "any" rows on this disk image')
	parser.add_argument('--expected', type=pathlib.Path, metavar='FILE',
			    help='the golden table of --image ("number start size" lines)')
	parser.add_argument('--shell', action='store_true',
			    help='stop the one scenario at its hold point with a shell on the guest\'s '
			    'console (this terminal); the case goes on when the shell exits')
	parser.add_argument('--gdb', type=bounded(1024, 65535), nargs='?', const=1234, metavar='PORT',
			    help='start the one scenario\'s guest with a gdb stub on localhost:PORT '
			    '(default 1234) and print the command that attaches')
	own = parser.add_argument_group('a driver of your own (harness/module-cases run with it, not raceblk)')
	own.add_argument('--module', metavar='FILE',
			 help='the module: a path in the kernel tree (drivers/block/null_blk/null_blk.ko), or '
			 'one here (/..., ./..., ../...) of a .ko whose directory has its Kbuild or Makefile; '
			 'built for each variant')
	own.add_argument('--module-disk', metavar='NAME', help='the disk its init adds (nullb0)')
	own.add_argument('--module-fail', metavar='PARAMS',
			 help='the parameters that make its init fail after the disk is added')
	own.add_argument('--module-params', default='', metavar='PARAMS',
			 help='parameters of every load of it (default: none)')
	bz = parser.add_argument_group('a kernel of your own')
	bz.add_argument('--bzimage', type=pathlib.Path, metavar='FILE',
			help='run the cases on this kernel (OBJ/arch/x86/boot/bzImage of a kernel you built), '
			'raceblk built against OBJ')
	bz.add_argument('--as', dest='as_variant', default='vanilla', metavar='VARIANT',
			help='what --bzimage is judged as (default vanilla)')
	opts = parser.parse_args(argv)
	if opts.expected and not opts.image:
		parser.error('--expected goes with --image')
	opts.own_module = None
	if opts.module:
		if opts.image:
			parser.error('--module runs its own cases, on no image: not with --image')
		try:
			opts.own_module = ownmod.from_options(opts.module, opts.module_disk, opts.module_params,
							      opts.module_fail)
		except ownmod.Problem as problem:
			parser.error(str(problem))
	elif opts.module_disk or opts.module_fail or opts.module_params:
		parser.error('--module-disk, --module-fail and --module-params go with --module')
	opts.cases = opts.cases or str(plan.MODULE_TABLE if opts.module else TABLE)
	if opts.as_variant != 'vanilla' and not opts.bzimage:
		parser.error('--as goes with --bzimage')
	if opts.bzimage and os.environ.get('RACEBLK_NO_FOREIGN'):
		parser.error('--bzimage: this run was started by --bzimage already')
	if opts.bzimage and opts.as_variant not in plan.default_variants():
		parser.error(f'--as {opts.as_variant}: one of {", ".join(plan.default_variants())}')
	# --shell and --gdb: one guest, for a person.
	opts.interactive = bool(opts.shell or opts.gdb)
	if opts.interactive:
		if opts.repeat != 1 or opts.matrix:
			parser.error('--shell and --gdb run one scenario once')
		opts.boot, opts.jobs, opts.timeout = 'cold', 1, INTERACTIVE_TIMEOUT_S
	opts.variants = os.environ.get('VARIANTS', '').split() or plan.default_variants() + plan.row_only_variants()
	opts.own_name = own_image_name(opts.image) if opts.image else None
	return opts


# --- the plan -----------------------------------------------------------------

def compile_plan(opts: argparse.Namespace) -> List[Scenario]:
	"""The validated table, expanded, filtered and sharded."""
	table = pathlib.Path(opts.cases)
	if not table.is_file():
		raise Refusal(f'no cases at {table}')
	known = plan.known_names()
	errors = plan.check(table, known) + plan.variant_errors(opts.variants, known)
	if errors:
		raise Refusal('\n'.join(errors) + '\nthe cases or VARIANTS have errors (above)')
	globs = opts.filter.split()
	chosen = [s for s in plan.scenarios(table, opts.variants, opts.own_name)
		  if any(fnmatch.fnmatchcase(s.name, g) for g in globs)]
	index, count = opts.shard
	chosen = chosen[index - 1::count]
	# --bzimage builds no module for another kernel.
	opts.not_run = []
	if os.environ.get('RACEBLK_NO_FOREIGN'):
		opts.not_run = [s for s in chosen if {plan.step_name(w) for w in s.steps} & set(plan.FOREIGN_ACTIONS)]
		chosen = [s for s in chosen if s not in opts.not_run]
	if opts.own_module and any(s.image != plan.DEFAULT_IMAGE for s in chosen):
		# The guest unpacks one archive after a restore: the module's.
		raise Refusal(f'--module runs cases on the default image only, and {opts.cases} has others')
	if opts.interactive and not opts.list:
		chosen = [interactive_scenario(chosen, opts.shell)]
	return chosen


def interactive_scenario(chosen: List[Scenario], shell: bool) -> Scenario:
	"""The one scenario --shell or --gdb runs; with --shell, a shell step
	right after its first held step (init waits there)."""
	if len(chosen) != 1:
		names = ', '.join(s.name for s in chosen[:5]) + (', ...' if len(chosen) > 5 else '')
		raise Refusal(f'--shell and --gdb run one scenario, and {len(chosen)} match'
			      + (f' ({names})' if chosen else '') + ': name one with --filter VARIANT/ID/IMAGE '
			      '(harness/run --list lists them)')
	scenario = chosen[0]
	if not shell:
		return scenario
	held = [i for i, name in enumerate(scenario.guest_steps) if name in HOLD_POINTS]
	if not held:
		raise Refusal(f'case {scenario.id} has no hold point (a held step): --shell stops there; '
			      'cases with one: grep -l held harness/cases, or params hold=POINT')
	steps = scenario.steps[:held[0] + 1] + ('shell',) + scenario.steps[held[0] + 1:]
	# Init waits at the hold point as long as raceblk allows, not the
	# case's seconds.
	params = tuple(p for p in scenario.params if not p.startswith('hold_timeout_ms='))
	return dataclasses.replace(scenario, steps=steps, params=params + (f'hold_timeout_ms={max_hold_ms()}',))


def max_hold_ms() -> int:
	"""raceblk's longest hold (RACEBLK_MAX_HOLD_MS)."""
	text = (TOP / 'driver/main.c').read_text()
	return int(re.search(r'^#define RACEBLK_MAX_HOLD_MS\s+(\d+)', text, re.M).group(1))


# --- bring your own disk ------------------------------------------------------

def own_image_name(path: pathlib.Path) -> str:
	stem = path.name[:-len('.img')] if path.name.endswith('.img') else path.name
	return 'byo-' + re.sub(r'[^A-Za-z0-9._-]', '_', stem)


def max_image_mib() -> int:
	match = re.search(r'^#define RACEBLK_MAX_IMAGE_MIB\s+(\d+)', (TOP / 'driver/main.c').read_text(), re.M)
	return int(match.group(1))


def sha256_of(path: pathlib.Path) -> str:
	digest = hashlib.sha256()
	with open(path, 'rb') as f:
		for block in iter(lambda: f.read(1 << 20), b''):
			digest.update(block)
	return digest.hexdigest()


def check_own_image(opts: argparse.Namespace) -> None:
	image = opts.image
	if not image.is_file() or not os.access(image, os.R_OK):
		raise Refusal(f'--image {image}: not a readable file')
	size, limit = image.stat().st_size, max_image_mib()
	if size > limit << 20:
		raise Refusal(f'--image {image}: {size} bytes; the ram backend holds at most {limit} MiB '
			      '(RACEBLK_MAX_IMAGE_MIB in driver/main.c)')
	if size == 0 or size % 512:
		raise Refusal(f'--image {image}: {size} bytes is not a whole number of 512-byte sectors')
	if opts.expected and not os.access(opts.expected, os.R_OK):
		raise Refusal(f'--expected {opts.expected}: cannot read')


def derive_expected(name: str, link: pathlib.Path, out: pathlib.Path, shown: pathlib.Path) -> None:
	"""The golden table as parted reads the image (through LINK, a path
	parted's ':'-separated output cannot be confused by), with parted's
	notes as comments."""
	done = subprocess.run([TOP / 'images/parted-table', link], capture_output=True, text=True, check=False)
	if done.returncode != 0:
		first = next((l for l in done.stderr.splitlines() if l.strip()), 'no output')
		raise Refusal(f'--image {shown}: parted cannot read it ({first.removeprefix("parted-table: ")}); '
			      'give its partition table with --expected FILE')
	notes = [re.sub(r'^note: ', '', l) for l in done.stderr.splitlines() if l.strip()]
	text = [f'# {name}: derived from parted -m -s IMAGE unit s print'] + [f'# {n}' for n in notes]
	out.write_text('\n'.join(text + done.stdout.splitlines()) + '\n')
	print(f'harness: {name}: no --expected, the golden table is parted\'s reading of {shown}:')
	print('\n'.join('    ' + l for l in out.read_text().splitlines()))
	if notes:
		print('harness: the notes (#) are information, not failures; a scenario whose kernel '
		      'shows another table fails and says where')


def prepare_own_image(opts: argparse.Namespace) -> str:
	"""Its golden table, checksums and archive under build/byo/; its sha256."""
	check_own_image(opts)
	name = opts.own_name
	work = BUILD / 'byo' / name
	shutil.rmtree(work, ignore_errors=True)
	work.mkdir(parents=True)
	digest = sha256_of(opts.image)
	link = work / f'{name}.img'
	link.symlink_to(opts.image.resolve())
	expected = work / f'{name}.expected'
	if opts.expected:
		shutil.copyfile(opts.expected, expected)
		print(f'harness: {name}: golden table from {opts.expected}')
	else:
		derive_expected(name, link, expected, opts.image)
	with open(work / f'{name}.img.sums', 'w') as sums:
		done = subprocess.run([TOP / 'images/sums', link, expected], stdout=sums,
				      stderr=subprocess.PIPE, text=True, check=False)
	if done.returncode != 0:
		raise Refusal(f'cannot use the golden table of {opts.image}: {done.stderr.strip()}')
	image_archive(name).parent.mkdir(parents=True, exist_ok=True)
	subprocess.run([HARNESS / 'mkinitramfs', '--image', image_archive(name), link, expected], check=True)
	return digest


# --- what a guest boots ---------------------------------------------------------

def kernel_of(variant: str) -> pathlib.Path:
	return BUILD / 'kernel' / variant / 'obj/arch/x86/boot/bzImage'


def initramfs_of(variant: str) -> pathlib.Path:
	return BUILD / 'initramfs' / f'{variant}.cpio'


def disk_of(image: str) -> pathlib.Path:
	"""IMAGE as a disk QEMU attaches (machine=pc-ide): built, or brought."""
	own = BUILD / 'byo' / image / f'{image}.img'
	return own if image.startswith('byo-') else BUILD / 'images' / f'{image}.img'


def image_archive(image: str) -> pathlib.Path:
	return BUILD / 'initramfs/images' / f'{image}.cpio.gz'


def check_built(scenarios: List[Scenario], variants: List[str]) -> None:
	"""The kernels, archives and images the scenarios boot, with archives
	no older than the guest scripts they carry."""
	tree = '' if plan.current_tree() == plan.default_tree() else f' KERNEL={plan.current_tree()}'
	if os.environ.get('KERNEL_SRC'):
		tree = f' KERNEL_SRC={os.environ["KERNEL_SRC"]}'
	make = f'make initramfs{tree} VARIANTS="{" ".join(variants)}"'
	guest_files = list((HARNESS / 'guest').iterdir())
	for variant in sorted({s.variant for s in scenarios}):
		if not kernel_of(variant).is_file() or not initramfs_of(variant).is_file():
			raise Refusal(f"no kernel or initramfs for '{variant}' under {SHOWN}/: run '{make}'")
		built = initramfs_of(variant).stat().st_mtime
		newer = [f for f in guest_files if f.stat().st_mtime > built]
		if newer:
			raise Refusal(f'{newer[0].relative_to(TOP)} is newer than the initramfs of '
				      f"'{variant}': run '{make}'")
	for image in sorted({s.image for s in scenarios}):
		if not image_archive(image).is_file():
			raise Refusal(f"no archive of image '{image}' under {SHOWN}/: run 'make initramfs'")
	for image in sorted({s.image for s in scenarios if s.machine != plan.DEFAULT_MACHINE}):
		if not disk_of(image).is_file():
			raise Refusal(f"no disk image '{image}' under {SHOWN}/: run 'make images'")
	if not shutil.which(guestvm.QEMU):
		raise Refusal(f'{guestvm.QEMU} not found: apt-get install qemu-system-x86')


def answered_ktap(workdir: pathlib.Path) -> bool:
	"""The guest run in WORKDIR began a KTAP document on its port."""
	ktap = workdir / 'ktap'
	return ktap.exists() and ktap.read_bytes().startswith(b'KTAP version 1')


def own_archive(variant: str) -> pathlib.Path:
	"""harness/run --module's archive of the user's module for VARIANT."""
	return BUILD / 'own' / f'{variant}.cpio.gz'


def write_initrd(variant: str, image: str, out: pathlib.Path, own: bool = False) -> None:
	"""The variant's archive, then the image's, then with OWN the user's
	module's: the kernel unpacks them all."""
	with open(out, 'wb') as f:
		for part in (initramfs_of(variant), image_archive(image)) + ((own_archive(variant),) if own else ()):
			f.write(part.read_bytes())


def prepare_own_module(opts: argparse.Namespace, variants: List[str]) -> None:
	"""The user's module built for each variant, and its archive."""
	own = opts.own_module
	where = 'its source ' + str(own.source) if own.source else 'the kernel tree'
	failing = f'{own.params} {own.fail}'.strip()
	print(f'harness: --module {own.name}: {own.path} from {where}, disk {own.disk}, '
	      f'load "{own.params}", failing load "{failing}"', flush=True)
	for variant in variants:
		try:
			ownmod.prepare(own, BUILD / 'kernel' / variant / 'obj', BUILD / 'own', variant)
		except ownmod.Problem as problem:
			raise Refusal(str(problem))


# --- accelerator and snapshots ----------------------------------------------------

class Runner:
	"""One run: its options, accelerator, snapshots and results."""

	def __init__(self, opts: argparse.Namespace, scenarios: List[Scenario], sockdir: str):
		self.opts, self.scenarios, self.sockdir = opts, scenarios, sockdir
		self.accel = 'tcg'
		self.snapshots: Dict[str, pathlib.Path] = {}
		self.print_lock = threading.Lock()
		self.done, self.total = 0, len(scenarios) * opts.repeat

	def machine(self, variant: str, accel: Optional[str] = None,
		    scenario: Optional[Scenario] = None) -> guestvm.Machine:
		if scenario is None or scenario.machine == plan.DEFAULT_MACHINE:
			machine = guestvm.Machine(accel or self.accel, variant, kernel_of(variant), vcpus=self.opts.vcpus)
		else:
			machine = guestvm.Machine(accel or self.accel, variant, kernel_of(variant), scenario.machine,
						  disk_of(scenario.image), vcpus=self.opts.vcpus)
		if scenario is not None:
			machine.interactive, machine.gdb_port = self.opts.shell, self.opts.gdb
		return machine

	def timeout_of(self, variant: str) -> int:
		"""A guest's timeout: --timeout, or SLOW_VARIANT_TIMEOUT times it on
		a debug or KCSAN kernel."""
		slow = {'debug', 'kcsan'} & set(plan.fragments_of(variant))
		return self.opts.timeout * (SLOW_VARIANT_TIMEOUT if slow else 1)

	def message(self, scenario: Scenario, archive: bytes = b'') -> bytes:
		return guestvm.scenario_message(scenario.variant, scenario.id, scenario.image,
						scenario.params, scenario.guest_steps, archive)

	def choose_accel(self) -> None:
		"""KVM only when a probe boot of our kernel answers (on some hosts
		/dev/kvm opens but cannot run this guest); else TCG.  Cached in
		build/accel."""
		cache = BUILD / 'accel'
		if not cache.is_file():
			answer = 'tcg'
			if os.access('/dev/kvm', os.W_OK):
				answer = 'kvm' if self.probe_kvm() else 'tcg'
			if guestvm.stopping():
				return		# a signal cut the probe short: no answer to keep
			if answer == 'tcg':
				print('harness: KVM cannot run this guest here (probe: build/accel-probe/); using TCG',
				      file=sys.stderr)
			cache.write_text(answer + '\n')
		self.accel = cache.read_text().strip()

	def probe_kvm(self) -> bool:
		probe = BUILD / 'accel-probe'
		shutil.rmtree(probe, ignore_errors=True)
		probe.mkdir(parents=True)
		variant = self.opts.variants[0]
		write_initrd(variant, plan.DEFAULT_IMAGE, probe / 'initrd')
		message = guestvm.scenario_message(variant, 'probe', plan.DEFAULT_IMAGE, (), ())
		try:
			guestvm.run_scenario(self.machine(variant, 'kvm'), probe, self.sockdir, probe / 'initrd',
					     message, 20)
		except guestvm.Fault:
			return False
		return answered_ktap(probe)

	def save_snapshot(self, variant: str) -> Optional[str]:
		"""Save VARIANT's snapshot unless the saved one is current; None
		when it is usable, else why not.  A new snapshot is kept only
		when a first restore of it runs clean (SAVE_TRIES saves at most)."""
		snapdir = BUILD / 'snapshots' / variant
		machine = self.machine(variant)
		parts = [initramfs_of(variant), image_archive(plan.DEFAULT_IMAGE)]
		key = machine.key(parts)
		vm = snapdir / 'vm'
		if (snapdir / 'key').is_file() and (snapdir / 'key').read_text().strip() == key and vm.is_file():
			self.snapshots[variant] = vm
			return None
		for _ in range(SAVE_TRIES):
			shutil.rmtree(snapdir, ignore_errors=True)
			snapdir.mkdir(parents=True)
			write_initrd(variant, plan.DEFAULT_IMAGE, snapdir / 'vm.initrd')
			try:
				guestvm.save_snapshot(machine, snapdir, self.sockdir, snapdir / 'vm.initrd', vm,
						      2 * self.timeout_of(variant))
				problem = self.restore_problem(variant, snapdir)
			except guestvm.Fault as fault:
				return str(fault)
			if not problem:
				(snapdir / 'key').write_text(key + '\n')
				self.snapshots[variant] = vm
				return None
		shutil.rmtree(snapdir, ignore_errors=True)
		return f'{SAVE_TRIES} snapshots saved; the first restore of each failed: {problem}'

	def restore_problem(self, variant: str, snapdir: pathlib.Path) -> str:
		"""Restore SNAPDIR's new snapshot once, with no steps: '' when the
		guest answers in KTAP and its console shows no crash line, else
		what went wrong.  (A snapshot that crashes at its restore would
		fail every scenario of the variant.)"""
		check = snapdir / 'check'
		check.mkdir()
		message = guestvm.scenario_message(variant, 'snapshot-check', plan.DEFAULT_IMAGE, (), ())
		outcome = guestvm.run_scenario(self.machine(variant), check, self.sockdir, snapdir / 'vm.initrd',
					       message, self.timeout_of(variant), snapshot=snapdir / 'vm')
		console = check / 'console.log'
		crashes = verdict.crash_lines(console.read_bytes().decode(errors='replace') if console.exists() else '')
		if crashes:
			return f'its console says {crashes[0]!r}'
		if outcome != 'exited' or not answered_ktap(check):
			return f'the guest gave no KTAP ({outcome}); its console:\n{guestvm.log_tail(console)}'
		return ''

	def choose_boots(self) -> str:
		"""Per variant, snapshot restores or cold boots; saves the
		snapshots wanted, in parallel."""
		boots: Dict[str, int] = {}
		# Snapshots are of microvm guests; other machines boot cold.
		# Each --repeat run is a boot of its own.
		for scenario in self.scenarios:
			if scenario.machine == plan.DEFAULT_MACHINE:
				boots[scenario.variant] = boots.get(scenario.variant, 0) + self.opts.repeat
		wanted = [v for v, n in boots.items()
			  if self.opts.boot == 'snapshot' or (self.opts.boot == 'auto' and n >= SNAPSHOT_MIN)]
		with concurrent.futures.ThreadPoolExecutor(max(1, min(len(wanted), self.opts.jobs))) as pool:
			for variant, why in zip(wanted, pool.map(self.save_snapshot, wanted)):
				if why:
					print(f'harness: cannot save a snapshot of {variant}; cold boots instead. {why}',
					      file=sys.stderr)
		kinds = {s.variant in self.snapshots and s.machine == plan.DEFAULT_MACHINE for s in self.scenarios}
		return {frozenset([True]): 'snapshots', frozenset([False]): 'cold boots'}.get(
			frozenset(kinds), 'snapshots and cold boots')

	# --- one guest --------------------------------------------------------------

	def run_dir(self, scenario: Scenario, k: int) -> pathlib.Path:
		base = RESULTS / scenario.name
		return base if self.opts.repeat == 1 else base / f'run-{k}'

	def boot(self, scenario: Scenario, workdir: pathlib.Path) -> str:
		snapshot = self.snapshots.get(scenario.variant) if scenario.machine == plan.DEFAULT_MACHINE else None
		if snapshot is None:
			initrd = workdir / 'initrd'
			write_initrd(scenario.variant, scenario.image, initrd, bool(self.opts.own_module))
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
		archive = b'' if scenario.image == plan.DEFAULT_IMAGE else image_archive(scenario.image).read_bytes()
		if self.opts.own_module:
			archive = own_archive(scenario.variant).read_bytes()
		return guestvm.run_scenario(self.machine(scenario.variant), workdir, self.sockdir,
					    snapshot.with_suffix('.initrd'), self.message(scenario, archive),
					    self.timeout_of(scenario.variant), snapshot=snapshot,
					    reported=verdict.reported)

	def run_once(self, scenario: Scenario, k: int) -> Dict:
		"""Boot run K of SCENARIO and judge it: a run record."""
		workdir = self.run_dir(scenario, k)
		shutil.rmtree(workdir, ignore_errors=True)
		workdir.mkdir(parents=True)
		start = time.monotonic()
		try:
			outcome = self.boot(scenario, workdir)
		except guestvm.Fault as fault:
			outcome = f'fault: {fault}'
		except Exception:	# a bug of ours: an ERROR with its traceback, not a dead run
			(workdir / 'traceback').write_text(traceback.format_exc())
			outcome = f'fault: harness error: {traceback.format_exc().strip().splitlines()[-1]} (traceback in {workdir.name}/traceback)'
		seconds = time.monotonic() - start
		# The guest's tty turns every newline into CR LF.
		texts = {}
		for name in ('ktap', 'console.log'):
			path = workdir / name
			texts[name] = path.read_bytes().decode(errors='replace').replace('\r\n', '\n') if path.exists() else ''
			path.write_text(texts[name])
		texts['console.log'] = verdict.unglued(texts['console.log'], texts['ktap'])
		ktap = verdict.parse_ktap(texts['ktap'], list(scenario.guest_steps))
		try:
			verdict.compare_observations(scenario, ktap, BUILD)
		except Exception:	# a bug of ours, or a golden table missing: this scenario's ERROR
			(workdir / 'traceback').write_text(traceback.format_exc())
			outcome = (f'fault: harness error judging the observations: '
				   f'{traceback.format_exc().strip().splitlines()[-1]} (traceback in {workdir.name}/traceback)')
		if guestvm.stopping():
			judged = Verdict.cut_short()
		else:
			judged = verdict.judge(scenario, ktap, texts['console.log'], outcome,
					       self.timeout_of(scenario.variant))
		run = run_of(k, judged, seconds, str(workdir.relative_to(TOP) if workdir.is_relative_to(TOP) else workdir),
			     ktap.steps, texts['ktap'], texts['console.log'])
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


def run_of(k: int, judged: Verdict, seconds: float = 0.0, logs: str = '',
	   steps: Sequence[Step] = (), ktap: str = '', console: str = '') -> Run:
	"""Run K: its verdict, and what the guest left (nothing for a run that
	never booted)."""
	found = verdict.console_reports(console)
	return Run(k, judged, round(seconds, 3), logs, list(steps), ktap, console, found.crash_lines,
		   found.known, verdict.crash_summary(console))


NOT_RUN_REASON = 'it loads modules built for another kernel, which --bzimage does not build'


def not_run_record(scenario: Scenario) -> Record:
	"""The record of a scenario --bzimage cannot run: a SKIP with why."""
	return aggregate(scenario, [run_of(1, Verdict(Status.SKIP, NOT_RUN_REASON))], 1)


def aggregate(scenario: Scenario, runs: List[Run], repeat: int) -> Record:
	"""One record for every run of a scenario: with --repeat, it passes
	only if every run passed; runs that disagree are FLAKY."""
	first_bad = next((r for r in runs if r.verdict.status not in (Status.PASS, Status.SKIP)), None)
	# A run cut short by a signal says nothing: neither do the others.
	first_bad = first_bad or next((r for r in runs if r.verdict.interrupted), None)
	shown = first_bad or runs[0]
	excerpt = verdict.crash_excerpt(shown.console) if first_bad else ''
	if first_bad and not excerpt:
		excerpt = '\n'.join(shown.console.splitlines()[-20:])
	record = Record(scenario.name, scenario.variant, scenario.id, scenario.image, scenario.line,
			list(scenario.params), list(scenario.steps), scenario.console,
			dataclasses.replace(shown.verdict), shown.logs, shown.steps, shown.crash, shown.crash_summary,
			shown.ktap, round(sum(r.seconds for r in runs), 3), excerpt)
	if repeat > 1 and not shown.verdict.interrupted:
		passed = sum(r.verdict.status == Status.PASS for r in runs)
		record.runs = [RunSummary(r.number, r.verdict.status, r.verdict.reason, r.seconds, r.logs) for r in runs]
		if first_bad is None:
			record.verdict.proof = f'{passed}/{repeat} {record.verdict.proof}'.strip()
		else:
			flaky = 'FLAKY: ' if passed else ''
			record.verdict.reason = (f'{flaky}{passed}/{repeat} runs passed; run {first_bad.number}: '
						 f'{first_bad.verdict.reason}')
	return record


def symbolise(record: Record) -> None:
	"""The crash excerpt through scripts/decode_stacktrace.sh with the
	variant's vmlinux and module, where that works."""
	if not record.crash or not record.console_excerpt:
		return
	variant = record.variant
	src = BUILD / 'kernel' / variant / 'src'
	vmlinux = BUILD / 'kernel' / variant / 'obj/vmlinux'
	script = src / 'scripts/decode_stacktrace.sh'
	if not script.is_file() or not vmlinux.is_file():
		return
	try:
		done = subprocess.run([script, vmlinux, src, BUILD / 'driver' / variant], input=record.console_excerpt,
				      capture_output=True, text=True, timeout=60, check=False)
	except subprocess.TimeoutExpired:
		return
	if done.returncode == 0 and done.stdout.strip():
		record.console_excerpt = done.stdout.rstrip('\n')


# A diagnostic line printed under a failure (a table of 255 partitions
# is 4 KiB): the rest is in the scenario's ktap.
DIAGNOSTIC_SHOWN = 300


def shortened(line: str) -> str:
	if len(line) <= DIAGNOSTIC_SHOWN:
		return line
	return f'{line[:DIAGNOSTIC_SHOWN]}... ({len(line) - DIAGNOSTIC_SHOWN} more characters in its ktap)'


def report_failure(record: Record, own_image: bool, own_expected: bool) -> None:
	print(f'--- {record.name}: {record.verdict.reason}')
	for step in record.results:
		if step.ok is False:
			for line in step.diagnostics:
				print(f'    # {shortened(line)}')
			print(f'    not ok {step.number} {step.name}')
	if own_image and not own_expected and any(s.ok is False and s.name == 'partitions'
						   for s in record.results):
		print('    note: the golden table is parted\'s reading: here the kernel and parted disagree.')
		print('    If the kernel is right for this disk, give its table with --expected.')
	if record.console_excerpt:
		print('    console (crash):' if record.crash else '    console (last lines):')
		for line in record.console_excerpt.splitlines()[:30]:
			print(f'      {line}')
	print(f'    logs: {record.logs}/')


def write_reports(run: Report) -> None:
	RESULTS.mkdir(parents=True, exist_ok=True)
	reports.write_file(RESULTS / 'results.json', run.dumps().encode())
	reports.write_file(RESULTS / 'results.ktap', reports.ktap(run.scenarios).encode())
	reports.write_file(RESULTS / 'junit.xml', reports.junit(run))


# --- the run ----------------------------------------------------------------------

class Lock:
	"""One run at a time in a build/: they would share snapshots and results."""

	def __init__(self):
		BUILD.mkdir(parents=True, exist_ok=True)
		self.file = open(BUILD / '.harness.lock', 'a+')
		try:
			fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
		except BlockingIOError:
			self.file.seek(0)
			holder = self.file.read().strip() or 'another process'
			raise Refusal(f'another harness run ({holder}) is using {BUILD}; wait for it to end') from None
		self.file.truncate(0)
		self.file.write(f'pid {os.getpid()}\n')
		self.file.flush()


class Signals:
	"""SIGINT, SIGTERM and SIGHUP at any point of a run (the KVM probe, a
	snapshot's save, the guests): kill every guest's process group and stop
	starting new ones; the run then writes what it has and says so."""

	def __init__(self):
		self.caught: List[int] = []
		self.old = {s: signal.signal(s, self.on_signal)
			    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

	def on_signal(self, signum, _frame):
		# Kill first: after a SIGHUP the terminal is gone, and the write
		# fails (EIO).
		self.caught.append(signum)
		guestvm.kill_all()
		if len(self.caught) == 1:
			try:
				os.write(2, f'\nharness: {signal.Signals(signum).name}: killing every guest\n'.encode())
			except OSError:
				pass

	def restore(self) -> None:
		for signum, handler in self.old.items():
			signal.signal(signum, handler)

	@property
	def first(self) -> Optional[int]:
		return self.caught[0] if self.caught else None


def run_all(runner: Runner, opts: argparse.Namespace, signals: Signals) -> List[Record]:
	"""Every scenario on a pool of -j threads, each driving its guest's
	QEMU; after a signal, the records of the scenarios that finished."""
	runs: Dict[int, List[Run]] = {}
	with concurrent.futures.ThreadPoolExecutor(opts.jobs) as pool:
		futures = {}
		for index, scenario in enumerate(runner.scenarios):
			if opts.repeat > 1:
				shutil.rmtree(RESULTS / scenario.name, ignore_errors=True)
			for k in range(1, opts.repeat + 1):
				futures[pool.submit(runner.run_once, scenario, k)] = index
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


def say_interactive(opts: argparse.Namespace, scenario: Scenario) -> None:
	"""What --shell and --gdb give, before the guest boots."""
	if opts.gdb:
		obj = BUILD / 'kernel' / scenario.variant / 'obj'
		config = (obj / '.config').read_text() if (obj / '.config').is_file() else ''
		shown = os.path.relpath(obj, TOP) if obj.is_relative_to(TOP) else str(obj)
		print(f'harness: gdb stub on localhost:{opts.gdb} (kernel booted with nokaslr); attach with\n'
		      f"  gdb {shown}/vmlinux -ex 'target remote localhost:{opts.gdb}'")
		if 'CONFIG_DEBUG_INFO=y' not in config:
			print(f'harness: {scenario.variant} has no debug info: gdb knows its symbols, not its '
			      f'source lines; {plan.series_of(scenario.variant)}-gdb has them '
			      f'(make initramfs VARIANTS={plan.series_of(scenario.variant)}-gdb)')
	if opts.shell:
		print('harness: the guest\'s console is this terminal.  At the hold point a shell starts '
		      f'there; init waits until it exits (at most {max_hold_ms() // 60000} minutes), then the '
		      'case goes on.  Ctrl-a x ends QEMU.', flush=True)


def without_bzimage(argv: List[str]) -> List[str]:
	"""ARGV less --bzimage FILE and --as VARIANT (either form)."""
	out, skip = [], False
	for arg in argv:
		if skip:
			skip = False
		elif arg in ('--bzimage', '--as'):
			skip = True
		elif not arg.startswith(('--bzimage=', '--as=')):
			out.append(arg)
	return out


def main(argv: List[str]) -> int:
	opts = parse_args(argv)
	if opts.bzimage:
		try:
			env = bzimage.prepare(opts.bzimage, opts.as_variant, build=not (opts.list or opts.matrix))
		except bzimage.Problem as problem:
			raise Refusal(str(problem))
		os.execve(HARNESS / 'run', [str(HARNESS / 'run'), *without_bzimage(argv)], env)
	scenarios = compile_plan(opts)
	names = [s.name for s in scenarios]
	if opts.matrix:
		text = json.dumps(reports.matrix(names, opts.matrix, opts.variants, opts.filter.split(), plan.current_tree()))
		RESULTS.mkdir(parents=True, exist_ok=True)
		(RESULTS / 'matrix.json').write_text(text + '\n')
		print(text)
		return 0
	if opts.list:
		print('\n'.join(names))
		return 0
	if not scenarios:
		raise Refusal(f"no scenario matches '{opts.filter}' for variants: {' '.join(opts.variants)}")
	lock = Lock()
	digest = prepare_own_image(opts) if opts.image else None
	check_built(scenarios, opts.variants)
	if opts.own_module:
		prepare_own_module(opts, sorted({s.variant for s in scenarios}))
	# The last run's reports go: a run that ends early must not leave them
	# looking like its own.
	for name in ('results.json', 'results.ktap', 'junit.xml', 'race-demo.md'):
		(RESULTS / name).unlink(missing_ok=True)
	RESULTS.mkdir(parents=True, exist_ok=True)
	started = time.time()
	signals = Signals()
	records: List[Record] = []
	boots = 'no boots'
	try:
		# Sockets under /tmp: a unix socket's path has at most 107 bytes.
		with tempfile.TemporaryDirectory(prefix='raceblk-', dir='/tmp') as sockdir:
			runner = Runner(opts, scenarios, sockdir)
			runner.choose_accel()
			if not signals.caught:
				boots = runner.choose_boots()
			runs = '' if opts.repeat == 1 else f' x {opts.repeat} runs'
			print(f'harness: {len(scenarios)} scenarios{runs} on {plan.source_name()}, '
			      f'variants: {" ".join(opts.variants)}, '
			      f'{runner.accel}, {opts.vcpus} vCPUs, {boots}, -j {opts.jobs}', flush=True)
			say_interactive(opts, scenarios[0])
			if not signals.caught:
				records = run_all(runner, opts, signals)
	finally:
		signals.restore()
	records += [not_run_record(s) for s in opts.not_run]
	signum = signals.first
	if not signum:
		for record in records:
			if record.status.failed:
				symbolise(record)
	run = Report(started, round(time.time() - started, 3), plan.current_tree(), opts.variants, runner.accel,
		     opts.vcpus, boots, opts.jobs, opts.timeout, opts.repeat, opts.filter,
		     signal.Signals(signum).name if signum else None, len(scenarios) + len(opts.not_run), records)
	write_reports(run)
	reports.write_file(RESULTS / 'matrix.json', (json.dumps(
		reports.matrix(names, 4, opts.variants, opts.filter.split(), plan.current_tree())) + '\n').encode())
	for record in records:
		if record.status.failed:
			report_failure(record, bool(opts.image), bool(opts.expected))
	print(f'results: {SHOWN}/results/ (results.json, results.ktap, junit.xml, matrix.json, '
	      'per scenario console.log and ktap)')
	count = results.totals(records)
	failed = count.failed + count.errors
	if digest is not None:
		if sha256_of(opts.image) == digest:
			print(f'harness: {opts.image} unchanged (sha256 {digest})')
		else:
			print(f'harness: {opts.image} CHANGED during the run', file=sys.stderr)
			failed += 1
	skipped = count.skipped
	if opts.not_run:
		print(f'harness: {len(opts.not_run)} scenarios skipped, as each says: {NOT_RUN_REASON} '
		      f'({", ".join(s.name for s in opts.not_run[:4])}' + (', ...)' if len(opts.not_run) > 4 else ')'))
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
