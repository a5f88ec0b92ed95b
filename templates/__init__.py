"""Jinja templates shipped as package data: generated jobs and `rivc init` scaffolds."""
