"""The lab: exact small policies whose every update goes through the package's own losses (torch only)."""
