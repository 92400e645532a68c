"""What a container holds, told apart as ferry stores a tree (docs/worker.md, "POSIX attributes in
Blob"): a directory is a zero-length folder stub marked ``hdi_isfolder``, as azcopy and blobfuse2
write them."""

from __future__ import annotations


def is_folder_stub(props) -> bool:
    return (props.metadata or {}).get("hdi_isfolder") == "true"


def file_blobs(container, prefix: str | None = None) -> dict:
    """{name: BlobProperties} of the blobs that are not folder stubs."""
    return {n: p for n, p in container.blobs(prefix).items() if not is_folder_stub(p)}


def folder_stubs(container, prefix: str | None = None) -> list[str]:
    return sorted(n for n, p in container.blobs(prefix).items() if is_folder_stub(p))
