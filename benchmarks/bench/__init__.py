"""The benchmarks ``python -m benchmarks NAME`` runs. Each module exposes ``add_arguments(parser)``,
``run(args) -> BenchReport`` and ``SMALL_ARGS``; its name and summary are listed in
``benchmarks.run.BENCHES``, so ``--help`` lists them without importing any. Figures are ratios
against a baseline measured in the same run: machines are shared and noisy, absolute times are not.
"""
