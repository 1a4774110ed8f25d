"""Serving `translator` exports: the HTTP server, TF Serving configs and client examples."""
