# SPDX-License-Identifier: GPL-2.0
"""QEMU guests: one per scenario, booted cold or restored from a snapshot
of its variant's guest taken at the point where /init waits for work.

The host is the server of every socket: QEMU connects to the guest's KTAP
port (the second serial line) and, for a snapshot's save, to its QMP
monitor.  On the KTAP port the guest says READY, the host sends the
scenario (resolved: params and steps) and the guest answers with KTAP.
Snapshots are saved with QMP migrate to a file descriptor passed over the
QMP socket, and restored with -incoming fd:N: no shell runs a path.

Every QEMU runs in its own process group, has a deadline and is killed
(the whole group) at it; kill_all() is what a signal handler calls.  A
guest whose console has shown a kernel report and that then says nothing
for QUIET_AFTER_REPORT_S is killed before its deadline: an oops that
killed a task holding a lock leaves the rest waiting for it for good, and
a soak's deadline is an hour away.
"""

import enum
import hashlib
import json
import os
import pathlib
import select
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Set

import clock
import plan

QEMU = 'qemu-system-x86_64'
CMDLINE = 'console=ttyS0 reboot=t panic=-1'
# Races are shown where they happen: two vCPUs, each its own host thread
# under TCG (multi-threaded TCG), so that the loader and an opener really
# run at the same time on the two host cores.
VCPUS = 2
MAX_VCPUS = 4		# what --vcpus takes
# A guest's memory, unless its fragments want more (plan.variant_trait).
MEMORY_MIB = 256
# Longer than any quiet stretch of a live guest: a debug kmemleak scan
# takes ~10 s, a soak cycle at most ~7 s.  (The self-tests shorten it.)
QUIET_AFTER_REPORT_S = int(os.environ.get('RACEBLK_QUIET_AFTER_REPORT_S') or 60)

_running: Dict[int, subprocess.Popen] = {}
# Those of _running that are asked to stop (SIGTERM), not killed: a make,
# which then deletes the target it was writing.
_asked: Set[int] = set()
# Reentrant: the signal handler (kill_all) may run on a thread that holds it.
_running_lock = threading.RLock()
_stopping = threading.Event()


class Fault(Exception):
	"""QEMU or the host failed: no verdict on the kernel can come of it."""


def kill_all() -> None:
	"""Stop starting guests and kill every running one's process group
	(ask a make's to stop)."""
	_stopping.set()
	with _running_lock:
		for proc in _running.values():
			try:
				os.killpg(proc.pid, signal.SIGTERM if proc.pid in _asked else signal.SIGKILL)
			except ProcessLookupError:
				pass


def track(proc: subprocess.Popen, ask: bool = False) -> None:
	"""PROC (in a process group of its own) is killed with the guests;
	with ASK, sent SIGTERM instead."""
	with _running_lock:
		_running[proc.pid] = proc
		if ask:
			_asked.add(proc.pid)
	if stopping():
		kill_all()


def untrack(proc: subprocess.Popen) -> None:
	with _running_lock:
		_running.pop(proc.pid, None)
		_asked.discard(proc.pid)


def stopping() -> bool:
	return _stopping.is_set()


def log_tail(path: pathlib.Path, lines: int = 20) -> str:
	try:
		return '\n'.join(path.read_text(errors='replace').splitlines()[-lines:])
	except OSError:
		return ''


def qemu_value(text: str) -> str:
	"""TEXT as one value of a QEMU option list: a ',' is written ',,'."""
	return str(text).replace(',', ',,')


def terminal_console(log: pathlib.Path) -> str:
	"""A guest's console on this terminal, and in LOG too.  mux=on gives
	QEMU's escape (Ctrl-a x), signal=off leaves Ctrl-C to the guest."""
	return f'stdio,id=console,mux=on,signal=off,logfile={qemu_value(log)}'


class Machine:
	"""The machine a variant's guests run on.  A restore needs the very
	machine its snapshot was saved on, so cold boots, saves and restores
	all take their arguments from here."""

	def __init__(self, accel: str, variant: str, kernel: pathlib.Path, kind: str = plan.DEFAULT_MACHINE,
		     disk: Optional[pathlib.Path] = None, vcpus: int = VCPUS):
		self.accel, self.variant, self.kernel = accel, variant, kernel
		self.kind, self.disk, self.vcpus = kind, disk, vcpus
		# What the kernel's command line needs besides CMDLINE (a kernel of
		# the user's: bzimage.boot_args).
		self.boot_args: Sequence[str] = ()
		# What the command line tells a TCG guest's kernel (clock.py).
		self.clock: Optional[clock.Told] = None
		# harness/run --shell: the console on the terminal (and its log);
		# --gdb: QEMU's gdb stub on this port, and no KASLR.
		self.interactive = False
		self.gdb_port: Optional[int] = None
		# Some fragments want room (debug: KASAN's shadow, kmemleak).
		self.memory = int(plan.variant_trait(variant, 'memory') or MEMORY_MIB)

	def board(self) -> List[str]:
		"""The machine's own QEMU arguments: harness/machines/KIND, one a
		line, {disk} standing for DISK."""
		lines = (plan.HARNESS / 'machines' / self.kind).read_text().splitlines()
		disk = qemu_value(self.disk) if self.disk else ''
		return [line.strip().replace('{disk}', disk) for line in lines
			if line.strip() and not line.lstrip().startswith('#')]

	def args(self, initrd: pathlib.Path, console: pathlib.Path, ktap_sock: str) -> List[str]:
		"""A guest of the run: its console in CONSOLE (and on the terminal
		with --shell), its KTAP port a client of the host's socket."""
		console_dev = terminal_console(console) if self.interactive else f'file,id=console,path={qemu_value(console)}'
		return self.qemu_args(initrd, console_dev, f'socket,id=ktap,path={qemu_value(ktap_sock)}')

	def rerun_args(self, initrd: str) -> List[str]:
		"""The same guest booted by hand (a scenario's qemu.cmd): its
		console on the terminal and in rerun.console.log, its KTAP in
		rerun.ktap, its scenario in the initramfs (/scenario)."""
		return self.qemu_args(pathlib.Path(initrd), terminal_console(pathlib.Path(RERUN_CONSOLE)),
				      f'file,id=ktap,path={RERUN_KTAP}')

	def cpu(self) -> str:
		"""The vCPUs' model.  la57=off: with 5-level paging, 6.1's generic
		KASAN sometimes reports a "wild-memory-access" in
		__common_interrupt() at boot (2 of 30 debug boots; 0 of 30 with
		4-level paging).  Under TCG, -erms,-fsrm: TCG runs a rep movsb or
		stosb one byte per step, and with ERMS or FSRM the kernel's and
		glibc's copies and clears take it (a cold scenario's initramfs,
		page cache reads and cleared pages: 0.1 s of its 1.1 s); without,
		they move 8 bytes a step."""
		return 'max,la57=off' + (',-erms,-fsrm' if self.accel == 'tcg' else '')

	def qemu_args(self, initrd: pathlib.Path, console_dev: str, ktap_dev: str) -> List[str]:
		board = self.board()
		accel = 'tcg,thread=multi' if self.accel == 'tcg' else self.accel
		# -icount counts TCG's instructions, one vCPU after the other.
		if '-icount' in board:
			accel = 'tcg'
		gdb = ['-gdb', f'tcp:127.0.0.1:{self.gdb_port}'] if self.gdb_port else []
		# Under -icount the TSC counts instructions: no rate to tell.
		told = self.clock.args() if self.clock and '-icount' not in board else []
		cmdline = ' '.join([CMDLINE, *told, *self.boot_args] + (['nokaslr'] if self.gdb_port else []))
		return ['-accel', accel, '-cpu', self.cpu(), '-m', str(self.memory), '-smp', str(self.vcpus),
			*board, '-no-reboot', '-display', 'none', '-nodefaults',
			'-chardev', console_dev, '-serial', 'chardev:console',
			'-chardev', ktap_dev,
			'-device', 'isa-serial,chardev=ktap,index=1', *gdb,
			'-kernel', str(self.kernel), '-initrd', str(initrd), '-append', cmdline]

	def key(self, initrd_parts: Sequence[pathlib.Path]) -> str:
		"""What a snapshot of this machine is made of."""
		digest = hashlib.sha256()
		digest.update(' '.join(self.args(pathlib.Path('INITRD'), pathlib.Path('CONSOLE'), 'KTAP')).encode())
		digest.update(subprocess.run([QEMU, '--version'], capture_output=True, check=False).stdout)
		for path in [self.kernel, *initrd_parts]:
			digest.update(hashlib.sha256(path.read_bytes()).digest())
		return digest.hexdigest()


# A scenario's qemu.cmd boots its guest cold by hand: the guest reads the
# scenario from /scenario in the initramfs, where a run's guest reads the
# host's message; its console and KTAP go to these files beside qemu.cmd.
class End(enum.StrEnum):
	"""How a guest ended: QEMU exited, or was killed at the deadline, or
	killed after a kernel report and silence."""
	EXITED = 'exited'
	TIMEOUT = 'timeout'
	HUNG = 'hung'


# What a run's guest leaves in its scenario's directory: its console, its
# KTAP and QEMU's own messages.
CONSOLE_LOG = 'console.log'
KTAP_LOG = 'ktap'
QEMU_LOG = 'qemu.log'

RERUN_CMD = 'qemu.cmd'
RERUN_SCENARIO = 'scenario.cpio'
RERUN_CONSOLE = 'rerun.console.log'
RERUN_KTAP = 'rerun.ktap'


def newc_archive(files: Dict[str, bytes], executable: Sequence[str] = ()) -> bytes:
	"""FILES (name: contents, mode 0644, or 0755 if EXECUTABLE names it)
	as a cpio archive in the newc format the kernel unpacks an initramfs
	from."""
	out = b''
	for ino, (name, data) in enumerate([*files.items(), ('TRAILER!!!', b'')], 1):
		mode = (0o100755 if name in executable else 0o100644) if name != 'TRAILER!!!' else 0
		fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name) + 1, 0)
		header = b'070701' + b''.join(b'%08X' % f for f in fields) + name.encode() + b'\0'
		out += header + b'\0' * (-len(header) % 4) + data + b'\0' * (-len(data) % 4)
	return out + b'\0' * (-len(out) % 512)


def write_rerun(machine: 'Machine', workdir: pathlib.Path, parts: Sequence[pathlib.Path], message: bytes,
		how: str) -> None:
	"""WORKDIR/qemu.cmd: a script that boots the guest of WORKDIR's
	scenario again, cold, from the archives PARTS and the scenario MESSAGE
	(HOW the run booted it, for its comment)."""
	(workdir / RERUN_SCENARIO).write_bytes(newc_archive({'scenario': message}))
	(workdir / RERUN_CMD).write_text(rerun_script(machine, parts, how))
	(workdir / RERUN_CMD).chmod(0o755)


def rerun_script(machine: 'Machine', parts: Sequence[pathlib.Path], how: str) -> str:
	"""The text of a qemu.cmd (write_rerun)."""
	marker = '@INITRD@'
	command = ' '.join(shlex.quote(a) for a in [QEMU, *machine.rerun_args(marker)])
	lines = ['#!/bin/sh',
		 f'# This scenario\'s guest, booted cold by hand ({how}): its',
		 f'# console on this terminal and in {RERUN_CONSOLE}, its KTAP in {RERUN_KTAP}.',
		 '# Ctrl-a x ends QEMU.',
		 'set -eu',
		 'cd "$(dirname "$0")"',
		 'initrd=$(mktemp)',
		 'trap \'rm -f "$initrd"\' EXIT',
		 # First: an uncompressed archive must start 4-byte aligned.
		 f'cat {RERUN_SCENARIO} ' + ' '.join(shlex.quote(str(p)) for p in parts) + ' > "$initrd"',
		 command.replace(marker, '"$initrd"')]
	return '\n'.join(lines) + '\n'


def scenario_message(variant: str, id_: str, image: str, params: Sequence[str],
		     steps: Sequence[str], archive: bytes = b'', golden: str = '-') -> bytes:
	"""What the guest reads at its READY point: GOLDEN is the file name of
	the image's golden table for the variant (golden.py chooses it), the
	partitions an action opens.  (The first byte after a restore can be
	lost: a blank line goes first.)"""
	lines = ['', f'run {variant} {id_} {image} {golden} {len(archive)}',
		 ' '.join(['params', *params]), ' '.join(['steps', *steps]), '']
	return '\n'.join(lines).encode() + archive


class Guest:
	"""One QEMU process and its sockets, with a deadline for all of it."""

	def __init__(self, workdir: pathlib.Path, sockdir: str, deadline: float,
		     reported: Optional[Callable[[str], bool]] = None):
		self.workdir, self.deadline = workdir, deadline
		# REPORTED(console) says whether a console shows a kernel report.
		self.reported = reported
		self.console_size, self.spoke = -1, time.monotonic()
		self.hung = False
		self.proc: Optional[subprocess.Popen] = None
		self.received = bytearray()
		self.listeners: List[socket.socket] = []
		self.sockdir = tempfile.mkdtemp(dir=sockdir)
		self.ktap_path = os.path.join(self.sockdir, 'ktap')
		self.ktap_listener = self.listen(self.ktap_path)

	def listen(self, path: str) -> socket.socket:
		if len(path.encode()) >= 108:
			raise Fault(f'socket path too long for AF_UNIX (108 bytes): {path}')
		sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
		self.listeners.append(sock)
		sock.bind(path)
		sock.listen(1)
		return sock

	def remaining(self) -> float:
		return max(0.0, self.deadline - time.monotonic())

	def hung_after_report(self) -> bool:
		"""The guest has said nothing for QUIET_AFTER_REPORT_S and its
		console shows a kernel report: it is ended at once."""
		console = self.workdir / CONSOLE_LOG
		size = console.stat().st_size if console.exists() else 0
		if size != self.console_size:
			self.console_size, self.spoke = size, time.monotonic()
			return False
		if self.reported is None or time.monotonic() - self.spoke < QUIET_AFTER_REPORT_S:
			return False
		self.spoke = time.monotonic()	# read the console again in a while, not at every poll
		if not self.reported(console.read_bytes().decode(errors='replace')):
			return False
		self.hung, self.deadline = True, time.monotonic()
		return True

	def start(self, args: List[str], pass_fds: Sequence[int] = (), interactive: bool = False) -> None:
		"""Start QEMU; INTERACTIVE: on this terminal (its stdin and stdout)."""
		if stopping():
			raise Fault('interrupted')
		with open(self.workdir / QEMU_LOG, 'wb') as log:
			try:
				self.proc = subprocess.Popen([QEMU, *args], stdin=None if interactive else subprocess.DEVNULL,
							     stdout=None if interactive else log,
							     stderr=log, pass_fds=pass_fds,
							     start_new_session=True)
			except OSError as err:
				raise Fault(f'cannot start {QEMU}: {err}') from err
		track(self.proc)

	def _qemu_gone(self, what: str) -> Fault:
		status = self.proc.poll() if self.proc else None
		tail = log_tail(self.workdir / QEMU_LOG, 5)
		return Fault(f'QEMU exited (status {status}) {what}' + (f': {tail}' if tail else ''))

	def accept(self, listener: socket.socket, what: str) -> socket.socket:
		"""QEMU's connection to LISTENER; a fault if QEMU dies first."""
		while self.remaining() > 0:
			ready, _, _ = select.select([listener], [], [], min(0.1, self.remaining()))
			if ready:
				conn, _ = listener.accept()
				return conn
			if self.proc.poll() is not None:
				raise self._qemu_gone(f'before it opened its {what}')
		raise Fault(f'QEMU did not open its {what} before the deadline')

	def read_until(self, conn: socket.socket, stop: Optional[bytes], out) -> bool:
		"""Append what the guest says to received (and OUT) until STOP is
		in it (None: until QEMU closes the port).  False at the deadline."""
		while stop is None or stop not in self.received:
			ready, _, _ = select.select([conn], [], [], min(0.2, self.remaining()))
			if ready:
				data = conn.recv(65536)
				if not data:
					return stop is None
				self.received += data
				self.spoke = time.monotonic()
				if out:
					out.write(data)
					out.flush()
			elif self.remaining() <= 0 or self.hung_after_report():
				return False
		return True

	def outcome(self, when: str, grace: float = 0) -> 'End':
		"""Wait for QEMU until the deadline (plus GRACE: a guest that has
		closed its port is ending); a Fault when QEMU itself failed (a
		guest's reboot or panic ends it with status 0)."""
		try:
			status = self.proc.wait(timeout=self.remaining() + grace)
		except subprocess.TimeoutExpired:
			self.kill()
			return End.HUNG if self.hung else End.TIMEOUT
		if status != 0:
			raise self._qemu_gone(when)
		return End.EXITED

	def kill(self) -> None:
		"""Kill QEMU's process group, unless QEMU was reaped already (its
		group id may be another's by now)."""
		if self.proc is None:
			return
		with _running_lock:
			if self.proc.returncode is None:
				try:
					os.killpg(self.proc.pid, signal.SIGKILL)
				except ProcessLookupError:
					pass
			_running.pop(self.proc.pid, None)
		self.proc.wait()

	def close(self) -> None:
		self.kill()
		for sock in self.listeners:
			sock.close()
		shutil.rmtree(self.sockdir, ignore_errors=True)


def run_scenario(machine: Machine, workdir: pathlib.Path, sockdir: str, initrd: pathlib.Path,
		 message: bytes, timeout_s: float, snapshot: Optional[pathlib.Path] = None,
		 reported: Optional[Callable[[str], bool]] = None) -> 'End':
	"""Boot (or restore SNAPSHOT) one guest, send it MESSAGE, keep its KTAP
	in WORKDIR/ktap and its console in WORKDIR/console.log.  Returns how
	it ended (HUNG: see Guest.hung_after_report; REPORTED tells a console
	with a kernel report); raises Fault when QEMU failed around the
	guest."""
	guest: Optional[Guest] = None
	fds: List[int] = []
	try:
		guest = Guest(workdir, sockdir, time.monotonic() + timeout_s, reported)
		args = machine.args(initrd, workdir / CONSOLE_LOG, guest.ktap_path)
		if snapshot is not None:
			fd = os.open(snapshot, os.O_RDONLY)
			fds.append(fd)
			args += ['-incoming', f'fd:{fd}']
		guest.start(args, pass_fds=fds, interactive=machine.interactive)
		for fd in fds:
			os.close(fd)
		fds = []
		conn = guest.accept(guest.ktap_listener, 'KTAP port')
		with conn, open(workdir / KTAP_LOG, 'wb') as out:
			# A restored guest waits already; a cold one says READY first.
			if snapshot is None and not guest.read_until(conn, b'READY', None):
				return guest.outcome('before its guest said READY')
			guest.received.clear()
			conn.settimeout(max(guest.remaining(), 0.1))
			try:
				conn.sendall(message)
			except OSError:
				pass	# the guest is gone: its KTAP says how far it got
			closed = guest.read_until(conn, None, out)
		return guest.outcome('while its guest ran', grace=10 if closed else 0)
	except OSError as err:
		raise Fault(f'{type(err).__name__}: {err}') from err
	finally:
		for fd in fds:
			os.close(fd)
		if guest:
			guest.close()


class Qmp:
	"""A QMP monitor connection (QEMU connected to our socket)."""

	def __init__(self, conn: socket.socket, guest: Guest):
		self.conn, self.guest, self.buffer = conn, guest, b''
		self._message()		# the greeting
		self.execute('qmp_capabilities')

	def _message(self) -> dict:
		while b'\n' not in self.buffer:
			ready, _, _ = select.select([self.conn], [], [], min(0.2, self.guest.remaining()))
			if ready:
				data = self.conn.recv(65536)
				if not data:
					raise self.guest._qemu_gone('while its monitor was in use')
				self.buffer += data
			elif self.guest.remaining() <= 0:
				raise Fault('QEMU monitor did not answer before the deadline')
		line, self.buffer = self.buffer.split(b'\n', 1)
		return json.loads(line)

	def execute(self, command: str, fd: Optional[int] = None, **arguments) -> dict:
		request = json.dumps({'execute': command, 'arguments': arguments}).encode() + b'\n'
		if fd is None:
			self.conn.sendall(request)
		else:
			socket.send_fds(self.conn, [request], [fd])
		while True:
			reply = self._message()
			if 'error' in reply:
				raise Fault(f'QMP {command}: {reply["error"].get("desc", reply["error"])}')
			if 'return' in reply:
				return reply['return']


def save_snapshot(machine: Machine, workdir: pathlib.Path, sockdir: str, initrd: pathlib.Path,
		  snapshot: pathlib.Path, timeout_s: float) -> None:
	"""Boot MACHINE to the guest's READY point and save it to SNAPSHOT over
	QMP; raises Fault (the console tail in it) when that cannot be done."""
	guest: Optional[Guest] = None
	tmp = snapshot.with_suffix('.tmp')
	try:
		guest = Guest(workdir, sockdir, time.monotonic() + timeout_s)
		qmp_path = os.path.join(guest.sockdir, 'qmp')
		qmp_listener = guest.listen(qmp_path)
		args = machine.args(initrd, workdir / CONSOLE_LOG, guest.ktap_path)
		args += ['-chardev', f'socket,id=qmp,path={qemu_value(qmp_path)}', '-mon', 'chardev=qmp,mode=control',
			 # Saved paused (below) but restored running: leave the run
			 # state out of the snapshot, so -incoming starts the guest.
			 '-global', 'migration.store-global-state=off']
		guest.start(args)
		ktap = guest.accept(guest.ktap_listener, 'KTAP port')
		qmp = Qmp(guest.accept(qmp_listener, 'QMP monitor'), guest)
		with ktap, open(workdir / 'ktap.log', 'wb') as out:
			if not guest.read_until(ktap, b'READY', out):
				if guest.proc.poll() is not None:
					raise guest._qemu_gone('before its guest said READY')
				raise Fault('the guest did not reach its snapshot point before the deadline')
			with open(tmp, 'wb') as image:
				qmp.execute('getfd', fd=image.fileno(), fdname='snapshot')
			# Paused first: a live save copies memory while the guest
			# writes it.  Twice here (TCG, QEMU 7.2), a snapshot saved
			# live while the kernel switched clocksources crashed the
			# idle task at every restore.
			qmp.execute('stop')
			qmp.execute('migrate', uri='fd:snapshot')
			status = 'active'
			while status not in ('completed', 'failed', 'cancelled'):
				if guest.remaining() <= 0:
					raise Fault('the snapshot was not saved before the deadline')
				time.sleep(0.05)
				status = qmp.execute('query-migrate').get('status', 'active')
			if status != 'completed':
				raise Fault(f'QEMU failed to save the snapshot (migration {status})')
			os.replace(tmp, snapshot)
			# QEMU may close the monitor before it answers quit.
			try:
				qmp.execute('quit')
			except (Fault, OSError):
				pass
	except (Fault, OSError, ValueError) as fault:
		tail = log_tail(workdir / CONSOLE_LOG)
		raise Fault(f'{fault}' + (f'\nits console:\n{tail}' if tail else '')) from fault
	finally:
		if guest:
			guest.close()
		tmp.unlink(missing_ok=True)
