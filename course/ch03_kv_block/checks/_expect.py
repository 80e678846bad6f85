"""`raises(...)`: a refusal check that says which symptom it saw, in the student's words.

pytest.raises reports a missing exception as "DID NOT RAISE" and a wrong one as a
traceback; a student needs one line that tells the two apart:

    take(2) of a block in use did not raise PoolError
    take(2) of a block in use raised KeyError: 2 instead of PoolError

A NotImplementedError passes through untouched, so the runner still says
"not implemented yet".
"""

from __future__ import annotations

import re

from course.i18n import say


def raises(expected, call, *args, what: str, match: str | None = None, **kwargs) -> BaseException:
    """Call call(*args, **kwargs); fail unless it raises `expected` (whose text matches `match`)."""
    name = getattr(expected, "__name__", str(expected))
    try:
        call(*args, **kwargs)
    except NotImplementedError:
        raise
    except expected as e:
        if match and not re.search(match, str(e)):
            raise AssertionError(
                say(
                    f"{what} raised {name} as it should, but its message "
                    f"{str(e)!r} does not mention {match!r}",
                    f"{what} 按要求抛出了 {name}，但消息 {str(e)!r} 没有提到 {match!r}",
                )
            ) from None
        return e
    except Exception as e:  # the wrong exception: say which
        raise AssertionError(
            say(
                f"{what} raised {type(e).__name__}: {e} instead of {name}",
                f"{what} 抛出的是 {type(e).__name__}：{e}，而不是 {name}",
            )
        ) from e
    raise AssertionError(say(f"{what} did not raise {name}", f"{what} 没有抛出 {name}"))
