# SPDX-License-Identifier: GPL-2.0
"""Reports generated from a run's records (harness/results.py): the KTAP
document (Documentation/dev-tools/ktap.rst), the JUnit XML CI tools read
(the Jenkins/Ant schema: harness/selftest/junit-10.xsd) and the shard
matrix.  No hand-written escaping: json and xml.etree do it.
"""

import pathlib
import re
import socket
import time
import xml.etree.ElementTree as ET
from typing import Dict, List

from results import Record, Report, Status, totals

# What XML 1.0 cannot carry: control characters but tab, newline and
# carriage return, surrogates (a path's undecodable bytes), U+FFFE/U+FFFF.
XML_INVALID_RE = re.compile('[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]')


def xml_text(text: str) -> str:
	"""TEXT with what XML 1.0 cannot carry shown as ^X (caret notation),
	or as U+FFFD."""
	return XML_INVALID_RE.sub(lambda m: f'^{chr(ord(m.group()) + 64)}' if m.group() < ' ' else '\ufffd', text)


def write_file(path: pathlib.Path, data: bytes) -> None:
	"""PATH whole or not at all: a reader never sees half a report."""
	tmp = path.with_name(path.name + '.tmp')
	tmp.write_bytes(data)
	tmp.replace(path)


# --- KTAP ----------------------------------------------------------------------

def _ktap_steps(record: Record, indent: str) -> List[str]:
	"""A scenario's steps as a nested KTAP document, complete even when the
	guest was cut off: the steps it never reported are "not ok # TIMEOUT"
	or "# ERROR", so the plan always adds up."""
	lines = [f'{indent}KTAP version 1', f'{indent}# Subtest: {record.name}',
		 f'{indent}1..{len(record.results)}']
	cut_off = record.verdict.directive or 'ERROR'
	# Numbered by position: the guest's own numbers are in results.json.
	for number, step in enumerate(record.results, 1):
		lines += [f'{indent}# {d}' for d in step.diagnostics]
		if step.ok is None:
			lines.append(f'{indent}not ok {number} {step.name} # {cut_off} not reported')
		else:
			lines.append(f'{indent}{"ok" if step.ok else "not ok"} {number} {step.name}')
	return lines


def _ktap_result(record: Record, number: int) -> str:
	name, verdict = record.name, record.verdict
	if verdict.is_xfail:
		# kselftest's ksft_test_result_xfail(): "ok N # XFAIL reason".
		return f'ok {number} {name} # XFAIL {verdict.xfail}'
	if verdict.status == Status.PASS:
		return f'ok {number} {name}'
	if verdict.status == Status.SKIP:
		return f'ok {number} {name} # SKIP {verdict.reason}'
	if verdict.directive:
		return f'not ok {number} {name} # {verdict.directive} {verdict.reason}'
	return f'not ok {number} {name}'


def ktap(records: List[Record]) -> str:
	"""The whole run: one result per scenario, its steps nested (2 spaces)."""
	lines = ['KTAP version 1', f'1..{len(records)}']
	for number, record in enumerate(records, 1):
		if record.status != Status.SKIP and record.results:
			lines += _ktap_steps(record, '  ')
		if record.verdict.proof:
			lines.append(f'# {record.verdict.proof}')
		if record.status.failed and not record.verdict.directive:
			lines.append(f'# {record.verdict.reason}')
		lines.append(_ktap_result(record, number))
	return '\n'.join(xml_text(line).replace('\n', ' ') for line in lines) + '\n'


# --- JUnit ----------------------------------------------------------------------

def failure_body(record: Record) -> str:
	"""What CI shows for a failure: the reason, the steps' diagnostics, the
	console from the first crash line (symbolised when it could be)."""
	parts = [record.verdict.reason]
	for step in record.results:
		mark = {True: 'ok', False: 'not ok', None: 'not reported'}[step.ok]
		parts.append(f'{mark} {step.number} {step.name}')
		parts += [f'    {d}' for d in step.diagnostics]
	if record.console_excerpt:
		parts += ['', 'console:', record.console_excerpt]
	parts += ['', f'logs: {record.logs}']
	return '\n'.join(parts)


def junit(run: Report) -> bytes:
	"""One testsuite, a testcase per scenario (classname: the variant)."""
	records = run.scenarios
	count = totals(records)
	seconds = f'{sum(r.seconds for r in records):.3f}'
	root = ET.Element('testsuites', name='raceblk', tests=str(count.tests),
			  failures=str(count.failed), errors=str(count.errors), time=seconds)
	suite = ET.SubElement(root, 'testsuite', name='raceblk', tests=str(count.tests),
			      failures=str(count.failed), errors=str(count.errors),
			      skipped=str(count.skipped), time=seconds,
			      timestamp=time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(run.started)),
			      hostname=socket.gethostname())
	xfails = [r for r in records if r.verdict.is_xfail]
	if xfails:
		# The schema has properties per suite, not per case: one per
		# case that passed by reproducing the crash it expects.
		properties = ET.SubElement(suite, 'properties')
		for record in xfails:
			ET.SubElement(properties, 'property', name=f'xfail:{record.name}',
				      value=xml_text(record.verdict.xfail))
	for record in records:
		case = ET.SubElement(suite, 'testcase', classname=record.variant,
				     name=f'{record.id}/{record.image}', time=f'{record.seconds:.3f}')
		if record.status.failed:
			element = 'failure' if record.status == Status.FAIL else 'error'
			ET.SubElement(case, element, message=xml_text(record.verdict.reason),
				      type=record.verdict.directive or 'FAIL').text = xml_text(failure_body(record))
		elif record.status == Status.SKIP:
			ET.SubElement(case, 'skipped', message=xml_text(record.verdict.reason))
		ET.SubElement(case, 'system-out').text = xml_text(record.ktap)
	ET.indent(root)
	return ET.tostring(root, encoding='UTF-8', xml_declaration=True) + b'\n'


# --- matrix ---------------------------------------------------------------------

def matrix(names: List[str], shards: int, variants: List[str], filters: List[str], tree: str) -> Dict:
	"""A GitHub Actions strategy.matrix: shard I of N runs every Nth
	scenario from the Ith, so N jobs run each exactly once (per tree)."""
	return {'include': [{'kernel': tree, 'shard': f'{i}/{shards}', 'variants': ' '.join(variants),
			     'filter': ' '.join(filters), 'scenarios': len(names[i - 1::shards])}
			    for i in range(1, shards + 1)]}
