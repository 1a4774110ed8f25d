"""The backend engines.

What training needs of each backend, behind one `Engine` (`backend`): TensorFlow's
strategies and trainer, JAX's strategy and training step.
"""
