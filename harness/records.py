# SPDX-License-Identifier: GPL-2.0
"""A scenario's runs made into its record (results.py), what a failure
prints, and the reports a run writes."""

import dataclasses
import subprocess
from typing import List, Sequence

import reports
import verdict
from plan import Scenario
from results import RESULTS_FILE, Record, Report, Run, RunSummary, Status, Step, Verdict
from session import Session

# The reports of a run, in build/TREE/results/: written from its records,
# the shard matrix of its scenarios, and race-demo's table.
REPORT_FILES = (RESULTS_FILE, 'results.ktap', 'junit.xml')
MATRIX_FILE = 'matrix.json'
RACE_DEMO_FILE = 'race-demo.md'


def run_of(k: int, judged: Verdict, seconds: float = 0.0, logs: str = '',
	   steps: Sequence[Step] = (), ktap: str = '', console: str = '') -> Run:
	"""Run K: its verdict, and what the guest left (nothing for a run that
	never booted)."""
	found = verdict.console_reports(console)
	return Run(k, judged, round(seconds, 3), logs, list(steps), ktap, console, found.crash_lines,
		   found.known, verdict.crash_summary(console))


FOREIGN_REASON = 'it loads modules built for another kernel, which only this project\'s own kernels get'


def not_run_record(scenario: Scenario, reason: str) -> Record:
	"""The record of a scenario --bzimage cannot run: a SKIP with why."""
	return aggregate(scenario, [run_of(1, Verdict(Status.SKIP, reason))], 1)


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


def symbolise(record: Record, session: Session) -> None:
	"""The crash excerpt through scripts/decode_stacktrace.sh with the
	variant's vmlinux and module, where that works."""
	if not record.crash or not record.console_excerpt:
		return
	variant = record.variant
	src = session.kernel_src(variant)
	vmlinux = session.kernel_obj(variant) / 'vmlinux'
	script = src / 'scripts/decode_stacktrace.sh'
	if not script.is_file() or not vmlinux.is_file():
		return
	try:
		done = subprocess.run([script, vmlinux, src, session.driver_of(variant)], input=record.console_excerpt,
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
	if record.logs:
		print(f'    logs: {record.logs}/')


def write_reports(run: Report, session: Session) -> None:
	"""REPORT_FILES, each whole or not at all."""
	session.results.mkdir(parents=True, exist_ok=True)
	texts = (run.dumps().encode(), reports.ktap(run.scenarios).encode(), reports.junit(run))
	for name, data in zip(REPORT_FILES, texts):
		reports.write_file(session.results / name, data)
