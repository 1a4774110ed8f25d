"""`translator recipe`.

Its stages in order (`stages`), from what the user gave (`settings`, `cli`) to the
corpus, the vocabulary, the training config and the reports.
"""
