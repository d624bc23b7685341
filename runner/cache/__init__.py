"""The compile cache: its keys, and its entries."""
