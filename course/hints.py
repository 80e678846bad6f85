"""`pagedsim hint [ID] [--level 1|2|3]`: hints on request, gentlest first (rustlings' `hint`).

Without an ID it is the exercise you are on (the first not passed), as `watch` picks it.

Level 1 says what to look at, level 2 how the pieces fit, level 3 the recipe
(course/curriculum.toml: `nudges` then `hint`). A failing `pagedsim check` never prints a
hint by itself; it ends with "need a hint? pagedsim hint ID".
"""

from __future__ import annotations

from pagedsim.io.args import ArgParser
from pagedsim.text.lang import wrap  # CJK-aware: Chinese has no spaces to break at

from . import curriculum, i18n, progress


def main(argv: list[str]) -> int:
    p = ArgParser(prog="pagedsim hint", description="a hint for one exercise, gentlest first")
    which = "an exercise id such as 3.4a (default: the one you are on)"
    p.add_argument("exercise", nargs="?", help=which)
    levels = "1: what to look at (default), 2: how the pieces fit, 3: the recipe"
    p.add_argument("--level", type=int, choices=(1, 2, 3), default=1, help=levels)
    p.add_argument("--lang", choices=i18n.LANGS, help="language of the text")
    args = p.parse_args(argv)
    lang = i18n.set_lang(args.lang)
    exercises = curriculum.load()
    ex = progress.named_or_current(p, args.exercise, exercises)
    if ex is None:
        n = len(exercises)
        print(i18n.say(f"all {n} exercises pass: no hint needed", f"{n} 个练习全部通过：无需提示"))
        return 0
    levels = ex.hint_levels(lang)
    text = levels[min(args.level, len(levels)) - 1]
    n, of = args.level, len(levels)
    title = f"{ex.id} 的提示，第 {n} 级（共 {of} 级）："
    print(i18n.say(f"hint {ex.id}, level {n} of {of}:", title))
    print("\n".join(line.strip() for line in wrap(text, 100)))
    if n < of:
        nxt = f"pagedsim hint {ex.id} --level {n + 1}"
        print(i18n.say(f"\nstill stuck? {nxt}", f"\n还是没思路？{nxt}"))
    return 0
