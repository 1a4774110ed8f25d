"""Training tests."""
