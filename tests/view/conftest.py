"""A real headless Chromium for the page tests, driven by Playwright for Python.

The browser is the system's (Debian's `chromium` package), never a Playwright download.
Without it (or without the `playwright` package) the browser tests skip and say why;
under CI=true a missing browser fails instead, so CI cannot pass by skipping.

`open_page(html)` writes the page to a file, loads it as file://, and records every
request and every console message. Every request except the page's own file is
refused (aborted), and `Loaded.check_clean()` asserts that none was even attempted and
that the console stayed free of errors.
"""

import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


def _missing(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(
            f"CI=true but {reason}: install it (apt-get install -y chromium; "
            "pip install -e .[test])",
            pytrace=False,
        )
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright package is not installed (pip install -e .[test])")
    path = chromium_path()
    if path is None:
        _missing("no system Chromium (apt-get install -y chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield b
        b.close()


@dataclass
class Loaded:
    page: object
    url: str
    requests: list = field(default_factory=list)  # every URL the page asked for
    refused: list = field(default_factory=list)  # those refused (anything but the page)
    console: list = field(default_factory=list)  # (type, text) of console messages and errors

    def check_clean(self) -> None:
        assert self.refused == [], f"the page asked the outside for {self.refused}"
        assert all(u.split("#")[0] == self.url.split("#")[0] for u in self.requests), self.requests
        errors = [m for m in self.console if m[0] in ("error", "pageerror", "warning")]
        assert errors == [], errors

    def dom(self) -> dict:
        """The page's state as the DOM contract states it."""
        return self.page.evaluate("""() => ({
            step: document.querySelector('#step').textContent,
            caption: document.querySelector('#caption').textContent,
            why: document.querySelector('#why').textContent,
            free: [...document.querySelectorAll('#free-list [data-block]')]
                .map(e => +e.dataset.block),
            refs: [...document.querySelectorAll('#blocks [data-block]')]
                .map(e => [+e.dataset.block, +e.dataset.ref]),
            fill: [...document.querySelectorAll('#blocks [data-block]')]
                .map(e => +e.dataset.fill),
            tables: [...document.querySelectorAll('#tables [data-seq]')].map(e => [e.dataset.seq,
                [...e.querySelectorAll('[data-block]')].map(c => +c.dataset.block)]),
        })""")


@pytest.fixture
def open_page(browser, tmp_path):
    contexts = []

    def open_(
        html: str, *, name: str = "page.html", fragment: str = "", viewport=(1600, 1000)
    ) -> Loaded:
        path = tmp_path / name
        path.write_text(html, encoding="utf-8")
        url = path.as_uri()
        ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        contexts.append(ctx)
        page = ctx.new_page()
        loaded = Loaded(page, url)

        def route(r):
            if r.request.url.split("#")[0] == url:
                r.continue_()
            else:
                loaded.refused.append(r.request.url)
                r.abort()

        ctx.route("**/*", route)
        page.on("request", lambda req: loaded.requests.append(req.url))
        page.on("console", lambda m: loaded.console.append((m.type, m.text)))
        page.on("pageerror", lambda e: loaded.console.append(("pageerror", str(e))))
        page.goto(url + fragment)
        page.wait_for_function("() => window.pagedsimViewer !== undefined")
        return loaded

    yield open_
    for ctx in contexts:
        ctx.close()


def expected(snap, caption: str, name=str) -> dict:
    """What the DOM must say for `snap` (see pagedsim/view/__init__.py), each sequence
    called `name(seq_id)` (the page's `PageOptions.names`)."""
    return dict(
        caption=caption,
        free=list(snap.free_list),
        refs=[[b, c] for b, c in enumerate(snap.ref_counts)],
        fill=list(snap.block_fill),
        tables=[[name(s.seq_id), list(s.blocks)] for s in snap.sequences],
    )


def long_script(steps: int, blocks: int, block_size: int, seed: int = 0) -> list[str]:
    """A random playground scenario of `steps` commands that keeps the pool busy: prompts,
    decodes, forks, finishes, and now and then a pool that runs dry."""
    rng, live, made, out = random.Random(seed), [], 0, []
    tokens = blocks * block_size
    while len(out) < steps:
        roll = rng.random()
        if not live or roll < 0.25:
            made += 1
            live.append(f"s{made}")
            out.append(f"alloc s{made} {rng.randint(1, max(2, tokens // 40))} w{made % 7}")
        elif roll < 0.70:
            out.append(f"append {rng.choice(live)} {rng.randint(1, 3 * block_size)}")
        elif roll < 0.78:
            made += 1
            out.append(f"fork {rng.choice(live)} s{made}")
            live.append(f"s{made}")
        else:
            out.append(f"free {live.pop(rng.randrange(len(live)))}")
    return out
