"""The SPDX 2.3 software bill of materials (JSON) written beside each image.

Why from the image's own records rather than from what the build asked for: what is in an image is
what its package databases say was installed, dependencies included: dpkg's status file for the
Debian packages (with each one's source package and version) and every ``*.dist-info/METADATA`` of
the program's virtualenv for the Python distributions (the bridge's own wheel among them). Pure
functions of those texts, so the document is as reproducible as the image: its creation time is
``SOURCE_DATE_EPOCH`` and its namespace is derived from the image digest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from .oci import iso_time

__all__ = ["Package", "dpkg_packages", "python_packages", "read_python_packages", "spdx_document"]

_SPDX_ID = re.compile(r"[^A-Za-z0-9.-]+")


@dataclass(frozen=True, order=True)
class Package:
    """One installed package: its ecosystem (``deb`` or ``pypi``), name, version and what more is known."""

    ecosystem: str
    name: str
    version: str
    architecture: str = ""
    source: str = ""
    license: str = "NOASSERTION"
    supplier: str = "NOASSERTION"

    @property
    def purl(self) -> str:
        if self.ecosystem == "deb":
            qualifiers = f"?arch={self.architecture}&distro=debian-12" if self.architecture else ""
            return f"pkg:deb/debian/{self.name}@{self.version}{qualifiers}"
        normalized = re.sub(r"[-_.]+", "-", self.name).lower()
        return f"pkg:pypi/{normalized}@{self.version}"

    @property
    def spdx_id(self) -> str:
        return "SPDXRef-" + _SPDX_ID.sub("-", f"{self.ecosystem}-{self.name}-{self.version}")


def dpkg_packages(status: str) -> list[Package]:
    """The installed packages of a dpkg status file's text, sorted by name."""
    found: list[Package] = []
    for stanza in status.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t"):
                continue  # continuation lines (descriptions, conffiles) are not needed
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        if not fields.get("Package") or fields.get("Status") != "install ok installed":
            continue
        version = fields.get("Version", "")
        source, _, source_version = fields.get("Source", "").partition(" ")
        found.append(
            Package(
                ecosystem="deb",
                name=fields["Package"],
                version=version,
                architecture=fields.get("Architecture", ""),
                source=f"{source}@{source_version.strip('()') or version}" if source else "",
                supplier=f"Organization: {fields['Maintainer']}"
                if fields.get("Maintainer")
                else "NOASSERTION",
            )
        )
    return sorted(found)


def python_packages(metadata_texts: Iterable[str]) -> list[Package]:
    """The distributions whose ``METADATA`` texts are given, sorted by name."""
    found: list[Package] = []
    for text in metadata_texts:
        headers = HeaderParser().parsestr(text)
        name, version = headers.get("Name"), headers.get("Version")
        if not name or not version:
            continue
        # Only an SPDX expression is an SPDX license; free-text License fields and classifiers are not.
        license_text = headers.get("License-Expression") or ""
        found.append(
            Package(ecosystem="pypi", name=name, version=version, license=license_text or "NOASSERTION")
        )
    return sorted(found)


def read_python_packages(site_packages: Path) -> list[Package]:
    return python_packages(
        p.read_text(errors="replace") for p in sorted(site_packages.glob("*.dist-info/METADATA"))
    )


def spdx_document(
    *, name: str, reference: str, digest: str, epoch: int, packages: Sequence[Package]
) -> dict[str, Any]:
    """An SPDX 2.3 document: the image (``reference``, ``digest``) contains each of ``packages``."""
    image_id = "SPDXRef-image"
    entries: list[dict[str, Any]] = [
        {
            "SPDXID": image_id,
            "name": name,
            "versionInfo": digest,
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": False,
            "primaryPackagePurpose": "CONTAINER",
            "externalRefs": [
                {
                    "referenceCategory": "PACKAGE-MANAGER",
                    "referenceType": "purl",
                    "referenceLocator": f"pkg:oci/{name}@{digest.replace(':', '%3A')}",
                }
            ],
            "comment": f"OCI image {reference}",
        }
    ]
    relationships: list[dict[str, str]] = [
        {"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES", "relatedSpdxElement": image_id}
    ]
    for package in packages:
        entry: dict[str, Any] = {
            "SPDXID": package.spdx_id,
            "name": package.name,
            "versionInfo": package.version,
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": False,
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": package.license,
            "copyrightText": "NOASSERTION",
            "supplier": package.supplier,
            "externalRefs": [
                {
                    "referenceCategory": "PACKAGE-MANAGER",
                    "referenceType": "purl",
                    "referenceLocator": package.purl,
                }
            ],
        }
        if package.source:
            entry["sourceInfo"] = f"built from the Debian source package {package.source}"
        entries.append(entry)
        relationships.append(
            {"spdxElementId": image_id, "relationshipType": "CONTAINS", "relatedSpdxElement": package.spdx_id}
        )
    return {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"{name} image",
        "documentNamespace": f"https://k8s-bridge.io/spdx/{name}/{digest.removeprefix('sha256:')}",
        "creationInfo": {"created": iso_time(epoch), "creators": ["Tool: bridge.sandbox.images"]},
        "packages": entries,
        "relationships": relationships,
    }
