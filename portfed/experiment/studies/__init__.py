"""The experiments a command runs: the comparison of algorithms, over seeds and years, tuning, the collapse study."""
