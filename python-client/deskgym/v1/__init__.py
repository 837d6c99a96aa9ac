"""Generated deskgym.v1 protocol stubs (built from ../proto at install time)."""
