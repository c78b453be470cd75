"""The benchmarks behind ``residency bench``: they run on the user's own tools, from a wheel. Each
module exposes ``add_arguments(parser)`` and ``run(args) -> BenchReport``; its name and summary are
listed in ``residency._cli._bench.BENCHES``, so ``--help`` lists them without importing any.
Figures are ratios against a baseline measured in the same run. The session simulator and its
cost model (``_simulate``, ``_strategies``, ``_trace``, ``_pricing``) are shared with the
repository's benchmarks (``python -m benchmarks``), which read the checkout's data.
"""
