# SPDX-License-Identifier: GPL-2.0
"""What keeps a run in hand: one run at a time in a build directory, and
the signals that stop it cleanly."""

import fcntl
import os
import signal
from typing import List, Optional

import guestvm
from session import Refusal, Session


class Lock:
	"""One run at a time in a build/: they would share snapshots and results."""

	def __init__(self, session: Session):
		session.build.mkdir(parents=True, exist_ok=True)
		self.file = open(session.build / '.harness.lock', 'a+')
		try:
			fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
		except BlockingIOError:
			self.file.seek(0)
			holder = self.file.read().strip() or 'another process'
			raise Refusal(f'another harness run ({holder}) is using {session.build}; wait for it to end') from None
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
