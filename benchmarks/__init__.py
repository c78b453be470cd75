"""The repository's benchmarks: ``python -m benchmarks [NAME]`` (``benchmarks.run``) and the scripts
beside this file. They read the data of this checkout and run from it, not from an installed wheel;
what ships is ``residency bench`` (``residency._bench``)."""
