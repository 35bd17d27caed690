"""What a run reports: Table 1 and its collapse verdicts, the figures, the tearsheets."""
