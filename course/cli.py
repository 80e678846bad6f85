"""`pagedsim lesson` and `pagedsim check`: the course's two commands.

    pagedsim lesson                 list the lessons
    pagedsim lesson 3.4 [--out DIR] [--no-demo] [--lang en|zh]
    pagedsim check                  list the exercises
    pagedsim check 3.4a             your file (found in your workspace, see course/workspace.py)
    pagedsim check 3.4a --impl F    any implementation file
        [--json] [--timeout S] [--extra-checks PATH ...] [--verbose] [--lang en|zh]
    pagedsim check --all [--solutions]
    pagedsim check --curriculum     refuse missing paths, orphan files, empty hints
    pagedsim check --mutants [--generic [--sample N]]
                                    every solution passes, every named bug is caught, and the
                                    share of generic mutants caught (course/mutation.py)

Exit status 0 means every requested check passed; 1 a check failed, timed out or could
not run; 2 a usage error. With --json the last line of stdout is one JSON object
(a list with --all).
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import tempfile
from pathlib import Path

from pagedsim.io.args import ArgParser, float_in, int_in

from . import curriculum, i18n, progress, verdict, workspace
from .lessons_text import lesson_text, read

LESSONS = {s: curriculum.lesson_module(s) for s in curriculum.sections()}  # from the lessons' files


def _lang_arg(p: argparse.ArgumentParser) -> None:
    default = "from the locale, Chinese when LANG or LC_ALL starts with zh, else English"
    p.add_argument("--lang", choices=i18n.LANGS, help=f"language of the text (default: {default})")


def lesson_main(argv: list[str]) -> int:
    p = ArgParser(prog="pagedsim lesson", description="print and run a chapter-3 lesson")
    p.add_argument("section", nargs="?", help=f"{next(iter(LESSONS))} ... {list(LESSONS)[-1]}")
    out = "a new temporary folder; the files written are named"
    p.add_argument(
        "--out", type=Path, help=f"where a lesson that draws writes its figures (default: {out})"
    )
    p.add_argument("--no-demo", action="store_true", help="print the text only")
    _lang_arg(p)
    args = p.parse_args(argv)
    lang = i18n.set_lang(args.lang)
    if args.section is None:
        for s in LESSONS:
            print(f"  {s}  {read(s)['en'].title}")
        print("\nrun one with `pagedsim lesson 3.1`")
        return 0
    if args.section not in LESSONS:
        return p.refuse(f"no lesson {args.section!r}; choose one of {', '.join(LESSONS)}")
    print(lesson_text(args.section, lang), "\n")
    if not args.no_demo:
        out = args.out or Path(tempfile.mkdtemp(prefix=f"pagedsim-lesson-{args.section}-"))
        out.mkdir(parents=True, exist_ok=True)
        before = set(out.rglob("*"))
        print(i18n.say("-- demo --", "-- 演示 --"))
        from .ch03_kv_block.lessons import NeedsExercise

        try:
            importlib.import_module(LESSONS[args.section]).demo(out)
        except NeedsExercise as e:
            print(f"({e})")
        written = sorted(set(out.rglob("*")) - before)
        print()
    for ex in (e for e in curriculum.load() if e.section == args.section):
        mine, stub = workspace.find(ex), f"{workspace.DEFAULT}/{Path(ex.stub).name}"
        make = i18n.say(
            " (create it with `pagedsim workspace`)", "（先运行 `pagedsim workspace` 生成）"
        )
        where = str(mine) if mine else stub + make
        print(f"{i18n.say('exercise', '练习')} {ex.id}: {ex.title_in(lang)}")
        print(f"  {i18n.say('edit ', '编辑')}  {where}")
        print(f"  {i18n.say('check', '检查')}  pagedsim check {ex.id}")
    if not args.no_demo:
        _say_what_was_written(out, written, temporary=not args.out)
    return 0


def _say_what_was_written(out: Path, new: list, *, temporary: bool) -> None:
    """Name the files the demo wrote (after the exercise lines); an unused temporary folder goes."""
    files = [p for p in new if p.is_file()]
    if files:
        names = ", ".join(str(p.relative_to(out)) for p in files[:6])
        more = f" (+{len(files) - 6} more)" if len(files) > 6 else ""
        en = f"(wrote {len(files)} file(s) to {out}: {names}{more})"
        print(i18n.say(en, f"（向 {out} 写入了 {len(files)} 个文件：{names}{more}）"))
    elif temporary:
        shutil.rmtree(out, ignore_errors=True)


def _choose_impl(ex, args) -> tuple[Path, str | None]:
    """The file to check and, when it is not the user's own choice, a line saying which it is."""
    if args.impl:
        return args.impl, None
    if args.solutions:
        return ex.path("solution"), None
    mine = workspace.find(ex)
    if mine:
        return mine, i18n.t("checking {path}", path=mine)
    mine = f"{workspace.DEFAULT}/{Path(ex.stub).name}"
    return ex.path("stub"), i18n.say(
        f"no workspace file for {ex.id} here: checking the untouched stub. Run this from the "
        f"folder that holds {workspace.DEFAULT}/ (or set PAGEDSIM_WORKSPACE); without one, run "
        f"`pagedsim workspace` once, then edit {mine}",
        f"这里没有找到 {ex.id} 的工作区文件，检查的是原始模板。"
        f"请在包含 {workspace.DEFAULT}/ 的目录里运行（或设置 PAGEDSIM_WORKSPACE）；"
        f"还没有工作区时，先运行一次 `pagedsim workspace`，"
        f"再编辑 {mine}",
    )


def _check_parser():
    p = ArgParser(prog="pagedsim check", description="run an exercise's checks")
    p.add_argument("exercise", nargs="?", help="an exercise id such as 3.4a")
    p.add_argument("--impl", type=Path, help="check this file instead of your workspace's")
    flags = (  # names, what
        (["--all"], "every exercise, in course order"),
        (["--solutions"], "check the reference solutions"),
        (["--json"], "print one JSON object per exercise (machine-readable)"),
        (["--verbose", "-v"], "show every failing check"),
        (["--curriculum"], "validate course/curriculum.toml"),
        (["--mutants"], "prove the checks catch the known bugs"),
        (["--generic"], "with --mutants: also measure generic mutants"),
    )
    for names, what in flags:
        p.add_argument(*names, action="store_true", help=what)
    default = "default 60, times the load per core when the machine is busy"
    per = f"seconds allowed per check and for importing the file ({default})"
    p.add_argument("--timeout", type=float_in(0, 86_400, open_low=True), metavar="S", help=per)
    more = "more pytest files to run against the same file (fixtures: impl, kernels)"
    p.add_argument("--extra-checks", nargs="+", type=Path, default=[], metavar="PATH", help=more)
    per = "with --generic: N generic mutants per exercise"
    p.add_argument("--sample", type=int_in(1, 10**6), metavar="N", help=per)
    _lang_arg(p)
    return p


def _curriculum_report(exercises) -> int:
    found = curriculum.problems(exercises)
    for line in found:
        print(f"curriculum: {line}")
    print("curriculum: OK" if not found else f"curriculum: {len(found)} problem(s)")
    return 1 if found else 0


def _list_exercises(exercises) -> int:
    for ex in exercises:
        mine = workspace.find(ex) or Path(workspace.DEFAULT) / Path(ex.stub).name
        print(f"  {ex.id:<5} {ex.title_in(i18n.lang())}\n        {mine}")
    on = progress.current(exercises) or exercises[0]  # the first not passed yet
    first = "; first copy the stubs to a workspace with `pagedsim workspace`"
    first = "" if any(map(workspace.find, exercises)) else first
    print(f"\ncheck one with `pagedsim check {on.id}`{first}")
    return 0


def _run_and_report(chosen, args) -> int:
    from .runner import print_report, run_checks

    results, hint = [], not args.solutions and len(chosen) == 1
    for ex in chosen:
        impl, note = _choose_impl(ex, args)
        if note and not args.json:
            print(note)
        outcome = run_checks(ex, impl, seconds=args.timeout, extra_checks=args.extra_checks)
        results.append(outcome)
        if not args.solutions:
            progress.record(outcome)  # only a file in a workspace: `pagedsim progress` shows it
        if not args.json:
            print_report(outcome, verbose=args.verbose, hint=hint)
    if args.json:
        objs = [o.as_json() for o in results]
        out = objs[0] if len(objs) == 1 and not args.all else objs
        if not verdict.send(out):  # under `grade` the pipe it named; else stdout
            print(json.dumps(out, ensure_ascii=False))
    elif len(chosen) > 1:
        ok = sum(o.ok for o in results)
        print("\n" + i18n.t("{ok}/{n} exercises pass", ok=ok, n=len(chosen)))
    return 0 if all(o.ok for o in results) else 1


def check_main(argv: list[str]) -> int:
    verdict.take()  # under `pagedsim grade`: the verdict's own channel, before anything runs
    p = _check_parser()
    args = p.parse_args(argv)
    i18n.set_lang(args.lang)
    exercises = curriculum.load()
    if args.curriculum:
        return _curriculum_report(exercises)
    try:
        one = [curriculum.find(args.exercise, exercises)] if args.exercise else None
    except KeyError as e:
        return p.refuse(e.args[0])
    if args.mutants:
        try:
            from .mutation import report
        except ImportError:
            return p.refuse("--mutants is not part of this build (the student copy has no mutants)")
        return report(one or exercises, generic=args.generic, sample=args.sample)
    if (args.impl or args.extra_checks) and not one:
        why = (
            "--impl and --extra-checks need one exercise id (e.g. pagedsim check 3.4a --impl FILE)"
        )
        return p.refuse(why)
    if not (args.all or one):
        return _list_exercises(exercises)
    chosen = exercises if args.all else one
    if (args.impl or args.extra_checks) and len(chosen) != 1:
        return p.refuse("--impl and --extra-checks need exactly one exercise id")
    return _run_and_report(chosen, args)
