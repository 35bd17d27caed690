"""The portfolio party and its evaluation: markets, parties, generator fits, backtests, diagnostics."""
