"""Where an OS keeps package repositories and CA certificates: the driver image's config mounts
(both implementations) follow the node OS's package family."""

from __future__ import annotations

REPO_DIRS = {"apt": "/etc/apt/sources.list.d", "yum": "/etc/yum.repos.d", "zypp": "/etc/zypp/repos.d"}
CA_DIRS = {
    "apt": "/usr/local/share/ca-certificates",
    "yum": "/etc/pki/ca-trust/extracted/pem",
    "zypp": "/etc/pki/trust/anchors",
}


def package_family(os_tag: str) -> str:
    """apt, yum or zypp: where an OS keeps package repositories and CA certificates."""
    if os_tag.startswith(("ubuntu", "debian")):
        return "apt"
    if os_tag.startswith(("sles", "sl-micro")):
        return "zypp"
    return "yum"
