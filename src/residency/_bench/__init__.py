"""Benchmarks behind ``residency bench``. Each module exposes ``add_arguments(parser)``,
``run(args) -> BenchReport`` and ``SMALL_ARGS``; its name and summary are listed in
``residency._cli._bench.BENCHES``, so ``--help`` lists them without importing any. Figures are
ratios against a baseline measured in the same run: machines are shared and noisy, absolute
times are not.
"""
