"""Synthetic data: the datagen source."""
