"""`tokenrace claim`: a speed claim turned into a verdict with its evidence (docs/claim.md)."""
