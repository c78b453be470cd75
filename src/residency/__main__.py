from residency._cli import entry

entry()
