"""The tutorial runner's format (tests/fixtures/tutorial.py): what is run, and what output matches."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.tutorial import Shell, Step, StepFailedError, environment, matches, parse, run_steps

PAGE = """\
Intro.

```sh
scripts/dev sandbox
```

```console
$ echo one
one
$ X=$(echo two)
$ cat <<EOF
> $X
> EOF
two
```

```console wait
$ date +%s
{{seconds}}
```
"""


def test_only_console_blocks_are_run_with_continuations_and_their_output() -> None:
    steps = parse(PAGE)
    assert steps == [
        Step("echo one", ("one",), False, 8),
        Step("X=$(echo two)", (), False, 10),
        Step("cat <<EOF\n$X\nEOF", ("two",), False, 11),
        Step("date +%s", ("{{seconds}}",), True, 18),
    ]


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        (["NAME   READY"], ["NAME READY"], True),
        (["job {{id}} ran"], ["job 12 ran"], True),
        (["job {{id}} ran"], ["job  ran"], False),
        (["job {{id}} ran"], ["job 1 2 ran"], False),
        (["<none>"], ["<none>"], True),
        (["a", "...", "z"], ["a", "b", "c", "z"], True),
        (["a", "...", "z"], ["a", "z"], True),
        (["a", "z"], ["a", "b", "z"], False),
        (["...", "z"], ["x", "z"], True),
        (["a"], ["a", "b"], False),
        (["a", "..."], ["a", "b"], True),
        ([], [], True),
        ([], ["noise"], False),
        (["a"], ["a", ""], True),
        (["x.y"], ["xzy"], False),
        (["now: {{...}}"], ["now: wait for Kueue, 2 s"], True),
        (["a {{...}} z"], ["a b c z"], True),
        (["a {{...}} z"], ["a b c"], False),
    ],
)
def test_matching(expected: list[str], actual: list[str], ok: bool) -> None:
    assert matches(expected, actual) is ok


def test_one_shell_keeps_variables_and_a_wrong_output_or_status_fails(tmp_path: Path) -> None:
    shell = Shell(env=environment({}), cwd=tmp_path)
    try:
        run_steps(parse(PAGE), shell)
        with pytest.raises(StepFailedError, match="output differs"):
            run_steps([Step("echo three", ("four",), False, 1)], shell)
        with pytest.raises(StepFailedError, match="exit status"):
            run_steps([Step("false", (), False, 1)], shell)
        with pytest.raises(StepFailedError, match="never matched"):
            run_steps([Step("echo no", ("yes",), True, 1)], shell, wait_timeout=0.0)
    finally:
        shell.close()
