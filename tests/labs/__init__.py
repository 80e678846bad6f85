"""Tests for the chapter 3.7 labs (issue 7)."""
