"""Tests for the chapter 3.7 labs: layouts, alignment, sectors, allocators, pre-allocation."""
