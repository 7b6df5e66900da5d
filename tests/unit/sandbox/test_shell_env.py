"""The sandbox's env.sh: every value quoted for sh, PATH put first on the caller's."""

from __future__ import annotations

import subprocess

from bridge.sandbox.shell_env import env_script


def test_the_script_exports_quoted_values_and_prepends_path() -> None:
    script = env_script({"KUBECONFIG": "/tmp/a b/$(x)'", "PATH": "/opt/kubectl:/opt/py"})
    shown = subprocess.run(
        ["sh", "-c", f'{script}\nprintf "%s\\n" "$KUBECONFIG" "$PATH"'],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert shown == ["/tmp/a b/$(x)'", "/opt/kubectl:/opt/py:/usr/bin:/bin"]
