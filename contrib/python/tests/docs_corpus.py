"""The documents the tests search: two roots holding the same handbook page (one passage, two
sources), an operations page, and a two-page PDF (a passage with pages), written fresh for each
test session so every expectation below is read from what was written here."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

KEY_ROTATION = """---
title: Signing key rotation
tags: [security, keys]
---
# Signing key rotation

Rotate the signing key every 90 days, or at once when a key may have leaked.
The old key stays valid for verification for 7 days so that issued tokens keep working.

## Rotate the key

1. Generate the new key pair with keyctl generate; it is created disabled.
2. Publish the public half of the key to the verification endpoint.
3. Enable the new key for signing; the old key stays valid for verification only.
"""

BACKUPS = """---
title: Backups
tags: [ops]
---
# Backups

Nightly backups of the ledger go to the cold bucket and are kept for 35 days.

## Restore

Restore a ledger from the cold bucket with restore --from cold, then verify it.
"""

#: The PDF's pages, each a list of lines.
VAULT_PAGES = [
    [
        "Retention vault audit",
        "The quarterly audit of the retention vault checks every sealed archive.",
    ],
    ["Vault sealing", "A sealed archive is verified against its manifest before the audit closes."],
]


def pdf(pages: List[List[str]]) -> bytes:
    """A minimal PDF 1.4 with one Helvetica text line per entry, one page per list."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        (
            "<< /Type /Pages /Kids ["
            + " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
            + f"] /Count {len(pages)} >>"
        ).encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, lines in enumerate(pages):
        text = " ".join(f"({line}) Tj T*" for line in lines)
        content = f"BT /F1 12 Tf 72 720 Td 14 TL {text} ET".encode()
        objects.append(
            (
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>"
            ).encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def write(folder: Path) -> Tuple[Path, Path]:
    """Writes the two roots under ``folder`` and returns them (``a``, ``b``)."""
    a, b = folder / "a", folder / "b"
    for root in (a, b):
        (root / "handbook").mkdir(parents=True)
        (root / "handbook" / "key-rotation.md").write_text(KEY_ROTATION, encoding="utf-8")
    (a / "ops").mkdir()
    (a / "ops" / "backups.md").write_text(BACKUPS, encoding="utf-8")
    (a / "manuals").mkdir()
    (a / "manuals" / "vault.pdf").write_bytes(pdf(VAULT_PAGES))
    return a, b
