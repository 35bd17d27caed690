"""The experiment configs: YAML validated into typed objects, unknown keys refused."""
