"""Helpers shared by the test suite (tiny wheels, loopback indexes, case fixtures)."""
