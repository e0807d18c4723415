# SPDX-License-Identifier: GPL-2.0
"""The model of a result, as kunit.py's KunitStatus and KunitResult: a
step the guest reported, a verdict, one boot of a scenario (a Run), a
scenario's record over its runs, and the whole run of harness/run (a
Report).  results.json is a Report's serialisation: this module alone
names its keys, and everything that reads results.json (the reports,
race-demo, soak) loads it here.
"""

import dataclasses
import enum
import json
import pathlib
from typing import Dict, List, Optional

# A run's results, as build/TREE/results/ holds them.
RESULTS_FILE = 'results.json'

FORMAT_VERSION = 1


class Status(enum.StrEnum):
	PASS = 'PASS'
	FAIL = 'FAIL'
	SKIP = 'SKIP'
	ERROR = 'ERROR'		# a fault of the harness, not of the kernel

	@property
	def failed(self) -> bool:
		return self in (Status.FAIL, Status.ERROR)


@dataclasses.dataclass
class Step:
	"""One step of a scenario as the guest reported it."""
	number: int
	name: str
	ok: Optional[bool]		# None: the guest never reported it
	diagnostics: List[str]
	seconds: Optional[float] = None
	# What an action saw ("# obs KEY=VALUE"), what the case expected of
	# it, and how they differ ('' when they agree).
	observed: Dict[str, str] = dataclasses.field(default_factory=dict)
	expected: Optional[str] = None
	mismatch: str = ''


@dataclasses.dataclass
class Verdict:
	status: Status
	reason: str = ''
	proof: str = ''			# PASS: the expected console line
	directive: str = ''		# KTAP: TIMEOUT or ERROR for a guest cut off
	xfail: str = ''			# PASS by the crash the case expects: its summary
	# A run a signal cut short: it says nothing, and neither do the
	# runs of its scenario that finished.  Used while the runs are
	# gathered; results.json says it once, as the report's "interrupted".
	interrupted: bool = False

	@classmethod
	def cut_short(cls) -> 'Verdict':
		return cls(Status.SKIP, 'interrupted', interrupted=True)

	@property
	def is_xfail(self) -> bool:
		"""A pass by reproducing the crash the case expects."""
		return self.status == Status.PASS and bool(self.xfail)


@dataclasses.dataclass
class Run:
	"""One boot of a scenario (several with --repeat), and what its guest
	left: nothing for a run that never booted."""
	number: int
	verdict: Verdict
	seconds: float = 0.0
	logs: str = ''
	steps: List[Step] = dataclasses.field(default_factory=list)
	ktap: str = ''
	console: str = ''
	crash: List[str] = dataclasses.field(default_factory=list)
	known_reports: List[str] = dataclasses.field(default_factory=list)
	crash_summary: str = ''


@dataclasses.dataclass
class RunSummary:
	"""A run of a --repeat scenario, as its record lists it."""
	run: int
	verdict: Status
	reason: str
	seconds: float
	logs: str


@dataclasses.dataclass
class Record:
	"""A scenario's record over its runs: with --repeat, the first run
	that did not pass speaks for all."""
	name: str
	variant: str
	id: str
	image: str
	line: int
	params: List[str]
	steps: List[str]
	console_expected: str
	verdict: Verdict
	logs: str = ''
	results: List[Step] = dataclasses.field(default_factory=list)
	crash: List[str] = dataclasses.field(default_factory=list)
	crash_summary: str = ''
	ktap: str = ''
	seconds: float = 0.0
	console_excerpt: str = ''
	runs: Optional[List[RunSummary]] = None

	@property
	def status(self) -> Status:
		return self.verdict.status

	def to_json(self) -> Dict:
		data = {'name': self.name, 'variant': self.variant, 'id': self.id, 'image': self.image,
			'line': self.line, 'params': list(self.params), 'steps': list(self.steps),
			'console_expected': self.console_expected, 'verdict': str(self.verdict.status),
			'reason': self.verdict.reason, 'proof': self.verdict.proof,
			'directive': self.verdict.directive, 'xfail': self.verdict.xfail, 'logs': self.logs,
			'results': [dataclasses.asdict(step) for step in self.results], 'crash': list(self.crash),
			'crash_summary': self.crash_summary, 'ktap': self.ktap, 'seconds': self.seconds,
			'console_excerpt': self.console_excerpt}
		if self.runs is not None:
			data['runs'] = [{**dataclasses.asdict(r), 'verdict': str(r.verdict)} for r in self.runs]
		return data

	@classmethod
	def from_json(cls, data: Dict) -> 'Record':
		verdict = Verdict(Status(data['verdict']), data['reason'], data['proof'], data['directive'],
				  data['xfail'])
		runs = None
		if 'runs' in data:
			runs = [RunSummary(**{**r, 'verdict': Status(r['verdict'])}) for r in data['runs']]
		return cls(data['name'], data['variant'], data['id'], data['image'], data['line'], data['params'],
			   data['steps'], data['console_expected'], verdict, data['logs'],
			   [Step(**step) for step in data['results']], data['crash'], data['crash_summary'],
			   data['ktap'], data['seconds'], data['console_excerpt'], runs)


@dataclasses.dataclass
class Report:
	"""A run of harness/run: how it ran and a record per scenario."""
	started: float
	seconds: float
	tree: str
	variants: List[str]
	accel: str
	vcpus: int
	boots: str
	jobs: int
	timeout_s: int
	repeat: int
	filter: str
	interrupted: Optional[str]	# the signal's name
	planned: int
	scenarios: List[Record]
	version: int = FORMAT_VERSION

	def to_json(self) -> Dict:
		data = {'version': self.version}
		for field in dataclasses.fields(self):
			if field.name not in ('version', 'scenarios'):
				data[field.name] = getattr(self, field.name)
		data['scenarios'] = [record.to_json() for record in self.scenarios]
		return data

	@classmethod
	def from_json(cls, data: Dict) -> 'Report':
		if data.get('version') != FORMAT_VERSION:
			raise ValueError(f'results.json version {data.get("version")!r}, not {FORMAT_VERSION}')
		fields = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name != 'scenarios'}
		return cls(**fields, scenarios=[Record.from_json(r) for r in data['scenarios']])

	@classmethod
	def load(cls, path: pathlib.Path) -> 'Report':
		return cls.from_json(json.loads(path.read_text()))

	def dumps(self) -> str:
		return json.dumps(self.to_json(), indent=1) + '\n'


@dataclasses.dataclass
class Totals:
	tests: int = 0
	passed: int = 0
	failed: int = 0
	errors: int = 0
	skipped: int = 0


def totals(records: List[Record]) -> Totals:
	count = Totals(tests=len(records))
	for record in records:
		if record.status == Status.PASS:
			count.passed += 1
		elif record.status == Status.FAIL:
			count.failed += 1
		elif record.status == Status.ERROR:
			count.errors += 1
		else:
			count.skipped += 1
	return count
