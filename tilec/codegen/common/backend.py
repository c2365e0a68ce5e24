"""What every backend is: kernel-level tile IR -> the stages of one or more ``--target``.

A backend is one class (Triton's layout): the targets it builds, its arches and default arch,
the target description the kernel level tiles for, frozen validated :class:`BackendOptions`,
and an ordered table of :class:`Stage`, each keyed by the name ``--emit`` gives it and taking
the value of the stage it follows (``kernel``: the kernel-level module).  :meth:`Backend.run`
walks that table up to the stage asked for; the driver knows no target by name.
This module imports nothing heavy: the registry lists backends without loading MLIR.
"""
from __future__ import annotations

import enum
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Optional

from ...diagnostics import DiagnosticSink, TilecError
from ...tiling.targets import TargetDesc

KERNEL = "kernel"
"""The last shared stage: the kernel-level module every backend starts from."""


class Output(enum.Enum):
    """What a stage gives when it is the one asked for."""

    TEXT = "text"            # its text (stdout, or the -o file)
    BINARY = "binary"        # one file (obj, cubin)
    LIBRARY = "library"      # a shared library and its header (suffix ".h")
    DIRECTORY = "directory"  # a directory (relative path -> bytes)


@dataclass(frozen=True)
class Stage:
    """One row of a backend's table: ``run`` (a method name) maps the value of stage
    ``after`` to this stage's; ``text`` gives a TEXT stage's text from its value (recorded for
    ``--dump-dir`` and the cache), ``files`` the output of any other from its value."""

    name: str
    output: Output
    after: str
    run: str
    text: Callable[[Any], str] = str
    files: Callable[[Any], dict[str, bytes]] = lambda value: {"": value}
    suffix: str = ""             # the default output's suffix when -o is absent
    replaceable: Optional[Callable[[Path], bool]] = None   # DIRECTORY: may replace this one


@dataclass(frozen=True)
class BackendOptions:
    """What changes a backend's code: the target and the arch (checked against
    ``arches``)."""

    arch: str
    target: str
    arches: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        if self.arch not in self.arches:
            raise TilecError(f"unknown --arch '{self.arch}' for --target {self.target}; "
                             "expected one of " + ", ".join(self.arches))

    def hash(self) -> str:
        return f"{self.target}:{self.arch}"


@dataclass(frozen=True)
class HostTarget:
    """What the host code of a backend's target differs in: the ``--target`` name (the
    templates' and the metadata's), the package whose ``templates/`` hold its ``host.c.j2`` and
    ``header.h.j2`` (each extends ``common/`` of the same name, filling its blocks), whether
    buffers are host memory (where ``test_break`` applies), the prefix of the device API the
    host code calls (alloc, free, copy, launch; "" when kernels run in the library itself), and
    the exports beyond the entries'."""

    name: str
    templates: str
    host_memory: bool
    api: str = ""
    exports: tuple[str, ...] = ()


@dataclass(frozen=True)
class Job:
    """What one compile asks of a backend besides the module: the library's name, the source
    file it quotes, the test hook, and the tools the driver found in the environment."""

    name: str = "kernels"
    source: str = ""
    test_break: str = ""
    tools: Mapping[str, Optional[str]] = field(default_factory=dict)

    def tool(self, name: str, default: str) -> str:
        return self.tools.get(name) or default


Note = Callable[[str, Callable[[], str], str], Optional[str]]
"""``note(stage, produce, stop)``: record a stage's text; the text when ``stage`` is ``stop``."""


def ignore(stage: str, produce: Callable[[], str], stop: str) -> Optional[str]:
    return produce() if stage == stop else None


class Backend:
    """A backend: subclasses set the class attributes and a method per stage."""

    name: ClassVar[str]
    targets: ClassVar[tuple[str, ...]]
    arches: ClassVar[tuple[str, ...]]
    default_arch: ClassVar[str]
    arch_help: ClassVar[str]                 # the --arch help of this backend's targets
    description: ClassVar[TargetDesc]        # what tile-kernel tiles for
    Options: ClassVar[type[BackendOptions]] = BackendOptions
    stages: ClassVar[tuple[Stage, ...]]      # in order; the last is the default

    def __init__(self, options: BackendOptions, sink: DiagnosticSink | None = None,
                 job: Job | None = None) -> None:
        self.options = options
        self.sink = sink or DiagnosticSink()
        self.job = job or Job()
        self.stop = ""
        self.module: Any = None
        self.note: Note = ignore
        self.resources = ExitStack()

    @classmethod
    def make_options(cls, target: str, arch: str = "") -> BackendOptions:
        """The checked options of a build for ``target`` (``arch`` "" is the default)."""
        return cls.Options(arch or cls.default_arch, target)

    @classmethod
    def stage_table(cls, target: str) -> dict[str, Stage]:
        """The stages of ``target``, in order, keyed by their ``--emit`` names."""
        return {s.name: s for s in cls.stages}

    def toolchain(self, stage: Stage) -> dict[str, str]:
        """What, besides tilec and the MLIR bindings, decides the output of ``stage``: tools
        and their versions (the driver adds them to the cache key)."""
        return {}

    def chain(self, stop: str) -> list[Stage]:
        """The stages from the kernel level to ``stop``."""
        table = self.stage_table(self.options.target)
        chain = [table[stop]]
        while chain[-1].after != KERNEL:
            chain.append(table[chain[-1].after])
        return chain[::-1]

    def run(self, module: Any, stop: str = "", note: Note = ignore) -> Any:
        """The value of stage ``stop`` (default: the last) of ``module``: text for a TEXT
        stage; each TEXT stage's text goes to ``note`` on the way."""
        self.stop = stop or self.stages[-1].name
        self.module, self.note = module, note
        value = module
        with self.resources:
            for stage in self.chain(self.stop):
                value = getattr(self, stage.run)(value)
                if stage.output is Output.TEXT:
                    text = note(stage.name, lambda: stage.text(value), self.stop)
                    if text is not None:
                        return text
        return value


class PartialBuild(TilecError):
    """A build that cannot finish here but leaves a directory that finishes it elsewhere (an
    ascend library without CANN: its CMake project): ``files`` (relative path -> bytes) go to
    :meth:`directory` beside the output, and :meth:`explain` says what to do with them."""

    files: dict[str, bytes]

    def directory(self, output: str) -> Path:
        raise NotImplementedError

    def replaceable(self, directory: Path) -> bool:
        """Whether an existing ``directory`` holds what a previous build wrote there."""
        return False

    def explain(self, output: str) -> str:
        raise NotImplementedError
