"""parquet_import.py - convert a task dataset in parquet to JSONL.

Run by task_import_parquet() (`cuda-agent data import`), which feeds this
script on stdin:  python3 - DATA.parquet OUT.jsonl

Reads the columns code, ops and data_source (and id, name, level when
present) in row batches, so the whole table is never in memory, and writes
one JSON object per row and per line, in row order: line N is row N. `ops`
may be a list column or a string holding a JSON or Python list; other
values are passed through for the C side to judge. Validation of the task
code (and deduplication, relabelling) happens in C afterwards.

Exit status: 0 done; 2 bad input (unreadable file, missing column);
3 pyarrow is not installed. The message is the last line on stderr.
"""
import ast
import json
import sys

EXIT_INPUT = 2
EXIT_NO_PYARROW = 3
BATCH_ROWS = 1024
OPTIONAL = ("ops", "data_source", "id", "name", "level")


def fail(code, message):
    print(message, file=sys.stderr)
    sys.exit(code)


def normalise_ops(value):
    """A list of names when the value holds one, else the value unchanged."""
    if isinstance(value, str):
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(parsed, (list, tuple)):
                return list(parsed)
        return value
    if isinstance(value, tuple):
        return list(value)
    return value


def dump(record):
    try:
        return json.dumps(record, ensure_ascii=False)
    except UnicodeEncodeError:
        # lone surrogates: escaped, so the C side names the row
        return json.dumps(record, ensure_ascii=True)


def main(argv):
    if len(argv) != 3:
        fail(EXIT_INPUT, "usage: python3 - DATA.parquet OUT.jsonl")
    src, dst = argv[1], argv[2]
    try:
        import pyarrow.parquet as pq
    except ImportError:
        fail(EXIT_NO_PYARROW,
             "reading parquet needs pyarrow, which python3 cannot import: pip install pyarrow")
    try:
        pf = pq.ParquetFile(src)
    except Exception as e:  # pyarrow raises several types for unreadable files
        fail(EXIT_INPUT, f"not a readable parquet file: {e}")
    names = pf.schema_arrow.names
    if "code" not in names:
        fail(EXIT_INPUT,
             f"no column \"code\" (columns: {', '.join(names)}): "
             "a task dataset has columns code, ops and data_source")
    columns = ["code"] + [c for c in OPTIONAL if c in names]
    with open(dst, "w", encoding="utf-8", errors="surrogatepass", newline="\n") as out:
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=columns):
            for row in batch.to_pylist():
                record = {"code": row["code"]}
                for key in OPTIONAL:
                    if row.get(key) is not None:
                        record[key] = row[key]
                if "ops" in record:
                    record["ops"] = normalise_ops(record["ops"])
                out.write(dump(record))
                out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
