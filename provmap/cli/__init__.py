"""The `provmap` command line: every subcommand is defined in this package (the top floor)."""
