"""The Spark adapter: batch files, spark-submit, the driver and the executor code. Imports
pyspark only where it runs on Spark."""
