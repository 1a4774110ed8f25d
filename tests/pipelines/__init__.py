"""Text pipeline tests: corpus reading, vocabularies, the tf.data pipeline, downloads."""
