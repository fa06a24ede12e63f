"""The differential fuzzers (vkinfer.testing.fuzz, issue 26): the mutators, the check, both engines on planted
defects, and the smoke run that `make test` includes."""
