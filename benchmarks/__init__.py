"""Benchmarks for polygrad."""
