"""The Spark session and what it ships to its executors."""
