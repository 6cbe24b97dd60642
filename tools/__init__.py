"""Developer tools run from the repository root; not part of the installed package."""
