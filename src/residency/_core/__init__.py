"""The sans-I/O core: pure, synchronous, no clock. The shell passes everything in."""
