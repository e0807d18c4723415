# SPDX-License-Identifier: GPL-2.0
"""harness/run --module: a user's own block driver in raceblk's place.

The module comes from one of two places, and is always built for the
kernel variant that loads it (a module built for one variant does not
load, or loads wrongly, into another: struct module differs):

  a path inside the kernel tree (drivers/block/null_blk/null_blk.ko): the
      in-tree module each variant's kernel build made;
  a path on this machine, absolute or starting with ./ or ../, of a .ko
      whose directory has its Kbuild or Makefile: that directory is copied
      under build/KERNEL/own/VARIANT/ and built there against the
      variant's object tree, as raceblk is.

The modules it depends on (its .modinfo "depends=") come from the same
object tree.  Each variant gets an archive (build/KERNEL/own/VARIANT.cpio.gz)
that the guest unpacks over its root: the modules under /lib/modules/own/
and /lib/raceblk/own.conf, which harness/guest/drivers.sh's own_* actions
read.  The cases are harness/module-cases.
"""

import dataclasses
import pathlib
import re
import shlex
import shutil
import subprocess
from typing import Dict, List, Optional

HARNESS = pathlib.Path(__file__).resolve().parent
GUEST_DIR = '/lib/modules/own'
CONF = 'lib/raceblk/own.conf'
# A disk's name in /dev, and one module parameter as the guest's shell
# passes it on (NAME or NAME=VALUE, nothing the shell would expand).
DISK_RE = re.compile(r'[A-Za-z0-9][A-Za-z0-9_.-]{0,31}')
PARAM_RE = re.compile(r'[A-Za-z0-9_.-]+(=[A-Za-z0-9_.,:+/-]*)?')


class Problem(Exception):
	"""What keeps --module from running, said for a person."""


@dataclasses.dataclass(frozen=True)
class OwnModule:
	path: pathlib.Path
	source: Optional[pathlib.Path]	# its source directory; None: in the kernel tree
	disk: str
	params: str
	fail: str

	@property
	def name(self) -> str:
		"""The module's name, as kbuild makes it of its file name."""
		return self.path.name.removesuffix('.ko').replace('-', '_')


def source_of(given: str) -> Optional[pathlib.Path]:
	"""The source directory of the module at GIVEN, a path on this machine
	(absolute, ./ or ../); None for a path inside the kernel tree."""
	if not given.startswith(('/', './', '../')):
		return None
	folder = pathlib.Path(given).parent.resolve()
	if not any((folder / f).is_file() for f in ('Kbuild', 'Makefile')):
		raise Problem(f'--module {given}: no Kbuild or Makefile in {folder}: a module is built for '
			      'each variant, from its source (a path without ./ or / is one inside the kernel tree)')
	return folder


def param_problem(option: str, text: str) -> Optional[str]:
	bad = [word for word in text.split() if not PARAM_RE.fullmatch(word)]
	if bad:
		return (f'{option}: "{bad[0]}" is not a module parameter NAME or NAME=VALUE '
			'(letters, digits and _.,:+/- only)')
	return None


def from_options(given: str, disk: Optional[str], params: str, fail: Optional[str]) -> OwnModule:
	"""The --module options checked: a clear Problem when they do not go
	together."""
	path = pathlib.Path(given)
	if path.suffix != '.ko' or not path.stem:
		raise Problem(f'--module {given}: a module file, NAME.ko')
	if not disk or not DISK_RE.fullmatch(disk):
		raise Problem(f'--module wants --module-disk NAME: the disk its init adds, as in /dev '
			      f'(nullb0), got {disk!r}')
	if not fail or not fail.split():
		raise Problem('--module wants --module-fail PARAMS: the parameters that make its init '
			      'fail after its disk is added')
	for option, text in (('--module-params', params), ('--module-fail', fail)):
		if (problem := param_problem(option, text)):
			raise Problem(problem)
	return OwnModule(path, source_of(given), disk, ' '.join(params.split()), ' '.join(fail.split()))


def depends(ko: pathlib.Path) -> List[str]:
	"""The modules KO needs loaded first: its .modinfo "depends=" list."""
	match = re.search(rb'(?:^|\0)depends=([^\0]*)\0', ko.read_bytes())
	return [name for name in match.group(1).decode().split(',') if name] if match else []


def tree_modules(obj: pathlib.Path) -> Dict[str, pathlib.Path]:
	"""Every module an object tree built, by name: modules.order."""
	order = obj / 'modules.order'
	lines = order.read_text().split() if order.is_file() else []
	return {pathlib.Path(line).stem.replace('-', '_'): obj / pathlib.Path(line).with_suffix('.ko')
		for line in lines}


def build_out_of_tree(own: OwnModule, obj: pathlib.Path, workdir: pathlib.Path) -> pathlib.Path:
	"""OWN's source copied to WORKDIR and built against OBJ; its .ko."""
	shutil.rmtree(workdir, ignore_errors=True)
	shutil.copytree(own.source, workdir, symlinks=True,
			ignore=shutil.ignore_patterns('*.o', '*.ko', '*.mod', '*.mod.c', '.*.cmd', 'Module.symvers',
						      'modules.order', '.tmp_versions'))
	log = workdir / 'build.log'
	with open(log, 'w') as out:
		done = subprocess.run(['make', '-C', str(obj), f'M={workdir}', 'CC=ccache gcc', 'modules'],
				      stdout=out, stderr=subprocess.STDOUT, check=False)
	ko = workdir / own.path.name
	if done.returncode != 0 or not ko.is_file():
		tail = ' | '.join(log.read_text().strip().splitlines()[-3:])
		raise Problem(f'--module {own.path}: building {own.source} against {obj} '
			      + ('made no ' + own.path.name if done.returncode == 0 else 'failed')
			      + f' (log: {log}): {tail}')
	return ko


def module_of(own: OwnModule, obj: pathlib.Path, workdir: pathlib.Path, variant: str) -> pathlib.Path:
	"""OWN built for the kernel of OBJ."""
	if own.source is not None:
		return build_out_of_tree(own, obj.resolve(), workdir.resolve())
	ko = obj / own.path
	if not ko.is_file():
		raise Problem(f'--module {own.path}: not a module the {variant} kernel built ({ko} is missing): '
			      'set it =m in the tree\'s configuration, or give a .ko beside its source '
			      '(a Kbuild or Makefile)')
	return ko


def with_depends(ko: pathlib.Path, obj: pathlib.Path) -> List[pathlib.Path]:
	"""KO and the modules it needs, in the order they load (KO last)."""
	built, order, seen = tree_modules(obj), [], set()

	def visit(path: pathlib.Path) -> None:
		for dep in depends(path):
			if dep in seen:
				continue
			seen.add(dep)
			if dep not in built or not built[dep].is_file():
				raise Problem(f'{path.name} needs the module {dep}, which {obj} did not build')
			visit(built[dep])
			order.append(built[dep])
	visit(ko)
	return order + [ko]


def conf_text(own: OwnModule, modules: List[pathlib.Path]) -> str:
	"""/lib/raceblk/own.conf: shell assignments the guest sources."""
	guest = [f'{GUEST_DIR}/{ko.name}' for ko in modules]
	values = {'OWN_NAME': own.name, 'OWN_KO': guest[-1], 'OWN_DEPS': ' '.join(guest[:-1]),
		  'OWN_DISK': own.disk, 'OWN_PARAMS': own.params, 'OWN_FAIL': own.fail}
	return ''.join(f'{key}={shlex.quote(value)}\n' for key, value in values.items())


def prepare(own: OwnModule, obj: pathlib.Path, outdir: pathlib.Path, variant: str) -> pathlib.Path:
	"""The guest archive of OWN for one variant: outdir/VARIANT.cpio.gz."""
	ko = module_of(own, obj, outdir / variant, variant)
	modules = with_depends(ko, obj)
	root = outdir / f'{variant}.root'
	shutil.rmtree(root, ignore_errors=True)
	(root / GUEST_DIR.lstrip('/')).mkdir(parents=True)
	# Without debug info: the archive crosses the serial port after a
	# restore, and a -gdb variant's modules carry megabytes of it.
	for module in modules:
		run_or_say(['strip', '--strip-debug', '-o', str(root / GUEST_DIR.lstrip('/') / module.name),
			    str(module)], f'strip {module}')
	(root / CONF).parent.mkdir(parents=True)
	(root / CONF).write_text(conf_text(own, modules))
	archive = outdir / f'{variant}.cpio.gz'
	run_or_say([str(HARNESS / 'mkinitramfs'), '--root', str(archive), str(root)], f'packing {archive}')
	return archive


def run_or_say(command: List[str], what: str) -> None:
	done = subprocess.run(command, capture_output=True, text=True, check=False)
	if done.returncode != 0:
		raise Problem(f'--module: {what} failed: {done.stderr.strip() or done.stdout.strip()}')
