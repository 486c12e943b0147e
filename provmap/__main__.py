"""`python -m provmap ...` is the `provmap` command."""

from provmap.cli.main import main

raise SystemExit(main())
