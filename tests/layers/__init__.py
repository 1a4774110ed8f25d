"""Layer tests."""
