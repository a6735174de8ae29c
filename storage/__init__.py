"""The evidence store (DuckDB), local file ingestion, and BM25 search over stored pages."""
