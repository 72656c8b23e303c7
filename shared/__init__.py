"""Code the kit's tooling shares: language choice, TAP output, process control."""
