"""Benchmarks behind ``residency bench``. Each module exposes ``NAME``, ``SUMMARY``,
``add_arguments(parser)`` and ``run(args) -> BenchReport``. Figures are ratios against a
baseline measured in the same run: machines are shared and noisy, absolute times are not.
"""
