"""The one palette of every picture: the figures, the slides and the browser page.

Sequence colours are Paul Tol's "muted" qualitative scheme (https://personal.sron.nl/~pault/),
distinguishable under the common colour-vision deficiencies, ordered so that neighbours in
admission order contrast. The page's CSS colours are written from these (`css_root`), so
the two cannot differ. No matplotlib here: the page is built without it.
"""

SEQ_COLOURS = (
    "#88CCEE",  # cyan
    "#CC6677",  # rose
    "#117733",  # green
    "#DDCC77",  # sand
    "#332288",  # indigo
    "#AA4499",  # purple
    "#44AA99",  # teal
    "#999933",  # olive
    "#882255",  # wine
)
FREE = "#DDDDDD"  # Tol's pale grey: a block on the free list
FREE_EDGE = "#888888"
INK = "#222222"  # text and outlines
ACCENT = "#EE7733"  # Tol vibrant orange: highlights (copy-on-write, the free-list head, changes)
ALERT = "#AA3377"  # a failed step


def css_root() -> str:
    """The page's colour variables, one `:root` rule: --ink, --free, --free-edge, --accent,
    --alert and --c0.. for the sequence colours in admission order."""
    pairs = [("ink", INK), ("free", FREE), ("free-edge", FREE_EDGE), ("accent", ACCENT)]
    pairs += [("alert", ALERT)] + [(f"c{k}", c) for k, c in enumerate(SEQ_COLOURS)]
    return ":root { " + " ".join(f"--{name}: {colour};" for name, colour in pairs) + " }\n"
