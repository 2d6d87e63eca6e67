"""trainplan: plan, launch and check large-model training runs."""

__version__ = "0.1.0"
