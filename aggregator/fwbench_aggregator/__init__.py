"""fwbench aggregator: validate and merge result Parquet files, build the report, compare two runs.

Never imports a deep-learning framework: it only reads the rows the cells wrote.
"""
