"""Records in (reader.py; the original PyProf's dicts, legacy.py) and tables out (output.py: text,
CSV, fixed width; parquet_table.py: the per-kernel table as Parquet)."""
