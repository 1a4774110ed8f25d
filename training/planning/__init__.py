"""A run's plan.

The rules (`rules`), counting and timing (`measure`), and a plan's life in a run: made
once, saved, resumed, given a new budget (`lifecycle`).
"""
