"""`python -m rivc.adapters.cli`: the rivc command."""

from . import main

main()
