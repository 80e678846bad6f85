"""Figure makers registered with `pagedsim figures` (filled in by its owner)."""

FIGURES: dict = {}  # name -> callable(out_dir: pathlib.Path) -> list[pathlib.Path]
