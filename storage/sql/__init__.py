"""Reading traces with DuckDB: a collection as of a time, its history, SQL over every trace."""
