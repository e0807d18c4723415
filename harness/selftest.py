#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The runner's own tests, as the kernel's kunit_tool_test.py: no kernel
and no VM.  harness/run runs against harness/selftest/fake-qemu (a stand-in
QEMU that plays a well-behaved or a broken guest) in a build directory
whose path holds a space, a quote, a colon and a comma.  Each test is named after
the fault it guards against; each must end with a clear message and a
report a CI tool can read.

usage: harness/selftest.py [-v] [TEST...]
Last line: "N passed, N failed, N skipped".
"""

import dataclasses
import fcntl
import contextlib
import gzip
import io
import importlib.machinery
import json
import lzma
import os
import pathlib
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import types
import unittest
import unittest.mock
import xml.etree.ElementTree as ET
from typing import List, Optional, Tuple

HARNESS = pathlib.Path(__file__).resolve().parent
TOP = HARNESS.parent
sys.path.insert(0, str(HARNESS))
import builds  # noqa: E402
import bzimage  # noqa: E402
import clock  # noqa: E402
import distro  # noqa: E402
import guestvm  # noqa: E402
import hosttools  # noqa: E402
import kernelmods  # noqa: E402
import golden  # noqa: E402
import plan  # noqa: E402
import reports  # noqa: E402
import results  # noqa: E402
import verdict  # noqa: E402

TABLE = plan.TABLE
FAKE_QEMU = HARNESS / 'selftest/fake-qemu'
FAKE_MAKE = HARNESS / 'selftest/fake-make'
XSD = HARNESS / 'selftest/junit-10.xsd'
SUMMARY_RE = re.compile(r'^(\d+) passed, (\d+) failed, (\d+) skipped$')
# Six scenarios of one variant, for the runs that need several.
MANY = ' '.join(f'vanilla/{id_}/mbr-primary' for id_ in (
	'bad_fail_at', 'bad_hold', 'bad_unwind', 'bad_io_delay', 'bad_fail_errno', 'bad_hold_timeout'))


def kunit_tool() -> pathlib.Path:
	"""The kernel's own KTAP parser (make check extracts it; $KUNIT_TOOL)."""
	return pathlib.Path(os.environ.get('KUNIT_TOOL', TOP / 'build/tools/kunit'))


class FakeBuild:
	"""A build/ with stand-in kernels and archives, and a fake QEMU on PATH."""

	def __init__(self, variants=('vanilla',)):
		self.root = pathlib.Path(tempfile.mkdtemp(prefix="raceblk selftest 'q:x,y' "))
		self.build = self.root / 'build'
		self.variants = variants
		for variant in variants:
			self.touch(f'kernel/{variant}/obj/arch/x86/boot/bzImage')
			self.touch(f'initramfs/{variant}.cpio')
		for image in plan.all_images():
			self.touch(f'initramfs/images/{image}.cpio.gz')
			self.touch(f'images/{image}.img')
			(self.build / f'images/{image}.img.sums').write_text('0 fake\n')
		(self.build / 'accel').write_text('tcg\n')
		# Not under root: PATH cannot hold a ':'.
		self.bin = pathlib.Path(tempfile.mkdtemp(prefix='raceblk-selftest-bin-'))
		(self.bin / 'qemu-system-x86_64').symlink_to(FAKE_QEMU)

	def touch(self, name: str) -> None:
		path = self.build / name
		path.parent.mkdir(parents=True, exist_ok=True)
		path.write_bytes(b'fake\n')

	def env(self, mode: str) -> dict:
		return {**os.environ, 'RACEBLK_BUILD': str(self.build), 'FAKE_QEMU': mode, 'FAKE_QEMU_STATE': str(self.root),
			'VARIANTS': ' '.join(self.variants), 'PATH': f'{self.bin}:{os.environ["PATH"]}'}

	def run(self, mode: str, *args: str, timeout: float = 120, env: Optional[dict] = None
		) -> subprocess.CompletedProcess:
		return subprocess.run([str(HARNESS / 'run'), *args], env={**self.env(mode), **(env or {})},
				      capture_output=True, text=True, timeout=timeout, check=False)

	def start(self, mode: str, *args: str) -> subprocess.Popen:
		return subprocess.Popen([str(HARNESS / 'run'), *args], env=self.env(mode), text=True,
					stdout=subprocess.PIPE, stderr=subprocess.PIPE)

	def results(self) -> results.Report:
		return results.Report.load(self.build / 'results/results.json')

	def guests_left(self) -> list:
		"""Fake QEMUs of this build still running."""
		left = []
		for proc in pathlib.Path('/proc').glob('[0-9]*'):
			try:
				if str(self.bin).encode() in (proc / 'cmdline').read_bytes():
					left.append(proc.name)
			except OSError:
				pass
		return left

	def close(self) -> None:
		shutil.rmtree(self.root, ignore_errors=True)
		shutil.rmtree(self.bin, ignore_errors=True)


class Case(unittest.TestCase):
	maxDiff = None

	def setUp(self):
		self.fake = FakeBuild()
		# Cleanups run last first: a run started later is killed before
		# its build directory goes.
		self.addCleanup(self.fake.close)

	def start(self, mode: str, *args: str) -> subprocess.Popen:
		"""A run in the background, killed at the end of the test whatever
		happens (before its build directory goes)."""
		run = self.fake.start(mode, *args)
		self.addCleanup(lambda: run.poll() is None and (run.kill(), run.wait()))
		return run

	def assertSummary(self, done, passed, failed, skipped):
		"""The run ended with its summary line, with these counts."""
		last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ''
		self.assertRegex(last, SUMMARY_RE, f'no summary line; stderr: {done.stderr}')
		self.assertEqual(SUMMARY_RE.match(last).groups(), (str(passed), str(failed), str(skipped)),
				 done.stdout)

	def assertReportsReadable(self):
		"""results.json loads, junit.xml validates against the Jenkins/Ant
		schema, results.ktap parses with the kernel's kunit_parser."""
		report = self.fake.results()
		junit = self.fake.build / 'results/junit.xml'
		ET.parse(junit)
		check = subprocess.run(['xmllint', '--noout', '--schema', str(XSD), str(junit)],
				       capture_output=True, text=True, check=False)
		self.assertEqual(check.returncode, 0, check.stderr)
		self.assertKunitParses()
		return report


	def assertKunitParses(self):
		"""results.ktap parses with the kernel's kunit_parser, when there
		is one (Reports.test_kunit_parser_present says whether the
		parser's checks ran: a missing parser skips no other check)."""
		tool = kunit_tool()
		if not (tool / 'kunit_parser.py').is_file():
			return
		parse = subprocess.run([sys.executable, '-c', 'import sys, kunit_parser; '
					'kunit_parser.parse_run_tests(open(sys.argv[1]).readlines())',
					str(self.fake.build / 'results/results.ktap')],
				       cwd=tool, capture_output=True, text=True, check=False)
		self.assertEqual(parse.returncode, 0, parse.stderr)


class Faults(Case):
	"""QEMU and the host going wrong."""

	def test_snapshot_qemu_exits_during_save(self):
		start = time.monotonic()
		done = self.fake.run('die-at-save', '--snapshot', '--filter', 'vanilla/before_add_disk/*')
		self.assertLess(time.monotonic() - start, 30)
		self.assertIn('cannot save a snapshot of vanilla; cold boots instead', done.stderr)
		self.assertSummary(done, 1, 0, 0)

	def test_snapshot_saved_and_restored(self):
		done = self.fake.run('pass', '--snapshot', '--filter', MANY)
		self.assertIn('snapshots', done.stdout)
		self.assertTrue((self.fake.build / 'snapshots/vanilla/vm').is_file())
		self.assertSummary(done, 6, 0, 0)

	def test_repeat_runs_count_towards_a_snapshot(self):
		# One scenario run three times is three boots: a snapshot pays.
		done = self.fake.run('pass', '--repeat', '3', '--filter', 'vanilla/before_add_disk/*')
		self.assertIn(', snapshots,', done.stdout)
		self.assertTrue((self.fake.build / 'snapshots/vanilla/vm').is_file())
		self.assertSummary(done, 1, 0, 0)

	def test_snapshot_that_crashes_at_restore_is_saved_again(self):
		done = self.fake.run('first-restore-crash', '--snapshot', '--filter', MANY)
		self.assertSummary(done, 6, 0, 0)
		self.assertNotIn('cannot save a snapshot', done.stderr)
		self.assertIn('snapshots', done.stdout)
		self.assertTrue((self.fake.build / 'snapshots/vanilla/key').is_file())

	def test_snapshot_that_always_crashes_at_restore_is_dropped(self):
		done = self.fake.run('restore-crash', '--snapshot', '--filter', MANY)
		self.assertSummary(done, 6, 0, 0)	# booted cold, where nothing crashes
		self.assertIn('cold boots', done.stdout)
		self.assertRegex(done.stderr, r'cannot save a snapshot of vanilla; cold boots instead\. 3 snapshots saved; '
				 r"the first restore of each failed: its console says 'WARNING: CPU: 0 PID: 0 at ")
		self.assertFalse((self.fake.build / 'snapshots/vanilla').exists())

	def test_snapshot_save_never_completes(self):
		start = time.monotonic()
		done = self.fake.run('save-stuck', '--snapshot', '--timeout', '2', '--filter', 'vanilla/before_add_disk/*')
		self.assertLess(time.monotonic() - start, 30)
		self.assertRegex(done.stderr, r'cannot save a snapshot of vanilla; cold boots instead\. .* before the deadline')
		self.assertSummary(done, 1, 0, 0)
		self.assertEqual(self.fake.guests_left(), [])

	def test_sigint_while_saving_a_snapshot(self):
		run = self.start('save-stuck', '--snapshot', '--timeout', '60', '--filter', MANY)
		deadline = time.monotonic() + 20
		while not (self.fake.build / 'snapshots/vanilla/vm.tmp').exists():
			self.assertLess(time.monotonic(), deadline, 'no snapshot save started')
			time.sleep(0.1)
		run.send_signal(signal.SIGINT)
		stdout, stderr = run.communicate(timeout=30)
		self.assertEqual(run.returncode, 130, stderr)
		self.assertSummary(subprocess.CompletedProcess(run.args, 130, stdout, stderr), 0, 0, 6)
		self.assertEqual(self.fake.guests_left(), [])
		self.assertFalse((self.fake.build / 'accel-probe').exists())

	def test_qemu_never_connects(self):
		start = time.monotonic()
		done = self.fake.run('no-connect', '--timeout', '2', '--filter', 'vanilla/before_add_disk/*')
		self.assertLess(time.monotonic() - start, 20)
		self.assertSummary(done, 0, 1, 0)
		self.assertIn('QEMU did not open its KTAP port before the deadline', done.stdout)
		self.assertEqual(self.fake.guests_left(), [])

	def test_qemu_fails_to_start(self):
		done = self.fake.run('fail-start', '--filter', 'vanilla/before_add_disk/*')
		self.assertEqual(done.returncode, 1)
		self.assertSummary(done, 0, 1, 0)
		self.assertIn('fake failure to start', done.stdout)
		record = self.assertReportsReadable().scenarios[0]
		self.assertEqual(record.status, results.Status.ERROR)
		junit = ET.parse(self.fake.build / 'results/junit.xml')
		self.assertIsNotNone(junit.find('.//testcase/error'))

	def test_hung_guest_killed_at_timeout(self):
		# Silent without a kernel report: killed at its timeout, however
		# short the quiet time after a report.
		start = time.monotonic()
		done = self.fake.run('hang', '--timeout', '2', '--filter', 'vanilla/before_add_disk/*',
				     env={'RACEBLK_QUIET_AFTER_REPORT_S': '1'})
		self.assertGreaterEqual(time.monotonic() - start, 2)
		self.assertLess(time.monotonic() - start, 20)
		self.assertSummary(done, 0, 1, 0)
		self.assertIn('guest killed at the 2s timeout', done.stdout)
		self.assertReportsReadable()
		self.assertIn('# TIMEOUT', (self.fake.build / 'results/results.ktap').read_text())
		self.assertEqual(self.fake.guests_left(), [])

	def test_debug_guest_gets_twice_the_timeout(self):
		fake = FakeBuild(variants=('fixed-debug',))
		try:
			start = time.monotonic()
			done = fake.run('hang', '--cold', '--timeout', '2', '--filter', 'fixed-debug/holder_close/*')
			self.assertGreaterEqual(time.monotonic() - start, 4)
			self.assertIn('guest killed at the 4s timeout', done.stdout)
		finally:
			fake.close()

	def test_guest_silent_after_a_report_killed_before_its_timeout(self):
		start = time.monotonic()
		done = self.fake.run('crash-hang', '--timeout', '120', '--filter', 'vanilla/before_add_disk/*',
				     env={'RACEBLK_QUIET_AFTER_REPORT_S': '2'})
		self.assertLess(time.monotonic() - start, 30)
		self.assertSummary(done, 0, 1, 0)
		self.assertIn('guest killed: silent for 2s after a kernel report (console: BUG: unable to handle',
			      done.stdout)
		self.assertIn('# TIMEOUT', (self.fake.build / 'results/results.ktap').read_text())
		self.assertEqual(self.fake.guests_left(), [])

	def interrupt(self, signum, status):
		run = self.start('hang', '--cold', '-j', '1', '--filter', MANY)
		deadline = time.monotonic() + 20
		while not list((self.fake.build / 'results').glob('vanilla/*/*/console.log')):
			self.assertLess(time.monotonic(), deadline, 'no guest started')
			time.sleep(0.1)
		run.send_signal(signum)
		stdout, stderr = run.communicate(timeout=30)
		done = subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr)
		self.assertEqual(run.returncode, status, stderr)
		self.assertIn('killing every guest', stderr)
		self.assertIn('interrupted by', stdout)
		self.assertSummary(done, 0, 0, 6)
		self.assertReportsReadable()
		self.assertEqual(self.fake.guests_left(), [])

	def test_sigint_mid_run(self):
		self.interrupt(signal.SIGINT, 130)

	def test_sigterm_mid_run(self):
		self.interrupt(signal.SIGTERM, 143)

	def test_sighup_with_stderr_failing_kills_the_guests(self):
		# The terminal a --shell run was on closes: SIGHUP, and its stderr
		# fails.  The guests must go all the same.
		# /dev/full: every write to stderr fails, as on a hung-up tty.
		with open('/dev/full', 'w') as full:
			run = subprocess.Popen([str(HARNESS / 'run'), '--cold', '-j', '1', '--filter', MANY],
					       env=self.fake.env('hang'), stdout=subprocess.DEVNULL, stderr=full)
		self.addCleanup(lambda: run.poll() is None and (run.kill(), run.wait()))
		deadline = time.monotonic() + 20
		while not list((self.fake.build / 'results').glob('vanilla/*/*/console.log')):
			self.assertLess(time.monotonic(), deadline, 'no guest started')
			time.sleep(0.1)
		run.send_signal(signal.SIGHUP)
		run.wait(timeout=30)
		self.assertEqual(self.fake.guests_left(), [])

	def test_second_run_refused_while_one_holds_build(self):
		self.fake.build.mkdir(parents=True, exist_ok=True)
		with open(self.fake.build / '.harness.lock', 'w') as lock:
			lock.write('pid 1\n')
			lock.flush()
			fcntl.flock(lock, fcntl.LOCK_EX)
			done = self.fake.run('pass', '--filter', 'vanilla/before_add_disk/*')
		self.assertEqual(done.returncode, 2)
		self.assertIn('another harness run (pid 1)', done.stderr)

	def test_guest_scripts_newer_than_initramfs(self):
		os.utime(self.fake.build / 'initramfs/vanilla.cpio', (0, 0))
		done = self.fake.run('pass', '--filter', 'vanilla/before_add_disk/*')
		self.assertEqual(done.returncode, 2)
		self.assertIn("is newer than the initramfs of 'vanilla': run 'make initramfs", done.stderr)


class Reports(Case):
	"""What CI tools read."""

	def test_qemu_cmd_boots_the_same_guest(self):
		# Restored or cold, a scenario's qemu.cmd boots its guest again
		# by hand, and that guest runs the same steps.
		done = self.fake.run('pass', '--snapshot', '--filter', MANY)
		self.assertSummary(done, 6, 0, 0)
		done = self.fake.run('pass', '--cold', '--filter', 'vanilla/none/mbr-primary')
		self.assertSummary(done, 1, 0, 0)
		for workdir in (self.fake.build / 'results/vanilla/none/mbr-primary',
				self.fake.build / 'results/vanilla/bad_hold/mbr-primary'):
			script = workdir / 'qemu.cmd'
			self.assertIn('(the run ', script.read_text())
			rerun = subprocess.run([str(script)], env=self.fake.env('pass'), capture_output=True, text=True,
					       timeout=60, check=False)
			self.assertEqual(rerun.returncode, 0, rerun.stderr)
			ktap = (workdir / 'ktap').read_text()
			self.assertEqual((workdir / 'rerun.ktap').read_text().replace('\r\n', '\n'), ktap)
			self.assertRegex(ktap, r'\nok 1 ')

	def test_dry_run_boots_nothing_and_prints_each_guest(self):
		# fail-start: a QEMU started at all would fail the run.
		done = self.fake.run('fail-start', '--dry-run', '--filter', MANY)
		self.assertEqual(done.returncode, 0, done.stderr)
		self.assertFalse((self.fake.build / 'results').exists())
		self.assertEqual(self.fake.guests_left(), [])
		self.assertEqual(done.stdout.count('\nqemu-system-x86_64 '), 6)
		self.assertEqual(done.stdout.count('--- vanilla/'), 6)

	def test_a_new_machine_is_its_file_and_its_cases(self):
		# docs/cases.md: a machine that can be snapshotted is a file in
		# harness/machines/ and the cases that name it, nothing else.
		with tempfile.TemporaryDirectory() as tmp:
			tree = pathlib.Path(tmp) / 'tree'
			shutil.copytree(TOP, tree, ignore=shutil.ignore_patterns('.git', 'build'))
			machine = (HARNESS / 'machines/microvm').read_text()
			(tree / 'harness/machines/dummy').write_text(machine)
			with open(tree / 'harness/cases', 'a') as cases:
				cases.write('\n# A machine of the self-test\'s own.\ncase dummy_machine\n'
					    'params  fail_at=none machine=dummy\nkernel  all\nload=OK\nunload=OK\n')
			(self.fake.bin / 'qemu-system-x86_64').unlink()
			(self.fake.bin / 'qemu-system-x86_64').symlink_to(tree / 'harness/selftest/fake-qemu')
			done = subprocess.run([str(tree / 'harness/run'), '--snapshot', '--filter', 'vanilla/dummy_machine/*'],
					      env=self.fake.env('pass'), capture_output=True, text=True, timeout=120, check=False)
			self.assertSummary(done, 1, 0, 0)
			self.assertIn(', snapshots,', done.stdout)
			self.assertTrue((self.fake.build / 'snapshots/vanilla@dummy/vm').is_file(), done.stderr)
			self.assertIn('restored it from its variant\'s snapshot',
				      (self.fake.build / 'results/vanilla/dummy_machine/mbr-primary/qemu.cmd').read_text())

	def test_kunit_parser_present(self):
		# The other tests parse results.ktap with it when it is there:
		# without it, this skip says those checks did not run.
		tool = kunit_tool()
		if not (tool / 'kunit_parser.py').is_file():
			self.skipTest(f'no kunit_parser.py in {tool} (make check extracts it): '
				      'results.ktap was not parsed with it')

	def test_results_json_round_trips(self):
		# What results.json holds is the model's, key for key.
		for repeat in ('1', '2'):
			done = self.fake.run('crash', '--repeat', repeat, '--filter', 'vanilla/before_add_disk/*')
			self.assertSummary(done, 0, 1, 0)
			path = self.fake.build / 'results/results.json'
			self.assertEqual(results.Report.load(path).dumps(), path.read_text())

	def test_control_characters_in_output(self):
		done = self.fake.run('control', '--filter', 'vanilla/before_add_disk/*')
		self.assertSummary(done, 1, 0, 0)
		self.assertReportsReadable()
		self.assertIn('^A^B^[', (self.fake.build / 'results/junit.xml').read_text())

	def test_failure_has_a_body_with_the_crash(self):
		done = self.fake.run('crash', '--filter', 'vanilla/before_add_disk/*')
		self.assertSummary(done, 0, 1, 0)
		self.assertReportsReadable()
		failure = ET.parse(self.fake.build / 'results/junit.xml').find('.//testcase/failure')
		self.assertIn('console: BUG: unable to handle page fault', failure.get('message'))
		self.assertIn('BUG: unable to handle page fault', failure.text)
		self.assertIn('ok 1 load=ENODEV', failure.text)

	def test_totals_with_space_and_quote_in_path(self):
		self.assertIn(' ', str(self.fake.build))
		done = self.fake.run('pass', '--filter', MANY + ' vanilla/before_add_disk/*')
		self.assertSummary(done, 7, 0, 0)
		suite = ET.parse(self.fake.build / 'results/junit.xml').find('testsuite')
		self.assertEqual((suite.get('tests'), suite.get('failures'), suite.get('errors')), ('7', '0', '0'))
		self.assertReportsReadable()

	def test_cut_off_guest(self):
		done = self.fake.run('cut-off', '--filter', 'vanilla/before_add_disk/*')
		self.assertSummary(done, 0, 1, 0)
		self.assertIn('guest reported 1 of 4 results', done.stdout)
		self.assertReportsReadable()
		ktap = (self.fake.build / 'results/results.ktap').read_text()
		self.assertIn('  not ok 2 not_scanned # ERROR not reported', ktap)
		self.assertRegex(ktap, r'\nnot ok 1 vanilla/before_add_disk/mbr-primary # ERROR guest reported 1 of 4')

	def test_ktap_nests_by_two_spaces(self):
		self.fake.run('pass', '--filter', 'vanilla/before_add_disk/*')
		ktap = (self.fake.build / 'results/results.ktap').read_text().splitlines()
		self.assertEqual(ktap[:4], ['KTAP version 1', '1..1', '  KTAP version 1',
					    '  # Subtest: vanilla/before_add_disk/mbr-primary'])
		self.assertEqual(ktap[-1], 'ok 1 vanilla/before_add_disk/mbr-primary')

	def test_expected_crash_is_marked_xfail_everywhere(self):
		# vanilla@6.1 holder_close expects the page fault fake-qemu's
		# "crash" guest shows: a pass, never shown as a clean one.
		done = self.fake.run('crash', '--filter', 'vanilla/holder_close/*', env={'KERNEL': '6.1'})
		self.assertSummary(done, 1, 0, 0)
		self.assertRegex(done.stdout, r'\nXFAIL vanilla/holder_close/mbr-primary +[0-9.]+s  expected: '
				 r'BUG: unable to handle page fault in raceblk_open\n')
		self.assertIn('harness: 1 of the passes are XFAIL', done.stdout)
		ktap = (self.fake.build / 'results/results.ktap').read_text().splitlines()
		self.assertEqual(ktap[-1], 'ok 1 vanilla/holder_close/mbr-primary # XFAIL '
				 'BUG: unable to handle page fault in raceblk_open')
		junit = ET.parse(self.fake.build / 'results/junit.xml')
		prop = junit.find('.//properties/property')
		self.assertEqual((prop.get('name'), prop.get('value')), (
			'xfail:vanilla/holder_close/mbr-primary', 'BUG: unable to handle page fault in raceblk_open'))
		self.assertReportsReadable()

	# Guests that misbehave: fake-qemu mode, (passed, failed, skipped), what
	# the run says about it.
	GUESTS = (
		('bad-plan', (0, 1, 0), 'bad plan line "1..3x"'),
		('skip-all', (0, 1, 0), 'skipped all (lost the steps) with 4 steps sent'),
		('no-marker', (0, 1, 0), 'no kernel line "harness: scenario vanilla/before_add_disk/mbr-primary"'),
		('not-kernel', (1, 0, 0), 'PASS  vanilla/before_add_disk'),	# "Oops" in a file name
		('formfeed', (1, 0, 0), 'PASS  vanilla/before_add_disk'),	# a form feed is no new line
	)

	def test_guests_that_misbehave(self):
		for mode, counts, text in self.GUESTS:
			with self.subTest(mode=mode):
				done = self.fake.run(mode, '--filter', 'vanilla/before_add_disk/*')
				self.assertSummary(done, *counts)
				self.assertIn(text, done.stdout)
				self.assertReportsReadable()

	def test_matrix_json(self):
		done = self.fake.run('pass', '--matrix', '3', '--filter', 'vanilla/*')
		shards = json.loads(done.stdout)['include']
		self.assertEqual([s['shard'] for s in shards], ['1/3', '2/3', '3/3'])
		listed = self.fake.run('pass', '--list', '--filter', 'vanilla/*').stdout.split()
		self.assertEqual(sum(s['scenarios'] for s in shards), len(listed))


class CrashScan(unittest.TestCase):
	"""Kernel lines that end a scenario, and lines that do not."""

	TITLES = ('kernel BUG at drivers/block/raceblk.c:42!', 'invalid opcode: 0000 [#1] PREEMPT SMP',
		  'UBSAN: shift-out-of-bounds in drivers/block/raceblk.c:7:3',
		  'INFO: task modctl:42 blocked for more than 120 seconds.',
		  'rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:',
		  'rcu: INFO: rcu_sched self-detected stall on CPU',
		  'list_add corruption. prev->next should be next (ffff8880), but was 0000.',
		  'list_del corruption, ffff888003e2c0a8->next is LIST_POISON1',
		  'refcount_t: underflow; use-after-free.', 'BUG: KASAN: use-after-free in raceblk_open',
		  'WARNING: CPU: 0 PID: 1 at kernel/module/main.c:843 try_module_get+0x5b/0x6c',
		  'general protection fault, probably for non-canonical address 0xdead: 0000 [#1]',
		  'Kernel panic - not syncing: Fatal exception', 'Oops: 0000 [#1] PREEMPT SMP')

	def test_kernel_line_glued_to_the_guests_mirror(self):
		# The serial port took an oops's first line in the middle of the
		# guest's mirrored KTAP line: it is the kernel's line all the same.
		ktap = ('KTAP version 1\n1..2\n# obs load_done=EIO\n'
			'# scan: [    1.20] raceblk0: p1 p2\nok 1 load_done\n')
		title = 'BUG: unable to handle page fault for address: ffffffffc0201000'
		console = ('[    1.20] raceblk0: p1 p2\n# scan: [    1.20] raceblk0: p1 p2\n'
			   f'# obs load_do[    2.50] {title}\nne=EIO\n[    2.51] #PF: supervisor read access\n'
			   '[    2.52] Oops: 0000 [#1] PREEMPT SMP\nok 1 load_done\n')
		self.assertEqual(verdict.crash_lines(console), ['Oops: 0000 [#1] PREEMPT SMP'])
		fixed = verdict.unglued(console, ktap)
		self.assertEqual(verdict.crash_lines(fixed), [title])
		self.assertEqual(verdict.kernel_messages(fixed).count('raceblk0: p1 p2'), 1)
		# Text of the guest's own that is no line it sent stays as it is.
		self.assertEqual(verdict.unglued(f'oops[    2.50] {title}\n', ktap), f'oops[    2.50] {title}\n')

	def test_die_headers_end_the_report(self):
		for header in ('divide error: 0000 [#1] PREEMPT SMP', 'double fault: 0000 [#1]',
			       'stack segment: 0000 [#1]', 'int3: 0000 [#1]'):
			with self.subTest(header=header):
				self.assertEqual(verdict.crash_lines(f'[    1.0] {header}\n[    1.1] WARNING: exit\n'),
						 [header])
		gpf = 'general protection fault, probably for non-canonical address 0xdead: 0000 [#1] PREEMPT'
		self.assertEqual(verdict.crash_lines(f'[    1.0] {gpf}\n[    1.1] WARNING: at do_exit\n'), [gpf])

	def test_notices_are_no_crash(self):
		console = ('[    0.1] RETBleed: WARNING: Spectre v2 mitigation leaves CPU vulnerable\n'
			   '[    0.2] Speculative Return Stack Overflow: WARNING: kernel not compiled with CPU_SRSO.\n')
		self.assertEqual(verdict.crash_lines(console), [])

	def test_each_title_is_a_crash(self):
		for title in self.TITLES:
			with self.subTest(title=title):
				self.assertEqual(verdict.crash_lines(f'[   12.345678] {title}\n'), [title])

	def test_bug_then_oops_is_one_crash(self):
		console = ('[    1.0] kernel BUG at mm/slub.c:1!\n[    1.1] invalid opcode: 0000 [#1]\n'
			   '[    1.2] WARNING: aftermath\n')
		self.assertEqual(verdict.crash_lines(console), ['kernel BUG at mm/slub.c:1!'])

	KCSAN_AT_REBOOT = ('[    4.79] BUG: KCSAN: data-race in _find_first_bit+0x23/0x51\n'
			   '[    4.79] race at unknown origin, with read to 0xffffffff81befa40 of 8 bytes\n'
			   '[    4.79]  _find_first_bit+0x23/0x51\n'
			   '[    4.79]  native_stop_other_cpus+0x89/0x17c\n'
			   '[    4.79] ==================================================================\n')

	def test_known_report_fails_nothing_and_is_listed(self):
		self.assertEqual(verdict.crash_lines(self.KCSAN_AT_REBOOT), [])
		self.assertEqual(verdict.console_reports(self.KCSAN_AT_REBOOT).known,
				 ['BUG: KCSAN: data-race in _find_first_bit+0x23/0x51'])

	def test_sbitmap_race_is_known(self):
		# 6.12 fixed-kcsan, openers_ungated (docs/reliability.md, "Known reports").
		console = ('[    6.83] BUG: KCSAN: data-race in _find_next_zero_bit / sbitmap_find_bit\n'
			   '[    6.83] read-write (marked) to 0xffff888000c2cd80 of 8 bytes by task 60 on cpu 0:\n'
			   '[    6.83]  sbitmap_find_bit+0x125/0x19b\n'
			   '[    6.83]  sbitmap_get+0x94/0xb6\n'
			   '[    6.83] read to 0xffff888000c2cd80 of 8 bytes by task 51 on cpu 1:\n'
			   '[    6.83]  _find_next_zero_bit+0x32/0x8e\n'
			   '[    6.83] ==================================================================\n')
		self.assertEqual(verdict.crash_lines(console), [])
		self.assertEqual(verdict.console_reports(console).known,
				 ['BUG: KCSAN: data-race in _find_next_zero_bit / sbitmap_find_bit'])

	def test_excerpt_starts_at_the_crash_not_a_known_report(self):
		console = self.KCSAN_AT_REBOOT + '[    4.80] BUG: unable to handle page fault\n'
		self.assertTrue(verdict.crash_excerpt(console).startswith('[    4.80] BUG: unable to handle page fault'))
		self.assertEqual(verdict.crash_excerpt(self.KCSAN_AT_REBOOT), '')

	def test_known_title_with_another_trace_is_a_crash(self):
		# The same function racing elsewhere is a new report; and a known
		# report's frame after its end line does not make it known.
		console = self.KCSAN_AT_REBOOT.replace('native_stop_other_cpus', 'blk_mq_run_hw_queue')
		self.assertEqual(verdict.crash_lines(console), ['BUG: KCSAN: data-race in _find_first_bit+0x23/0x51'])
		late = console + '[    4.80]  native_stop_other_cpus+0x89/0x17c\n'
		self.assertEqual(verdict.console_reports(late).known, [])

	def test_only_kernel_lines(self):
		console = 'harness: image Oops.img\n# BUG: in a diagnostic\n[    1.0] raceblk: loaded\n'
		self.assertEqual(verdict.crash_lines(console), [])


class Input(unittest.TestCase):
	"""Bad flags, bad tables, bad images: a clear refusal, exit 2."""

	BAD_FLAGS = ((['-j', '9' * 20], 'argument -j: wants a whole number from 1 to 64'),
		     (['-j', '0'], 'argument -j: wants a whole number from 1 to 64'),
		     (['--matrix', '9' * 20], 'argument --matrix: wants a whole number from 1 to 256'),
		     (['--timeout', '0'], 'argument --timeout: wants a whole number from 1 to 86400'),
		     (['--repeat', 'x'], 'argument --repeat: wants a whole number from 1 to 1000'),
		     (['--shard', '3/2'], 'argument --shard: wants I/N with 1 <= I <= N'),
		     (['--shard', '1/' + '9' * 20], 'argument --shard: wants I/N'),
		     (['--expected', 'x'], '--expected goes with --image'),
		     (['--cold', '--snapshot'], 'not allowed with argument'),
		     (['--bogus'], 'unrecognized arguments: --bogus'),
		     (['--image', '/nonexistent.img'], '--image /nonexistent.img: not a readable file'),
		     (['--filter', 'nothing/*'], "no scenario matches 'nothing/*'"),
		     (['--module', 'null_blk.ko'], '--module wants --module-disk NAME'),
		     (['--module', 'null_blk.ko', '--module-disk', '../sda', '--module-fail', 'x=1'],
		      '--module wants --module-disk NAME'),
		     (['--module', 'null_blk.ko', '--module-disk', 'nullb0'], '--module wants --module-fail PARAMS'),
		     (['--module', 'null_blk.ko', '--module-disk', 'nullb0', '--module-fail', 'x=$(reboot)'],
		      '--module-fail: "x=$(reboot)" is not a module parameter'),
		     (['--module', 'null_blk.o', '--module-disk', 'nullb0', '--module-fail', 'x=1'],
		      '--module null_blk.o: a module file, NAME.ko'),
		     (['--module', 'a.ko', '--module-disk', 'sda', '--module-fail', 'x=1', '--image', 'x.img'],
		      '--module runs its own cases, on no image'),
		     (['--module-fail', 'x=1'], 'go with --module'),
		     (['--bzimage', 'x', '--as', 'vanila'], '--as vanila: one of vanilla, isolate, rusty, fixed'),
		     (['--as', 'fixed'], '--as goes with --bzimage'),
		     (['--bzimage', '/nonexistent'], '--bzimage /nonexistent: not a file'),
		     (['--module', '/nonexistent/x.ko', '--module-disk', 'xb0', '--module-fail', 'x=1'],
		      '--module /nonexistent/x.ko: no Kbuild or Makefile in /nonexistent'),
		     (['--module', 'drivers/no/such.ko', '--module-disk', 'sda', '--module-fail', 'x=1'],
		      '--module drivers/no/such.ko: not a module the vanilla kernel built'))

	def test_bad_flags(self):
		fake = FakeBuild()
		try:
			for args, message in self.BAD_FLAGS:
				with self.subTest(args=args):
					done = fake.run('pass', *args, timeout=20)
					self.assertEqual(done.returncode, 2, done.stdout)
					self.assertIn(message, done.stderr)
					self.assertNotIn('Traceback', done.stderr)
		finally:
			fake.close()

	def test_unknown_variant(self):
		fake = FakeBuild(variants=('vanila',))
		try:
			done = fake.run('pass', '--list')
			self.assertEqual(done.returncode, 2)
			self.assertIn('unknown variant "vanila"', done.stderr)
		finally:
			fake.close()

	@staticmethod
	def case(kernel: str = 'vanilla', steps: str = 'load=OK', head: str = '') -> str:
		"""A one-case file: its kernel line, an action per word of STEPS."""
		return f'case none\n{head}kernel {kernel}\n' + steps.replace(' ', '\n') + '\n'

	CASE_ERRORS = (
		('case none\nkernel vanilla fixed\nload=OK EIO\n', '1 cells, the kernel line (line 2) has 2 columns'),
		(case('vanila'), 'unknown variant "vanila"'),
		(case(steps='lod=OK'), 'unknown step "lod"'),
		(case(head='image nosuch\n'), 'unknown image "nosuch"'),
		('crash bad BUG: (\n' + case(head='', steps='crash\tbad load=OK').replace('\t', ' '),
		 'crash regex "BUG: ("'),
		(case(steps='crash\tnosuch load=OK').replace('\t', ' '), 'unknown crash "nosuch"'),
		(case(head='params fail_a=none\n'), 'unknown raceblk parameter "fail_a"'),
		(case(head='params machine=q35\n'), 'unknown machine "q35"'),
		(case(steps='load=*'), 'step "load=*": NAME[:ARGS][=EXPECTED]'),
		(case(steps='notify=events=COMING,GOING'), 'an expectation of several keys is KEY=VALUE'),
		(case('vanilla all'), 'none on vanilla again (first at line 2)'),
		(case('vanilla@6.1 vanilla'), 'none on vanilla again (first at line 2)'),
		(case('vanilla@2.4'), '"vanilla@2.4": unknown tree "2.4"'),
		(case('vanilla@6.2+'), '"vanilla@6.2+": unknown tree "6.2+"'),
		(case() + case('fixed'), 'case none again (first at line 1): a case is written once'),
		('load=OK\n', '"load=OK" outside a case'),
		('case none\nparams fail_at=none\n', 'case none: no kernel line'),
		('case none\nkernel vanilla fixed\nload=OK . -\n', 'column fixed: no action runs there'),
		(case(head='kernel fixed\n'), '"kernel" after the kernel line'),
		(case(head='params fail_at=late\nparams hold=late\n'), 'a second params line'),
		('case none\nkernel vanilla fixed\nprobe:2:0=size64=1,read=0 mmap=OK,junk .\n',
		 '"mmap=OK,junk" under "probe:2:0=size64=1,read=0": both KEY=VALUE,KEY=VALUE'),
		('crash oops x\ncrash oops y\n' + case(), 'crash oops named again'))

	def test_case_errors_name_file_and_line(self):
		with tempfile.TemporaryDirectory() as tmp:
			table = pathlib.Path(tmp) / 'cases'
			for text, message in self.CASE_ERRORS:
				with self.subTest(case=text):
					table.write_text(text)
					errors = plan.check(table, plan.known_names())
					self.assertTrue(any(message in e for e in errors), errors)
					for error in errors:
						self.assertRegex(error, rf'^{re.escape(str(table))}:\d+: ')

	def test_errors_name_the_line_they_are_on(self):
		with tempfile.TemporaryDirectory() as tmp:
			table = pathlib.Path(tmp) / 'cases'
			table.write_text(self.case('vanilla fixed', 'load=OK lod=OK unload=OK'))
			self.assertEqual(plan.check(table, plan.known_names()),
					 [f'{table}:4: unknown step "lod" (no act_lod in harness/guest/*.sh)'])
			table.write_text('crash bad BUG: (\n' + self.case(head='params fail_a=1\nimage nosuch\n'))
			self.assertEqual([e.split(': ', 1)[0] for e in plan.check(table, plan.known_names())],
					 [f'{table}:1', f'{table}:3', f'{table}:4'])

	def coverage_of(self, text: str) -> List[str]:
		with tempfile.TemporaryDirectory() as tmp:
			table = pathlib.Path(tmp) / 'cases'
			table.write_text(text)
			return [e for e in plan.check(table, plan.known_names(), coverage=True) if 'no fuzz: step' not in e]

	def test_case_silent_on_a_default_kernel_is_an_error(self):
		# A default kernel a case forgets would silently not run it.
		errors = self.coverage_of('# a comment\n' + self.case('vanilla@6.1 fixed,rusty'))
		self.assertEqual(len(errors), 1, errors)
		self.assertRegex(errors[0], r'cases:2: case none says nothing of isolate@6\.1, vanilla@6\.12, isolate@6\.12, '
				 r'vanilla@7\.3, isolate@7\.3: ')
		errors = self.coverage_of(self.case('vanilla@6.1,vanilla@6.12+ fixed,rusty,isolate'))
		self.assertEqual(errors, [])
		self.assertEqual(self.coverage_of(self.case('vanilla fixed,rusty') + 'skip isolate why not\n'), [])
		self.assertEqual(self.coverage_of(self.case('all')), [])
		errors = self.coverage_of(self.case('vanilla isolate rusty fixed') + 'skip fixed why not\n')
		self.assertEqual(len(errors), len(plan.trees()), errors)
		self.assertIn('fixed@6.1 has a column and a skip line', errors[0])

	def test_skip_names_known_kernels(self):
		errors = self.coverage_of(self.case('vanilla rusty fixed') + 'skip isolate@2.4 why\n')
		self.assertTrue(any('cases:4: skip "isolate@2.4": unknown tree "2.4"' in e for e in errors), errors)

	def test_skip_needs_a_reason(self):
		errors = self.coverage_of(self.case('vanilla rusty fixed') + 'skip isolate\n')
		self.assertTrue(any('cases:4: skip KERNELS REASON' in e for e in errors), errors)

	def test_cells_say_what_each_kernel_expects(self):
		text = ('crash oops BUG: x\ncase probe\nkernel vanilla fixed isolate\n'
			'crash . oops .\nload=OK\nheld . - .\nprobe:2:0=size64=9,read=0 mmap=OK mmap=SIGBUS -\n'
			'unload EBUSY . OK\n')
		with tempfile.TemporaryDirectory() as tmp:
			table = pathlib.Path(tmp) / 'cases'
			table.write_text(text)
			self.assertEqual(plan.check(table, plan.known_names()), [])
			chosen = {s.variant: s for s in plan.scenarios(table, ['vanilla', 'fixed', 'isolate'])}
		self.assertEqual(chosen['vanilla'].steps, ('load=OK', 'held', 'probe:2:0=size64=9,read=0,mmap=OK', 'unload=EBUSY'))
		self.assertEqual(chosen['fixed'].steps, ('load=OK', 'probe:2:0=size64=9,read=0,mmap=SIGBUS', 'unload'))
		self.assertEqual(chosen['isolate'].steps, ('load=OK', 'held', 'unload=OK'))
		self.assertEqual((chosen['vanilla'].console, chosen['fixed'].console), ('-', 'BUG: x'))

	def test_readme_example_is_a_case_of_the_repository(self):
		for doc in ('README.md', 'docs/cases.md'):
			with self.subTest(doc=doc):
				example = re.findall(r'^```\n(case [a-z_]+\n(?:.+\n)+?)```', (TOP / doc).read_text(), re.M)
				self.assertTrue(example, f'no case block in {doc}')
				self.assertIn(example[0], TABLE.read_text())

	def test_workflow_actions_are_pinned_by_commit(self):
		# A tag can be moved to other code; a commit cannot.
		for workflow in sorted((TOP / '.github/workflows').glob('*.yml')):
			for use in re.findall(r'^\s*(?:- )?uses: (\S+)', workflow.read_text(), re.M):
				with self.subTest(workflow=workflow.name, uses=use):
					self.assertTrue(use.startswith('./') or re.fullmatch(r'[\w./-]+@[0-9a-f]{40}', use), use)

	def test_the_guest_sources_every_library(self):
		# /init sources its libraries by name (so that shellcheck follows
		# them); a library it does not source would be unknown in the
		# guest though plan.py, mkinitramfs and the docs take it.
		guest = HARNESS / 'guest'
		sourced = set()
		wanted = ['init']
		while wanted:
			text = (guest / wanted.pop()).read_text()
			found = set(re.findall(r'^\s*\. /lib/raceblk/(\S+\.sh)$', text, re.M)) - sourced
			sourced |= found
			wanted += found
		self.assertEqual(sorted(p.name for p in guest.glob('*.sh')), sorted(sourced))

	def test_action_docs_are_current(self):
		self.assertEqual((TOP / 'docs/actions.md').read_text(), plan.action_docs(),
				 'docs/actions.md is not what the guest\'s comments say: run make docs')

	def test_driver_docs_are_current(self):
		self.assertEqual((TOP / 'docs/driver.md').read_text(), plan.driver_docs(),
				 'docs/driver.md\'s parameters are not what driver/main.c says: run make docs')

	def test_parameter_descriptions_read_through_their_macros(self):
		with tempfile.TemporaryDirectory() as tmp:
			driver = pathlib.Path(tmp) / 'driver'
			driver.mkdir()
			(driver / 'internal.h').write_text('#define POINTS(X)\t\\\n\tX(a)\t\\\n\tX(b)\n')
			(driver / 'main.c').write_text('#include <linux/module.h>\n#define NAME(p) " " #p\n'
						       'MODULE_PARM_DESC(hold,\n\t\t "Where;  it waits:" POINTS(NAME)\n\t\t ". Default: a");\n'
						       'MODULE_PARM_DESC(stage, "Read-only: \\"held at <point>\\"");\n')
			self.assertEqual(plan.driver_parameters(pathlib.Path(tmp)),
					 {'hold': 'Where;  it waits: a b. Default: a', 'stage': 'Read-only: "held at <point>"'})

	def test_parameters_read_as_modinfo_reads_them(self):
		# A stand-in .modinfo: NUL-terminated strings, one "parm=" each.
		with tempfile.TemporaryDirectory() as tmp:
			ko = pathlib.Path(tmp) / 'raceblk.ko'
			parms = ''.join(f'parm={n}:{d}\0parmtype={n}:charp\0' for n, d in plan.driver_parameters().items())
			ko.write_bytes(b'\x7fELF\0license=GPL\0' + parms.encode())
			self.assertEqual(plan.parameter_errors(ko), [])
			ko.write_bytes(ko.read_bytes().replace(b'Default: none', b'Default: alloc', 1))
			self.assertEqual(len(plan.parameter_errors(ko)), 1)

	def test_cases_are_valid(self):
		self.assertEqual(plan.check(TABLE, plan.known_names(), coverage=True), [])

	def test_all_rows_skip_row_only_variants(self):
		only = plan.row_only_variants()
		self.assertTrue(only, 'no +NAME in kernel-patches/variants')
		chosen = plan.scenarios(TABLE, plan.default_variants() + only)
		on_only = {s.id for s in chosen if s.variant in only}
		named = {row.id for row in plan.parse(TABLE)[0]
			 if any(v in only for v in plan.row_variants(row, plan.current_tree()))}
		self.assertEqual(on_only, named)
		self.assertNotIn('none', on_only)

	def test_tree_qualified_variant_runs_on_its_tree_only(self):
		text = 'case unload_io\nkernel vanilla@6.1,fixed vanilla@6.12\nload=OK\nunload=EBUSY - .\n'
		with tempfile.TemporaryDirectory() as tmp:
			table = pathlib.Path(tmp) / 'cases'
			table.write_text(text)
			for tree, steps in (('6.1', ('load=OK',)), ('6.12', ('load=OK', 'unload=EBUSY')), ('7.3', None)):
				with self.subTest(tree=tree):
					chosen = plan.scenarios(table, ['vanilla', 'fixed'], tree=tree)
					wanted = {'vanilla': steps, 'fixed': ('load=OK',)} if steps else {'fixed': ('load=OK',)}
					self.assertEqual({s.variant: s.steps for s in chosen}, wanted)

	def test_a_tree_and_the_later_ones(self):
		# vanilla@6.12+: 6.12 and 7.3, not 6.1; by version, not by text.
		text = 'case unload_io\nkernel vanilla@6.1,fixed vanilla@6.12+\nload=OK\nunload=EBUSY - .\n'
		with tempfile.TemporaryDirectory() as tmp:
			table = pathlib.Path(tmp) / 'cases'
			table.write_text(text)
			for tree, steps in (('6.1', ('load=OK',)), ('6.12', ('load=OK', 'unload=EBUSY')),
					    ('7.3', ('load=OK', 'unload=EBUSY'))):
				with self.subTest(tree=tree):
					chosen = plan.scenarios(table, ['vanilla'], tree=tree)
					self.assertEqual([s.steps for s in chosen], [steps])
		self.assertTrue(plan.on_tree('6.1+', '6.12'))
		self.assertFalse(plan.on_tree('6.12+', '6.2'))

	def test_nearest_tree_is_the_latest_at_or_below(self):
		for version, tree in (('6.1', '6.1'), ('6.11', '6.1'), ('6.12', '6.12'), ('7.2', '6.12'),
				      ('7.3', '7.3'), ('8.0', '7.3'), ('5.15', None), ('6.1.0-57-amd64', '6.1'),
				      ('6.12.118+deb12-amd64', '6.12'), ('7.3.4', '7.3'), ('6.10', '6.1'), ('6', None), ('', None)):
			with self.subTest(version=version):
				self.assertEqual(plan.nearest_tree(version), tree)

	def test_a_foreign_module_the_variant_lacks_is_refused(self):
		text = ('case proto\nkernel vanilla vanilla-modversions\nload_foreign:raceblk-proto  EINVAL  EINVAL\n'
			'skip    isolate,rusty,fixed  x\n')
		with tempfile.TemporaryDirectory() as tmp:
			table = pathlib.Path(tmp) / 'cases'
			table.write_text(text)
			errors = plan.check(table, plan.known_names())
		self.assertTrue(errors and all('vanilla@' in e and 'no foreign/raceblk-proto.ko' in e for e in errors), errors)
		self.assertEqual(len(errors), len(plan.trees()))

	def test_the_foreign_actions_are_those_that_load_a_foreign_module(self):
		text = (HARNESS / 'guest/compat.sh').read_text()
		found = re.findall(r'^act_(\w+)\(\) \{\n(?:\t.*\n)*?\t.*"\$FOREIGN/\$1\.ko"', text, re.M)
		self.assertEqual(sorted(found), sorted(plan.FOREIGN_ACTIONS))

	def test_a_gdb_variant_runs_what_its_base_runs(self):
		text = 'case unload_io\nkernel vanilla fixed\nload=OK\nunload=EBUSY - .\n'
		with tempfile.TemporaryDirectory() as tmp:
			table = pathlib.Path(tmp) / 'cases'
			table.write_text(text)
			chosen = plan.scenarios(table, ['fixed-gdb', 'vanilla-debug-gdb'], tree='6.1')
			self.assertEqual([(s.variant, s.steps) for s in chosen], [('fixed-gdb', ('load=OK', 'unload=EBUSY'))])

	def test_a_design_is_judged_by_fixed_unless_it_has_a_column(self):
		# rcuput (kernel-patches/designs): fixed's column in the first
		# case, its own in the second; -debug goes along.
		text = ('case one\nkernel vanilla fixed,isolate,rusty\nload=OK\nunload - .\n\n'
			'case two\nkernel vanilla,isolate,rusty fixed rcuput\nload=OK\nunload . EBUSY EAGAIN\n')
		self.assertIn('rcuput', plan.designs())
		with tempfile.TemporaryDirectory() as tmp:
			table = pathlib.Path(tmp) / 'cases'
			table.write_text(text)
			chosen = plan.scenarios(table, ['fixed', 'rcuput', 'rcuput-debug'], tree='6.1')
			self.assertEqual([(s.id, s.variant, s.steps) for s in chosen],
					 [('one', 'fixed', ('load=OK', 'unload')), ('one', 'rcuput', ('load=OK', 'unload')),
					  ('two', 'fixed', ('load=OK', 'unload=EBUSY')),
					  ('two', 'rcuput', ('load=OK', 'unload=EAGAIN'))])
			self.assertEqual(plan.judged_in_case('rcuput-debug', {'fixed', 'fixed-debug'}), 'fixed-debug')

	def test_a_design_shows_a_kept_module_its_own_way(self):
		# fixed adds nothing userspace sees; rcuput marks it "!".
		scenario = plan.Scenario(variant='rcuput', id='x', image='mbr-primary', params=(), console='-',
					 steps=('kept',), line=1)
		self.assertEqual(verdict.default_expected(scenario, 'kept', {}, None)['flags'], '!-')
		fixed = dataclasses.replace(scenario, variant='fixed')
		self.assertEqual(verdict.default_expected(fixed, 'kept', {}, None)['flags'], '-')
		self.assertNotIn('kept', verdict.default_expected(fixed, 'mod_kept', {}, None))

	def test_bench_cases_are_valid_and_judge_the_pairs(self):
		self.assertEqual(plan.check(plan.BENCH_TABLE, plan.known_names(), coverage=True, fuzz=False), [])
		chosen = plan.scenarios(plan.BENCH_TABLE, ['vanilla', 'fixed'], tree='6.1')
		self.assertEqual({s.machine for s in chosen if s.id == 'getput_icount'}, {'microvm-icount'})
		self.assertEqual(verdict.mismatch_of('getput', None, {'getput': 'ENOENT'},
						     plan.action_contracts()['getput'].expects), 'getput=ENOENT, expected OK')

	def test_an_icount_machine_runs_without_multithreaded_tcg(self):
		machine = guestvm.Machine('tcg', 'vanilla', pathlib.Path('bzImage'), 'microvm-icount')
		args = machine.args(pathlib.Path('initrd'), pathlib.Path('console'), 'sock')
		self.assertEqual(args[args.index('-accel') + 1], 'tcg')
		self.assertEqual(args[args.index('-icount') + 1], 'shift=0')
		plain = guestvm.Machine('tcg', 'vanilla', pathlib.Path('bzImage'))
		args = plain.args(pathlib.Path('initrd'), pathlib.Path('console'), 'sock')
		self.assertEqual(args[args.index('-accel') + 1], 'tcg,thread=multi')

	def test_a_tcg_guest_is_told_its_clock_but_under_icount(self):
		machine = guestvm.Machine('tcg', 'vanilla', pathlib.Path('bzImage'))
		machine.clock = clock.Told(2596000, 250, pit_ticks=True)
		args = machine.args(pathlib.Path('initrd'), pathlib.Path('console'), 'sock')
		self.assertEqual(args[args.index('-append') + 1],
				 f'{guestvm.CMDLINE} tsc_early_khz=2596000 lpj=10384000 nolapic_timer')
		# Under -icount the TSC counts instructions: nothing is told.
		icount = guestvm.Machine('tcg', 'vanilla', pathlib.Path('bzImage'), 'microvm-icount')
		icount.clock = machine.clock
		args = icount.args(pathlib.Path('initrd'), pathlib.Path('console'), 'sock')
		self.assertEqual(args[args.index('-append') + 1], guestvm.CMDLINE)
		# No HZ known: no lpj=; with ACPI the PIT does not tick.
		self.assertEqual(clock.Told(2596000, 0, pit_ticks=False).args(), ['tsc_early_khz=2596000'])

	def test_tcg_vcpus_copy_without_rep_movsb(self):
		tcg = guestvm.Machine('tcg', 'vanilla', pathlib.Path('bzImage')).args(pathlib.Path('i'), pathlib.Path('c'), 's')
		kvm = guestvm.Machine('kvm', 'vanilla', pathlib.Path('bzImage')).args(pathlib.Path('i'), pathlib.Path('c'), 's')
		self.assertEqual((tcg[tcg.index('-cpu') + 1], kvm[kvm.index('-cpu') + 1]),
				 ('max,la57=off,-erms,-fsrm', 'max,la57=off'))

	def test_the_clock_is_the_hosts_and_the_kernels(self):
		with tempfile.TemporaryDirectory() as tmp:
			obj = pathlib.Path(tmp)
			self.assertIsNone(clock.of('kvm', obj))
			(obj / '.config').write_text('CONFIG_HZ_1000=y\nCONFIG_HZ=1000\n')
			told = clock.of('tcg', obj)
			self.assertEqual((told.hz, told.pit_ticks), (1000, True))
			# The host's TSC: some hundreds of MHz at least, in whole MHz.
			self.assertGreater(told.tsc_khz, 100000)
			self.assertEqual(told.tsc_khz % 1000, 0)
			(obj / 'acpi').mkdir()
			(obj / 'acpi/.config').write_text('CONFIG_ACPI=y\nCONFIG_HZ=250\n')
			self.assertEqual((clock.of('tcg', obj / 'acpi').hz, clock.of('tcg', obj / 'acpi').pit_ticks), (250, False))
			# No configuration: the rate alone.
			self.assertEqual(clock.of('tcg', obj / 'none').args(), [f'tsc_early_khz={told.tsc_khz}'])

	def test_soak_rows_are_valid(self):
		soak = load_script('soak')
		for argv in ([], ['--faults', '--cycles', '300'], ['--ungated', '--runs', '20', '--variant', 'vanilla-debug'],
			     ['--ungated=reload', '--cycles', '1', '--runs', '200', '--vcpus', '1']):
			argv = argv if '--variant' in argv else argv + ['--variant', 'fixed-debug']
			with tempfile.TemporaryDirectory() as tmp, self.subTest(argv=argv):
				table = pathlib.Path(tmp) / 'cases'
				table.write_text(soak.table(soak.options(argv)))
				self.assertEqual(plan.check(table, plan.known_names()), [])

	def test_ungated_rate_counts_loads_from_the_console(self):
		# A run an oops ended at its third load counts three loads and a
		# hit; a clean run its cycles; a hung one no hit.
		soak = load_script('soak')
		consoles = {'hit': 3, 'clean': 5, 'hung': 2}
		(HARNESS.parent / 'build').mkdir(exist_ok=True)
		with tempfile.TemporaryDirectory(dir=HARNESS.parent / 'build') as tmp:
			records = []
			for name, cycles in consoles.items():
				logs = pathlib.Path(tmp) / name
				logs.mkdir()
				lines = [f'[    1.0{n}] soak: cycle {n}: raceblk_s{n % 4} fail_at=late hold=0 openers=2'
					 for n in range(cycles)]
				(logs / 'console.log').write_text('\n'.join(lines + ['[    2.00] soak: cycle 1: holder opens x']))
				status = results.Status.PASS if name == 'clean' else results.Status.FAIL
				records.append(results.Record(f'vanilla/soak_{name}/one-sector', 'vanilla', f'soak_{name}',
							      'one-sector', 1, [], [], '-', results.Verdict(status),
							      logs=str(logs.relative_to(HARNESS.parent)),
							      crash=['BUG: unable to handle page fault'] if name == 'hit' else []))
			line = soak.ungated_rate(records, 'openers')
		self.assertIn('1 of 10 loads ended in a kernel report (10.0%), in 3 run(s); '
			      '1 run(s) failed without one', line)

	def test_parameter_without_fuzz_fails_the_check(self):
		text = TABLE.read_text()
		text = re.sub(r'fuzz:io_delay_ms:\S+', 'module=absent', text)
		with tempfile.TemporaryDirectory() as tmp:
			table = pathlib.Path(tmp) / 'cases'
			table.write_text(text)
			errors = plan.check(table, plan.known_names(), coverage=True)
		self.assertTrue(errors)
		self.assertTrue(all('parameter "io_delay_ms" has no fuzz: step' in e for e in errors), errors)


@unittest.skipUnless(shutil.which('parted'), 'needs parted (apt-get install parted)')
class Build(Case):
	"""--build: each kernel made in turn, its scenarios run while the next
	builds; a failed build is an error of its scenarios, not a lost run."""

	FILTER = '*/none/mbr-primary */after_add_disk/mbr-primary'

	def setUp(self):
		self.fake = FakeBuild(variants=('vanilla', 'fixed'))
		self.addCleanup(self.fake.close)
		for variant in self.fake.variants:
			(self.fake.build / f'kernel/{variant}/obj/arch/x86/boot/bzImage').unlink()
			(self.fake.build / f'initramfs/{variant}.cpio').unlink()
		(self.fake.bin / 'make').symlink_to(FAKE_MAKE)

	def run_built(self, **env):
		return self.fake.run('pass', '--build', '--filter', self.FILTER,
				     env={'FAKE_MAKE_STATE': str(self.fake.root), **env})

	def made(self):
		return (self.fake.root / 'made').read_text().splitlines()

	def test_a_kernel_s_verdicts_come_while_the_next_builds(self):
		# fixed's make fails unless a guest of vanilla boots meanwhile.
		done = self.run_built(FAKE_MAKE_AFTER='vanilla')
		self.assertSummary(done, 4, 0, 0)
		self.assertEqual(self.made(), ['initramfs-base vanilla', 'initramfs-base fixed'])
		lines = done.stdout.splitlines()
		first_verdict = next(i for i, line in enumerate(lines) if line.startswith('PASS'))
		self.assertTrue(lines[first_verdict].split()[1].startswith('vanilla/'), lines)
		self.assertIn('as each kernel is made', done.stdout)

	def test_without_it_nothing_is_made(self):
		done = self.fake.run('pass', '--filter', self.FILTER, env={'FAKE_MAKE_STATE': str(self.fake.root)})
		self.assertEqual(done.returncode, 2, done.stdout)
		self.assertRegex(done.stderr, "no kernel or initramfs for '(vanilla|fixed)'")
		self.assertFalse((self.fake.root / 'made').exists())

	def test_a_failed_build_is_an_error_of_its_scenarios_and_after(self):
		done = self.run_built(FAKE_MAKE_FAIL='vanilla')
		self.assertSummary(done, 0, 4, 0)
		self.assertEqual(self.made(), ['initramfs-base vanilla'])
		report = {r.name: r for r in self.fake.results().scenarios}
		self.assertEqual(report['vanilla/none/mbr-primary'].verdict.reason,
				 'make initramfs-base VARIANTS=vanilla failed (status 2; its output is above)')
		self.assertEqual(report['fixed/none/mbr-primary'].verdict.reason,
				 'not built: make initramfs-base VARIANTS=vanilla failed')
		self.assertEqual(self.fake.guests_left(), [])

	def test_a_kernel_still_stale_after_its_make_is_not_booted(self):
		done = self.run_built(FAKE_MAKE_STALE='fixed')
		self.assertSummary(done, 2, 2, 0)
		report = {r.name: r for r in self.fake.results().scenarios}
		self.assertEqual(report['fixed/after_add_disk/mbr-primary'].verdict.reason,
				 'make initramfs-base VARIANTS=fixed still has work right after it ran (make -d -q says what)')

	def test_modules_built_for_another_kernel_are_made_after_every_kernel(self):
		# vanilla's struct_module loads the raceblk built for fixed: it
		# waits for every base, its guest boots cold with that archive.
		done = self.fake.run('pass', '--build', '--filter', f'{self.FILTER} vanilla/struct_module/*',
				     env={'FAKE_MAKE_STATE': str(self.fake.root)})
		self.assertSummary(done, 5, 0, 0)
		self.assertEqual(self.made(), ['initramfs-base vanilla', 'initramfs-base fixed', 'initramfs vanilla'])
		cmd = (self.fake.build / 'results/vanilla/struct_module/mbr-primary' / guestvm.RERUN_CMD).read_text()
		self.assertIn('initramfs/foreign/vanilla.cpio.gz', cmd)
		self.assertIn('booted it cold', cmd)

	def test_a_signal_stops_the_build_too(self):
		run = subprocess.Popen([str(HARNESS / 'run'), '--build', '--filter', self.FILTER], text=True,
				       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
				       env={**self.fake.env('pass'), 'FAKE_MAKE_STATE': str(self.fake.root),
					    'FAKE_MAKE_SLEEP': 'fixed'})
		self.addCleanup(lambda: run.poll() is None and (run.kill(), run.wait()))
		sleeping = self.fake.root / 'sleeping'
		deadline = time.monotonic() + 30
		while not sleeping.exists():
			self.assertLess(time.monotonic(), deadline, 'fixed\'s build never began')
			time.sleep(0.05)
		run.send_signal(signal.SIGTERM)
		stdout, _ = run.communicate(timeout=30)
		self.assertEqual(run.returncode, 143, stdout)
		self.assertIn('interrupted by SIGTERM', stdout)
		self.assertFalse(pathlib.Path('/proc', sleeping.read_text()).exists(), 'the make was left running')

	def test_the_steps_get_the_variables_of_make_s_command_line(self):
		# make test KERNEL_TARBALL=... : the Makefile takes that one only
		# from the command line; each step sets VARIANTS and JOBS itself.
		self.assertEqual(builds.command_line_variables(r's -- VARIANTS=vanilla VAR=a\ b KERNEL_TARBALL=/x/y'),
				 ['VAR=a b', 'KERNEL_TARBALL=/x/y'])
		self.assertEqual(builds.command_line_variables(' -j2 --jobserver-auth=3,4 -- JOBS=3 FOO=1'), ['FOO=1'])
		self.assertEqual(builds.command_line_variables('s'), [])

	def test_it_makes_only_this_project_s_kernels(self):
		done = self.fake.run('pass', '--build', '--debian', '6.1')
		self.assertEqual(done.returncode, 2, done.stdout)
		self.assertIn('--build makes this project\'s kernels', done.stderr)


class Order(Case):
	"""The scenarios the last runs found longest start first."""

	def test_the_longest_start_first(self):
		names = ['vanilla/none/mbr-primary', 'vanilla/after_add_disk/mbr-primary', 'vanilla/before_add_disk/mbr-primary']
		(self.fake.build / 'results').mkdir(parents=True)
		(self.fake.build / 'results/durations.json').write_text(json.dumps(
			{names[0]: 1.0, names[1]: 9.0, names[2]: 4.0}))
		done = self.fake.run('pass', '-j', '1', '--filter', ' '.join(names))
		self.assertSummary(done, 3, 0, 0)
		ran = [line.split()[1] for line in done.stdout.splitlines() if line.startswith('PASS')]
		self.assertEqual(ran, [names[1], names[2], names[0]])
		# This run's own seconds replace the old ones, the others stay.
		kept = json.loads((self.fake.build / 'results/durations.json').read_text())
		self.assertEqual(set(kept), set(names))
		self.assertLess(kept[names[1]], 9.0)

	def test_a_durations_file_that_is_not_one_is_ignored(self):
		(self.fake.build / 'results').mkdir(parents=True)
		(self.fake.build / 'results/durations.json').write_text('["vanilla/none/mbr-primary", "x"]')
		done = self.fake.run('pass', '--filter', 'vanilla/none/mbr-primary')
		self.assertSummary(done, 1, 0, 0)


class OwnImage(Case):
	"""--image: the golden table parted gives, whatever the path."""

	def make_image(self, path: pathlib.Path, *commands: str) -> None:
		path.parent.mkdir(parents=True, exist_ok=True)
		with open(path, 'wb') as f:
			f.truncate(4 << 20)
		subprocess.run(['parted', '-s', str(path), *commands], check=True, capture_output=True)

	def test_path_with_colon(self):
		image = self.fake.root / 'a:b' / 'disk.img'
		self.make_image(image, 'mklabel', 'msdos', 'mkpart', 'primary', '2048s', '4095s',
				'mkpart', 'extended', '4096s', '8191s', 'mkpart', 'logical', '4097s', '6143s')
		done = self.fake.run('pass', '--image', str(image), '--filter', '*/before_add_disk/*')
		self.assertSummary(done, 1, 0, 0)
		expected = (self.fake.build / 'byo/byo-disk/byo-disk.expected').read_text()
		rows = [line for line in expected.splitlines() if not line.startswith('#')]
		self.assertEqual(rows, ['1 2048 2048', '2 4096 2', '5 4097 2047'])

	def test_parted_cannot_read_it(self):
		image = self.fake.root / 'tiny.img'
		self.make_image(image, 'mklabel', 'gpt')
		with open(image, 'r+b') as f:
			f.truncate(1024)
		done = self.fake.run('pass', '--image', str(image), '--filter', '*/before_add_disk/*')
		self.assertEqual(done.returncode, 2, done.stdout)
		self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)
		self.assertRegex(done.stderr, r'--image .*tiny.img: parted .*; give its partition table with --expected')


@unittest.skipUnless(shutil.which('gcc') and shutil.which('strip'), 'needs gcc and strip')
class OwnModule(Case):
	"""--module: the user's driver and the modules it needs, built for each
	variant, go to the guest with what the own_* actions read."""

	def fake_module(self, path: str, depends: str) -> None:
		"""An object file with a module's .modinfo, which strip takes."""
		ko = self.fake.build / 'kernel/vanilla/obj' / path
		ko.parent.mkdir(parents=True, exist_ok=True)
		source = ('static const char modinfo[] __attribute__((section(".modinfo"), used)) = '
			  f'"license=GPL\\0depends={depends}\\0vermagic=x";\n')
		subprocess.run(['gcc', '-c', '-x', 'c', '-', '-o', str(ko)], input=source, text=True, check=True)

	def archive(self, variant: str, *cpio: str) -> str:
		"""What cpio CPIO... says of the variant's archive of the module."""
		data = gzip.decompress((self.fake.build / f'own/{variant}.cpio.gz').read_bytes())
		return subprocess.run(['cpio', '--quiet', *cpio], input=data, capture_output=True, check=True).stdout.decode()

	def test_in_tree_module_goes_with_what_it_needs(self):
		(self.fake.build / 'kernel/vanilla/obj/modules.order').parent.mkdir(parents=True, exist_ok=True)
		(self.fake.build / 'kernel/vanilla/obj/modules.order').write_text(
			'drivers/block/fake-blk.o\nfs/base/base_a.o\nfs/dep/dep_b.o\n')
		self.fake_module('drivers/block/fake-blk.ko', 'dep_b,base_a')
		self.fake_module('fs/dep/dep_b.ko', 'base_a')
		self.fake_module('fs/base/base_a.ko', '')
		done = self.fake.run('pass', '--module', 'drivers/block/fake-blk.ko', '--module-disk', 'fakeb0',
				     '--module-params', 'nr=2  irqmode=2', '--module-fail', 'fail=1,50,0,-1',
				     '--filter', '*/own_rmmod/*')
		self.assertSummary(done, 1, 0, 0)
		self.assertIn('harness: --module fake_blk: drivers/block/fake-blk.ko from the kernel tree', done.stdout)
		self.assertEqual(self.archive('vanilla', '-i', '--to-stdout', 'lib/raceblk/own.conf'), "OWN_NAME=fake_blk\nOWN_KO=/lib/modules/own/fake-blk.ko\n"
			      "OWN_DEPS='/lib/modules/own/base_a.ko /lib/modules/own/dep_b.ko'\n"
			      "OWN_DISK=fakeb0\nOWN_PARAMS='nr=2 irqmode=2'\nOWN_FAIL=fail=1,50,0,-1\n")
		self.assertEqual(self.archive('vanilla', '-t').split(),
				 ['lib', 'lib/modules', 'lib/modules/own', 'lib/modules/own/base_a.ko',
				  'lib/modules/own/dep_b.ko', 'lib/modules/own/fake-blk.ko', 'lib/raceblk',
				  'lib/raceblk/own.conf'])

	def test_a_module_it_needs_that_the_tree_did_not_build(self):
		self.fake_module('drivers/block/fake.ko', 'nowhere')
		done = self.fake.run('pass', '--module', 'drivers/block/fake.ko', '--module-disk', 'fakeb0',
				     '--module-fail', 'fail=1')
		self.assertEqual(done.returncode, 2, done.stdout)
		self.assertIn('fake.ko needs the module nowhere, which', done.stderr)

	def test_out_of_tree_source_that_does_not_build(self):
		source = self.fake.root / 'my drv'
		source.mkdir()
		(source / 'Kbuild').write_text('obj-m += mydrv.o\n')
		done = self.fake.run('pass', '--module', str(source / 'mydrv.ko'), '--module-disk', 'myd0',
				     '--module-fail', 'fail=1')
		self.assertEqual(done.returncode, 2, done.stdout)
		self.assertRegex(done.stderr, r'--module .*mydrv.ko: building .*my drv against .* failed \(log: ')
		self.assertTrue((self.fake.build / 'own/vanilla/Kbuild').is_file())


class BzImage(unittest.TestCase):
	"""--bzimage: a kernel of the user's is checked before any guest boots."""

	def object_tree(self, config: str) -> pathlib.Path:
		obj = pathlib.Path(tempfile.mkdtemp(prefix='selftest-bzimage-'))
		self.addCleanup(shutil.rmtree, obj, ignore_errors=True)
		for name, text in (('.config', config), ('Module.symvers', ''),
				   ('include/config/kernel.release', '7.3.4\n'), ('arch/x86/boot/bzImage', 'fake')):
			(obj / name).parent.mkdir(parents=True, exist_ok=True)
			(obj / name).write_text(text)
		return obj

	def test_a_missing_option_is_named_before_any_boot(self):
		wanted = bzimage.wanted_lines('7.3')
		config = '\n'.join(line for name, line in wanted.items() if name != 'CONFIG_MODULE_UNLOAD')
		obj = self.object_tree(config + '\n# CONFIG_MODULE_UNLOAD is not set\nCONFIG_KERNEL_GZIP=y\n')
		fake = FakeBuild()
		self.addCleanup(fake.close)
		done = fake.run('pass', '--bzimage', str(obj / 'arch/x86/boot/bzImage'))
		self.assertEqual(done.returncode, 2, done.stdout)
		self.assertRegex(done.stderr, r"lacks what the guest needs .*: CONFIG_MODULE_UNLOAD=y "
				 r"\(it has '# CONFIG_MODULE_UNLOAD is not set'\)$")
		self.assertEqual(fake.guests_left(), [])
		self.assertFalse((fake.build / 'results').exists())

	def test_a_kernel_with_what_is_needed_runs_its_trees_cases(self):
		# No restart and no environment: the run's session is the
		# kernel's (its tree, its build directory, no foreign modules).
		obj = self.object_tree('\n'.join(bzimage.wanted_lines('7.3').values()) + '\n')
		for name in bzimage.in_tree_modules():
			(obj / name).parent.mkdir(parents=True, exist_ok=True)
			(obj / name).write_text('fake')
		fake = FakeBuild()
		self.addCleanup(fake.close)
		done = fake.run('pass', '--bzimage', str(obj / 'arch/x86/boot/bzImage'), '--list',
				env={'KERNEL': '6.1', 'VARIANTS': 'fixed'})
		self.assertEqual(done.returncode, 0, done.stderr)
		lines = done.stdout.splitlines()
		self.assertIn('judged as vanilla of 7.3', lines[0])
		foreign = set(plan.FOREIGN_ACTIONS)
		cases = plan.scenarios(TABLE, ['vanilla'], tree='7.3')
		expected = [s.name for s in cases if not {plan.step_name(w) for w in s.steps} & foreign]
		self.assertEqual(lines[1:], expected)
		self.assertLess(len(expected), len(cases), 'no foreign case to leave out')

	def test_a_kernel_lacking_what_some_cases_need_runs_the_others(self):
		# Debian's way: PREEMPT_DYNAMIC (booted with preempt=full), no
		# failslab, no uevent helper; the SCSI midlayer and sd modules
		# (bzimage-modular: loaded from the kernel's modules).  The cases
		# using what it lacks are left out.
		wanted = bzimage.wanted_lines('7.3')
		lacking = ('CONFIG_PREEMPT', 'CONFIG_FAILSLAB', 'CONFIG_UEVENT_HELPER', 'CONFIG_BLK_DEV_SD', 'CONFIG_SCSI')
		config = [line for name, line in wanted.items() if name not in lacking]
		config += ['CONFIG_PREEMPT_DYNAMIC=y', 'CONFIG_BLK_DEV_SD=m', 'CONFIG_SCSI=m']
		obj = self.object_tree('\n'.join(config) + '\n')
		for name in bzimage.in_tree_modules():
			(obj / name).parent.mkdir(parents=True, exist_ok=True)
			(obj / name).write_text('fake')
		fake = FakeBuild()
		self.addCleanup(fake.close)
		# A module that stands for what base.config builds in must be there.
		(obj / 'drivers/scsi').mkdir(parents=True, exist_ok=True)
		(obj / 'drivers/scsi/sd_mod.ko').write_text('fake')
		done = fake.run('pass', '--bzimage', str(obj / 'arch/x86/boot/bzImage'), '--list')
		self.assertEqual(done.returncode, 2, done.stdout)
		self.assertIn('has no scsi_mod.ko: the cases load it', done.stderr)
		(obj / 'drivers/scsi/scsi_mod.ko').write_text('fake')
		done = fake.run('pass', '--bzimage', str(obj / 'arch/x86/boot/bzImage'), '--list')
		self.assertEqual(done.returncode, 0, done.stderr)
		lines = done.stdout.splitlines()
		self.assertIn('boots with preempt=full', lines[0])
		self.assertIn('lacks what some cases need (kernel-patches/config/case-needs): '
			      'CONFIG_FAILSLAB, CONFIG_UEVENT_HELPER:', lines[1])
		cases = plan.scenarios(TABLE, ['vanilla'], tree='7.3')
		needing = {s.name for s in cases if s.uses & {'fault_held', 'prober_start'}}
		self.assertTrue(needing)
		self.assertFalse(needing & set(lines), 'a case needing what the kernel lacks is listed')
		self.assertIn('vanilla/holder_close/mbr-primary', lines)
		self.assertIn('vanilla/scsi_holder_part/mbr-primary', lines)
		# raceblk itself needs the SCSI midlayer, built in or a module.
		(obj / '.config').write_text('\n'.join(c for c in config if c != 'CONFIG_SCSI=m') + '\n')
		done = fake.run('pass', '--bzimage', str(obj / 'arch/x86/boot/bzImage'), '--list')
		self.assertEqual(done.returncode, 2, done.stdout)
		self.assertIn("lacks what the guest needs (kernel-patches/config/base.config says why): CONFIG_SCSI=y (it has 'nothing')",
			      done.stderr)

	def test_a_skipped_case_names_what_it_needs(self):
		lacks = {'CONFIG_FAILSLAB': "CONFIG_FAILSLAB=y (it has 'nothing')"}
		scenario = next(s for s in plan.scenarios(TABLE, ['vanilla'], tree='6.1') if 'fault_held' in s.uses)
		self.assertEqual(plan.lacked(scenario, lacks), ["CONFIG_FAILSLAB=y (it has 'nothing')"])
		plain = next(s for s in plan.scenarios(TABLE, ['vanilla'], tree='6.1') if s.id == 'holder_close')
		self.assertEqual(plan.lacked(plain, lacks), [])

	def test_a_clang_kernel_wants_its_compiler_named(self):
		config = 'CONFIG_CC_IS_CLANG=y\nCONFIG_CC_VERSION_TEXT="clang version 19.1.7"\n'
		with unittest.mock.patch('shutil.which', return_value=None):
			with self.assertRaisesRegex(bzimage.Problem, r'built with "clang version 19.1.7": its modules are built '
						    r'with LLVM=1, which needs clang, lld, llvm \(apt-get install clang lld llvm\)$'):
				bzimage.need_clang(pathlib.Path('bzImage'), config)
		with unittest.mock.patch('shutil.which', return_value='/usr/bin/x'):
			bzimage.need_clang(pathlib.Path('bzImage'), config)

	def test_the_boot_args_are_on_the_command_line(self):
		machine = guestvm.Machine('tcg', 'vanilla', pathlib.Path('bzImage'))
		machine.boot_args = (bzimage.PREEMPT_FULL,)
		args = machine.args(pathlib.Path('initrd'), pathlib.Path('console'), 'sock')
		self.assertEqual(args[args.index('-append') + 1], f'{guestvm.CMDLINE} preempt=full')

	def test_what_is_asked(self):
		wanted = bzimage.wanted_lines('7.3')
		self.assertEqual(wanted['CONFIG_MODULES'], 'CONFIG_MODULES=y')
		self.assertEqual(wanted['CONFIG_BLK_DEV_NULL_BLK_FAULT_INJECTION'],
				 'CONFIG_BLK_DEV_NULL_BLK_FAULT_INJECTION=y')
		self.assertNotIn('CONFIG_KERNEL_LZ4', wanted)
		# "is not set" holds when the kernel has no such option.
		self.assertEqual(bzimage.missing('', {'CONFIG_X': '# CONFIG_X is not set'}), {})
		self.assertEqual(bzimage.missing('CONFIG_X=m\n', {'CONFIG_X': 'CONFIG_X=y'}),
				 {'CONFIG_X': "CONFIG_X=y (it has 'CONFIG_X=m')"})

	def test_scenarios_it_cannot_run_are_skip_records(self):
		fake = FakeBuild()
		self.addCleanup(fake.close)
		done = fake.run('pass', '--filter', '*/vermagic_release/* */bad_hold/*', env={'RACEBLK_FOREIGN': 'vanilla'})
		self.assertEqual(done.stdout.strip().splitlines()[-1], '1 passed, 0 failed, 1 skipped', done.stdout)
		skipped = [r for r in fake.results().scenarios if r.status == results.Status.SKIP]
		self.assertEqual([r.name for r in skipped], ['vanilla/vermagic_release/mbr-primary'])
		self.assertIn('modules built for another kernel', skipped[0].verdict.reason)
		self.assertIn('<skipped message="it loads modules built for another kernel',
			      (fake.build / 'results/junit.xml').read_text())

	def test_an_image_outside_its_object_tree(self):
		obj = self.object_tree('')
		(obj / 'vmlinux').write_text('fake')
		with self.assertRaisesRegex(bzimage.Problem, 'not the bzImage of its object tree'):
			bzimage.object_tree(obj / 'vmlinux')
		with self.assertRaisesRegex(bzimage.Problem, 'no kernel object tree around it'):
			bzimage.object_tree(pathlib.Path('/bin/true'))


@unittest.skipUnless(shutil.which('parted') and shutil.which('gcc'), 'needs parted and gcc')
class ImgPatch(unittest.TestCase):
	"""images/imgpatch, built with ASan and UBSan, against hostile patch
	files: each is refused with a message, leaves the image as it was,
	and makes no sanitizer report."""

	# Commands (one patch file each) and what the refusal says.
	HOSTILE = (
		(['le32 99999999999999999:0 1'], 'is outside the'),
		(['le32 -99999999999999999:0 1'], 'is outside the'),
		(['le32 -9223372036854775808:0 1'], 'is outside the'),
		(['le64 0:18446744073709551615 1'], 'is outside the'),
		(['zero 0:0 18446744073709551615'], 'is outside the'),
		(['zero 1:0 0x10000000000000000'], 'is not a number'),
		(['bytes -1:511 00 00'], 'is outside the'),
		(['bytes 0:0 00 zz'], "'zz' is not a hex byte"),
		(['le16 0:0 65536'], 'does not fit in le16'),
		(['le32 1:84 1', 'gpt-crc'], 'entry size 1 is not a multiple of 8'),
		(['le32 1:84 0', 'gpt-guids x'], 'entry size 0 is not a multiple of 8'),
		(['le32 1:84 0x80000000', 'gpt-guids x'], 'entry array is outside the image'),
		(['le32 1:80 0xffffffff', 'gpt-crc'], 'entry array is outside the image'),
		(['le64 1:72 0x0100000000000000', 'gpt-crc'], 'entry array is outside the image'),
		(['le64 1:72 0xffffffffffffffff', 'gpt-guids x'], 'entry array is outside the image'),
		(['le64 1:32 0xffffffffffffffff', 'gpt-crc'], 'no backup GPT header'),
		(['le64 1:32 0x0080000000000000', 'gpt-crc'], 'no backup GPT header'),
		(['le32 1:12 4096', 'gpt-crc'], "header's size 4096 is over a sector"),
		(['bogus 1 2'], "cannot parse 'bogus'"),
		([' '.join(['bytes 0:0'] + ['00'] * 700)], 'too many words'),
	)

	@classmethod
	def setUpClass(cls):
		cls.tmp = pathlib.Path(tempfile.mkdtemp(prefix='raceblk-imgpatch-'))
		cls.tool = cls.tmp / 'imgpatch'
		subprocess.run(['gcc', '-g', '-O1', '-fsanitize=address,undefined', '-fno-sanitize-recover=all',
				'-Wall', '-Wextra', '-Werror', '-o', str(cls.tool), str(TOP / 'images/imgpatch.c')],
			       check=True)
		cls.good = cls.tmp / 'good.img'
		with open(cls.good, 'wb') as f:
			f.truncate(2 << 20)
		subprocess.run(['parted', '-s', str(cls.good), 'mklabel', 'gpt', 'mkpart', 'p1', '2048s', '3071s'],
			       check=True, capture_output=True)

	@classmethod
	def tearDownClass(cls):
		shutil.rmtree(cls.tmp, ignore_errors=True)

	def patch(self, commands):
		image = self.tmp / 'hostile.img'
		shutil.copyfile(self.good, image)
		done = subprocess.run([str(self.tool), str(image)], input='\n'.join(commands) + '\n',
				      capture_output=True, text=True, check=False)
		return done, image.read_bytes() == self.good.read_bytes()

	def test_good_patch_applies(self):
		done, same = self.patch(['gpt-guids raceblk', 'le32 0:440 0x1234'])
		self.assertEqual((done.returncode, done.stderr), (0, ''))
		self.assertFalse(same)

	def test_hostile_patches_are_refused(self):
		for commands, message in self.HOSTILE:
			with self.subTest(commands=commands[0][:40]):
				done, same = self.patch(commands)
				self.assertEqual(done.returncode, 1, done.stderr)
				self.assertIn(message, done.stderr)
				self.assertRegex(done.stderr, r'^imgpatch: ')
				self.assertNotIn('Sanitizer', done.stderr)
				self.assertNotIn('runtime error', done.stderr)
				self.assertTrue(same, 'the image changed')


class GuestSteps(unittest.TestCase):
	"""Functions of harness/guest/proc.sh, run by the host's busybox sh
	with a stand-in dmesg: what a step concludes about a background task."""

	# An oops in task PID, as 6.1 logs it.
	OOPS = 'BUG: unable to handle page fault\\nOops: 0000 [#1]\\nCPU: 0 PID: {} Comm: sleep Tainted: G'

	def settle(self, task: str, log: str = '') -> list[str]:
		"""Start TASK in the background, settle it; its status and SETTLED.
		The stand-in dmesg (a function: busybox runs its own applet before
		a program on PATH) prints LOG, with $pid as the task's PID and
		\\n between lines."""
		return self.guest_sh(f'{task} & pid=$!\n'
				     f'dmesg() {{ printf \'%b\\n\' "{log}"; }}\n'
				     'SETTLE_SECONDS=2 settle "$pid" sleep && status=0 || status=$?\n'
				     'echo "$status:$SETTLED"; kill "$pid" 2>/dev/null\n').split()

	def guest_sh(self, script: str, *libs: str) -> str:
		"""SCRIPT's output, run by busybox sh after harness/guest/proc.sh
		and LIBS (it must write nothing to stderr)."""
		sources = ''.join(f'. {HARNESS}/guest/{lib}; ' for lib in ('proc.sh', *libs))
		done = subprocess.run(['busybox', 'sh', '-c', f'GUEST_LIB={HARNESS}/guest; {sources}\n{script}'],
				      capture_output=True, text=True, check=False, timeout=30)
		self.assertEqual(done.stderr, '')
		return done.stdout

	def load_held(self, answers: str, present: str = '', log: str = '') -> str:
		"""harness/guest/drivers.sh's load_held with 3 tries, its loads
		answering ANSWERS in turn ("LOAD/HELD ..."), the module listed in
		/proc/modules after the loads named in PRESENT ("2 3"), and a
		dmesg of LOG: how many loads it made, LOAD and HELD."""
		return self.guest_sh('n_load=0\n'
				     'catch_load() { n_load=$((n_load + 1)); set -- ' + answers + '; '
				     'shift $((n_load - 1)); LOAD=${1%%/*}; HELD=$(echo "${1#*/}" | tr _ " "); }\n'
				     f'module_gone() {{ case " {present} " in *" $n_load "*) return 1 ;; esac; }}\n'
				     f'dmesg() {{ printf \'%b\\n\' "{log}"; }}\n'
				     'holder_stop() { :; }\n'
				     'modctl() { echo OK; }\n'
				     'load_held 3 /x.ko x_blk xb0 a=1 > /dev/null; echo "$n_load $LOAD $HELD"\n',
				     'drivers.sh').strip()

	def test_part_opens_the_first_partition_of_the_table_the_host_named(self):
		# The host chooses the golden table (golden.py); the guest reads
		# the one it names.
		with tempfile.TemporaryDirectory() as tmp:
			(pathlib.Path(tmp) / 'x.expected').write_text('# none\n')
			(pathlib.Path(tmp) / 'x.fixed.expected').write_text('# one\n5 63 100\n6 200 10\n')
			script = (f'GOLDEN={tmp}; DISK=raceblk0; PART=p\n'
				  'GOLDEN_TABLE=x.fixed.expected device_of part; GOLDEN_TABLE=x.expected device_of part\n')
			self.assertEqual(self.guest_sh(script, 'disk.sh').split(), ['raceblk0p5', 'raceblk0'])

	def test_load_held_loads_until_a_failure_is_held(self):
		self.assertEqual(self.load_held('OK/await_OK ENOMEM/await_ENOENT ENOMEM/await_OK'),
				 '3 ENOMEM await OK')

	def test_load_held_gives_up_after_its_tries(self):
		self.assertEqual(self.load_held('ENOMEM/await_ENOENT ENOMEM/await_ENOENT ENOMEM/await_ENOENT '
						'ENOMEM/await_OK'), '3 ENOMEM await ENOENT')

	def test_load_held_stops_at_a_module_kept_unheld(self):
		self.assertEqual(self.load_held('ENOMEM/await_ENOENT ENOMEM/await_OK', present='1'),
				 '1 ENOMEM await ENOENT')

	def test_load_held_stops_at_a_disk_whose_opens_were_refused(self):
		refused = 'WARNING: x_blk: try_module_get() from blkdev_get_whole'
		self.assertEqual(self.load_held('ENOMEM/await_ENXIO ENOMEM/await_OK', log=refused),
				 '1 ENOMEM await ENXIO')
		# No disk this time (the failure came before it), or it
		# succeeded: again.
		self.assertEqual(self.load_held('OK/await_OK ENOMEM/await_ENOENT ENOMEM/await_ENXIO', log=refused),
				 '3 ENOMEM await ENXIO')

	def test_load_held_tries_again_when_the_teardown_came_first(self):
		self.assertEqual(self.load_held('ENOMEM/await_ENXIO ENOMEM/await_OK'), '2 ENOMEM await OK')

	def test_load_held_stops_when_the_loader_died(self):
		self.assertEqual(self.load_held('died/await_ENOENT ENOMEM/await_OK'), '1 died await ENOENT')

	def test_exited_task_is_reaped_with_its_status(self):
		self.assertEqual(self.settle('sh -c "sleep 0.1; exit 3"'), ['3:'])

	def test_task_an_oops_killed_is_not_waited_for(self):
		# It may hang in its exit for good: a plain wait would too.
		start = time.monotonic()
		self.assertEqual(self.settle('sleep 60', self.OOPS.format('$pid')), ['255:died'])
		self.assertLess(time.monotonic() - start, 10)

	def test_oops_with_another_cpus_line_in_between_killed_its_task(self):
		# 6.12: a dependant's failed load logged between the header and
		# the task's line.
		oops = self.OOPS.replace('\\nCPU:', '\\nraceblk_user: Unknown symbol raceblk_stage_point (err -2)\\nCPU:')
		self.assertEqual(self.settle('sleep 60', oops.format('$pid')), ['255:died'])

	def test_oops_of_another_task_of_that_name_is_not_its_own(self):
		self.assertEqual(self.settle('sleep 0.3', self.OOPS.format('1$pid')), ['0:'])

	def test_warning_does_not_kill_its_task(self):
		# A WARNING (or a KASAN report) names the task as an oops does.
		warning = 'WARNING: CPU: 0 PID: $pid at kernel/module/main.c:843\\nCPU: 0 PID: $pid Comm: sleep Tainted: G'
		self.assertEqual(self.settle('sleep 0.3', warning), ['0:'])

	def test_task_still_running_at_the_deadline_gets_its_state(self):
		self.assertEqual(self.settle('sleep 60'), ['255:silent', '(S)'])

	def soak_points(self, parm: str) -> subprocess.CompletedProcess:
		"""soak_points on a stand-in module: PARM among NUL-terminated
		strings, as a .ko's .modinfo section holds them."""
		with tempfile.TemporaryDirectory() as tmp:
			ko = pathlib.Path(tmp) / 'x.ko'
			ko.write_bytes(b'\x7fELF\0license=GPL\0' + parm.encode() + b'\0parm=hold:other\0')
			# soak.sh sources its report library from the guest's /lib/raceblk.
			script = (f'GUEST_LIB={HARNESS}/guest; . {HARNESS}/guest/proc.sh\n'
				  f'eval "$(sed \'s|/lib/raceblk/|{HARNESS}/guest/|\' {HARNESS}/guest/soak.sh)"\n'
				  f'soak_points {ko} && echo "$SOAK_BEFORE_DISK:$SOAK_POINTS"\n')
			return subprocess.run(['busybox', 'sh', '-c', script], capture_output=True, text=True,
					      check=False, timeout=30)

	def test_soak_counts_the_reports_the_host_would_not_pass(self):
		# The guest's count of a soak's reports agrees with the host's
		# scan: a known report (with its function in the trace) is no
		# report; the same title without it is.
		known_title, known_function = verdict.KNOWN_REPORTS[0]
		klog = ['[    1.000000] raceblk: init failed', '[    2.000000] BUG: KASAN: slab-use-after-free in x',
			'[    2.100000] ' + '=' * 20, f'[    3.000000] {known_title} / y', '[    3.100000] ',
			f'[    3.200000]  {known_function}+0x1/0x2', '[    3.300000] ' + '=' * 20,
			f'[    4.000000] {known_title} / z', '[    4.100000] ' + '=' * 20,
			'[    5.000000] kmemleak: 1 new suspected memory leaks', '[    6.000000] RETBleed: WARNING: x']
		with tempfile.TemporaryDirectory() as tmp:
			log = pathlib.Path(tmp) / 'klog'
			log.write_text('\n'.join(klog) + '\n')
			script = (f'GUEST_LIB={HARNESS}/guest; . {HARNESS}/guest/soakreport.sh\n'
				  f'soak_titles > {tmp}/titles\n'
				  f'soak_unknown_reports {tmp}/titles {tmp}/pending < {log}; echo --\n'
				  # A known report cut by a drain: decided with the rest.
				  f'head -n 5 {log} > {tmp}/first; tail -n +6 {log} > {tmp}/rest\n'
				  f'soak_unknown_reports {tmp}/titles {tmp}/pending < {tmp}/first; echo --\n'
				  f'cat {tmp}/pending {tmp}/rest | soak_unknown_reports {tmp}/titles {tmp}/pending; echo --\n'
				  # The final call decides: no closing line, no known report.
				  f'head -n 5 {log} | soak_unknown_reports {tmp}/titles {tmp}/pending final\n')
			done = subprocess.run(['busybox', 'sh', '-c', script], capture_output=True, text=True, timeout=30)
		self.assertEqual((done.returncode, done.stderr), (0, ''))
		whole, first, rest, final = [out.splitlines() for out in done.stdout.split('--\n')]
		self.assertEqual(whole, [klog[1], klog[7], klog[9]])
		self.assertEqual(first, [klog[1]])		# the known title waits
		self.assertEqual(rest, [klog[7], klog[9]])
		self.assertEqual(final, [klog[1], klog[3]])
		messages = [line.split('] ', 1)[1] for line in klog]
		self.assertEqual(list(verdict.known_report_titles(messages)), [3])

	def test_soak_reads_the_failure_points_from_modinfo(self):
		done = self.soak_points('parm=fail_at:' + plan.driver_parameters()['fail_at'])
		self.assertEqual((done.returncode, done.stdout), (0, '3:none alloc before_add_disk after_add_disk after_scan_io late\n'))
		done = self.soak_points('parm=fail_at:Point where init fails: none alloc. Default: none')
		self.assertEqual(done.returncode, 1)
		self.assertIn('no after_add_disk among the failure points', done.stdout)


def load_script(name: str) -> types.ModuleType:
	"""harness/NAME, a program whose file has no .py, as a module."""
	loader = importlib.machinery.SourceFileLoader(pathlib.Path(name).name.replace('-', '_'), str(HARNESS / name))
	module = types.ModuleType(loader.name)
	module.__file__ = loader.path
	loader.exec_module(module)
	return module


class RaceDemo(unittest.TestCase):
	"""The main job's table, from canned results (harness/selftest/race-demo/)."""

	CANNED = HARNESS / 'selftest/race-demo'

	def canned(self):
		"""make-canned as a module, and each tree's canned results."""
		module = load_script('selftest/race-demo/make-canned')
		reports = {path.stem: results.Report.load(path) for path in sorted(self.CANNED.glob('*.json'))}
		self.assertTrue(reports, f'no canned results in {self.CANNED}')
		return module, reports

	def test_tables_from_canned_results(self):
		make_canned, reports = self.canned()
		for tree, report in reports.items():
			for backend, text in make_canned.render_all(report, tree).items():
				golden = self.CANNED / f'{tree}.{backend}.out'
				self.assertEqual(text, golden.read_text(), f'{golden}: race-demo prints another table')
				self.assertIn('race-demo: proven', text)

	def test_a_scenario_that_failed_is_unexpected_not_proven(self):
		make_canned, reports = self.canned()
		tree, report = next(iter(reports.items()))
		held = next(r for r in report.scenarios if r.variant == 'fixed' and r.id == 'holder_close')
		held.verdict = results.Verdict(results.Status.FAIL, 'not ok 3 held')
		text = make_canned.render_all(report, tree)['blk']
		self.assertIn('? UNEXPECTED', text)
		self.assertIn('some scenarios did not behave as their cases expect', text)
		self.assertNotIn('race-demo: proven', text)

	def test_a_cell_reads_its_action_contract_on_its_series(self):
		# mod_kept's contract: flags=-, but flags=!- on rcuput.
		race_demo = load_script('race-demo')
		step = results.Step(1, 'kept', True, [], observed={'state': 'Unloading', 'flags': '!-', 'initstate': 'going',
								    'logged': 'yes'})
		for variant, cell in (('rcuput', 'kept while held'), ('fixed', 'freed while held')):
			record = results.Record(f'{variant}/holder_close/mbr-primary', variant, 'holder_close', 'mbr-primary',
						1, [], [], '', results.Verdict(results.Status.PASS), results=[step])
			self.assertEqual(race_demo.held(race_demo.Facts(record))[1], cell, variant)

	def test_debian_s_kernel_is_vanilla_beside_fixed(self):
		race_demo = load_script('race-demo')
		ran = {}

		def run(args, env, check):
			ran.update(args=[str(a) for a in args], variants=env['VARIANTS'])
			return subprocess.CompletedProcess(args, 2)
		with unittest.mock.patch.object(race_demo.subprocess, 'run', run):
			self.assertEqual(race_demo.main(['--debian', '6.1']), 2)
		self.assertEqual(ran['variants'], 'vanilla fixed')
		self.assertEqual(ran['args'][1:3], ['--debian', '6.1'])
		with contextlib.redirect_stderr(io.StringIO()) as said:
			self.assertEqual(race_demo.main(['--debian', '5.4']), 2)
		self.assertIn('race-demo: --debian TREE, one of 6.1, 6.12, 7.3, without --designs', said.getvalue())

	def test_every_row_names_a_case(self):
		race_demo = load_script('race-demo')
		cases, errors = plan.parse_cases(TABLE)
		self.assertEqual(errors, [])
		ids = {case.id for case in cases}
		run = {s.id for tree in plan.trees()
		       for s in plan.scenarios(TABLE, plan.default_variants(), tree=tree)
		       if s.image == plan.DEFAULT_IMAGE}
		for backend, rows in race_demo.ROWS.items():
			for label, id_, _ in rows:
				self.assertTrue(id_ in ids, f'{backend} row "{label}": no case {id_} in {TABLE}')
				self.assertTrue(id_ in run, f'{backend} row "{label}": case {id_} runs on no tree\'s '
					      f'default variants on image {plan.DEFAULT_IMAGE}')


@unittest.skipUnless(shutil.which('gcc'), 'needs gcc')
class ModctlDepends(unittest.TestCase):
	"""modctl reads what a module depends on as modprobe would (its loads
	run in guests only: never here)."""

	def test_depends_reads_the_modinfo_string(self):
		with tempfile.TemporaryDirectory() as tmp:
			modctl = pathlib.Path(tmp) / 'modctl'
			subprocess.run(['gcc', '-Wall', '-Werror', '-o', str(modctl), str(HARNESS / 'guest/modctl.c')], check=True)
			for modinfo, deps in ((b'depends=scsi_mod,crc-t10dif', 'scsi_mod\ncrc-t10dif\n'), (b'depends=', ''),
					      (b'license=GPL', ''), (b'xdepends=scsi_mod', '')):
				ko = pathlib.Path(tmp) / 'x.ko'
				ko.write_bytes(b'\x7fELF\0' + b'\0' * 70000 + modinfo + b'\0vermagic=6.1\0')
				done = subprocess.run([str(modctl), 'depends', str(ko)], capture_output=True, text=True, timeout=10)
				self.assertEqual((done.returncode, done.stdout), (0, deps), modinfo)
			done = subprocess.run([str(modctl), 'depends', f'{tmp}/absent.ko'], capture_output=True, text=True, timeout=10)
			self.assertEqual(done.returncode, 2)
			self.assertIn('absent.ko: No such file', done.stderr)


class KernelModules(unittest.TestCase):
	"""harness/kernelmods.py: the kernel's modules a guest loads, and for
	a kernel not built here what they depend on, found by depends=."""

	@staticmethod
	def module(path: pathlib.Path, depends: str) -> bytes:
		elf = b'\x7fELF\0' + b'\0' * 100 + f'depends={depends}'.encode() + b'\0vermagic=6.1\0'
		path.parent.mkdir(parents=True, exist_ok=True)
		path.write_bytes(lzma.compress(elf) if path.suffix == '.xz' else elf)
		return elf

	def test_a_distribution_s_modules_come_uncompressed_with_their_dependencies(self):
		with tempfile.TemporaryDirectory() as tmp:
			root, dest = pathlib.Path(tmp) / 'kernel', pathlib.Path(tmp) / 'dest'
			null_blk = self.module(root / 'drivers/block/null_blk/null_blk.ko.xz', 'configfs')
			self.module(root / 'fs/configfs/configfs.ko.xz', '')
			sd = self.module(root / 'drivers/scsi/sd_mod.ko.xz', 'scsi_mod,crc-t10dif')
			scsi = self.module(root / 'drivers/scsi/scsi_mod.ko.xz', 'scsi_common')
			self.module(root / 'drivers/scsi/scsi_common.ko.xz', '')
			self.module(root / 'lib/crc-t10dif.ko.xz', 'crct10dif_common')
			self.module(root / 'crypto/crct10dif_common.ko.xz', '')
			self.module(root / 'drivers/unused.ko.xz', '')
			dest.mkdir()
			# raceblk (built beside them) needs scsi_mod and one of its own.
			(dest / 'raceblk.ko').write_bytes(b'\0depends=scsi_mod,raceblk_user\0')
			paths = ['drivers/block/null_blk/null_blk.ko', 'drivers/scsi/sd_mod.ko', 'drivers/ata/ata_piix.ko',
				 'fs/configfs/configfs.ko']
			kernelmods.stage(dest, root, paths, dependencies=True)
			self.assertEqual(sorted(p.name for p in dest.glob('*.ko')),
					 ['configfs.ko', 'null_blk.ko', 'raceblk.ko', 'sd_mod.ko'])
			self.assertEqual((dest / 'null_blk.ko').read_bytes(), null_blk)
			self.assertEqual((dest / 'sd_mod.ko').read_bytes(), sd)
			self.assertEqual(sorted(p.name for p in (dest / 'kernel').iterdir()),
					 ['configfs.ko', 'crc-t10dif.ko', 'crct10dif_common.ko', 'scsi_common.ko', 'scsi_mod.ko'])
			self.assertEqual((dest / 'kernel/scsi_mod.ko').read_bytes(), scsi)
			# Our own kernels: the modules alone.
			shutil.rmtree(dest)
			dest.mkdir()
			kernelmods.stage(dest, root, paths, dependencies=False)
			self.assertFalse((dest / 'kernel').exists())
			self.assertEqual(len(list(dest.glob('*.ko'))), 3)


class Distro(unittest.TestCase):
	"""make KERNEL=debian-TREE: Debian's image judged as vanilla, checked as
	--bzimage checks a kernel, its modules from its package."""

	def test_debian_s_kernel_is_vanilla_beside_the_project_s_own(self):
		home = pathlib.Path(tempfile.mkdtemp(prefix='selftest-debian-'))
		self.addCleanup(shutil.rmtree, home, ignore_errors=True)
		wanted = bzimage.wanted_lines('6.1')
		config = [line for name, line in wanted.items() if name not in ('CONFIG_PREEMPT', 'CONFIG_SCSI', 'CONFIG_FAILSLAB')]
		headers = home / 'deb/usr/src/linux-headers-6.1.0-57-amd64'
		for name, text in (('.config', '\n'.join(config + ['CONFIG_PREEMPT_DYNAMIC=y', 'CONFIG_SCSI=m']) + '\n'),
				   ('Module.symvers', ''), ('include/config/kernel.release', '6.1.192\n')):
			(headers / name).parent.mkdir(parents=True, exist_ok=True)
			(headers / name).write_text(text)
		(home / 'vmlinuz').write_text('fake')
		(headers / 'arch/x86/boot').mkdir(parents=True)
		(headers / 'arch/x86/boot/bzImage').symlink_to(home / 'vmlinuz')
		(home / 'headers').symlink_to(headers)
		for name in bzimage.in_tree_modules() + ['drivers/scsi/scsi_mod.ko']:
			(home / 'modules/kernel' / (name + '.xz')).parent.mkdir(parents=True, exist_ok=True)
			(home / 'modules/kernel' / (name + '.xz')).write_text('fake')
		(home / 'release').write_text('6.1.0-57-amd64 6.1.192-3\n')
		with unittest.mock.patch.object(distro, 'home', return_value=home):
			with contextlib.redirect_stdout(io.StringIO()) as said:
				session = distro.prepare('6.1', ['vanilla', 'fixed'], build=False)
			self.assertIn("Debian's linux-image-6.1.0-57-amd64 (6.1.192-3): 6.1.192", said.getvalue())
			self.assertEqual(session.source, "Debian's linux-image-6.1.0-57-amd64 (6.1.192-3) as vanilla, "
					 'fixed of kernel-patches/6.1/')
			self.assertEqual((session.build, session.tree, session.foreign), (home, '6.1', ('vanilla',)))
			# Its command line and what it lacks are its own, not fixed's.
			self.assertEqual((session.boot_args_of('vanilla'), session.boot_args_of('fixed')),
					 ((bzimage.PREEMPT_FULL,), ()))
			self.assertIn('CONFIG_FAILSLAB', session.lacks_of('vanilla'))
			self.assertEqual(session.lacks_of('fixed'), {})
			with self.assertRaisesRegex(distro.Problem, 'VARIANTS=fixed lacks it'):
				distro.prepare('6.1', ['fixed'], build=False)
			(home / 'modules/kernel/drivers/block/loop.ko.xz').unlink()
			with self.assertRaisesRegex(distro.Problem, 'has no drivers/block/loop.ko: the cases load it'):
				distro.prepare('6.1', ['vanilla'], build=False)


	def test_a_kbuild_that_cannot_run_here_is_replaced_by_one_built_here(self):
		home = pathlib.Path(tempfile.mkdtemp(prefix='selftest-debian-'))
		self.addCleanup(shutil.rmtree, home, ignore_errors=True)
		(home / 'prep').mkdir()
		(home / 'prep/configuration.diff').write_text(
			'-CONFIG_CC_VERSION_TEXT="gcc-14"\n+CONFIG_CC_VERSION_TEXT="gcc"\n-CONFIG_CC_HAS_MIN_FUNCTION_ALIGNMENT=y\n'
			'-CONFIG_CC_OPT_INLINE_MEMSET="-finline-stringops=memset"\n-CONFIG_SCHED_CLASS_EXT=y\n'
			'+CONFIG_GCC_ASM_GOTO_OUTPUT_BROKEN=y\n')
		with unittest.mock.patch.object(distro, 'home', return_value=home):
			# What gcc 14 has and gcc 12 has not, off; what the kernel is, kept.
			self.assertEqual(distro.compiler_overrides('7.3'),
					 ['CONFIG_CC_HAS_MIN_FUNCTION_ALIGNMENT=', 'CONFIG_CC_OPT_INLINE_MEMSET='])
			# Debian's modpost wrapper runs modpost.real-lsb-64: ours is modpost.
			self.assertEqual(distro.built_here('7.3', home / 'headers/scripts/mod/modpost.real-lsb-64'),
					 home / 'prep/scripts/mod/modpost')
			self.assertEqual(distro.built_here('7.3', home / 'headers/tools/objtool/objtool'),
					 home / 'prep/tools/objtool/objtool')
		program = home / 'fixdep'
		program.write_text('#!/bin/sh\necho "fixdep: /lib/libc.so.6: version \\`GLIBC_2.38\' not found (required by fixdep)" >&2\n')
		program.chmod(0o755)
		self.assertEqual(distro.cannot_run(program), "needs GLIBC_2.38, which this host's libc has not")
		program.write_text('#!/bin/sh\necho "usage: fixdep" >&2\n')
		self.assertEqual(distro.cannot_run(program), '')


@unittest.skipUnless(shutil.which('gcc'), 'needs gcc')
class Churner(unittest.TestCase):
	"""harness/guest/blkhold's churner and uevent prober, on a regular file
	standing in for the disk."""

	@classmethod
	def setUpClass(cls):
		(TOP / 'build').mkdir(exist_ok=True)
		cls.tmp = pathlib.Path(tempfile.mkdtemp(prefix='selftest-blkhold-', dir=str(TOP / 'build')))
		cls.tool = cls.tmp / 'blkhold'
		subprocess.run(['gcc', '-O2', '-Wall', '-Wextra', '-Werror', f'-DPROBER_DIR="{cls.tmp}"',
				'-o', str(cls.tool), str(HARNESS / 'guest/blkhold.c')], check=True)
		cls.disk = cls.tmp / 'disk'
		cls.disk.write_bytes(bytes(8192))

	@classmethod
	def tearDownClass(cls):
		shutil.rmtree(cls.tmp, ignore_errors=True)

	def blkhold(self) -> subprocess.Popen:
		return subprocess.Popen([str(self.tool)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

	def churn(self, command: str) -> Tuple[int, float]:
		"""Run COMMAND; how often it opened, and how long it took."""
		start = time.monotonic()
		proc = self.blkhold()
		out, _ = proc.communicate(command + '\n', timeout=30)
		match = re.fullmatch(r'churn OK opened (\d+) failed (\d+)\n', out)
		self.assertTrue(match, out)
		return int(match.group(1)), time.monotonic() - start

	def test_each_open_is_held(self):
		quick, _ = self.churn(f'churn {self.disk} 500')
		held, _ = self.churn(f'churn {self.disk} 500 100')
		self.assertGreater(quick, 100)
		self.assertLess(held, 60)

	def stopped(self, command: str, stop) -> Tuple[str, float]:
		"""Run COMMAND (a churn of 20 s), call STOP after 0.4 s; its
		output, and how long it took to end after STOP."""
		proc = self.blkhold()
		proc.stdin.write(command + '\n')
		proc.stdin.close()
		time.sleep(0.4)
		stop()
		start = time.monotonic()
		self.assertEqual(proc.wait(timeout=5), 0)
		return proc.stdout.read(), time.monotonic() - start

	def test_stops_when_its_device_goes_away(self):
		gone = self.tmp / 'gone'
		shutil.copyfile(self.disk, gone)
		out, took = self.stopped(f'churn {gone} 20000 10', gone.unlink)
		self.assertLess(took, 2)
		self.assertRegex(out, r'^churn OK opened [1-9]')

	def test_stops_at_its_stop_file_after_its_hold(self):
		stop = self.tmp / 'stop'
		stop.unlink(missing_ok=True)
		out, took = self.stopped(f'churn {self.disk} 20000 300 {stop}', stop.touch)
		self.assertLess(took, 1.5)
		self.assertRegex(out, r'^churn OK opened [1-9]\d* failed 0\n$')

	def test_a_hold_on_a_dead_disk_sleeps(self):
		# A pass that reads nothing (a disk after del_gendisk()) waits
		# 1 ms before the next, rather than spin through the hold.
		empty = self.tmp / 'empty'
		empty.write_bytes(b'')
		proc = self.blkhold()
		proc.stdin.write(f'churn {empty} 500 500\n')
		proc.stdin.close()
		_, status, usage = os.wait4(proc.pid, 0)
		self.assertEqual(os.waitstatus_to_exitcode(status), 0)
		self.assertRegex(proc.stdout.read(), r'^churn OK opened [1-9]')
		# Spinning, it would use the whole 500 ms.
		self.assertLess(usage.ru_utime + usage.ru_stime, 0.25)

	def test_negative_hold_is_no_hold(self):
		opened, _ = self.churn(f'churn {self.disk} 200 -1')
		self.assertGreater(opened, 50)

	def test_waits_for_a_device_that_never_comes(self):
		opened, took = self.churn(f'churn {self.tmp}/never 300')
		self.assertEqual(opened, 0)
		self.assertGreater(took, 0.25)

	def await_(self, path: pathlib.Path, stop: pathlib.Path) -> str:
		proc = self.blkhold()
		out, _ = proc.communicate(f'await {path} 300 {stop}\n', timeout=30)
		return out.strip()

	def test_await_says_whether_it_saw_what_it_could_not_open(self):
		stop = self.tmp / 'stop'
		stop.touch()
		# A unix socket cannot be open()ed: ENXIO, as a disk whose
		# module refuses the open.
		sock = socket.socket(socket.AF_UNIX)
		self.addCleanup(sock.close)
		sock.bind(str(self.tmp / 'sock'))
		self.assertEqual(self.await_(self.tmp / 'sock', stop), 'await ENXIO')
		self.assertEqual(self.await_(self.tmp / 'never', stop), 'await ENOENT')
		self.assertEqual(self.await_(self.disk, stop), 'await OK')
		self.assertEqual(self.await_(self.tmp / 'sock', self.tmp / 'no-stop'), 'await ETIMEDOUT')

	def uevent(self, **event: str) -> str:
		"""Run it as the kernel runs its uevent helper; its log."""
		log = self.tmp / 'prober.log'
		log.unlink(missing_ok=True)
		env = {'HOME': '/', 'PATH': '/bin', **event}
		subprocess.run([str(self.tool), event.get('SUBSYSTEM', 'block')], env=env, check=True, timeout=10,
			       stdin=subprocess.DEVNULL)
		return log.read_text() if log.exists() else ''

	def test_uevent_probes_a_new_block_device(self):
		(self.tmp / 'prober.hold').write_text('0\n')
		# DEVNAME is under /dev/: climb out of it to the stand-in.
		name = f'..{self.disk}'
		self.assertRegex(self.uevent(ACTION='add', SUBSYSTEM='block', DEVNAME=name),
				 rf'^begin (\d+) {re.escape(name)}\nend \1 {re.escape(name)} open OK read OK\n$')
		self.assertRegex(self.uevent(ACTION='add', SUBSYSTEM='block', DEVNAME='no-such-disk'),
				 r'\nend \d+ no-such-disk open ENOENT read -\n$')

	def test_uevent_leaves_other_events_alone(self):
		(self.tmp / 'prober.hold').write_text('0\n')
		self.assertEqual(self.uevent(ACTION='remove', SUBSYSTEM='block', DEVNAME='x'), '')
		self.assertEqual(self.uevent(ACTION='add', SUBSYSTEM='module', DEVNAME='x'), '')

	def test_uevent_prober_off_without_its_hold_file(self):
		(self.tmp / 'prober.hold').unlink(missing_ok=True)
		self.assertEqual(self.uevent(ACTION='add', SUBSYSTEM='block', DEVNAME=f'..{self.disk}'), '')


class Units(unittest.TestCase):
	"""Pieces without a run."""

	def progress(self, *command: str, **env: str) -> subprocess.CompletedProcess:
		with tempfile.TemporaryDirectory() as tmp:
			return subprocess.run([str(HARNESS / 'progress'), 'kernel demo', f'{tmp}/build.log', *command],
					      env={**os.environ, **env}, capture_output=True, text=True, check=False)

	@unittest.skipUnless(shutil.which('dpkg-deb'), 'needs dpkg-deb')
	def test_fetch_source_uses_its_own_apt_lists_and_installs_nothing(self):
		# make deps KERNEL=7.3: every apt-get call reads a sources list of
		# its own (never the host's) and only downloads.
		with tempfile.TemporaryDirectory() as tmp:
			top, bin_ = pathlib.Path(tmp) / 'top', pathlib.Path(tmp) / 'bin'
			(top / 'kernel-patches/9.9').mkdir(parents=True)
			shutil.copy(TOP / 'kernel-patches/fetch-source', top / 'kernel-patches/')
			(top / 'kernel-patches/9.9/apt-source').write_text('# a comment\ndeb http://example.invalid/debian suite main\n')
			pkg = pathlib.Path(tmp) / 'pkg'
			(pkg / 'DEBIAN').mkdir(parents=True)
			(pkg / 'usr/src').mkdir(parents=True)
			(pkg / 'usr/src/linux-source-9.9.tar.xz').write_bytes(b'tarball')
			(pkg / 'DEBIAN/control').write_text('Package: linux-source-9.9\nVersion: 9.9.1-1\n'
							     'Architecture: all\nMaintainer: t <t@t>\nDescription: t\n')
			deb = pathlib.Path(tmp) / 'linux-source-9.9_9.9.1-1_all.deb'
			subprocess.run(['dpkg-deb', '--build', str(pkg), str(deb)], capture_output=True, check=True)
			bin_.mkdir()
			(bin_ / 'apt-get').write_text(f'#!/bin/sh\necho "$*" >> {tmp}/calls\n'
						       f'case " $* " in *" download "*) cp {deb} . ;; esac\n')
			(bin_ / 'apt-get').chmod(0o755)
			done = subprocess.run([str(top / 'kernel-patches/fetch-source'), '9.9'],
					      env={**os.environ, 'PATH': f'{bin_}:{os.environ["PATH"]}'},
					      capture_output=True, text=True, check=False)
			self.assertEqual(done.returncode, 0, done.stderr)
			self.assertEqual((top / 'build/9.9/deb/usr/src/linux-source-9.9.tar.xz').read_bytes(), b'tarball')
			# What make and series-check ask: the fetched tarball, its version.
			ask = {q: subprocess.run([str(top / 'kernel-patches/fetch-source'), f'--{q}', '9.9'],
						 capture_output=True, text=True, check=True).stdout
			       for q in ('tarball', 'version')}
			self.assertEqual((top / ask['tarball'].strip()).read_bytes(), b'tarball')
			self.assertEqual(ask['version'], '9.9.1-1\n')
			calls = (pathlib.Path(tmp) / 'calls').read_text().splitlines()
			self.assertEqual([c.split()[-1] for c in calls if 'update' in c.split()], ['update'])
			self.assertEqual(len(calls), 2, calls)
			for call in calls:
				with self.subTest(call=call):
					self.assertIn(f'Dir::Etc::sourcelist={top}/build/apt/9.9/sources.list', call)
					self.assertIn('Dir::Etc::sourceparts=-', call)
					self.assertIn(f'Dir::State::Lists={top}/build/apt/9.9/lists', call)
					self.assertNotIn('install', call.split())
			self.assertEqual((top / 'build/apt/9.9/sources.list').read_text(),
					 'deb http://example.invalid/debian suite main\n')

	def test_kernel_cache_points_a_restored_tree_at_its_new_place(self):
		# A build saved in one clone, restored in another: 7.3's generated
		# Makefile names its own directory too (KBUILD_OUTPUT), and a
		# stale one sent raceblk's objects into the kernel's obj dir.
		with tempfile.TemporaryDirectory() as tmp:
			old, new = pathlib.Path(tmp) / 'a/obj', pathlib.Path(tmp) / 'b/obj'
			inputs = pathlib.Path(tmp) / 'series'
			inputs.write_text('x\n')
			old.mkdir(parents=True)
			(old / '.config').write_text('CONFIG_X=y\n')
			(old / 'Makefile').write_text(f'export KBUILD_OUTPUT = {old}\ninclude {tmp}/a/src/Makefile\n')
			env = {**os.environ, 'KERNEL_CACHE': f'{tmp}/cache', 'KBUILD_BUILD_TIMESTAMP': 't',
			       'KBUILD_BUILD_USER': 'u', 'KBUILD_BUILD_HOST': 'h'}
			cache = str(TOP / 'kernel-patches/kernel-cache')
			subprocess.run([cache, 'save', 'v', str(old), f'{tmp}/a/src', str(inputs)], env=env, check=True)
			subprocess.run([cache, 'restore', 'v', str(new), f'{tmp}/b/src', str(inputs)], env=env, check=True)
			self.assertEqual((new / 'Makefile').read_text(),
					 f'export KBUILD_OUTPUT = {new}\ninclude {tmp}/b/src/Makefile\n')

	def test_apply_series_names_the_patch_that_does_not_apply(self):
		# KERNEL_SRC: a worktree of the user's HEAD, their checkout and
		# branches untouched; a patch that does not apply is one line.
		with tempfile.TemporaryDirectory() as tmp:
			repo, dest = pathlib.Path(tmp) / 'linux', pathlib.Path(tmp) / 'wt'
			git = ['git', '-c', 'user.name=t', '-c', 'user.email=t@t', '-C', str(repo)]
			subprocess.run(['git', 'init', '-q', '-b', 'main', str(repo)], check=True)
			(repo / 'f.c').write_text('int a;\nint b;\nint c;\n')
			subprocess.run(git + ['add', 'f.c'], check=True)
			subprocess.run(git + ['commit', '-q', '-m', 'base'], check=True)
			(repo / 'f.c').write_text('int a;\nint B;\nint c;\n')
			patch = pathlib.Path(tmp) / '0001-b.patch'
			subprocess.run(git + ['commit', '-q', '-am', 'b'], check=True)
			patch.write_text(subprocess.run(git + ['format-patch', '--stdout', '-1'], capture_output=True,
							text=True, check=True).stdout)
			subprocess.run(git + ['reset', '-q', '--hard', 'HEAD~1'], check=True)
			apply = [str(TOP / 'kernel-patches/apply-series'), str(repo), str(dest), str(patch)]
			done = subprocess.run(apply, capture_output=True, text=True, check=False)
			self.assertEqual(done.returncode, 0, done.stderr)
			self.assertIn('int B;', (dest / 'f.c').read_text())
			(repo / 'f.c').write_text('int a;\nint x;\nint c;\n')
			subprocess.run(git + ['commit', '-q', '-am', 'x'], check=True)
			done = subprocess.run(apply, capture_output=True, text=True, check=False)
			self.assertEqual(done.returncode, 1)
			self.assertRegex(done.stderr, r'^apply-series: .*0001-b.patch does not apply to .*linux '
					 r'\([0-9a-f]+\): conflict in f.c\n$')
			branches = subprocess.run(git + ['branch', '--format=%(refname:short)'], capture_output=True,
						  text=True, check=True).stdout.split()
			self.assertEqual(branches, ['main'])
			self.assertEqual(subprocess.run(git + ['status', '--porcelain'], capture_output=True,
							text=True, check=True).stdout, '')

	def test_kernel_build_is_one_line(self):
		done = self.progress('sh', '-c', 'for i in 1 2 3; do echo "  CC  file$i.o"; done')
		self.assertRegex(done.stdout, r'^kernel demo: building \(log: .*build.log\) \.\.\. 0m0\ds\n$')

	def test_failing_build_shows_its_log_tail(self):
		done = self.progress('sh', '-c', 'echo "  CC  a.o"; echo "a.c:1: error: oops"; exit 3')
		self.assertEqual(done.returncode, 3)
		self.assertIn('FAILED after', done.stdout)
		self.assertIn('a.c:1: error: oops', done.stdout)

	def test_v1_streams_the_build(self):
		done = self.progress('sh', '-c', 'echo "  CC  a.o"', V='1')
		self.assertEqual(done.stdout, '  CC  a.o\n')

	def test_xml_text_shows_control_characters(self):
		self.assertEqual(reports.xml_text('a\x01b\x1bc\td\n'), 'a^Ab^[c\td\n')
		self.assertEqual(reports.xml_text('path \udcff'), 'path \ufffd')

	def test_second_plan_line_is_an_error(self):
		ktap = verdict.parse_ktap('1..2\nnot ok 1 a\n1..0 # SKIP x\n', ['a', 'b'])
		self.assertIn('a second plan line "1..0 # SKIP x"', ktap.errors)

	def test_parse_ktap_checks_plan_against_steps(self):
		ktap = verdict.parse_ktap('KTAP version 1\n1..2\nok 1 a\n', ['a', 'b', 'c'])
		self.assertIn('plan "1..2" for 3 steps sent', ktap.errors)
		self.assertEqual([s.ok for s in ktap.steps], [True, None, None])

	def test_step_time_is_not_a_diagnostic(self):
		ktap = verdict.parse_ktap('1..1\n# saw it\n# time: 0.25s\nok 1 a\n', ['a'])
		self.assertEqual((ktap.steps[0].diagnostics, ktap.steps[0].seconds), (['saw it'], 0.25))


class HostJudges(unittest.TestCase):
	"""The guest reports what an action saw ("# obs KEY=VALUE"); the host
	compares it with what the case expects."""

	def judged(self, words, ktap_text, build=None):
		scenario = plan.Scenario(variant='vanilla', id='x', image='mbr-primary', params=(), console='-',
					 steps=tuple(words), line=1)
		ktap = verdict.parse_ktap(ktap_text, list(scenario.guest_steps))
		verdict.compare_observations(scenario, ktap, build)
		return ktap.steps

	def test_the_guest_gets_no_expectation(self):
		self.assertEqual(plan.split_step('holder_open:part=ENXIO'), ('holder_open:part', 'ENXIO'))
		self.assertEqual(plan.split_step('load=EIO'), ('load', 'EIO'))
		self.assertEqual(plan.split_step('release'), ('release', None))
		self.assertEqual(plan.split_step('nullb_held:2,100,0,1=load=ENOMEM,close=OK'),
				 ('nullb_held:2,100,0,1', 'load=ENOMEM,close=OK'))

	def test_an_action_that_saw_something_else_fails(self):
		steps = self.judged(['load=EIO', 'holder_close=died'],
				    '1..2\n# obs load=OK\nok 1 load\n# obs holder_close=died\nok 2 holder_close\n')
		self.assertEqual([s.ok for s in steps], [False, True])
		self.assertEqual(steps[0].mismatch, 'load=OK, expected EIO')
		self.assertEqual(steps[0].name, 'load=EIO')

	def test_an_unreported_observation_fails(self):
		steps = self.judged(['load=EIO'], '1..1\nok 1 load\n')
		self.assertEqual(steps[0].mismatch, 'load=(not reported), expected EIO')

	def test_a_fate_matches_by_its_first_word_and_alternatives_any(self):
		text = '1..1\n# obs load=ENOMEM\n# obs close=hung in bdev_release\nok 1 nullb_held:1\n'
		self.assertTrue(self.judged(['nullb_held:1=load=ENOMEM,close=hung|unheld'], text)[0].ok)
		self.assertFalse(self.judged(['nullb_held:1=load=ENOMEM,close=died'], text)[0].ok)
		self.assertFalse(self.judged(['nullb_held:1=load=ENOMEM,close=hun'], text)[0].ok)

	def test_an_action_name_says_what_it_expects(self):
		ok = '1..1\n# obs left=yes\n# obs said=yes\nok 1 reaped\n'
		late = '1..1\n# obs left=no\n# obs said=yes\nok 1 reaped\n'
		self.assertTrue(self.judged(['reaped'], ok)[0].ok)
		self.assertEqual(self.judged(['reaped'], late)[0].mismatch, 'left=no, expected yes')

	def test_the_image_says_what_a_read_gives(self):
		build = pathlib.Path(tempfile.mkdtemp(prefix='selftest-golden-'))
		self.addCleanup(shutil.rmtree, build)
		(build / 'images').mkdir()
		(build / 'images/mbr-primary.img.sums').write_text('0 aaa\n1 bbb raceblk mbr-primary p1 sector 2048\n')
		text = '1..1\n# obs holder_read=OK\n# obs nr=1\n# obs sum={}\nok 1 holder_read\n'
		self.assertTrue(self.judged(['holder_read=OK'], text.format('bbb'), build)[0].ok)
		self.assertEqual(self.judged(['holder_read=OK'], text.format('aaa'), build)[0].mismatch,
				 'sum=aaa, expected bbb')
		data = '1..1\n# obs sum.0=aaa\n# obs sum.1={}\n# obs stamp.1=raceblk mbr-primary p1 sector 2048\nok 1 data\n'
		self.assertEqual(self.judged(['data'], data.format('ccc'), build)[0].mismatch, 'sum.1=ccc, expected bbb')
		table = plan.TOP / 'images/mbr-primary.parted'
		self.assertTrue(table.is_file())
		parts = golden.Image('mbr-primary', build).partitions('vanilla')
		self.assertEqual(parts[0][0], 1)
		good = golden.table_text(parts)
		kib = ' '.join(f'{n}:{size // 2}' for n, _, size in parts)
		text = f'1..1\n# obs partitions={good}\n# obs proc_kib={{}}\nok 1 partitions\n'
		self.assertTrue(self.judged(['partitions'], text.format(kib), build)[0].ok)
		self.assertIn('proc=p1: /proc/partitions says 7 KiB',
			      self.judged(['partitions'], text.format('1:7'), build)[0].mismatch)

	def test_a_table_that_differs_says_what_differs(self):
		# A looping EBR chain: partition 5 again up to 255, said once.
		build = pathlib.Path(tempfile.mkdtemp(prefix='selftest-golden-'))
		self.addCleanup(shutil.rmtree, build)
		parts = golden.Image('mbr-primary', build).partitions('vanilla')
		good = golden.table_text(parts)
		last, start, size = parts[-1]
		looped = ' '.join(f'{n}:{start}+{size}' for n in range(last + 1, 256))
		first = parts[0]
		bent = golden.table_text([(first[0], first[1], first[2] + 2)] + parts[1:])
		text = f'1..1\n# obs partitions={bent} {looped}\nok 1 partitions\n'
		mismatch = self.judged(['partitions'], text, build)[0].mismatch
		self.assertEqual(mismatch, f'partitions: extra {last + 1}-255: {255 - last} more of {last}:{start}+{size}; '
				 f'changed {first[0]}:{first[1]}+{first[2]} is {first[1]}+{first[2] + 2}')
		self.assertLess(len(mismatch), 120)
		text = '1..1\n# obs partitions=none\nok 1 partitions\n'
		self.assertEqual(self.judged(['partitions'], text, build)[0].mismatch,
				 f'partitions: missing {good.replace(" ", ", ")}')
		# What the guest says instead of a table is shown as it is.
		text = '1..1\n# obs partitions=no raceblk0\nok 1 partitions\n'
		self.assertEqual(self.judged(['partitions'], text, build)[0].mismatch,
				 f'partitions=no raceblk0, expected {good}')

	def test_fuzz_expects_the_error_of_the_one_who_refused(self):
		text = '1..1\n# obs fuzz=EINVAL\n# obs driver_error=yes\n# obs kernel_invalid={}\nok 1 fuzz:fail_at:noval\n'
		self.assertTrue(self.judged(['fuzz:fail_at:noval=EINVAL'], text.format('yes'))[0].ok)
		self.assertEqual(self.judged(['fuzz:fail_at:noval=EINVAL'], text.format('no'))[0].mismatch,
				 'kernel_invalid=no, expected yes')
		loaded = '1..1\n# obs fuzz=OK\n# obs param=absent\n# obs warned=no\n# obs unload=OK\nok 1 fuzz:x:1\n'
		self.assertEqual(self.judged(['fuzz:x:1=OK'], loaded)[0].mismatch, 'warned=no, expected yes')

	def test_blksum_is_the_hash_its_comment_defines(self):
		# The images' sums are the host's build of it, the guest's
		# checks its static build: one program, and its definition.
		tool = pathlib.Path(tempfile.mkdtemp(prefix='selftest-blksum-')) / 'blksum'
		self.addCleanup(shutil.rmtree, tool.parent)
		hosttools.built(HARNESS / 'guest/blksum.c', tool)

		def defined(data: bytes) -> str:
			mix, mask, h = 0xff51afd7ed558ccd, (1 << 64) - 1, 0
			for (word,) in struct.iter_unpack('<Q', data + bytes(-len(data) % 8)):
				h = ((h ^ word) * mix) & mask
				h ^= h >> 32
			h = ((h ^ len(data)) * mix) & mask
			return f'{h ^ (h >> 29):016x}'

		sizes = (0, 1, 7, 8, 9, 4096, (1 << 20) - 1, (1 << 20) + 9)
		for size in sizes:
			data = os.urandom(size)
			(tool.parent / 'in').write_bytes(data)
			out = subprocess.run([tool, tool.parent / 'in', '-'], input=data, capture_output=True, check=True).stdout
			self.assertEqual(out.decode().split()[::2], [defined(data)] * 2, size)
		# A byte moved or zeros that end earlier: another sum.
		self.assertNotEqual(defined(b'ab\0\0'), defined(b'ba\0\0'))
		self.assertNotEqual(defined(bytes(8)), defined(bytes(16)))
		done = subprocess.run([tool, tool.parent / 'none'], capture_output=True, text=True, check=False)
		self.assertEqual((done.returncode, done.stderr), (1, f'blksum: {tool.parent}/none: No such file or directory\n'))

	def test_a_failed_read_fails_read_done(self):
		# It reports no md5 then: the read itself must have been OK.
		text = '1..1\n# obs read_done=dd: /dev/raceblk0: Input/output error\nok 1 read_done\n'
		self.assertFalse(self.judged(['read_done'], text)[0].ok)

	def test_numbers_compare(self):
		text = '1..1\n# obs churners=ok\n# obs opened={}\nok 1 churn_done\n'
		self.assertTrue(self.judged(['churn_done'], text.format('3'))[0].ok)
		self.assertEqual(self.judged(['churn_done'], text.format('0'))[0].mismatch, 'opened=0, expected >0')

	def test_a_step_the_guest_could_not_act_on_stays_not_ok(self):
		steps = self.judged(['holder_open:part=OK'], '1..1\n# obs holder_open=OK\nnot ok 1 holder_open:part\n')
		self.assertEqual((steps[0].ok, steps[0].mismatch), (False, ''))

	def test_the_verdict_names_the_mismatch(self):
		scenario = plan.Scenario(variant='vanilla', id='x', image='mbr-primary', params=(), console='-',
					 steps=('load=EIO',), line=1)
		ktap = verdict.parse_ktap('1..1\n# obs load=OK\nok 1 load\n', ['load'])
		verdict.compare_observations(scenario, ktap)
		console = f'[    1.000000] {verdict.scenario_marker(scenario)}\n'
		judged = verdict.judge(scenario, ktap, console, guestvm.End.EXITED, 60)
		self.assertEqual((judged.status, judged.reason), (results.Status.FAIL, 'not ok 1 load=EIO: observed load=OK, expected EIO'))


class Summary(unittest.TextTestResult):
	"""Counts what passed: a class whose setUpClass failed ran no test."""

	passed = 0

	def addSuccess(self, test):
		super().addSuccess(test)
		self.passed += 1


def main() -> int:
	runner = unittest.TextTestRunner(verbosity=2 if '-v' in sys.argv else 1, resultclass=Summary,
					 stream=sys.stdout)
	names = [a for a in sys.argv[1:] if not a.startswith('-')]
	loader = unittest.defaultTestLoader
	suite = loader.loadTestsFromNames(names, sys.modules[__name__]) if names else \
		loader.loadTestsFromModule(sys.modules[__name__])
	result = runner.run(suite)
	failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
	skipped = len(result.skipped)
	print(f'{result.passed} passed, {failed} failed, {skipped} skipped')
	return 1 if failed else 0


if __name__ == '__main__':
	sys.exit(main())
