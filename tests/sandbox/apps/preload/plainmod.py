"""A module with no side effects at import: what a preloaded parent imports and learns."""

VALUE = 1
