"""Integrations of fp8attn with serving frameworks. Each subpackage imports its framework lazily."""
