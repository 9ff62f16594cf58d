"""The local engine's files: Parquet, CSV and JSON Lines in, the same out, chosen by suffix.

An input is read as a stream of record batches of a fixed size (so a resumed run cuts it into the same
batches), after one pass over its id column that checks every id before any request is sent. CSV
columns are read as the text they hold (no type guessing from the first rows; a quoted cell may span
lines; a leading BOM is dropped); JSON Lines are read by the json module, so a string with a lone
surrogate reaches the client, which names it, instead of failing the whole file in the reader.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from jevper import ConfigError
from jevper.batch._schema import flattened

Format = Literal["parquet", "csv", "jsonl"]
SUFFIXES: dict[str, Format] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}
#: Rows parsed at a time while reading a file (not the batch size of the run).
_CHUNK = 8192


class InputError(ConfigError):
    """The input file cannot be read as the table it should be; says which file, where and why."""


def format_of(path: Path, role: str) -> Format:
    found = SUFFIXES.get(path.suffix.lower())
    if found is None:
        raise ConfigError(
            f"{role} {path}: expected a file ending in {', '.join(SUFFIXES)}, "
            f"got {path.suffix or 'no suffix'!r}"
        )
    return found


@dataclass(frozen=True)
class Checked:
    """What the pass over the ids found: the row count and the table's schema."""

    rows: int
    schema: pa.Schema


class Input:
    """One input file; ``check`` reads it once before the run, ``batches`` streams it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.format = format_of(path, "INPUT")
        if not path.is_file():
            raise InputError(f"INPUT {path}: expected a readable file, got {_what(path)}")
        self._jsonl_schema: pa.Schema | None = None

    def schema(self) -> pa.Schema:
        try:
            if self.format == "parquet":
                return pq.ParquetFile(self.path).schema_arrow
            if self.format == "csv":
                return pa.schema([(name, pa.string()) for name in self._csv_names()])
            return self._scan_jsonl()
        except (OSError, pa.ArrowException) as exc:
            raise InputError(
                f"INPUT {self.path}: expected a {self.format} file, could not read it: {exc}"
            ) from None

    def check(self, id_column: str) -> Checked:
        """Every id present, an integer or a string, and none twice; the rows counted."""
        schema = self.schema()
        if id_column not in schema.names:
            raise ConfigError(
                f"id_column: expected a column {id_column!r} holding each row's id, got columns "
                f"{schema.names}; pass --id-column naming one of them"
            )
        kind = schema.field(id_column).type
        if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise ConfigError(
                f"id_column {id_column!r}: expected integers or strings, got {kind}; give each row an id"
            )
        rows = 0
        last: Any = None
        increasing = True
        for batch in self._read(columns=[id_column]):
            column = batch.column(0)
            if column.null_count:
                first = rows + pc.index(pc.is_null(column), True).as_py()
                raise ConfigError(
                    f"id_column {id_column!r}: expected an id on every row, got none on row {first}"
                )
            rows += len(column)
            if increasing and len(column):
                # Ids in increasing order (a row number, a sorted key) are unique: checked in constant
                # memory. Only other orders are counted whole (memory in proportion to the rows).
                step = (
                    len(column) == 1
                    or pc.all(pc.less(column.slice(0, len(column) - 1), column.slice(1))).as_py()
                )
                increasing = bool(step) and (last is None or last < column[0].as_py())
                last = column[-1].as_py()
        if not increasing:
            self._check_unique(id_column, kind)
        return Checked(rows, schema)

    def _check_unique(self, id_column: str, kind: pa.DataType) -> None:
        chunks = [batch.column(0) for batch in self._read(columns=[id_column])]
        ids = pa.chunked_array(chunks, type=kind) if chunks else pa.chunked_array([], type=kind)
        counts = pc.value_counts(ids)
        twice = pc.filter(counts, pc.greater(counts.field("counts"), 1))
        if len(twice):
            shown = [v.as_py() for v in twice.field("values")[:5]]
            raise ConfigError(
                f"id_column {id_column!r}: expected every id once, got {len(twice)} id(s) more than once, "
                f"e.g. {shown}; the output is keyed by id"
            )

    def batches(self, rows: int) -> Iterator[pa.RecordBatch]:
        """The input in batches of ``rows`` rows (the last one shorter)."""
        return rebatched(self._read(), rows)

    def _read(self, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
        try:
            if self.format == "parquet":
                # Column chunks read a megabyte at a time: a file of one large row group would
                # otherwise be held whole while it is read.
                reader = pq.ParquetFile(self.path, buffer_size=1 << 20, pre_buffer=False)
                yield from reader.iter_batches(batch_size=_CHUNK, columns=columns)
            elif self.format == "csv":
                yield from self._read_csv(columns)
            else:
                yield from self._read_jsonl(columns)
        except (OSError, pa.ArrowException) as exc:
            raise InputError(
                f"INPUT {self.path}: expected a {self.format} file, could not read it: {exc}"
            ) from None

    # --- CSV ---------------------------------------------------------------------------------------

    def _csv_names(self) -> list[str]:
        # utf-8-sig: a BOM (Excel's "CSV UTF-8") is not part of the first column's name; Arrow's
        # reader drops it too.
        with self.path.open(newline="", encoding="utf-8-sig", errors="surrogateescape") as f:
            header = next(csv.reader(f), None)
        if not header:
            raise InputError(
                f"INPUT {self.path}: expected a header line naming the columns, got an empty file"
            )
        seen: dict[str, int] = {}
        for number, name in enumerate(header, 1):
            if name in seen:
                # Arrow would keep one of the two and drop the other's cells without a word.
                raise InputError(
                    f"INPUT {self.path}: expected each column named once in the header, got column "
                    f"{name!r} twice (columns {seen[name]} and {number}); rename one of them"
                )
            seen[name] = number
        return header

    def _read_csv(self, columns: list[str] | None) -> Iterator[pa.RecordBatch]:
        names = self._csv_names()
        convert = pcsv.ConvertOptions(
            column_types={name: pa.string() for name in names},
            strings_can_be_null=False,
            include_columns=columns or names,
        )
        # A quoted cell may hold line breaks; without this, a block boundary falling inside one
        # breaks the parse.
        parse = pcsv.ParseOptions(newlines_in_values=True)
        reader = pcsv.open_csv(self.path, parse_options=parse, convert_options=convert)
        yield from reader

    # --- JSON Lines --------------------------------------------------------------------------------

    def _lines(self) -> Iterator[tuple[int, dict[str, Any]]]:
        with self.path.open("rb") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except ValueError as exc:
                    raise InputError(
                        f"INPUT {self.path} line {number}: expected a JSON object, got {exc}"
                    ) from None
                if not isinstance(value, dict):
                    raise InputError(
                        f"INPUT {self.path} line {number}: expected a JSON object, got {type(value).__name__}"
                    )
                yield number, value

    def _scan_jsonl(self) -> pa.Schema:
        """The columns (in order of first appearance) and their types, unified over every line."""
        if self._jsonl_schema is not None:
            return self._jsonl_schema
        names: dict[str, None] = {}
        chunk: list[dict[str, Any]] = []
        schema: pa.Schema | None = None
        for _, value in self._lines():
            names.update(dict.fromkeys(value))
            chunk.append(value)
            if len(chunk) == _CHUNK:
                schema = _unified(schema, _jsonl_batch(chunk, list(names)).schema)
                chunk = []
        if chunk or schema is None:
            schema = _unified(schema, _jsonl_batch(chunk, list(names)).schema)
        fields = [schema.field(n) if n in schema.names else pa.field(n, pa.null()) for n in names]
        self._jsonl_schema = pa.schema(fields)
        return self._jsonl_schema

    def _read_jsonl(self, columns: list[str] | None) -> Iterator[pa.RecordBatch]:
        schema = self._scan_jsonl()
        if columns is not None:
            schema = pa.schema([schema.field(n) for n in columns])
        chunk: list[dict[str, Any]] = []
        for _, value in self._lines():
            chunk.append(value)
            if len(chunk) == _CHUNK:
                yield _jsonl_batch(chunk, schema.names, schema)
                chunk = []
        if chunk:
            yield _jsonl_batch(chunk, schema.names, schema)


def _unified(known: pa.Schema | None, new: pa.Schema) -> pa.Schema:
    if known is None:
        return new
    return pa.unify_schemas([known, new], promote_options="permissive")


def _jsonl_batch(
    rows: list[dict[str, Any]], names: list[str], schema: pa.Schema | None = None
) -> pa.RecordBatch:
    columns = []
    for name in names:
        values = [row.get(name) for row in rows]
        kind = schema.field(name).type if schema is not None else None
        columns.append(_array(values, kind))
    return pa.RecordBatch.from_arrays(columns, names=names)


def _array(values: list[Any], kind: pa.DataType | None) -> pa.Array:
    try:
        return pa.array(values, type=kind)
    except UnicodeEncodeError:
        if not all(v is None or isinstance(v, str) for v in values):
            raise InputError(
                "expected text without lone surrogates inside nested values, got one; only a column of "
                "text may hold a lone surrogate (its row then fails alone)"
            ) from None
    # A lone surrogate in text: its bytes go into the column as they are (Arrow does not check them),
    # and the row's state is refused by the client, which names the character.
    raw = [None if v is None else v.encode("utf-8", "surrogatepass") for v in values]
    return pa.array(raw, type=pa.binary()).view(pa.string()).cast(kind or pa.string(), safe=False)


def rebatched(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """``batches`` cut and joined into batches of exactly ``rows`` rows (the last one shorter)."""
    held: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        while batch.num_rows:
            take = min(rows - count, batch.num_rows)
            held.append(batch.slice(0, take))
            count += take
            batch = batch.slice(take)
            if count == rows:
                yield _joined(held)
                held, count = [], 0
    if count:
        yield _joined(held)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def _what(path: Path) -> str:
    if not path.exists():
        return "no such file"
    return "a directory" if path.is_dir() else "something that is not a file"


# --- writing ------------------------------------------------------------------------------------------


class Writer:
    """Writes the output's batches to ``path`` in its format; ``close`` finishes the file."""

    def __init__(self, path: Path, schema: pa.Schema, fmt: Format) -> None:
        self.format = fmt
        self._file: Any = None
        self._writer: Any = None
        if fmt == "parquet":
            self._writer = pq.ParquetWriter(path, schema)
        elif fmt == "csv":
            self._writer = pcsv.CSVWriter(
                path, flattened(pa.RecordBatch.from_pylist([], schema=schema)).schema
            )
        else:
            self._file = path.open("w", encoding="utf-8")

    def write(self, batch: pa.RecordBatch) -> None:
        if self.format == "parquet":
            self._writer.write_batch(batch)
        elif self.format == "csv":
            self._writer.write_batch(flattened(batch))
        else:
            maps = [i for i, f in enumerate(batch.schema) if _has_map(f.type)]
            for row in batch.to_pylist():
                if maps:
                    row = {k: _plain_maps(v) for k, v in row.items()}
                self._file.write(json.dumps(row, ensure_ascii=False) + "\n")

    def metadata(self, values: dict[str, str]) -> None:
        """Key-value metadata for a Parquet file's footer (written when it is closed)."""
        self._writer.add_key_value_metadata(values)

    def close(self) -> None:
        """The file finished (not yet synced: ``jevper._atomic.replacing`` does that when it renames it
        into place)."""
        if self._writer is not None:
            self._writer.close()
        if self._file is not None:
            self._file.close()


def _has_map(kind: pa.DataType) -> bool:
    if pa.types.is_map(kind):
        return True
    if pa.types.is_struct(kind):
        return any(_has_map(f.type) for f in kind)
    return False


def _plain_maps(value: Any) -> Any:
    """A map comes out of Arrow as a list of (key, value) pairs; JSON Lines keep it an object."""
    if isinstance(value, dict):
        return {k: _plain_maps(v) for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        return {k: _plain_maps(v) for k, v in value}
    return value
