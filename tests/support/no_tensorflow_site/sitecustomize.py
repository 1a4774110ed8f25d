"""Blocks TensorFlow in every Python process started with this directory on PYTHONPATH.

`tests.support.no_tensorflow.block_tensorflow` puts it there, so the processes a blocked
one starts (the recipe `bench.accelerator run` starts, say) have no TensorFlow either, as
on the accelerator machines.
"""

from tests.support.no_tensorflow import block_tensorflow

block_tensorflow()
