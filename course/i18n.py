"""English or Chinese for the course's own words: lessons, FAIL messages, hints.

The language is, in order: `--lang en|zh` (the CLI calls `set_lang`, which also sets
PAGEDSIM_LANG so that checks see it), else PAGEDSIM_LANG, else the locale: Chinese
when LC_ALL, LC_MESSAGES or LANG starts with "zh", English otherwise.

    t(template, **kw)   a framing sentence of the runner or CLI, looked up in ZH
    say(en, zh)         a check's own message, written in both languages at the call site
"""

from __future__ import annotations

import os

from pagedsim.text import lang as _lang

LANGS = _lang.LANGS

# English template -> Chinese template (same {fields}).
ZH = {
    "not implemented yet: {what}": "尚未实现：{what}",
    "a function": "某个函数",
    "counterexample: {example}": "反例：{example}",
    " (line {line} of your file)": "（你的文件第 {line} 行）",
    "{doc}: your code raised {name}: {what}{at}": "{doc}：你的代码抛出了 {name}：{what}{at}",
    "this check": "这项检查",
    "no such file: {path}": "没有这个文件：{path}",
    "importing your file": "导入你的文件",
    "{n} more failing check(s); --verbose shows them all": (
        "还有 {n} 项检查未通过；加 --verbose 查看全部"
    ),
    "checking {path}": "检查 {path}",
    "{ok}/{n} exercises pass": "{ok}/{n} 个练习通过",
    "your file does not parse: line {line}: {msg}": "你的文件有语法错误：第 {line} 行：{msg}",
    "your file called sys.exit({code}) while being imported": (
        "你的文件在导入时调用了 sys.exit({code})"
    ),
    "importing your file raised {name}: {what}{at}": "导入你的文件时抛出了 {name}：{what}{at}",
    "{what} ran for over {seconds:g} s: is there an endless loop?": (
        "{what} 运行超过 {seconds:g} 秒：是不是有死循环？"
    ),
    "{what} ran for over {seconds:g} s, still making progress but far too slowly: "
    "something does much more work than it needs (a loop over every block?)": (
        "{what} 运行超过 {seconds:g} 秒，仍在推进，但太慢了："
        "某处做了远多于必要的工作（遍历了每个块？）"
    ),
    "{what} ran for over {seconds:g} s without progress (one call into your code never "
    "returned): is there an endless loop?": "{what} 运行超过 {seconds:g} 秒且没有任何进展"
    "（对你代码的一次调用一直没有返回）：是不是有死循环？",
    "PASS {id}  {title} ({passed}/{total} checks)": "PASS {id}  {title}（{passed}/{total} 项检查）",
    "{status} {id}  {passed}/{total} checks pass": "{status} {id}  {passed}/{total} 项检查通过",
    "  ({n} checks)": "（{n} 项检查）",
}


def set_lang(lang: str | None) -> str:
    """Fix the language for this process and the checks it runs; None keeps the detected one."""
    if lang is not None and lang not in LANGS:
        raise ValueError(f"--lang must be one of {', '.join(LANGS)}, got {lang!r}")
    os.environ["PAGEDSIM_LANG"] = _lang.detect(lang)
    return os.environ["PAGEDSIM_LANG"]


def lang() -> str:
    return _lang.detect()  # the rule of pagedsim.text.lang, shared with tour and play


def t(template: str, **kw) -> str:
    return _lang.t(template, lang(), ZH, **kw)


def say(en: str, zh: str) -> str:
    return zh if lang() == "zh" else en
