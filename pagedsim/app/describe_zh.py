"""Deprecated: see pagedsim.app.MOVED for where this module lives now."""

from pagedsim._moved import alias

alias(__name__)
