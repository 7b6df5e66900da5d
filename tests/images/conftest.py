"""The images tier's fixtures (``tests.fixtures.images``): both images built once, a private podman."""

from tests.fixtures.images import built_images, podman

__all__ = ["built_images", "podman"]
