#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The cases (harness/cases), parsed once and validated.

A case is written once: its module parameters, its image, its actions in
order, and in a table under them what each kernel is expected to show,
a column per kernel (harness/cases says how).  plan.py compiles each
column to a Row (the case as one kernel runs it) and each Row, per
variant and image, to a Scenario: what one guest runs and what the host
expects of it.  A case that would never run, or would run and fail for a
reason that has nothing to do with the kernel (a misspelt variant, an
unknown action, a crash regex that does not compile), is an error here,
named FILE:LINE, before any guest boots; so is a case of the repository
that says nothing of a default kernel (no column, no skip line).

    harness/plan.py check [CASES [VARIANT...]]
                                    validate the cases, and that each
                                    VARIANT (the run's) is a known one;
                                    exit 1 and list the errors
    harness/plan.py actions         docs/actions.md: the guest's actions

Standard library only, as the kernel's own kunit.py.
"""

import dataclasses
import functools
import os
import pathlib
import re
import subprocess
import sys
from typing import Dict, Iterator, List, Optional, Set, Tuple

import golden

HARNESS = pathlib.Path(__file__).resolve().parent
TOP = HARNESS.parent
TABLE = HARNESS / 'cases'
# harness/run --module's cases: a driver of the user's own (harness/ownmod.py).
MODULE_TABLE = HARNESS / 'module-cases'
# make bench's hot path (harness/bench hotpath).
BENCH_TABLE = HARNESS / 'bench-cases'
# The actions that load modules built for another kernel
# (harness/guest/compat.sh, /lib/modules/foreign/).
FOREIGN_ACTIONS = ('vermagic', 'load_foreign', 'force_load')


def booted_variants(variants: List[str], scenarios: List['Scenario']) -> List[str]:
	"""Those of VARIANTS (in their order) that some of SCENARIOS boot."""
	booted = {s.variant for s in scenarios}
	return [v for v in variants if v in booted]


def loads_foreign_modules(scenario: 'Scenario') -> bool:
	"""SCENARIO loads modules built for another kernel: its guest gets
	the variant's archive of them too (a cold boot)."""
	return bool(scenario.uses & set(FOREIGN_ACTIONS))
# The words that begin a case's own lines; any other line of a case is an
# action's (no act_case, act_params... in harness/guest/).
KEYWORDS = ('case', 'params', 'image', 'kernel', 'crash', 'skip')
RUN, NOT_RUN = '.', '-'
# A case's id, a crash's name, an action's, a parameter's: a lower-case word.
NAME = r'[a-z][a-z0-9_]*'
NAME_RE = re.compile(rf'^{NAME}$')
# A step is an action of the guest's (act_NAME in harness/guest/*.sh),
# written NAME[:ARGS][=EXPECTED]: the guest gets NAME[:ARGS] and reports
# what it saw; the host compares that with EXPECTED.  What the guest gets
# is a KTAP description: no '#' (ktap.rst), no glob character.
ACTION_RE = re.compile(rf'^({NAME})(?::([^\s#*?\[=]+))?(?:=([^\s#*?\[]+))?$')
STEP_NAME_RE = re.compile(rf'^{NAME}')
# An action's definition in harness/guest/*.sh: act_NAME() {
ACT_RE = re.compile(r'^act_([a-z0-9_]+)\(\)', re.MULTILINE)
PARAM_RE = re.compile(rf'^({NAME})=[^\s*?\[]*$')


def scenario_name(variant: str, id_: str, image: str) -> str:
	"""How results, filters and the guest's console name a scenario
	(the guest's /init writes it too, for the host to find)."""
	return f'{variant}/{id_}/{image}'


@dataclasses.dataclass(frozen=True)
class Row:
	"""A case as the kernels of one column run it: its step words
	(NAME[:ARGS][=EXPECTED]) and the regex its crash lines match ('-': no
	crash line).  LINE is the case's kernel line; STEP_LINES each step's."""
	line: int
	id: str
	variants: Tuple[str, ...]
	image: str
	params: Tuple[str, ...]
	console: str
	steps: Tuple[str, ...]
	step_lines: Tuple[int, ...] = ()
	param_line: int = 0
	image_line: int = 0


@dataclasses.dataclass(frozen=True)
class Skip:
	"""skip KERNELS REASON: default kernels a case does not run on."""
	line: int
	variants: Tuple[str, ...]
	reason: str


@dataclasses.dataclass(frozen=True)
class Case:
	line: int
	id: str
	rows: Tuple[Row, ...]
	skips: Tuple[Skip, ...]


@dataclasses.dataclass(frozen=True)
class Known:
	"""What the rows may name."""
	variants: Set[str]
	trees: Set[str]
	images: Set[str]
	steps: Set[str]
	params: Set[str]
	foreign: Dict[str, List[str]] = dataclasses.field(default_factory=dict)


def trees(top: pathlib.Path = TOP) -> List[str]:
	"""The kernel trees: kernel-patches/TREE/ with a series.vanilla."""
	return sorted(p.parent.name for p in (top / 'kernel-patches').glob('*/series.vanilla'))


def default_tree(top: pathlib.Path = TOP) -> str:
	"""The tree when KERNEL is not set: kernel-patches/default-tree."""
	return next(line for line in (top / 'kernel-patches/default-tree').read_text().splitlines()
		    if line and not line.startswith('#'))


def current_tree() -> str:
	"""The run's tree: $KERNEL, as make passes it, or the default one."""
	return os.environ.get('KERNEL') or default_tree()


def source_name() -> str:
	"""What the run's kernels are built from, for headers: Debian's
	linux-source-TREE, or make's KERNEL_SRC=DIR (RACEBLK_SOURCE)."""
	return os.environ.get('RACEBLK_SOURCE') or f'linux-source-{current_tree()}'


def driver_define(name: str, top: pathlib.Path = TOP) -> int:
	"""A limit of the driver's, as driver/main.c #defines it (the
	harness checks its input against it before a guest would)."""
	text = (top / 'driver/main.c').read_text()
	return int(re.search(rf'^#define {name}\s+(\d+)', text, re.M).group(1))


DEFINE_RE = re.compile(r'^#define\s(?:[^\n]*\\\n)*[^\n]*\n', re.M)
NEWLINE_RE = re.compile(r'\n\s*')
PARM_DESC_RE = re.compile(r'^MODULE_PARM_DESC\((\w+),\s*((?:[^;]|"[^"]*")*?)\);', re.M | re.S)


@functools.lru_cache(maxsize=None)
def driver_parameters(top: pathlib.Path = TOP) -> Dict[str, str]:
	"""raceblk's parameters and their descriptions, as modinfo prints
	them: each MODULE_PARM_DESC of driver/main.c through the C
	preprocessor with the driver's own #defines (RACEBLK_BACKENDS and
	the lists main.c makes of it), no kernel headers needed.  The
	Makefile checks this reading against each raceblk.ko it builds
	(check-parameters)."""
	defines = ''.join(DEFINE_RE.findall((top / 'driver/internal.h').read_text() +
					    (top / 'driver/main.c').read_text()))
	descs = PARM_DESC_RE.findall((top / 'driver/main.c').read_text())
	# Each on one line (no C string holds a raw newline), for the reading below.
	text = defines + ''.join(f'\n@{name}@ {NEWLINE_RE.sub(" ", desc)}\n' for name, desc in descs)
	done = subprocess.run(['cpp', '-P', '-w'], input=text, capture_output=True, text=True, check=True)
	params = {}
	for name, expanded in re.findall(r'^@(\w+)@ (.*)$', done.stdout, re.M):
		params[name] = ''.join(re.findall(r'"((?:[^"\\]|\\.)*)"', expanded)).replace('\\"', '"')
	return params


def built_parameters(ko: pathlib.Path) -> Dict[str, str]:
	"""What a built module's .modinfo says of each parameter ("parm=NAME:DESC")."""
	return {m.group(1).decode(): m.group(2).decode()
		for m in re.finditer(rb'\0parm=(\w+):([^\0]*)', ko.read_bytes())}


PARAMETERS_BEGIN = '<!-- Generated by make docs from MODULE_PARM_DESC in driver/main.c. -->\n'
PARAMETERS_END = '<!-- End of the generated table. -->\n'


def driver_docs(top: pathlib.Path = TOP) -> str:
	"""docs/driver.md with its table of parameters made again from
	driver_parameters() (make docs)."""
	text = (top / 'docs/driver.md').read_text()
	head, rest = text.split(PARAMETERS_BEGIN, 1)
	escape = str.maketrans({'|': '\\|'})
	rows = [f'| `{name}` | {desc.translate(escape)} |\n' for name, desc in driver_parameters(top).items()]
	table = ''.join(['| parameter | what `modinfo raceblk.ko` says |\n', '|---|---|\n', *rows])
	return head + PARAMETERS_BEGIN + table + PARAMETERS_END + rest.split(PARAMETERS_END, 1)[1]


def parameter_errors(ko: pathlib.Path, top: pathlib.Path = TOP) -> List[str]:
	"""Where a built raceblk.ko's parameters differ from driver_parameters()."""
	built, read = built_parameters(ko), driver_parameters(top)
	return [f'{ko}: parameter {name}: modinfo says {built.get(name)!r}, driver_parameters() read {read.get(name)!r}'
		for name in sorted(set(built) | set(read)) if built.get(name) != read.get(name)]


def tree_series(tree: str, top: pathlib.Path = TOP) -> Set[str]:
	return {p.name[len('series.'):] for p in (top / 'kernel-patches' / tree).glob('series.*')}


def known_names(top: pathlib.Path = TOP) -> Known:
	series = set().union(*(tree_series(t, top) for t in trees(top)))
	images = set(all_images(top))
	steps = guest_actions(top)
	# The driver's parameters: the kernel ignores a misspelt one (it logs
	# "unknown parameter"), and the row would run with the defaults.
	params = set(driver_parameters(top))
	# SERIES-FRAGMENT: a series built with kernel-patches/config/FRAGMENT.config too.
	fragments = {p.stem for p in (top / 'kernel-patches/config').glob('*.config')} - {'base'}
	return Known(variants=series | {f'{v}-{f}' for v in series for f in fragments}, trees=set(trees(top)),
		     images=images, steps=steps, params=params, foreign=foreign_modules(top))


def guest_actions(top: pathlib.Path = TOP) -> Set[str]:
	"""The guest's actions: act_NAME in harness/guest/*.sh."""
	text = '\n'.join(p.read_text() for p in sorted((top / 'harness/guest').glob('*.sh')))
	return set(ACT_RE.findall(text))


def action_comments(top: pathlib.Path = TOP) -> Iterator[Tuple[pathlib.Path, str, List[str]]]:
	"""Each guest action, library by library: its library, its name and
	the comment above its act_NAME, a line each, without the "#"."""
	for path in sorted((top / 'harness/guest').glob('*.sh')):
		lines = path.read_text().splitlines()
		for i, line in enumerate(lines):
			match = ACT_RE.match(line)
			if match:
				start = i
				while start > 0 and lines[start - 1].startswith('#'):
					start -= 1
				yield path, match.group(1), [c.lstrip('#').strip() for c in lines[start:i]]


@dataclasses.dataclass(frozen=True)
class Contract:
	"""What every case expects of an action unless it says otherwise: its
	name says it ("stuck": kept for good).  BASE is the action whose
	comment says it ("kept" is "as mod_kept"); ON_SERIES, what differs on
	a series ("expects on rcuput: flags=!-")."""
	base: str
	expects: Dict[str, str]
	on_series: Dict[str, Dict[str, str]]

	def expects_on(self, series: str) -> Dict[str, str]:
		return {**self.expects, **self.on_series.get(series, {})}


# "expects: KEY=VALUE ...", "expects: as ACTION" or "expects on SERIES: KEY=VALUE ...".
EXPECTS_RE = re.compile(r'^expects(?: on ([a-z0-9_]+))?: (.*)$')


def pairs(text: str) -> Dict[str, str]:
	return dict(pair.split('=', 1) for pair in text.split())


def expects_lines(comment: List[str]) -> Dict[Optional[str], str]:
	"""An action comment's "expects" lines, by series (None: every one)."""
	return dict(m.groups() for m in map(EXPECTS_RE.match, comment) if m)


@functools.lru_cache(maxsize=None)
def action_contracts(top: pathlib.Path = TOP) -> Dict[str, Contract]:
	"""Each guest action's contract: the "expects" lines of the comment
	above its act_NAME."""
	said: Dict[str, Dict[Optional[str], str]] = {}
	for _, name, comment in action_comments(top):
		lines = expects_lines(comment)
		if lines:
			said[name] = lines
	contracts = {}
	for name, lines in said.items():
		text = lines.get(None, '')
		base = text[len('as '):] if text.startswith('as ') else name
		contracts[name] = Contract(base, pairs(said[base].get(None, '')),
					   {series: pairs(v) for series, v in said[base].items() if series})
	return contracts


def action_docs(top: pathlib.Path = TOP) -> str:
	"""docs/actions.md: every guest action and the comment above it, by
	library: what it does and reports (make docs writes it)."""
	out = ['<!-- Generated by make docs from the comments above act_NAME in harness/guest/*.sh. -->',
	       '# Guest actions', '',
	       'Each step of a case is one of these (`NAME[:ARGS][=EXPECTED]` in',
	       '`harness/cases`): the guest runs `act_NAME` and reports what it saw',
	       '(`# obs KEY=VALUE`); the host compares that with what the case expects.']
	found: Dict[pathlib.Path, List[str]] = {}
	for path, name, comment in action_comments(top):
		text = ' '.join(c for c in comment if not EXPECTS_RE.match(c))
		said = expects_lines(comment)
		if said:
			on = ''.join(f' (on {s}: `{v}`)' for s, v in said.items() if s)
			text += f' Every case expects `{said.get(None, "")}`{on} unless it says otherwise.'
		# "NAME:ARGS: what it does" -> `NAME:ARGS`: what it does
		usage, _, rest = text.partition(': ')
		if re.match(r'[a-z0-9_]*', usage).group() != name or not rest:
			usage, rest = name, text or '(no comment)'
		found.setdefault(path, []).append(f'- `{usage}`: {rest}')
	for path, lines in found.items():
		out += ['', f'## {path.name}', ''] + lines
	return '\n'.join(out) + '\n'


def step_name(word: str) -> str:
	"""'holder_open:part=OK' -> 'holder_open'."""
	return STEP_NAME_RE.match(word).group()


def split_step(word: str) -> Tuple[str, Optional[str]]:
	"""What the guest runs of a step word, and what the host expects of it:
	'holder_open:part=OK' -> ('holder_open:part', 'OK')."""
	match = ACTION_RE.match(word)
	if not match:
		return word, None
	sent = match.group(1) + (f':{match.group(2)}' if match.group(2) else '')
	return sent, match.group(3)


def split_variant(word: str) -> Tuple[str, Optional[str]]:
	"""'fixed@6.12' -> ('fixed', '6.12'); 'fixed' -> ('fixed', None)."""
	name, _, tree = word.partition('@')
	return name, tree or None


def tree_version(tree: str) -> Tuple[int, ...]:
	"""'6.12' -> (6, 12), to order trees."""
	return tuple(int(part) for part in tree.split('.'))


def on_tree(only: Optional[str], tree: str) -> bool:
	"""Whether a column's @ONLY takes in TREE: no @ (every tree), @6.12
	(that tree) or @6.12+ (6.12 and every later tree)."""
	if only is None:
		return True
	if only.endswith('+'):
		return tree_version(tree) >= tree_version(only[:-1])
	return only == tree


def tree_spec_error(only: Optional[str], known: Known) -> Optional[str]:
	if only is None or only.rstrip('+') in known.trees:
		return None
	return f'unknown tree "{only}" (trees: {", ".join(sorted(known.trees, key=tree_version))}, each maybe with +)'


def series_of(variant: str) -> str:
	"""'vanilla-debug' -> 'vanilla': the series a variant is built from
	(the Makefile's series_of)."""
	return variant.split('-')[0]


def fragments_of(variant: str) -> List[str]:
	"""'vanilla-debug' -> ['debug']: its config fragments besides base."""
	return variant.split('-')[1:]


TRAITS_RE = re.compile(r'^# harness: (.*)$', re.MULTILINE)


def harness_traits(text: str) -> Dict[str, str]:
	"""A file's "# harness: TRAIT[=VALUE] ..." line (a config fragment's,
	a machine's): each trait and its value ("yes" for a bare TRAIT)."""
	match = TRAITS_RE.search(text)
	words = match.group(1).split() if match else []
	return dict((w.split('=', 1) + ['yes'])[:2] for w in words)


@functools.lru_cache(maxsize=None)
def fragment_traits(fragment: str, top: pathlib.Path = TOP) -> Dict[str, str]:
	"""What the harness makes of a config fragment, as its file's
	harness_traits say: slow (a guest gets twice the timeout),
	memory=MIB, soak (make soak runs on it), transparent (it changes no
	behaviour: a case expects of NAME-gdb what it expects of NAME)."""
	path = top / 'kernel-patches/config' / f'{fragment}.config'
	return harness_traits(path.read_text()) if path.is_file() else {}


def variant_trait(variant: str, trait: str) -> Optional[str]:
	"""TRAIT of the first of VARIANT's fragments that has it."""
	return next((fragment_traits(f)[trait] for f in fragments_of(variant) if trait in fragment_traits(f)), None)


def judged_as(variant: str) -> str:
	"""'fixed-gdb' -> 'fixed': the variant whose columns say what VARIANT
	shows."""
	return '-'.join([series_of(variant)] + [f for f in fragments_of(variant) if 'transparent' not in fragment_traits(f)])


def row_variants(row: Row, tree: str) -> Tuple[str, ...]:
	"""The row's variants on TREE, tree names taken off."""
	return tuple(name for name, only in map(split_variant, row.variants) if on_tree(only, tree))


@dataclasses.dataclass
class _Draft:
	"""A case while its lines are read."""
	line: int
	id: str
	params: Tuple[str, ...] = ()
	param_line: int = 0
	image: str = 'any'
	image_line: int = 0
	kernel_line: int = 0
	columns: Tuple[str, ...] = ()
	table: List[Tuple[int, str, Tuple[str, ...]]] = dataclasses.field(default_factory=list)
	skips: List[Skip] = dataclasses.field(default_factory=list)


def table_crashes() -> Dict[str, str]:
	"""The crashes harness/cases names before its first case: every other
	cases file (harness/module-cases, make soak's) knows them too."""
	crashes = {}
	for text in TABLE.read_text().split('\n'):
		words = text.split(None, 2)
		if words[:1] == ['case']:
			break
		if words[:1] == ['crash'] and len(words) == 3:
			crashes[words[1]] = words[2].strip()
	return crashes


def parse_cases(path: pathlib.Path) -> Tuple[List[Case], List[Tuple[int, str]]]:
	"""The cases at PATH, and what is wrong with its lines (line number,
	error)."""
	# The file's own crash names, and harness/cases' it may name again.
	crashes: Dict[str, str] = {}
	inherited = {} if path.resolve() == TABLE.resolve() else table_crashes()
	cases: List[Case] = []
	errors: List[Tuple[int, str]] = []
	draft: Optional[_Draft] = None

	def error(nr: int, text: str) -> None:
		errors.append((nr, f'{path}:{nr}: {text}'))

	def finish() -> None:
		if draft is not None:
			case = compile_case(draft, {**inherited, **crashes}, error)
			if case is not None:
				cases.append(case)

	# split('\n'), not splitlines(): a form feed is no new line.
	for nr, text in enumerate(path.read_text().split('\n'), 1):
		words = tuple(text.split())
		if not words or words[0].startswith('#'):
			continue
		key, rest = words[0], words[1:]
		if key == 'crash' and draft is None:
			if len(rest) < 2 or not NAME_RE.match(rest[0]):
				error(nr, 'crash NAME REGEX: a name (lower case letters, digits, _) and its regex')
			elif rest[0] in crashes:
				error(nr, f'crash {rest[0]} named again')
			else:
				crashes[rest[0]] = text.split(None, 2)[2].strip()
				try:
					re.compile(crashes[rest[0]])
				except re.error as err:
					error(nr, f'crash regex "{crashes[rest[0]]}": {err}')
		elif key == 'case':
			finish()
			draft = _Draft(nr, rest[0] if len(rest) == 1 else '')
			if len(rest) != 1:
				error(nr, 'case ID: one id')
		elif draft is None:
			error(nr, f'"{key}" outside a case ("case ID" begins one)')
		elif key == 'skip':
			if len(rest) < 2:
				error(nr, 'skip KERNELS REASON: the kernels, and why the case does not run there')
			else:
				draft.skips.append(Skip(nr, tuple(rest[0].split(',')), ' '.join(rest[1:])))
		elif draft.kernel_line == 0:
			read_header(draft, nr, key, rest, lambda text, nr=nr: error(nr, text))
		elif key in ('params', 'kernel'):
			error(nr, f'"{key}" after the kernel line')
		elif rest and len(rest) != len(draft.columns):
			error(nr, f'{len(rest)} cells, the kernel line (line {draft.kernel_line}) has '
			      f'{len(draft.columns)} columns (no cells: the same on every column)')
		else:
			draft.table.append((nr, key, rest or (RUN,) * len(draft.columns)))
	finish()
	seen: Dict[str, Case] = {}
	for case in cases:
		first = seen.setdefault(case.id, case)
		if first is not case:
			error(case.line, f'case {case.id} again (first at line {first.line}): a case is written once')
	return cases, errors


def read_header(draft: _Draft, nr: int, key: str, rest: Tuple[str, ...], error) -> None:
	"""A line of DRAFT before its kernel line: params, image, kernel."""
	if (key == 'params' and draft.param_line) or (key == 'image' and draft.image_line):
		error(f'a second {key} line (the case\'s {key} go on one line)')
	elif key == 'params':
		draft.params, draft.param_line = rest, nr
	elif key == 'image':
		draft.image, draft.image_line = (rest[0] if len(rest) == 1 else ''), nr
		if len(rest) != 1:
			error('image NAME: one image (an image per column goes under the kernel line)')
	elif key == 'kernel':
		draft.kernel_line, draft.columns = nr, rest
		if not rest:
			error('kernel: no column')
	else:
		error(f'"{key}" before the kernel line (a case has params and image, then its kernel line)')


def compile_case(draft: _Draft, crashes: Dict[str, str], error) -> Optional[Case]:
	"""A Row per column of DRAFT's table."""
	if not draft.kernel_line:
		error(draft.line, f'case {draft.id}: no kernel line')
		return None
	rows = []
	for column, variants in enumerate(draft.columns):
		image, image_line, console, steps, lines = draft.image, draft.image_line, '-', [], []
		for nr, head, cells in draft.table:
			cell = cells[column]
			if head == 'image':
				image, image_line = (image if cell == RUN else cell), nr
			elif head == 'crash':
				console = crash_regex(cell, crashes, lambda text, nr=nr: error(nr, text))
			elif cell != NOT_RUN:
				steps.append(head if cell == RUN else with_expected(head, cell, lambda text, nr=nr: error(nr, text)))
				lines.append(nr)
		if not steps:
			error(draft.kernel_line, f'column {variants}: no action runs there')
		rows.append(Row(line=draft.kernel_line, id=draft.id, variants=tuple(variants.split(',')), image=image,
				params=draft.params, console=console, steps=tuple(steps), step_lines=tuple(lines),
				param_line=draft.param_line, image_line=image_line))
	return Case(line=draft.line, id=draft.id, rows=tuple(rows), skips=tuple(draft.skips))


def crash_regex(cell: str, crashes: Dict[str, str], error) -> str:
	"""'refused+oops' -> the regexes of both, either matching; '.' -> '-'."""
	if cell == RUN:
		return '-'
	unknown = [name for name in cell.split('+') if name not in crashes]
	if unknown:
		error(f'unknown crash "{unknown[0]}" (crash NAME REGEX lines, before the first case, name them)')
		return '-'
	return '|'.join(crashes[name] for name in cell.split('+'))


def with_expected(head: str, cell: str, error) -> str:
	"""The step word of an action line's head and a column's cell: the
	cell is what that column expects; KEY=VALUE,... under a head with
	KEY=VALUE,... adds those keys to the head's (or sets them)."""
	sent, expected = split_step(head)
	if expected and '=' in expected and '=' in cell:
		if not all('=' in pair for pair in f'{expected},{cell}'.split(',')):
			error(f'"{cell}" under "{head}": both KEY=VALUE,KEY=VALUE')
		pairs = dict(pair.split('=', 1) for pair in expected.split(',') if '=' in pair)
		pairs.update(pair.split('=', 1) for pair in cell.split(',') if '=' in pair)
		return f'{sent}=' + ','.join(f'{key}={value}' for key, value in pairs.items())
	return f'{sent}={cell}'


def parse(path: pathlib.Path) -> Tuple[List[Row], List[Tuple[int, str]]]:
	"""The rows of the cases at PATH (a row per column), and the errors."""
	cases, errors = parse_cases(path)
	return [row for case in cases for row in case.rows], errors


def word_errors(words: Tuple[str, ...], form: re.Pattern, names: Set[str], bad_form: str,
		unknown: str) -> Iterator[str]:
	"""Each of WORDS has FORM, whose first group is one of NAMES."""
	for word in words:
		match = form.match(word)
		if not match:
			yield bad_form.format(word)
		elif match.group(1) not in names:
			yield unknown.format(match.group(1))


def row_errors(row: Row, known: Known) -> Iterator[Tuple[int, str]]:
	"""What is wrong with a row, each at its line (a step's at its own)."""
	for text in column_errors(row, known):
		yield row.line, text
	for text in image_errors(row, known):
		yield row.image_line or row.line, text
	for text in param_errors(row, known):
		yield row.param_line or row.line, text
	lines = row.step_lines or (row.line,) * len(row.steps)
	for word, line in zip(row.steps, lines):
		for text in word_errors((word,), ACTION_RE, known.steps, 'step "{}": NAME[:ARGS][=EXPECTED]',
					'unknown step "{0}" (no act_{0} in harness/guest/*.sh)'):
			yield line, text
		expected = split_step(word)[1]
		if expected and '=' in expected and not all('=' in pair for pair in expected.split(',')):
			yield line, f'step "{word}": an expectation of several keys is KEY=VALUE,KEY=VALUE'
		for text in foreign_errors(row, word, known):
			yield line, text


def foreign_errors(row: Row, word: str, known: Known) -> Iterator[str]:
	"""A step that loads a module built for another kernel, on a variant
	whose guests do not get that module."""
	match = ACTION_RE.match(word)
	if not match or match.group(1) not in FOREIGN_ACTIONS or not match.group(2):
		return
	for tree in sorted(known.trees):
		for variant in row_variants(row, tree):
			for name in (default_variants() if variant == 'all' else [variant]):
				if match.group(2) not in known.foreign.get(name, []):
					yield (f'step "{word}": {name}@{tree}\'s guests get no foreign/{match.group(2)}.ko '
					       '(harness/foreign-modules)')


def column_errors(row: Row, known: Known) -> Iterator[str]:
	if not NAME_RE.match(row.id):
		yield f'id "{row.id}": lower case letters, digits and _'
	for variant, tree in map(split_variant, row.variants):
		if variant != 'all' and variant not in known.variants:
			yield f'unknown variant "{variant}" (kernel-patches/TREE/series.* name them)'
		if (error := tree_spec_error(tree, known)):
			yield f'"{variant}@{tree}": {error}'
	for tree in known.trees:
		if 'all' in row_variants(row, tree) and len(row_variants(row, tree)) > 1:
			yield f'"all" with other variants on {tree}'
	if row.console != '-':
		try:
			re.compile(row.console)
		except re.error as err:
			yield f'crash regex "{row.console}": {err}'


def image_errors(row: Row, known: Known) -> Iterator[str]:
	if row.image not in ('all', 'any') and row.image not in known.images:
		yield f'unknown image "{row.image}" (images/*.parted, images/*.patch, all, any)'


def param_errors(row: Row, known: Known) -> Iterator[str]:
	yield from word_errors(row.params, PARAM_RE, known.params | {'machine'}, 'param "{}": NAME=VALUE',
			       'unknown raceblk parameter "{}" (module_param in driver/main.c)')
	for param in row.params:
		if param.startswith('machine=') and param[len('machine='):] not in machines():
			yield f'unknown machine "{param[len("machine="):]}" (harness/machines: {", ".join(machines())})'


def coverage_errors(cases: List[Case], known: Known, top: pathlib.Path = TOP) -> Iterator[Tuple[int, str]]:
	"""Every case says what each default kernel does on every tree: a
	column names it, or a skip line says why it does not run there.  A
	skip that names a kernel a column runs on contradicts it."""
	defaults = default_variants(top)
	for case in cases:
		for skip in case.skips:
			for variant, tree in map(split_variant, skip.variants):
				if variant not in known.variants:
					yield skip.line, f'unknown variant "{variant}" in skip'
				if (error := tree_spec_error(tree, known)):
					yield skip.line, f'skip "{variant}@{tree}": {error}'
		missing = []
		for tree in sorted(known.trees):
			ran = {v for row in case.rows for v in row_variants(row, tree)}
			ran = set(known.variants) if 'all' in ran else ran
			skipped = {}
			for skip in case.skips:
				skipped.update((name, skip.line) for name, only in map(split_variant, skip.variants)
					       if on_tree(only, tree))
			missing += [f'{v}@{tree}' for v in defaults if v not in ran | set(skipped)]
			for variant in sorted(ran & set(skipped)):
				yield skipped[variant], f'case {case.id}: {variant}@{tree} has a column and a skip line'
		if missing:
			yield case.line, (f'case {case.id} says nothing of {", ".join(missing)}: add a column, '
					  'or a line "skip KERNELS REASON"')


def duplicate_errors(rows: List[Row], known: Known) -> Iterator[Tuple[Row, str]]:
	"""A variant of a tree that two rows with the same id both name."""
	seen, said = {}, set()
	for tree in sorted(known.trees):
		for row in rows:
			names = row_variants(row, tree)
			for variant in sorted(known.variants if 'all' in names else set(names)):
				first = seen.setdefault((row.id, variant, tree), row)
				if first is not row and (row.line, variant) not in said:
					said.add((row.line, variant))
					yield row, f'{row.id} on {variant} again (first at line {first.line})'


def check(path: pathlib.Path, known: Known, coverage: bool = False, fuzz: bool = True) -> List[str]:
	"""The cases' errors; with COVERAGE (make check asks it of the
	repository's cases), also a default kernel a case says nothing of,
	and with FUZZ too a raceblk parameter that no fuzz: step covers."""
	cases, errors = parse_cases(path)
	rows = [row for case in cases for row in case.rows]
	errors = set(errors)
	for row in rows:
		errors |= {(line, f'{path}:{line}: {e}') for line, e in row_errors(row, known)}
	errors |= {(row.line, f'{path}:{row.line}: {e}') for row, e in duplicate_errors(rows, known)}
	if coverage:
		errors |= {(line, f'{path}:{line}: {e}') for line, e in coverage_errors(cases, known)}
		errors |= {(0, f'{path}: {e}') for e in (fuzz_errors(rows, known) if fuzz else ())}
		errors |= {(0, f'harness/guest: act_{word} has the name of a case\'s own line: rename it')
			   for word in KEYWORDS if word in known.steps}
	return [text for _, text in sorted(errors)]


def fuzz_errors(rows: List[Row], known: Known) -> Iterator[str]:
	"""Every raceblk parameter has fuzz: steps, on every default kernel: a
	parameter added to the driver without them fails the check."""
	for tree in sorted(known.trees):
		for variant in default_variants():
			fuzzed = {step[len('fuzz:'):].split(':')[0] for row in rows
				  if {'all', variant} & set(row_variants(row, tree))
				  for step in row.steps if step.startswith('fuzz:')}
			for param in sorted(known.params - fuzzed):
				yield f'raceblk parameter "{param}" has no fuzz: step on {variant}@{tree}'


def variant_errors(variants: List[str], known: Known) -> List[str]:
	return [f'unknown variant "{v}" (kernel-patches/TREE/series.* name them)'
		for v in variants if v not in known.variants]


def tree_errors(top: pathlib.Path = TOP) -> List[str]:
	"""Every tree has the variants of kernel-patches/variants: each row
	runs on every tree.  A tree may have a series of its own (6.12's scan
	fixes a bug 6.1 does not have)."""
	wanted = set(default_variants(top) + row_only_variants(top)) | set(designs(top))
	return [f'kernel-patches/{tree}/ has no series.{name} (kernel-patches/variants or designs names it)'
		for tree in trees(top)
		for name in sorted({series_of(v) for v in wanted} - tree_series(tree, top))]


DEFAULT_IMAGE = 'mbr-primary'
# The machines a case can ask for with machine=NAME in its params (the
# runner's, not raceblk's): harness/machines/NAME, QEMU's arguments.
DEFAULT_MACHINE = 'microvm'


def machines(top: pathlib.Path = TOP) -> List[str]:
	return sorted(p.name for p in (top / 'harness/machines').iterdir())


@functools.lru_cache(maxsize=None)
def machine_traits(name: str, top: pathlib.Path = TOP) -> Dict[str, str]:
	"""What the harness makes of machine NAME (harness/machines/NAME):
	snapshot (its "# harness:" line: a guest of it can be restored from a
	snapshot of its variant's), disk (its arguments take the case's image
	as a disk, {disk}: it boots cold, the disk being the image's)."""
	text = (top / 'harness/machines' / name).read_text()
	traits = harness_traits(text)
	if '{disk}' in text:
		traits['disk'] = 'yes'
		traits.pop('snapshot', None)
	return traits


@dataclasses.dataclass(frozen=True)
class Scenario:
	"""One guest's work: a row resolved for one variant and one image."""
	variant: str
	id: str
	image: str
	params: Tuple[str, ...]
	console: str
	steps: Tuple[str, ...]
	line: int
	machine: str = DEFAULT_MACHINE

	@property
	def name(self) -> str:
		return scenario_name(self.variant, self.id, self.image)

	@property
	def guest_steps(self) -> Tuple[str, ...]:
		"""What the guest runs of each step (see split_step)."""
		return tuple(split_step(word)[0] for word in self.steps)

	@property
	def expectations(self) -> Tuple[Optional[str], ...]:
		"""What the host expects of each step (see split_step)."""
		return tuple(split_step(word)[1] for word in self.steps)

	@property
	def uses(self) -> Set[str]:
		"""What of the kernel it uses, as case-needs names it: its
		actions, raceblk parameters (NAME=VALUE) and machine."""
		return {step_name(w) for w in self.steps} | set(self.params) | {f'machine={self.machine}'}


@functools.lru_cache(maxsize=None)
def case_needs(top: pathlib.Path = TOP) -> Dict[str, Tuple[str, ...]]:
	"""The options only some cases need, and what uses each: actions,
	parameters, machines (kernel-patches/config/case-needs)."""
	return {words[0]: tuple(words[1:]) for words in golden.rows(top / 'kernel-patches/config/case-needs')}


def lacked(scenario: Scenario, lacks: Dict[str, str], top: pathlib.Path = TOP) -> List[str]:
	"""What SCENARIO needs of LACKS, the options a kernel lacks, by
	case-needs: LACKS' text of each ("CONFIG_X=y (it has ...)")."""
	return [text for option, text in sorted(lacks.items()) if set(case_needs(top).get(option, ())) & scenario.uses]


def case_needs_errors(known: Known, top: pathlib.Path = TOP) -> List[str]:
	"""A name in case-needs that no action, parameter or machine has, or
	an option no base.config sets."""
	fragments = [top / 'kernel-patches/config/base.config'] + [top / 'kernel-patches' / t / 'config/base.config'
								  for t in trees(top)]
	asked = {w[0].split('=')[0] for f in fragments if f.is_file() for w in golden.rows(f)}
	errors = [f'kernel-patches/config/case-needs: {option}: no base.config sets it'
		  for option in case_needs(top) if option not in asked]
	# --bzimage skips the cases of a module whose option a kernel lacks.
	errors += [f'harness/in-tree-modules: {m.path}: its {m.option} is not in kernel-patches/config/case-needs'
		   for m in in_tree_modules(top) if not m.mark and m.option not in case_needs(top)]
	for option, users in case_needs(top).items():
		for user in users:
			name, value = user.split('=', 1) if '=' in user else (user, '')
			if not ((value and name == 'machine' and value in machines(top))
				or (value and name in known.params) or (not value and name in known.steps)):
				errors.append(f'kernel-patches/config/case-needs: {option}: "{user}" is no action, '
					      'raceblk parameter or machine')
	return errors


def variant_words(top: pathlib.Path = TOP) -> List[str]:
	text = (top / 'kernel-patches/variants').read_text()
	return ' '.join(re.sub(r'#.*', '', line) for line in text.splitlines()).split()


def default_variants(top: pathlib.Path = TOP) -> List[str]:
	"""The kernels every "all" row runs on, race-demo's columns."""
	return [w for w in variant_words(top) if not w.startswith('+')]


# The module change as it is posted; kernel-patches/designs lists the
# others, each judged by this one's columns where a case has none of its
# own.
POSTED = 'fixed'


@functools.lru_cache(maxsize=None)
def designs(top: pathlib.Path = TOP) -> Tuple[str, ...]:
	"""The other designs of the module change: kernel-patches/designs
	(read once: scenarios() asks for every row and variant)."""
	return tuple(word for line in (top / 'kernel-patches/designs').read_text().splitlines()
		for word in line.split('#')[0].split())


def judged_in_case(variant: str, named: Set[str], top: pathlib.Path = TOP) -> str:
	"""The column of a case (whose columns name NAMED) that judges
	VARIANT: judged_as(VARIANT), or for a design the case names nowhere,
	the posted one's ('rcuput-debug' -> 'fixed-debug')."""
	as_ = judged_as(variant)
	if series_of(as_) in designs(top) and as_ not in named:
		return '-'.join([POSTED] + fragments_of(as_))
	return as_


def golden_series(variant: str, top: pathlib.Path = TOP) -> str:
	"""The series whose golden tables VARIANT's kernel shows
	(images/NAME.SERIES.expected): a design has the posted one's block
	fixes, and so its tables (the guest gets the one golden.py chooses)."""
	return series_of(judged_in_case(variant, set(), top))


def row_only_variants(top: pathlib.Path = TOP) -> List[str]:
	"""+NAME in kernel-patches/variants: make test runs the rows naming
	NAME there, never the "all" rows."""
	return [w[1:] for w in variant_words(top) if w.startswith('+')]


def test_variants(top: pathlib.Path = TOP) -> List[str]:
	"""What make test and harness/run build and run unless VARIANTS says."""
	return default_variants(top) + row_only_variants(top)


def design_columns(top: pathlib.Path = TOP) -> List[str]:
	"""race-demo --designs' columns: the bug, the posted change and the
	other designs of it."""
	return ['vanilla', POSTED, *designs(top)]


def all_images(top: pathlib.Path = TOP) -> List[str]:
	"""Every image the repository builds: good ones (a parted spec) first."""
	images = top / 'images'
	return ([p.stem for p in sorted(images.glob('*.parted'))]
		+ [p.stem for p in sorted(images.glob('*.patch'))])


def row_images(row: Row, own_image: Optional[str], top: pathlib.Path = TOP) -> List[str]:
	"""The images a row runs on; with --image NAME, its "all" and "any" rows only."""
	if own_image is not None:
		return [own_image] if row.image in ('all', 'any') else []
	if row.image == 'all':
		return all_images(top)
	return [DEFAULT_IMAGE if row.image == 'any' else row.image]


def resolve(row: Row, variant: str, image: str) -> Scenario:
	"""The row as the guest runs it: the image named in params unless they
	name one, the machine taken out of them."""
	machine = next((p.split('=', 1)[1] for p in row.params if p.startswith('machine=')), DEFAULT_MACHINE)
	params = tuple(p for p in row.params if not p.startswith('machine='))
	if not any(p.startswith('image=') for p in params):
		params = (f'image=raceblk/{image}.img',) + params
	return Scenario(variant=variant, id=row.id, image=image, params=params,
			console=row.console, steps=row.steps, line=row.line, machine=machine)


def scenarios(path: pathlib.Path, variants: List[str], own_image: Optional[str] = None,
	      top: pathlib.Path = TOP, tree: Optional[str] = None) -> List[Scenario]:
	"""Every scenario of a valid table on TREE (default: the run's), in
	table order, then variant order."""
	rows, _ = parse(path)
	row_only = row_only_variants(top)
	tree = tree or current_tree()
	named: Dict[str, Set[str]] = {}
	for row in rows:
		named.setdefault(row.id, set()).update(row_variants(row, tree))
	plan = []
	for row in rows:
		names = row_variants(row, tree)
		for variant in variants:
			as_ = judged_in_case(variant, named[row.id], top)
			if ('all' in names and as_ not in row_only) or as_ in names:
				plan += [resolve(row, variant, image) for image in row_images(row, own_image, top)]
	return plan


RELEASE_RE = re.compile(r'([0-9]+\.[0-9]+)(?:[.+-].*)?')


def nearest_tree(release: str, top: pathlib.Path = TOP) -> Optional[str]:
	"""The known tree whose series and expectations a kernel of RELEASE
	('7.4', '6.1.0-57-amd64', '6.12.118+deb12') takes: the latest at or
	below its MAJOR.MINOR; None below them all, or for no release."""
	match = RELEASE_RE.fullmatch(release)
	if not match:
		return None
	wanted = tree_version(match.group(1))
	below = [t for t in trees(top) if tree_version(t) <= wanted]
	return max(below, key=tree_version) if below else None


def foreign_modules(top: pathlib.Path = TOP) -> Dict[str, List[str]]:
	"""The modules built for another kernel that each variant's guests get
	(harness/foreign-modules)."""
	return {words[0]: words[1:] for words in golden.rows(top / 'harness/foreign-modules')}


@dataclasses.dataclass(frozen=True)
class InTreeModule:
	path: str
	option: str	# the option that builds it
	mark: str	# '' for none


def in_tree_modules(top: pathlib.Path = TOP) -> List[InTreeModule]:
	"""The kernel tree's modules the guests load (harness/in-tree-modules)."""
	return [InTreeModule(words[0], words[1], ' '.join(words[2:])) for words in golden.rows(top / 'harness/in-tree-modules')]


def make_facts(variants: List[str], top: pathlib.Path = TOP) -> List[str]:
	"""What the Makefile knows of the project, asked once: KIND:VALUE
	words (tree:, default:, test:, design-column:, image:, module:,
	foreign:VARIANT:NAME,...), and for
	each variant (VARIANTS, the defaults, the designs)
	variant:NAME:SERIES:FRAGMENTS:SOAK ("-": none)."""
	words = [f'tree:{t}' for t in trees(top)] + [f'default:{v}' for v in default_variants(top)]
	words += [f'test:{v}' for v in test_variants(top)] + [f'design-column:{v}' for v in design_columns(top)]
	words += [f'image:{i}' for i in all_images(top)] + [f'module:{m.path}' for m in in_tree_modules(top)]
	words += [f'foreign:{v}:{",".join(names)}' for v, names in foreign_modules(top).items()]
	every = dict.fromkeys(variants + default_variants(top) + row_only_variants(top) + list(designs(top)))
	words += [f'variant:{v}:{series_of(v)}:{",".join(fragments_of(v)) or "-"}:'
		  f'{"yes" if variant_trait(v, "soak") else "-"}' for v in every]
	return words


def main(argv: List[str]) -> int:
	if argv == ['actions']:
		sys.stdout.write(action_docs())
		return 0
	if argv == ['driver-docs']:
		sys.stdout.write(driver_docs())
		return 0
	if len(argv) == 2 and argv[0] == 'check-parameters':
		errors = parameter_errors(pathlib.Path(argv[1]))
		for error in errors:
			print(error, file=sys.stderr)
		return 1 if errors else 0
	if argv == ['designs']:
		print(' '.join(designs()))
		return 0
	if argv[:1] == ['make-facts']:
		print(' '.join(make_facts(argv[1:])))
		return 0
	if len(argv) == 2 and argv[0] == 'nearest-tree':
		print(nearest_tree(argv[1]) or '')
		return 0
	if len(argv) < 1 or argv[0] != 'check':
		print('usage: harness/plan.py check [CASES [VARIANT...]] | actions | driver-docs | check-parameters KO | designs | '
		      'make-facts [VARIANT...]',
		      file=sys.stderr)
		return 2
	known = known_names()
	if len(argv) > 1:
		errors = check(pathlib.Path(argv[1]), known, coverage=True)
	else:
		errors = check(TABLE, known, coverage=True) + check(MODULE_TABLE, known, coverage=True, fuzz=False)
		errors += check(BENCH_TABLE, known, coverage=True, fuzz=False)
	errors += variant_errors(argv[2:], known) + tree_errors() + case_needs_errors(known)
	for error in errors:
		print(error, file=sys.stderr)
	return 1 if errors else 0


if __name__ == '__main__':
	sys.exit(main(sys.argv[1:]))
