# SPDX-License-Identifier: GPL-2.0
"""How harness/run boots its guests: the accelerator (KVM only when a probe
boot of our kernel answers, else TCG), each variant's snapshot or cold
boots, the machine and the timeout of a guest."""

import argparse
import concurrent.futures
import os
import pathlib
import shutil
import sys
from typing import Callable, Dict, List, Optional, Tuple

import clock
import golden
import guestvm
import plan
import verdict
from plan import Scenario
from session import Session

SNAPSHOT_MIN = 3	# a snapshot costs about two boots
# A debug or KCSAN kernel runs a scenario 3 to 6 times slower under TCG
# than a plain one (fixed-debug's reload_ungated: 40-55 s beside another
# guest): its guests get this many times --timeout.
SLOW_VARIANT_TIMEOUT = 2
SAVE_TRIES = 3


def answered_ktap(workdir: pathlib.Path) -> bool:
	"""The guest run in WORKDIR began a KTAP document on its port."""
	ktap = workdir / guestvm.KTAP_LOG
	return ktap.exists() and ktap.read_bytes().startswith(b'KTAP version 1')


def initrd_parts(session: Session, variant: str, image: str, own: bool = False,
		 foreign: bool = False) -> List[pathlib.Path]:
	"""A cold guest's initramfs: the variant's archive, then the image's,
	then with OWN the user's module's, with FOREIGN the variant's modules
	built for another kernel; the kernel unpacks them all."""
	parts = [session.initramfs_of(variant), session.image_archive(image)]
	return parts + ([session.own_archive(variant)] if own else []) + ([session.foreign_archive(variant)] if foreign else [])


def scenario_parts(session: Session, scenario: Scenario, own: bool = False) -> List[pathlib.Path]:
	"""The archives SCENARIO's guest boots cold."""
	return initrd_parts(session, scenario.variant, scenario.image, own, plan.loads_foreign_modules(scenario))


def write_initrd(parts: List[pathlib.Path], out: pathlib.Path) -> None:
	with open(out, 'wb') as f:
		for part in parts:
			f.write(part.read_bytes())


def variant_machine(session: Session, variant: str, accel: str, kind: str = plan.DEFAULT_MACHINE,
		    disk: Optional[pathlib.Path] = None, vcpus: int = guestvm.VCPUS) -> guestvm.Machine:
	"""The machine VARIANT's guests boot on: its kernel, what its command
	line needs (a kernel of the user's) and what it is told of its clock."""
	machine = guestvm.Machine(accel, variant, session.kernel_of(variant), kind, disk, vcpus=vcpus)
	machine.boot_args = session.boot_args_of(variant)
	machine.clock = clock.of(accel, session.kernel_obj(variant))
	return machine


class Guests:
	"""A run's guests: its options, session, accelerator and snapshots."""

	def __init__(self, opts: argparse.Namespace, session: Session, scenarios: List[Scenario], sockdir: str):
		self.opts, self.session, self.scenarios, self.sockdir = opts, session, scenarios, sockdir
		self.accel = 'tcg'
		# The snapshot of each variant's guests on each machine that has
		# them (plan.machine_traits).
		self.snapshots: Dict[Tuple[str, str], pathlib.Path] = {}

	def machine(self, variant: str, accel: Optional[str] = None, scenario: Optional[Scenario] = None,
		    kind: str = plan.DEFAULT_MACHINE) -> guestvm.Machine:
		kind = scenario.machine if scenario else kind
		disk = self.session.disk_of(scenario.image) if scenario and 'disk' in plan.machine_traits(kind) else None
		machine = variant_machine(self.session, variant, accel or self.accel, kind, disk, self.opts.vcpus)
		if scenario is not None:
			machine.interactive, machine.gdb_port = self.opts.shell, self.opts.gdb
		return machine

	def snapshot_of(self, scenario: Scenario) -> Optional[pathlib.Path]:
		"""The snapshot SCENARIO's guest is restored from; None: a cold
		boot (a restored guest takes one archive: its image's, so one that
		loads modules built for another kernel boots cold)."""
		if plan.loads_foreign_modules(scenario):
			return None
		return self.snapshots.get((scenario.variant, scenario.machine))

	def timeout_of(self, variant: str) -> int:
		"""A guest's timeout: --timeout, or SLOW_VARIANT_TIMEOUT times it on
		a kernel with a slow fragment (debug, kcsan: their "# harness:"
		line)."""
		return self.opts.timeout * (SLOW_VARIANT_TIMEOUT if plan.variant_trait(variant, 'slow') else 1)

	def message(self, scenario: Scenario, archive: bytes = b'') -> bytes:
		table = golden.Image(scenario.image, self.session.build).table_path(plan.golden_series(scenario.variant))
		return guestvm.scenario_message(scenario.variant, scenario.id, scenario.image,
						scenario.params, scenario.guest_steps, archive, table.name)

	def cached_accel(self) -> None:
		"""Take the accelerator an earlier run chose, TCG if none did."""
		self.accel = self.session.cached_accel()
		if self.accel == 'tcg':
			clock.host_tsc_khz()	# measured once, here: a failure stops the run

	def choose_accel(self) -> None:
		"""KVM only when a probe boot of our kernel answers (on some hosts
		/dev/kvm opens but cannot run this guest); else TCG.  Cached in
		build/accel."""
		cache = self.session.accel_file
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
		self.cached_accel()

	def probe_kvm(self) -> bool:
		probe = self.session.build / 'accel-probe'
		shutil.rmtree(probe, ignore_errors=True)
		probe.mkdir(parents=True)
		# The first variant the run boots (with --build, the first made).
		variant = plan.booted_variants(self.opts.variants, self.scenarios)[0]
		write_initrd(initrd_parts(self.session, variant, plan.DEFAULT_IMAGE), probe / 'initrd')
		message = guestvm.scenario_message(variant, 'probe', plan.DEFAULT_IMAGE, (), ())
		try:
			guestvm.run_scenario(self.machine(variant, 'kvm'), probe, self.sockdir, probe / 'initrd',
					     message, 20)
		except guestvm.Fault:
			return False
		return answered_ktap(probe)

	def save_snapshot(self, wanted: Tuple[str, str]) -> Optional[str]:
		"""Save the snapshot of WANTED (variant, machine) unless the saved
		one is current; None when it is usable, else why not.  A new
		snapshot is kept only when a first restore of it runs clean
		(SAVE_TRIES saves at most)."""
		variant, kind = wanted
		snapdir = self.session.snapshot_dir(variant, kind)
		machine = self.machine(variant, kind=kind)
		key = machine.key(initrd_parts(self.session, variant, plan.DEFAULT_IMAGE))
		vm = snapdir / 'vm'
		if (snapdir / 'key').is_file() and (snapdir / 'key').read_text().strip() == key and vm.is_file():
			self.snapshots[wanted] = vm
			return None
		for _ in range(SAVE_TRIES):
			shutil.rmtree(snapdir, ignore_errors=True)
			snapdir.mkdir(parents=True)
			write_initrd(initrd_parts(self.session, variant, plan.DEFAULT_IMAGE), snapdir / 'vm.initrd')
			try:
				guestvm.save_snapshot(machine, snapdir, self.sockdir, snapdir / 'vm.initrd', vm,
						      2 * self.timeout_of(variant))
				problem = self.restore_problem(machine, snapdir)
			except guestvm.Fault as fault:
				return str(fault)
			if not problem:
				(snapdir / 'key').write_text(key + '\n')
				self.snapshots[wanted] = vm
				return None
		shutil.rmtree(snapdir, ignore_errors=True)
		return f'{SAVE_TRIES} snapshots saved; the first restore of each failed: {problem}'

	def restore_problem(self, machine: guestvm.Machine, snapdir: pathlib.Path) -> str:
		"""Restore SNAPDIR's new snapshot once, with no steps: '' when the
		guest answers in KTAP and its console shows no crash line, else
		what went wrong.  (A snapshot that crashes at its restore would
		fail every scenario of the variant.)"""
		check = snapdir / 'check'
		check.mkdir()
		message = guestvm.scenario_message(machine.variant, 'snapshot-check', plan.DEFAULT_IMAGE, (), ())
		outcome = guestvm.run_scenario(machine, check, self.sockdir, snapdir / 'vm.initrd',
					       message, self.timeout_of(machine.variant), snapshot=snapdir / 'vm')
		console = check / guestvm.CONSOLE_LOG
		crashes = verdict.crash_lines(console.read_bytes().decode(errors='replace') if console.exists() else '')
		if crashes:
			return f'its console says {crashes[0]!r}'
		if outcome != guestvm.End.EXITED or not answered_ktap(check):
			return f'the guest gave no KTAP ({outcome}); its console:\n{guestvm.log_tail(console)}'
		return ''

	def wanted_snapshots(self) -> List[Tuple[str, str]]:
		"""The (variant, machine) pairs whose guests are restored from a
		snapshot: --snapshot, or SNAPSHOT_MIN boots or more in the run.
		Only a machine whose traits say so has snapshots; the others boot
		cold.  Each --repeat run is a boot of its own."""
		boots: Dict[Tuple[str, str], int] = {}
		for scenario in self.scenarios:
			if 'snapshot' in plan.machine_traits(scenario.machine) and not plan.loads_foreign_modules(scenario):
				key = (scenario.variant, scenario.machine)
				boots[key] = boots.get(key, 0) + self.opts.repeat
		return [k for k, n in boots.items()
			if self.opts.boot == 'snapshot' or (self.opts.boot == 'auto' and n >= SNAPSHOT_MIN)]

	def save_snapshots(self, wanted: List[Tuple[str, str]]) -> None:
		"""Save the snapshots WANTED, in parallel; cold boots for those
		that cannot be saved."""
		with concurrent.futures.ThreadPoolExecutor(max(1, min(len(wanted), self.opts.jobs))) as pool:
			for (variant, kind), why in zip(wanted, pool.map(self.save_snapshot, wanted)):
				if why:
					shown = variant if kind == plan.DEFAULT_MACHINE else f'{variant} on {kind}'
					print(f'harness: cannot save a snapshot of {shown}; cold boots instead. {why}',
					      file=sys.stderr)

	def choose_boots(self) -> str:
		"""Per variant and machine, snapshot restores or cold boots; saves
		the snapshots wanted."""
		self.save_snapshots(self.wanted_snapshots())
		return self.boot_kind(lambda s: self.snapshot_of(s) is not None)

	def boot_kind(self, restored: Callable[[Scenario], bool]) -> str:
		kinds = {restored(s) for s in self.scenarios}
		return {frozenset([True]): 'snapshots', frozenset([False]): 'cold boots'}.get(
			frozenset(kinds), 'snapshots and cold boots')
