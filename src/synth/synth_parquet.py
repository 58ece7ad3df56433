"""synth_parquet.py - write a synth dataset (tasks.jsonl) as parquet with the Ops-6K columns.

Run by synth_export() (src/synth/synth_out.c), which feeds this script on stdin:
    python3 - tasks.jsonl tasks.parquet
Columns: code, ops (list of strings), data_source (the published set's three), then ours: id,
name, seed, stream, eager_ms, compile_ms, filters (JSON text). Written to OUT.tmp and renamed, so
a reader never sees half a file.

Exit status: 0 done; 2 bad input; 3 pyarrow is not installed. The message is the last line on
stderr.
"""
import json
import os
import sys


def main():
    if len(sys.argv) != 3:
        print("usage: python3 - tasks.jsonl tasks.parquet", file=sys.stderr)
        return 2
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        print("pyarrow is not installed (pip install pyarrow): tasks.parquet not written",
              file=sys.stderr)
        return 3
    cols = {k: [] for k in ("code", "ops", "data_source", "id", "name", "seed", "stream",
                            "eager_ms", "compile_ms", "filters")}
    with open(sys.argv[1]) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                print(f"{sys.argv[1]}:{n}: {e}", file=sys.stderr)
                return 2
            for k in cols:
                v = row.get(k)
                cols[k].append(json.dumps(v, sort_keys=True) if k == "filters" else v)
    schema = pa.schema([("code", pa.string()), ("ops", pa.list_(pa.string())),
                        ("data_source", pa.string()), ("id", pa.string()), ("name", pa.string()),
                        ("seed", pa.int64()), ("stream", pa.string()), ("eager_ms", pa.float64()),
                        ("compile_ms", pa.float64()), ("filters", pa.string())])
    table = pa.table(cols, schema=schema)
    tmp = sys.argv[2] + ".tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
