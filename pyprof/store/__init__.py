"""The columnar record store: parse's records as a Parquet dataset (one folder, partitioned by
rank), written from JSON Lines and read back as the same records (docs/records.md, "Parquet").

schema.py is the one place that says which column holds which record field and how; write.py
turns JSON Lines into the dataset; read.py gives records (dicts, for prof's analysis) or Arrow
tables (column selection and filters pushed down to the Parquet reader, no dict per record).
"""
