"""kubernetes-asyncio imported lazily: the bridges load only its configuration, not its models."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from bridge.lazy_kubernetes import exported_names


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_generated_init_is_read_for_its_names_and_their_modules() -> None:
    source = textwrap.dedent(
        '''
        """Generated."""
        from __future__ import absolute_import
        __version__ = "36.1.0"
        from kubernetes_asyncio.client.api_client import ApiClient
        from kubernetes_asyncio.client.models.v1_pod import V1Pod
        import kubernetes_asyncio.client as client
        '''
    )
    assert exported_names(source) == {
        "ApiClient": ("kubernetes_asyncio.client.api_client", "ApiClient"),
        "V1Pod": ("kubernetes_asyncio.client.models.v1_pod", "V1Pod"),
        "client": ("kubernetes_asyncio.client", None),
    }


def test_the_bridge_loads_kubernetes_asyncios_configuration_without_its_models() -> None:
    out = run_python(
        """
        import sys
        import bridge.runtime.session  # what the bridges import: the configuration loaders
        from kubernetes_asyncio import config
        from kubernetes_asyncio.client import Configuration
        assert callable(config.load_kube_config) and callable(config.load_incluster_config)
        loaded = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models.")]
        apis = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.api.")]
        print(len(loaded), len(apis), Configuration.__name__)
        """
    )
    assert out.split() == ["0", "0", "Configuration"]


def test_every_name_of_the_package_is_still_there_on_first_use() -> None:
    out = run_python(
        """
        import bridge
        import kubernetes_asyncio
        from kubernetes_asyncio.client import V1Pod, CoreV1Api, ApiException
        from kubernetes_asyncio.client.models import V1Node
        print(kubernetes_asyncio.__version__ != "", V1Pod.__name__, CoreV1Api.__name__,
              kubernetes_asyncio.client.models.V1Node is V1Node, "V1Pod" in dir(kubernetes_asyncio.client),
              issubclass(ApiException, Exception))
        try:
            kubernetes_asyncio.client.NoSuchThing
        except AttributeError as exc:
            print("AttributeError", "NoSuchThing" in str(exc))
        """
    )
    assert out.split() == ["True", "V1Pod", "CoreV1Api", "True", "True", "True", "AttributeError", "True"]


def test_a_package_imported_before_is_left_as_it_is() -> None:
    out = run_python(
        """
        import sys
        import kubernetes_asyncio  # the whole package, before the bridge
        import bridge
        from bridge.lazy_kubernetes import install
        print(install(), "kubernetes_asyncio.client.models.v1_pod" in sys.modules)
        """
    )
    assert out.split() == ["False", "True"]
