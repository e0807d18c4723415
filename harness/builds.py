# SPDX-License-Identifier: GPL-2.0
"""harness/run --build: each variant's kernel and archives are made one
after the other (make initramfs-base VARIANTS=V, in the run's order of
variants; then make initramfs for a variant whose cases load modules
built for another kernel) while the scenarios of the variants already
made run, so that the first verdicts come while the next kernel builds.

On two cores a compile and the guests share the CPUs: while a kernel
builds, fewer guests run at once (guests_while_building); when the last
step is made, the run has all of -j.  After a step that failed no other
is made: the scenarios needing it or a later one are errors naming it.
"""

import os
import shlex
import signal
import subprocess
import threading
import time
from typing import Dict, List, Set, Tuple

import guestvm
import plan

# A make of ours runs on its own: not a part of the make that started
# harness/run (its flags, its jobserver), but in its tree (KERNEL, ...)
# and with the variables given on that make's command line
# (command_line_variables).  A kernel's build says it in whole lines
# (harness/progress): verdicts come meanwhile.
MAKE_ENV = {**{k: v for k, v in os.environ.items() if k not in ('MAKEFLAGS', 'MFLAGS', 'MAKELEVEL')},
	    'PROGRESS_LINES': '1'}
# What each step sets itself.
STEP_VARIABLES = ('VARIANTS', 'JOBS')


def command_line_variables(makeflags: str) -> List[str]:
	"""The VAR=VALUE words of the make command line that started this run
	(MAKEFLAGS after "--", a space in a value escaped), but those each
	step sets: a variable the Makefile takes only from the command line
	(KERNEL_TARBALL) must reach the steps' makes as it was given."""
	words = f' {makeflags}'.split(' -- ', 1)
	if len(words) < 2:
		return []
	return [w for w in shlex.split(words[1]) if '=' in w and w.split('=', 1)[0] not in STEP_VARIABLES]


# A make asked to stop (SIGTERM: it deletes the target it was writing,
# as after a ^C) that has not within this long is killed.
STOP_GRACE_S = 10


def wait_asked(proc: subprocess.Popen) -> int:
	"""PROC's status; killed (its group) STOP_GRACE_S after the run was
	stopped if it has not ended by then."""
	stopped_at = None
	while True:
		try:
			return proc.wait(timeout=0.5)
		except subprocess.TimeoutExpired:
			if guestvm.stopping():
				stopped_at = stopped_at or time.monotonic()
				if time.monotonic() - stopped_at > STOP_GRACE_S:
					try:
						os.killpg(proc.pid, signal.SIGKILL)
					except ProcessLookupError:
						pass


def guests_while_building(jobs: int) -> int:
	"""Guests at once while a kernel builds: half of -j, at least one."""
	return max(1, jobs // 2)


# make's goals for a variant: its kernel, raceblk, its own archive and the
# images' (what most guests boot), then the archive of its modules built
# for another kernel (which prepares more trees, and for vanilla needs
# fixed's raceblk).
BASE, ALL = 'initramfs-base', 'initramfs'
Step = Tuple[str, str]		# (goal, variant)


class Builds:
	"""The run's variants, made in a thread of their own: each one's base
	in order, then the rest of those in FULL (whose scenarios load modules
	built for another kernel)."""

	def __init__(self, variants: List[str], full: Set[str], jobs: int):
		self.order, self.jobs = list(variants), jobs
		self.steps: List[Step] = [(BASE, v) for v in self.order] + [(ALL, v) for v in self.order if v in full]
		self.made = {step: threading.Event() for step in self.steps}
		self.failed: Dict[Step, str] = {}
		self.finished = threading.Event()
		self.thread = threading.Thread(target=self.make_all, name='builds', daemon=True)

	def start(self) -> None:
		self.thread.start()

	def make_all(self) -> None:
		try:
			for step in self.steps:
				why = self.why_not_made() or self.make(*step)
				if why:
					self.failed[step] = why
				self.made[step].set()
		finally:
			# A bug of ours here: no step left waiting, none taken as made.
			for step, event in self.made.items():
				if not event.is_set():
					self.failed.setdefault(step, 'not built: the builds stopped (a harness error)')
					event.set()
			self.finished.set()

	def why_not_made(self) -> str:
		"""Why the next step is not made: the run was stopped, or an
		earlier build failed."""
		if guestvm.stopping():
			return 'not built: the run was interrupted'
		failed = next(iter(self.failed), None)
		return f'not built: make {failed[0]} VARIANTS={failed[1]} failed' if failed else ''

	def make(self, goal: str, variant: str) -> str:
		"""Make GOAL for VARIANT: '' or why not.  Made means up to date: a
		kernel restored from the cache once looked stale again, and every
		make restored it and rebuilt all that depends on it."""
		goals = [goal, f'VARIANTS={variant}']
		status = self.run_make(goals + [f'JOBS={self.jobs}'])
		if status != 0:
			return f'make {" ".join(goals)} failed (status {status}; its output is above)'
		if self.run_make(['-q', *goals]) != 0:
			return f'make {" ".join(goals)} still has work right after it ran (make -d -q says what)'
		return ''

	@staticmethod
	def run_make(args: List[str]) -> int:
		try:
			proc = subprocess.Popen(['make', '--no-print-directory', '-C', str(plan.TOP), *args,
						 *command_line_variables(os.environ.get('MAKEFLAGS', ''))], env=MAKE_ENV,
						stdin=subprocess.DEVNULL, start_new_session=True)
		except OSError as err:
			print(f'harness: cannot start make: {err}', flush=True)
			return 127
		guestvm.track(proc, ask=True)
		try:
			return wait_asked(proc)
		finally:
			guestvm.untrack(proc)

	def wait(self, variant: str, goal: str = BASE) -> str:
		"""Wait until GOAL is made for VARIANT: '' when it was, else why not."""
		self.made[goal, variant].wait()
		return self.failed.get((goal, variant), '')

	def building(self) -> bool:
		return not self.finished.is_set()


class Gate:
	"""At most -j guests at once, and fewer while BUILDS still builds."""

	def __init__(self, jobs: int, builds: 'Builds'):
		self.jobs, self.builds = jobs, builds
		self.running = 0
		self.changed = threading.Condition()
		threading.Thread(target=self.wake_when_built, name='gate', daemon=True).start()

	def limit(self) -> int:
		return guests_while_building(self.jobs) if self.builds.building() else self.jobs

	def wake_when_built(self) -> None:
		self.builds.finished.wait()
		with self.changed:
			self.changed.notify_all()

	def __enter__(self) -> None:
		with self.changed:
			self.changed.wait_for(lambda: self.running < self.limit())
			self.running += 1

	def __exit__(self, *_) -> None:
		with self.changed:
			self.running -= 1
			self.changed.notify_all()
