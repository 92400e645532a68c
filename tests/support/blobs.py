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


_QUOTE = "\u201b"


def _is_replacement(c: str) -> bool:
    return c in "\uff3c\uff0f\u2421\u201b" or 0x2400 <= ord(c) < 0x2420


def blob_name(path: str) -> str:
    """The blob a relative path is stored as (docs/worker.md, "Names in Blob storage"), written
    again here from the table, so the tests hold the worker to the documented mapping."""

    def segment(s: str) -> str:
        last = s[-1:] if s[-1:] in (".", "\uff0e") else ""
        out = []
        for c in s[: len(s) - len(last)]:
            if ord(c) < 0x20:
                out.append(chr(0x2400 + ord(c)))
            elif c == "\x7f":
                out.append("\u2421")
            elif c == "\\":
                out.append("\uff3c")
            else:
                out.append(_QUOTE + c if _is_replacement(c) else c)
        return "".join(out) + {"": "", ".": "\uff0e", "\uff0e": _QUOTE + "\uff0e"}[last]

    return "/".join(segment(s) for s in path.split("/"))
